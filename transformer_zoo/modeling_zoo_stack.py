"""The stack: `ZooStackMixin` turns a `PreTrainedModel` into embeddings -> N `ZooBlock`s -> final norm (pre-norm
only), building the masks, rotary angles and position bias every layer shares; with the token embedding
(`ZooScaledEmbedding`) and the forward-argument helpers the families' forwards use (`accepts_past_key_values`,
`leading_positions_read`). The layers themselves live in modeling_zoo_layers.py.

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import functools
import warnings
from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

from .modeling_zoo_attention_variants import (
    count_variant_training_steps,
    uses_variant_mask,
    variant_attention_mask,
)
from .modeling_zoo_checks import (
    check_attention_mask,
    check_inputs_embeds,
    check_position_ids,
    check_token_ids,
    reject_unknown_kwargs,
)
from .modeling_zoo_dropout import ZooDropout
from .modeling_zoo_layers import ZooBlock, build_norm
from .modeling_zoo_positions import POSITION_SCHEMES


# ================================================================================================ forward arguments
def accepts_past_key_values(forward: Callable) -> Callable:
    """Decorates a forward that takes `cache`: `past_key_values=` (transformers 4's name, still what PEFT's prefix
    tuning and older code pass) is accepted with a FutureWarning and used as the cache, as transformers 5's own
    models accept it. Given both, one is chosen rather than one dropped blindly: PEFT's generate passes its prefix as
    `past_key_values` next to generate's own `cache`; the prefix is used while that cache is still empty (the
    prefill), generate's cache afterwards (it then holds the prefix already). transformers' `deprecate_kwarg` would
    keep the empty cache and silently generate without the prefix, as Llama does with PEFT 0.21.
    """

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if "past_key_values" in kwargs:
            legacy = kwargs.pop("past_key_values")
            warnings.warn(
                f"`past_key_values` is deprecated for {type(self).__name__}.forward (transformers 5 names it `cache`); "
                "it was used as `cache`. Pass cache=... instead.",
                FutureWarning,
                stacklevel=2,
            )
            cache = kwargs.get("cache")
            if cache is None or (legacy is not None and cache.get_seq_length() == 0):
                kwargs["cache"] = legacy
        return forward(self, *args, **kwargs)

    return wrapper


# ================================================================================================ stack
class ZooScaledEmbedding(nn.Embedding):
    """Token embeddings times `embed_scale` (sqrt(hidden_size) with config.scale_embedding, Vaswani et al. 3.4).

    The scale lives in the module, as in transformers' BART, so `get_input_embeddings()(ids)` is exactly what the
    model adds positions to, and PEFT (which reads `embed_scale`) scales its embedding adapters the same way. At 1.0
    the multiply is skipped: a full-size multiply and its backward are not free.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, embed_scale=1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeddings = super().forward(input_ids)
        return embeddings * self.embed_scale if self.embed_scale != 1.0 else embeddings

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", embed_scale={self.embed_scale:.4g}" if self.embed_scale != 1.0 else "")


def build_token_embedding(config) -> ZooScaledEmbedding:
    scale = config.hidden_size**0.5 if config.scale_embedding else 1.0
    # A pad id outside the vocabulary (a config warns about it, transformers accepts it) names no row to keep at
    # zero; nn.Embedding would refuse it (or, for -1, silently take the last row).
    pad = config.pad_token_id
    padding_idx = pad if pad is not None and 0 <= pad < config.vocab_size else None
    return ZooScaledEmbedding(config.vocab_size, config.hidden_size, padding_idx, embed_scale=scale)


