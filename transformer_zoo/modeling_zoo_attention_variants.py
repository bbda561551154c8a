"""Efficient self-attention variants, chosen per model by `config.attention_variant`.

| variant          | cost            | what it computes                                                                    |
|------------------|-----------------|-------------------------------------------------------------------------------------|
| `full`           | O(n^2)          | exact softmax attention through transformers' kernels (eager, sdpa,                  |
|                  |                 | flash_attention_2, flex_attention); this module is not involved                     |
| `sliding_window` | O(n (3w + g))   | exact softmax over a local window of `attention_window` keys on each side plus the  |
|                  |                 | `global_attention_indices` slots, which attend to and are attended by every token   |
|                  |                 | (Longformer, Beltagy et al. 2020); causal or bidirectional                          |
| `linformer`      | O(n k)          | keys and values projected along the sequence from n to `linformer_k` by learned     |
|                  |                 | matrices (Wang et al. 2020); bidirectional only                                     |
| `performer`      | O(n m d)        | FAVOR+ (Choromanski et al. 2021): softmax kernel estimated with `performer_features`|
|                  |                 | positive orthogonal random features; causal through chunked prefix sums             |

None of the approximate variants builds an n x n mask or score matrix on any backend: they take the 2-D padding mask
[batch, keys] (see `variant_attention_mask`). The one exception is deliberate: `sliding_window` under
`attn_implementation="flex_attention"` hands the window to FlexAttention as a block-sparse `BlockMask` (built by
transformers' `masking_utils` with an extra mask function; its memory is O(n^2 / 128^2) blocks, not O(n^2)); under
`flash_attention_2` without global tokens it uses FlashAttention's native `window_size`. Under `eager` and `sdpa` it
runs the blocked kernel below, written here because neither PyTorch nor transformers has a CPU sliding-window kernel
with global tokens that trains (FlexAttention has no backward pass on CPU in torch 2.13).

Each variant is an `nn.Module` stored on `ZooAttention` as `attention_variant` (cross-attention always stays exact):
Linformer owns its projection parameters, Performer its random-feature buffer (persistent, so a saved model reloads
the same features). Position schemes that add a score bias (ALiBi, T5 relative) are refused by the config, because
these variants never form the score matrix the bias is added to; Linformer also refuses RoPE (see the config).

The kernels themselves (tensors in, tensors out) are in modeling_zoo_attention_variant_kernels.py.

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import torch
from torch import nn
from transformers import initialization as init
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    find_packed_sequence_indices,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .modeling_zoo_attention_variant_kernels import (
    draw_orthogonal_features,
    existing_global_slots,
    performer_attention,
    sliding_window_attention,
    sliding_window_mask_function,
)


logger = logging.get_logger(__name__)


# ================================================================================================ base
class AttentionVariant(nn.Module):
    """One self-attention kernel. `forward` has the signature of transformers' attention functions (module, query,
    key, value, mask, scaling, dropout) and returns ([batch, seq, heads, head_dim], weights or None).

    query is [batch, heads, q_len, head_dim]; key/value are [batch, kv_heads, kv_len, head_dim] after the cache
    update, so kv_len - q_len earlier slots come from the cache. `attention_mask` is what `variant_attention_mask`
    built: None or a bool [batch, kv_len] padding mask (True = real token), or a transformers mask for the backends
    that take one (flex BlockMask, flash 2-D mask).
    """

    # Whether the variant can serve a causal (decoder) stack at all.
    supports_causal = True

    def __init__(self, config, layer_idx: int, num_heads: int, num_key_value_heads: int, head_dim: int,
                 is_causal: bool):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_key_value_heads, self.head_dim = num_heads, num_key_value_heads, head_dim
        self.is_causal = is_causal

    def reset_parameters(self) -> None:
        """(Re)initialise parameters and buffers with transformers' `initialization` helpers, which skip tensors
        loaded from a checkpoint (called from ZooPreTrainedModel._init_weights)."""

    @staticmethod
    def padding_mask(attention_mask, batch: int, kv_len: int, device) -> torch.Tensor | None:
        if attention_mask is None:
            return None
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.ndim != 2:
            raise ValueError(
                "This attention variant takes a 2-D padding mask [batch, keys] (True/1 = real token); got "
                f"{type(attention_mask).__name__} of shape {getattr(attention_mask, 'shape', None)}. Pass the "
                "tokenizer's attention_mask, not a prepared 4-D mask."
            )
        if tuple(attention_mask.shape) != (batch, kv_len):
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}; expected ({batch}, {kv_len}).")
        return attention_mask.to(device=device, dtype=torch.bool)


class SlidingWindowAttention(AttentionVariant):
    """Local window of `attention_window` keys each side plus `global_attention_indices` (see the module docstring
    for which kernel each attn_implementation uses)."""

    def __init__(self, config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal):
        super().__init__(config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal)
        self.window = config.attention_window
        self.global_indices = tuple(sorted(set(config.global_attention_indices or ())))
        self.config = config

    def forward(self, module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        implementation = self.config._attn_implementation or "eager"
        if implementation == "flex_attention" or "flash" in implementation:
            if "flash" in implementation:
                if self.global_indices:
                    raise ValueError(
                        f"attention_variant='sliding_window' with global_attention_indices={list(self.global_indices)}"
                        f" cannot run on attn_implementation={implementation!r}: FlashAttention has a window but no "
                        "global tokens. Use attn_implementation='sdpa' (blocked kernel) or 'flex_attention', or "
                        "drop the global tokens."
                    )
                # transformers maps sliding_window=s to FlashAttention's window_size=(s - 1, s - 1): w keys each side.
                kwargs["sliding_window"] = self.window + 1
            # flex: attention_mask is the BlockMask built by variant_attention_mask.
            attention_function = ALL_ATTENTION_FUNCTIONS[implementation]
            return attention_function(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
        groups = self.num_heads // key.shape[1]
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        padding = self.padding_mask(attention_mask, query.shape[0], key.shape[-2], query.device)
        output = sliding_window_attention(
            query, key, value, self.window, self.global_indices, self.is_causal, padding, scaling, dropout,
            self.training,
        )
        return output.transpose(1, 2).contiguous(), None

    def extra_repr(self) -> str:
        return f"window={self.window}, global_indices={list(self.global_indices)}, causal={self.is_causal}"


# ================================================================================================ Linformer
class LinformerAttention(AttentionVariant):
    """Linformer (Wang et al. 2020): softmax(Q (E K)^T * scaling) (F V) with E, F in R^{k x L} learned and applied
    along the sequence axis; a sequence of n <= L slots uses the first n columns (as fairseq's implementation does).

    `linformer_sharing`: "head" = one E and one F per key/value head, "layer" = one E and one F per layer shared by
    the heads, "key_value" = one matrix per layer for both keys and values (the paper's sharing options within a
    layer). Padded positions are zeroed before the projection so they contribute nothing.
    """

    supports_causal = False

    def __init__(self, config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal):
        super().__init__(config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal)
        if is_causal:
            raise ValueError(
                "attention_variant='linformer' cannot be causal: its projection mixes every position of the sequence, "
                "including future ones, into each projected key. Use it in encoders (zoo_encoder, zoo_vit); for a "
                "decoder choose 'performer' or 'sliding_window'."
            )
        self.projected_length = config.linformer_k
        self.max_length = config.linformer_max_length or config.max_position_embeddings
        self.sharing = config.linformer_sharing
        self.initializer_range = config.initializer_range
        heads = num_key_value_heads if self.sharing == "head" else 1
        self.key_projection = nn.Parameter(torch.empty(heads, self.projected_length, self.max_length))
        self.value_projection = (
            None if self.sharing == "key_value"
            else nn.Parameter(torch.empty(heads, self.projected_length, self.max_length))
        )

    def reset_parameters(self):
        # fairseq's Linformer: Xavier-uniform with gain 1/sqrt(2), i.e. variance 1 / (L + k).
        std = (self.max_length + self.projected_length) ** -0.5
        init.normal_(self.key_projection, mean=0.0, std=std)
        if self.value_projection is not None:
            init.normal_(self.value_projection, mean=0.0, std=std)

    def forward(self, module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        n = key.shape[-2]
        if n > self.max_length:
            raise ValueError(
                f"Sequence of {n} slots is longer than linformer_max_length={self.max_length} (the projections have "
                "one column per slot). Shorten the input or build the model with a larger linformer_max_length "
                "(new columns are untrained)."
            )
        if query.shape[-2] != n:
            raise ValueError("attention_variant='linformer' does not support a key/value cache (encoders only).")
        padding = self.padding_mask(attention_mask, query.shape[0], n, query.device)
        if padding is not None:
            keep = padding[:, None, :, None]
            key, value = torch.where(keep, key, 0.0), torch.where(keep, value, 0.0)
        key_projection = self.key_projection[..., :n].to(key.dtype)
        value_projection = (self.value_projection if self.value_projection is not None
                            else self.key_projection)[..., :n].to(value.dtype)
        projected_key = torch.matmul(key_projection, key)  # b kvh k d
        projected_value = torch.matmul(value_projection, value)
        groups = self.num_heads // key.shape[1]
        projected_key, projected_value = repeat_kv(projected_key, groups), repeat_kv(projected_value, groups)
        scores = torch.matmul(query, projected_key.transpose(-1, -2)) * scaling  # b h n k
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        weights = nn.functional.dropout(weights, p=dropout, training=self.training)
        output = torch.matmul(weights, projected_value)
        return output.transpose(1, 2).contiguous(), weights

    def extra_repr(self) -> str:
        return f"k={self.projected_length}, max_length={self.max_length}, sharing={self.sharing!r}"


class PerformerAttention(AttentionVariant):
    """FAVOR+ with `performer_features` positive orthogonal random features per layer (shared by the heads).

    The projection is a persistent buffer drawn from `performer_seed` and the layer index, so a model is
    reproducible and a saved one reloads the same features. With `performer_redraw_interval` = N > 0 the features are
    redrawn every N training forward passes of the stack (never in eval mode), from the seed, the layer and the
    number of redraws so far, so a run is reproducible too. The count lives on the module (not saved): a resumed run
    restarts it. Attention dropout does not apply (there is no attention-probability matrix to drop from).
    """

    def __init__(self, config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal):
        super().__init__(config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal)
        self.num_features = config.performer_features
        self.redraw_interval = config.performer_redraw_interval
        self.seed = config.performer_seed
        self.projection = nn.Buffer(torch.empty(self.num_features, head_dim), persistent=True)
        self.forward_count = 0
        self.redraw_count = 0
        if config.attention_dropout > 0 and layer_idx == 0:
            logger.warning_once(
                f"attention_variant='performer' has no attention-probability matrix, so attention_dropout="
                f"{config.attention_dropout} is not applied inside attention (hidden and embedding dropout still are)."
            )

    def _draw(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + self.layer_idx * 10_007 + self.redraw_count) % (2**63)
        )
        return draw_orthogonal_features(self.num_features, self.head_dim, generator)

    def reset_parameters(self):
        self.redraw_count = 0
        init.copy_(self.projection, self._draw())

    @torch.no_grad()
    def count_training_step(self) -> None:
        """Called once per training forward of the stack (not per checkpointed recompute)."""
        if not self.training or self.redraw_interval <= 0:
            return
        self.forward_count += 1
        if self.forward_count % self.redraw_interval == 0:
            self.redraw_count += 1
            self.projection.copy_(self._draw().to(self.projection.device))

    def forward(self, module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        groups = self.num_heads // key.shape[1]
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        padding = self.padding_mask(attention_mask, query.shape[0], key.shape[-2], query.device)
        if not self.is_causal and query.shape[-2] != key.shape[-2]:
            raise ValueError("Bidirectional Performer attention got a key/value cache; caches are for decoders.")
        output = performer_attention(query, key, value, self.projection, self.is_causal, padding, scaling)
        return output.transpose(1, 2).contiguous(), None

    def extra_repr(self) -> str:
        return f"features={self.num_features}, redraw_interval={self.redraw_interval}, causal={self.is_causal}"


# ================================================================================================ registry
# config.attention_variant -> module class; "full" means transformers' own kernels (no variant module).
ATTENTION_VARIANTS: dict[str, type[AttentionVariant] | None] = {
    "full": None,
    "sliding_window": SlidingWindowAttention,
    "linformer": LinformerAttention,
    "performer": PerformerAttention,
}


def build_attention_variant(config, layer_idx: int, num_heads: int, num_key_value_heads: int, head_dim: int,
                            is_causal: bool, is_cross_attention: bool) -> AttentionVariant | None:
    """The variant module for one self-attention layer, or None for exact attention (and for cross-attention, which
    stays exact: its keys are the encoder output, not the long sequence the variants are for)."""
    name = getattr(config, "attention_variant", "full")
    if name not in ATTENTION_VARIANTS:
        raise ValueError(f"attention_variant={name!r} is unknown; choose one of {', '.join(ATTENTION_VARIANTS)}.")
    variant_class = ATTENTION_VARIANTS[name]
    if variant_class is None or is_cross_attention:
        return None
    return variant_class(config, layer_idx, num_heads, num_key_value_heads, head_dim, is_causal)


def uses_variant_mask(config) -> bool:
    """Whether the stack must build its self-attention mask with `variant_attention_mask` rather than transformers'
    create_causal_mask / create_bidirectional_mask (FlashAttention's 2-D mask already is O(n), so flash keeps it)."""
    name = getattr(config, "attention_variant", "full")
    return name != "full" and not (name == "sliding_window" and "flash" in (config._attn_implementation or ""))


def variant_attention_mask(config, is_causal: bool, inputs_embeds: torch.Tensor, attention_mask, cache,
                           position_ids):
    """The self-attention mask of a stack whose layers use an attention variant.

    sliding_window on flex_attention: transformers' causal/bidirectional mask intersected with the window-or-global
    rule; for flex that is a block-sparse BlockMask. Every other case: the 2-D bool padding mask [batch, keys] (None
    without padding), which the variant kernels read directly, so no n x n mask is built.

    `position_ids` are the caller's own (None where the stack made them) and `cache` is None where an empty dynamic
    cache would only have stopped create_causal_mask looking for packed sequences (ZooStack._cache_for_mask). A causal
    stack given positions that restart within a row and no attention_mask holds several documents per row, which
    transformers' masks keep apart: the flex path does too (create_causal_mask), the other kernels cannot, and are
    refused rather than left to attend across documents (`refuse_packed_rows`).
    """
    if cache is not None and getattr(cache, "is_compileable", False):
        raise ValueError(
            f"attention_variant={config.attention_variant!r} does not support a static cache (its kernels take the "
            "keys actually seen, not a fixed-size buffer). Generate with the default dynamic cache."
        )
    if config.attention_variant == "sliding_window" and config._attn_implementation == "flex_attention":
        past = cache.get_seq_length() if cache is not None else 0
        kv_length = past + inputs_embeds.shape[1]
        globals_ = config.global_attention_indices or ()
        is_global = None
        if globals_:
            # Longer than kv_length: FlexAttention's block-mask builder may evaluate the rule on indices padded up
            # to its 128-slot blocks, and an out-of-range lookup inside a compiled mask function is not checked.
            is_global = torch.zeros(kv_length + 256, dtype=torch.bool, device=inputs_embeds.device)
            is_global[existing_global_slots(tuple(globals_), kv_length, inputs_embeds.device)] = True
        window_rule = sliding_window_mask_function(config.attention_window, is_global)
        if is_causal:
            return create_causal_mask(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                      cache=cache, position_ids=position_ids, and_mask_function=window_rule)
        return create_bidirectional_mask(config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                         and_mask_function=window_rule)
    if is_causal and position_ids is not None and attention_mask is None and cache is None:
        refuse_packed_rows(config, position_ids)
    if attention_mask is None:
        return None
    if attention_mask.ndim != 2:
        raise ValueError(
            f"attention_variant={config.attention_variant!r} takes a 2-D padding mask [batch, keys]; got a "
            f"{attention_mask.ndim}-D mask. Pass the tokenizer's attention_mask."
        )
    attention_mask = attention_mask.to(device=inputs_embeds.device, dtype=torch.bool)
    return None if bool(attention_mask.all()) else attention_mask


def refuse_packed_rows(config, position_ids: torch.Tensor) -> None:
    """Raise when `position_ids` restart within a row (transformers' sign of packed sequences, several documents in
    one row): the blocked sliding-window kernel and Performer's prefix sums have no notion of a document boundary and
    would let each document attend to the one before it. "Packed" is transformers' own test
    (masking_utils.find_packed_sequence_indices, which create_causal_mask uses), so both paths agree on it. The check
    reads the data; under torch.compile, where a Python branch on it cannot be traced (and that function returns the
    document indices unconditionally), it is an assertion inside the graph (on CUDA a device-side assert)."""
    documents = find_packed_sequence_indices(position_ids)
    if documents is None:
        return
    message = (f"attention_variant={config.attention_variant!r} under attn_implementation="
               f"{config._attn_implementation!r} cannot keep packed sequences apart: position_ids restart within a "
               "row (several documents in one row, no attention_mask), and its kernel would attend across them. ")
    if config.attention_variant == "sliding_window":
        message += "Use attn_implementation='flex_attention', which separates them, or "
    else:
        message += "Use attention_variant='full', which separates them, or "
    message += "put one sequence per row with an attention_mask."
    if torch.compiler.is_compiling():
        torch._assert_async((documents[:, -1] == 0).all(), message)
    else:
        raise ValueError(message)


def count_variant_training_steps(stack: nn.Module) -> None:
    """Advance per-forward state (Performer feature redraws) once per stack forward; called by run_stack, so a
    gradient-checkpointed layer's recompute does not count twice (and sees the same features)."""
    if stack.training:
        for module in stack.modules():
            if isinstance(module, PerformerAttention):
                module.count_training_step()