class ZooStackMixin:
    """Makes a `PreTrainedModel` a stack of `ZooBlock`s. Call `build_stack` in `__init__`, `run_stack` in forward.

    The family owns `embed_tokens` (it knows where its vocabulary lives; `build_token_embedding` makes one).
    """

    def build_stack(
        self,
        config,
        num_layers: int,
        is_causal: bool,
        has_cross_attention: bool = False,
        position_scheme: str | None = None,
    ) -> None:
        """`position_scheme` overrides config.position_embedding_type (ViT adds its 2-D positions itself)."""
        self.is_causal = is_causal
        # How callers name this stack's inputs in messages: an encoder-decoder's decoder (the one stack with
        # cross-attention) takes decoder_input_ids, decoder_attention_mask and decoder_position_ids.
        self.argument_prefix = "decoder_" if has_cross_attention else ""
        num_heads, _, head_dim = config.attention_shape(config.attention_key(0, is_causal))
        self.positions = POSITION_SCHEMES[position_scheme or config.position_embedding_type](
            config, is_causal, num_heads, head_dim
        )
        self.embed_norm = build_norm(config) if config.embedding_norm else None
        self.embed_dropout = ZooDropout(config.embedding_dropout, config.dropout_sampler)
        self.layers = nn.ModuleList(
            [ZooBlock(config, i, is_causal, has_cross_attention) for i in range(num_layers)]
        )
        # Post-norm blocks end normalised; pre-norm stacks need one last norm.
        self.norm = build_norm(config) if config.norm_position == "pre" else None
        self.gradient_checkpointing = False

    def embed_inputs(self, input_ids: torch.LongTensor | None, inputs_embeds: torch.Tensor | None,
                     name: str = "input_ids") -> torch.Tensor:
        """`inputs_embeds`, or the token embeddings of `input_ids` (exactly one must be given). The embedding module
        applies any sqrt(d) scale itself, so `inputs_embeds=model.get_input_embeddings()(ids)` equals
        `input_ids=ids`."""
        if (input_ids is None) == (inputs_embeds is None):
            embeds_name = name.replace("input_ids", "inputs_embeds")
            raise ValueError(
                f"{type(self).__name__}: pass exactly one of {name} or {embeds_name} (got "
                f"{'both' if input_ids is not None else 'neither'})."
            )
        if inputs_embeds is None:
            # PEFT may wrap the embedding (trainable_token_indices); the config's vocab_size follows every resize.
            check_token_ids(input_ids, getattr(self.embed_tokens, "num_embeddings", self.config.vocab_size), name)
            return self.embed_tokens(input_ids)
        weight = getattr(self.embed_tokens, "weight", None)
        token_dtype = weight.dtype if isinstance(weight, torch.Tensor) and weight.is_floating_point() else None
        check_inputs_embeds(inputs_embeds, self.config.hidden_size, name.replace("input_ids", "inputs_embeds"),
                            token_dtype)
        if token_dtype is not None and not torch.is_autocast_enabled(inputs_embeds.device.type):
            # Exact (the check refused anything token_dtype cannot hold), and what input_ids would have given.
            inputs_embeds = inputs_embeds.to(token_dtype)
        return inputs_embeds

    def check_encoder_states(self, encoder_hidden_states: torch.Tensor, encoder_attention_mask, batch_size: int,
                             query_length: int) -> None:
        """The states cross-attention reads ([batch, source length, hidden_size], from the encoder or passed as
        encoder_outputs) and the source mask that goes with them."""
        states = tuple(encoder_hidden_states.shape)
        if encoder_hidden_states.ndim != 3 or states[0] != batch_size or states[2] != self.config.hidden_size:
            raise ValueError(
                f"the encoder states (encoder_outputs) have shape {states}, expected [batch={batch_size}, source "
                f"length, hidden_size={self.config.hidden_size}]: pass the encoder's output for the same batch "
                "(model.get_encoder()(input_ids).last_hidden_state).")
        if isinstance(encoder_attention_mask, torch.Tensor) and encoder_attention_mask.ndim == 2 \
                and tuple(encoder_attention_mask.shape) != states[:2]:
            raise ValueError(
                f"attention_mask (of the source) has shape {tuple(encoder_attention_mask.shape)}, but the encoder "
                f"states are {states[:2]} [batch, source length]: pass the mask of the source the encoder read.")
        if encoder_attention_mask is not None:
            # The source's own mask, under the name the encoder-decoder takes it by.
            check_attention_mask(encoder_attention_mask, batch_size, query_length, states[1])

    def check_attention_implementation(self) -> None:
        implementation = self.config._attn_implementation or "eager"
        if "flash" in implementation and self.positions.adds_score_bias:
            raise ValueError(
                f"attn_implementation={implementation!r} cannot add the {self.config.position_embedding_type!r} "
                "position bias to attention scores (FlashAttention kernels take no score bias here). Use 'sdpa', "
                "'eager' or 'flex_attention', or a position scheme without a score bias (rope, learned, sinusoidal)."
            )

    def run_stack(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        extra_embeddings: torch.Tensor | None = None,
        leading_positions: int | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """The stack's final hidden states, [batch, positions, hidden].

        leading_positions: the caller reads only the first `leading_positions` positions of the result (a [CLS]-
        pooled head: the class and distillation tokens). The last layer then computes just those rows: its queries,
        attention output, residuals and feed-forward (keys and values still come from every position), which is
        most of a layer's work, and the result has that many positions. It is the same arithmetic for the rows kept
        (tests/test_skipped_work.py). Where the layer's input is read by something else (forward hooks on the
        last layer), or its kernel is not one that takes a rectangular mask (flash, flex, the attention variants),
        every position is computed and the first ones are returned.
        """
        self.check_attention_implementation()
        reject_unknown_kwargs(self, kwargs)
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        past_length = self_cache.get_seq_length() if self_cache is not None else 0
        batch_size, query_length = inputs_embeds.shape[:2]
        # The keys attention will see. A StaticCache returns all max_cache_len slots (the unused ones masked), not
        # past + query, so ask the cache, as create_causal_mask does: the score bias must span them (without this,
        # alibi/relative crashed under generate(cache_implementation="static")), and a 4-D mask may.
        key_length = past_length + query_length
        if self_cache is not None:
            key_length = self_cache.get_mask_sizes(query_length, 0)[0]
        # The mask first: positions derived from a wrong mask (generate does that) would otherwise fail first.
        prefix = self.argument_prefix
        if attention_mask is not None:
            check_attention_mask(attention_mask, batch_size, query_length, past_length + query_length,
                                 f"{prefix}attention_mask", key_length)
        if position_ids is not None:
            check_position_ids(position_ids, batch_size, query_length, f"{prefix}position_ids")
        if encoder_hidden_states is not None:
            self.check_encoder_states(encoder_hidden_states, encoder_attention_mask, batch_size, query_length)
        # Only positions the caller gave can mark packed sequences (several documents in one row, their positions
        # restarting), which transformers' create_causal_mask looks for in position_ids. The stack's own arange has
        # nothing to find, and passing it cost compiled steps their is_causal attention: under torch.compile that
        # search cannot be decided, so the mask came back as a [batch, 1, queries, keys] tensor and SDPA computed the
        # whole square instead of the causal triangle (tests/test_compiled_masks.py; 1.5x the attention time at 1,024
        # tokens on CPU, the compiled_causal_mask probe, docs/speed.md).
        packing_positions = position_ids
        if position_ids is None:
            position_ids = torch.arange(query_length, device=inputs_embeds.device).unsqueeze(0) + past_length

        hidden_states = inputs_embeds
        # Token-type embeddings before positions: BERT's own summation order. Float addition is not associative, and
        # the other order's 1-ulp differences grow to 4e-5 over all-MiniLM-L6-v2's 6 layers (converted checkpoints
        # must match to 1e-5).
        for extra in (extra_embeddings, self.positions.embed(position_ids)):
            if extra is not None:
                hidden_states = hidden_states + extra.to(hidden_states.dtype)
        if self.embed_norm is not None:
            hidden_states = self.embed_norm(hidden_states)
        if self.training:  # identity in eval mode (see ZooBlock.apply_dropout)
            hidden_states = self.embed_dropout(hidden_states)

        if uses_variant_mask(self.config):
            # Efficient attention variants read the 2-D padding mask (or a flex BlockMask), never an n x n one.
            count_variant_training_steps(self)
            mask = variant_attention_mask(
                self.config, self.is_causal, hidden_states, attention_mask,
                self._cache_for_mask(self_cache, past_length, attention_mask, packing_positions), packing_positions
            )
        elif self.is_causal:
            mask = create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=attention_mask,
                cache=self._cache_for_mask(self_cache, past_length, attention_mask, packing_positions),
                position_ids=packing_positions,
            )
        else:
            mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
            )
        cross_mask = None
        if encoder_hidden_states is not None:
            cross_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        rotary = self.positions.rotary(position_ids, hidden_states.dtype)
        bias = self.positions.score_bias(query_length, key_length, past_length, hidden_states.device)
        if bias is not None:
            # Expanded (a view, no copy) to the batch: transformers' flex_attention score_mod indexes the bias as
            # position_bias[batch_idx, head, q, kv], so a batch-1 bias crashed flex for any batch > 1.
            bias = bias.to(hidden_states.dtype).expand(hidden_states.shape[0], -1, -1, -1)

        query_positions = None
        if leading_positions is not None:
            if isinstance(leading_positions, bool) or not isinstance(leading_positions, int) or leading_positions < 1:
                raise ValueError(f"leading_positions must be a positive int (the positions the caller reads), got "
                                 f"{leading_positions!r}.")
            if leading_positions < hidden_states.shape[1]:
                if self._last_layer_takes_leading_rows(mask, cache, encoder_hidden_states):
                    query_positions = leading_positions
        for index, layer in enumerate(self.layers):
            if query_positions is not None and index == len(self.layers) - 1:
                kwargs["query_positions"] = query_positions
            # Tensors that may require grad (encoder_hidden_states; the learned relative position bias) go
            # positionally, as BART does: reentrant checkpointing (use_reentrant=True) only treats positional
            # arguments as checkpoint inputs, and a keyword tensor made the recompute backpropagate into the
            # encoder / bias graph once per layer ("Trying to backward through the graph a second time").
            hidden_states = layer(
                hidden_states,
                mask,
                rotary,
                bias,
                encoder_hidden_states,
                encoder_attention_mask=cross_mask,
                cache=cache,
                **kwargs,
            )
        if leading_positions is not None:
            hidden_states = hidden_states[:, :leading_positions]
        if self.norm is not None:
            hidden_states = self.norm(hidden_states)
        return hidden_states

    @staticmethod
    def _cache_for_mask(cache, past_length: int, attention_mask, packing_positions):
        """The cache create_causal_mask is given. It looks for packed sequences in position_ids only without one, and
        a forward with use_cache on (the config's default, in training too, as in transformers' models) makes an
        empty DynamicCache: packed rows then attended across their documents without a word. An empty dynamic cache
        sizes the mask as no cache does, so there it is left out (tests/test_compiled_masks.py)."""
        if (packing_positions is not None and attention_mask is None and past_length == 0
                and isinstance(cache, DynamicCache) and not cache.is_compileable and not any(cache.is_sliding)):
            return None
        return cache

    def _last_layer_takes_leading_rows(self, mask, cache, encoder_hidden_states) -> bool:
        """Whether the last layer can compute only the leading rows (see run_stack)."""
        last = self.layers[-1]
        if (self.is_causal or cache is not None or encoder_hidden_states is not None
                or (self.config._attn_implementation or "eager") not in ("eager", "sdpa")
                or last.self_attn.attention_variant is not None
                or (mask is not None and not (torch.is_tensor(mask) and mask.ndim == 4))):
            return False
        # An observer of the last layer (an analysis hook, a profiler's module hook) expects every position.
        return not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks or any(
            module._forward_hooks or module._forward_pre_hooks for module in last.modules()))


def leading_positions_read(config, kwargs: dict, positions: int) -> int | None:
    """`positions` for `run_stack(leading_positions=...)` when a pooled head's caller gets back only what the head
    reads from them; None when every position's states are returned (output_hidden_states or output_attentions
    asked for, by argument or by config)."""
    for name in ("output_hidden_states", "output_attentions"):
        asked = kwargs.get(name)
        if asked if asked is not None else getattr(config, name, False):
            return None
    return positions
