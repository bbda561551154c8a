"""The parts every transformer-zoo family is assembled from.

Four kinds of layer, each chosen by a config string through a small registry:

* normalisation   `NORMS`             layernorm | rmsnorm
* feed-forward    `ZooMLP`            any transformers activation, or a gated one (swiglu, geglu, reglu)
* position scheme `POSITION_SCHEMES`  sinusoidal | learned | rope | alibi | relative | none
* attention       `ZooAttention`      one module for self- and cross-attention, MHA/GQA/MQA; the kernel (eager, sdpa,
                                      flash_attention_2, flex_attention) comes from transformers' attention interface.

The position schemes live in modeling_zoo_positions.py (a scheme has three hooks: `embed`, `rotary`, `score_bias`;
attention asks the scheme and never branches on its name), the checks on a forward's inputs in modeling_zoo_checks.py,
the zoo's own attention kernels (eager, and sdpa's math path with the zoo's masks) in modeling_zoo_attention_kernels.py
and dropout (`ZooDropout`, masks drawn by PCG64 on CPU) in modeling_zoo_dropout.py.

`ZooBlock` is one layer (self-attention, optional cross-attention, feed-forward), each sublayer wrapped by the same
pre- or post-norm residual. `ZooStackMixin` turns a `PreTrainedModel` into a stack of blocks: embeddings -> N blocks
-> final norm (pre-norm only). The four families are such stacks with different flags and heads.

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import functools
import inspect
import json
import os
import warnings
from collections.abc import Callable

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .configuration_zoo_common import GATED_ACTIVATIONS
from .modeling_zoo_attention_kernels import eager_attention_forward, sdpa_math_attention
from .modeling_zoo_attention_variants import (
    AttentionVariant,
    build_attention_variant,
    count_variant_training_steps,
    uses_variant_mask,
    variant_attention_mask,
)
from .modeling_zoo_checks import check_token_ids, reject_unknown_kwargs
from .modeling_zoo_dropout import ZooDropout, pcg64_applies
from .modeling_zoo_positions import POSITION_SCHEMES, PositionScheme, apply_rotary


logger = logging.get_logger(__name__)


# ================================================================================================ normalisation
class ZooRMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019), computed in float32 as Llama does so that bf16 runs agree.

    Written here rather than using `torch.nn.RMSNorm` because that one normalises in the input dtype, which changes
    bf16 logits against converted Llama checkpoints.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


NORMS: dict[str, Callable[..., nn.Module]] = {
    "layernorm": lambda dim, eps, bias: nn.LayerNorm(dim, eps=eps, bias=bias),
    "rmsnorm": lambda dim, eps, bias: ZooRMSNorm(dim, eps=eps),
}


def build_norm(config, dim: int | None = None) -> nn.Module:
    return NORMS[config.norm_type](dim or config.hidden_size, config.layer_norm_eps, config.norm_bias)


# ================================================================================================ feed-forward
# Activations that have an exactly equivalent fused PyTorch kernel. GPT-2's "gelu_new" is the tanh approximation of
# GELU written as six element-wise ops in transformers; torch's gelu(approximate="tanh") computes the same function in
# one kernel (differences are float rounding, < 1e-6) and trains measurably faster on CPU.
FUSED_EQUIVALENTS = {"gelu_new": "gelu_pytorch_tanh"}


def get_activation(name: str) -> nn.Module:
    """The activation module for a config name; gated names give the gate's activation."""
    name = GATED_ACTIVATIONS.get(name, name)
    return ACT2FN[FUSED_EQUIVALENTS.get(name, name)]


class ZooMLP(nn.Module):
    """Position-wise feed-forward: down(act(up(x))), or down(act(gate(x)) * up(x)) for gated activations."""

    def __init__(self, config, intermediate_size: int | None = None):
        super().__init__()
        gated = config.hidden_act in GATED_ACTIVATIONS
        intermediate_size = intermediate_size or config.intermediate_size
        self.act_fn = get_activation(config.hidden_act)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=config.mlp_bias)
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=config.mlp_bias) if gated else None
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.gate_proj is None:
            return self.down_proj(self.act_fn(self.up_proj(hidden_states)))
        return self.down_proj(self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


# ================================================================================================ attention
# Token rows from which one fused q/k/v product beats three (measured on CPU: decoding single tokens was slower fused).
FUSED_PROJECTION_MIN_ROWS = 64


def plain_linears(modules) -> bool:
    """True when every module is exactly nn.Linear with no hooks: then calling F.linear on its weight is the same as
    calling the module."""
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return False
    return all(
        type(module) is nn.Linear and not module._forward_hooks and not module._forward_pre_hooks
        and (module.bias is None) == (modules[0].bias is None)
        for module in modules
    )


class ZooAttention(nn.Module):
    """Multi-head attention with `num_key_value_heads` key/value heads (MHA, GQA or MQA), for self-attention or for
    cross-attention over `key_value_states`. Projection names follow Llama's (q/k/v/o_proj) so PEFT targets and
    conversion tables read naturally.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool, is_cross_attention: bool = False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        # Read by transformers' sdpa and flash backends; encoders and cross-attention must say False.
        self.is_causal = is_causal and not is_cross_attention
        self.is_cross_attention = is_cross_attention
        # Heads removed by physical pruning (config.pruned_heads) are not built, so a saved pruned model reloads with
        # its smaller projections. `kept_heads` holds the original indices of the remaining query heads, so masks and
        # importance scores can still name heads as the unpruned model did.
        self.pruned_heads_key = config.attention_key(layer_idx, is_causal, is_cross_attention)
        self.head_dim = config.attention_shape(self.pruned_heads_key)[2]
        self.kept_heads = config.kept_heads(self.pruned_heads_key)
        self.num_heads = len(self.kept_heads)
        self.num_key_value_heads = len(config.kept_key_value_heads(self.pruned_heads_key))
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        # config.attention_variant: None for exact attention (the attn_implementation kernel), else the efficient
        # kernel module (sliding window, Linformer, Performer) that replaces it for self-attention.
        self.attention_variant = build_attention_variant(
            config, layer_idx, self.num_heads, self.num_key_value_heads, self.head_dim, self.is_causal,
            is_cross_attention,
        )

    def _project(self, proj: nn.Linear, states: torch.Tensor) -> torch.Tensor:
        return proj(states).view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def _project_together(self, projections: tuple[nn.Linear, ...], states: torch.Tensor) -> list[torch.Tensor]:
        """Several projections of the same states, as one matrix product when they are plain linear layers.

        One (n, d) x (d, 3d) product instead of three (n, d) x (d, d) ones does less work per step (fewer kernel
        launches and passes over `states`, forward and backward) and gives the same result to float rounding. The
        parameters stay three modules (q_proj, k_proj, v_proj), so checkpoints, conversion and PEFT targets do not
        change: the weights are concatenated at call time. A projection that is not a plain nn.Linear (wrapped by
        PEFT, quantised) or that carries hooks (analysis tools, profilers) is called as a module, one by one.
        """
        # Concatenating the weights costs a copy of them per call, which a product over a handful of rows (decoding
        # one token at a time) does not win back: there the projections run one by one.
        if states.numel() < FUSED_PROJECTION_MIN_ROWS * states.shape[-1] or not plain_linears(projections):
            return [self._project(proj, states) for proj in projections]
        weight = torch.cat([proj.weight for proj in projections])
        bias = torch.cat([proj.bias for proj in projections]) if projections[0].bias is not None else None
        fused = nn.functional.linear(states, weight, bias)
        sizes = [proj.out_features for proj in projections]
        return [part.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2) for part in fused.split(sizes, -1)]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        query_positions: int | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query_positions: self-attention for the first `query_positions` positions only, over keys and values
        from every position (what the last layer of a [CLS]-pooled encoder needs; `ZooStackMixin.run_stack`). The
        mask, rotary angles and position bias given are those of the full sequence and are cut to those rows."""
        query_states = hidden_states
        if query_positions is not None:
            query_states = hidden_states[:, :query_positions]
            attention_mask = attention_mask[:, :, :query_positions] if attention_mask is not None else None
            position_bias = position_bias[:, :, :query_positions] if position_bias is not None else None
        if self.is_cross_attention:
            query = self._project(self.q_proj, hidden_states)
        elif query_positions is not None:
            query = self._project(self.q_proj, query_states)
            key, value = self._project_together((self.k_proj, self.v_proj), hidden_states)
        else:
            query, key, value = self._project_together((self.q_proj, self.k_proj, self.v_proj), hidden_states)

        # Self-attention appends to the self-attention cache; cross-attention computes the encoder's keys and values
        # once and reuses them at every later decoding step (the EncoderDecoderCache pattern of transformers' BART).
        layer_cache = cache
        if isinstance(cache, EncoderDecoderCache):
            layer_cache = cache.cross_attention_cache if self.is_cross_attention else cache.self_attention_cache
        if self.is_cross_attention and isinstance(cache, EncoderDecoderCache) and cache.is_updated.get(self.layer_idx):
            key = layer_cache.layers[self.layer_idx].keys
            value = layer_cache.layers[self.layer_idx].values
        else:
            if self.is_cross_attention:
                key, value = self._project_together((self.k_proj, self.v_proj), key_value_states)
            if position_embeddings is not None:
                cos, sin = position_embeddings
                query_cos, query_sin = cos, sin
                if query_positions is not None:
                    query_cos, query_sin = cos[..., :query_positions, :], sin[..., :query_positions, :]
                query, key = apply_rotary(query, query_cos, query_sin), apply_rotary(key, cos, sin)
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)
                if self.is_cross_attention and isinstance(cache, EncoderDecoderCache):
                    cache.is_updated[self.layer_idx] = True

        if self.attention_variant is not None:
            # The config refuses score-bias position schemes for the variants, so position_bias is None here.
            attention_function = self.attention_variant
        elif (self.training and self.config._attn_implementation == "sdpa"
              and (self.is_cross_attention or query_positions is not None or query.shape[2] == key.shape[2])
              and self.config.dropout_sampler == "pcg64"
              and pcg64_applies(query, self.attention_dropout, query.shape[:3].numel() * key.shape[2])):
            attention_function = sdpa_math_attention
        else:
            attention_function = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
        if position_bias is not None:
            kwargs["position_bias"] = position_bias
        output, weights = attention_function(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(*query_states.shape[:-1], -1).contiguous()
        return self.o_proj(output), weights


# ================================================================================================ block
class ZooBlock(GradientCheckpointingLayer):
    """One transformer layer: self-attention, optional cross-attention, feed-forward. Every sublayer goes through
    the same residual connection, pre-norm x + f(norm(x)) or post-norm norm(x + f(x)), with dropout on f.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool, has_cross_attention: bool = False):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.self_attn = ZooAttention(config, layer_idx, is_causal)
        self.self_attn_norm = build_norm(config)
        self.cross_attn = ZooAttention(config, layer_idx, is_causal, is_cross_attention=True) if has_cross_attention else None
        self.cross_attn_norm = build_norm(config) if has_cross_attention else None
        self.mlp = ZooMLP(config, config.feed_forward_size(config.attention_key(layer_idx, is_causal)))
        self.mlp_norm = build_norm(config)
        self.dropout = ZooDropout(config.hidden_dropout, config.dropout_sampler)

    def _residual(self, hidden_states: torch.Tensor, norm: nn.Module, sublayer: Callable,
                  query_positions: int | None = None) -> torch.Tensor:
        """query_positions: the sublayer returns only the first positions, and so does the residual."""
        kept = hidden_states if query_positions is None else hidden_states[:, :query_positions]
        if self.pre_norm:
            return kept + self.apply_dropout(sublayer(norm(hidden_states)))
        return norm(kept + self.apply_dropout(sublayer(hidden_states)))

    def apply_dropout(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # Not called in eval mode, where dropout is the identity: a module call costs microseconds of Python, and
        # decoding one token runs three per layer (transformers' layers call F.dropout with training=False instead).
        return self.dropout(hidden_states) if self.training else hidden_states

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        query_positions: int | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """query_positions: compute the layer's output for the first `query_positions` positions only (their
        attention still reads every position); see `ZooStackMixin.run_stack`'s `leading_positions`."""
        hidden_states = self._residual(
            hidden_states,
            self.self_attn_norm,
            lambda x: self.self_attn(
                x, attention_mask, position_embeddings, position_bias, cache=cache, query_positions=query_positions,
                **kwargs,
            )[0],
            query_positions,
        )
        # Without encoder states the decoder runs on its own (a language model over the target side), skipping
        # cross-attention as BART's and Marian's decoders do.
        if self.cross_attn is not None and encoder_hidden_states is not None:
            hidden_states = self._residual(
                hidden_states,
                self.cross_attn_norm,
                lambda x: self.cross_attn(
                    x, encoder_attention_mask, key_value_states=encoder_hidden_states, cache=cache, **kwargs
                )[0],
            )
        return self._residual(hidden_states, self.mlp_norm, self.mlp)


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
    return ZooScaledEmbedding(config.vocab_size, config.hidden_size, config.pad_token_id, embed_scale=scale)


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
        if inputs_embeds.ndim != 3 or inputs_embeds.shape[1] == 0:
            raise ValueError(
                f"inputs_embeds must be [batch, sequence, hidden_size] with at least one position, got shape "
                f"{tuple(inputs_embeds.shape)}; model.get_input_embeddings()(input_ids) makes them.")
        return inputs_embeds

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
        (tests/test_optimised_paths.py). Where the layer's input is read by something else (forward hooks on the
        last layer), or its kernel is not one that takes a rectangular mask (flash, flex, the attention variants),
        every position is computed and the first ones are returned.
        """
        self.check_attention_implementation()
        reject_unknown_kwargs(self, kwargs)
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        past_length = self_cache.get_seq_length() if self_cache is not None else 0
        query_length = inputs_embeds.shape[1]
        if attention_mask is not None and attention_mask.ndim == 2 and (
            attention_mask.shape[0] != inputs_embeds.shape[0] or attention_mask.shape[1] != past_length + query_length
        ):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}, expected [batch, cached + new tokens] = "
                f"[{inputs_embeds.shape[0]}, {past_length} + {query_length}]: one entry per key position, the "
                "cached ones included.")
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
                self.config, self.is_causal, hidden_states, attention_mask, self_cache, position_ids
            )
        elif self.is_causal:
            mask = create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=attention_mask,
                cache=self_cache,
                position_ids=position_ids,
            )
        else:
            mask = create_bidirectional_mask(
                config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
            )
        cross_mask = None
        if encoder_attention_mask is not None and encoder_hidden_states is not None and encoder_attention_mask.ndim == 2 \
                and tuple(encoder_attention_mask.shape) != tuple(encoder_hidden_states.shape[:2]):
            raise ValueError(
                f"attention_mask (of the source) has shape {tuple(encoder_attention_mask.shape)}, but the encoder "
                f"states are {tuple(encoder_hidden_states.shape[:2])} [batch, source length]: pass the mask of the "
                "source the encoder read.")
        if encoder_hidden_states is not None:
            cross_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )
        rotary = self.positions.rotary(position_ids, hidden_states.dtype)
        # The bias must span the keys attention will see. A StaticCache returns all max_cache_len slots (the unused
        # ones masked), not past + query, so ask the cache, as create_causal_mask does; without this alibi/relative
        # crashed with a shape mismatch under generate(cache_implementation="static").
        key_length = past_length + query_length
        if self_cache is not None:
            key_length = self_cache.get_mask_sizes(query_length, 0)[0]
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


# ================================================================================================ base model
class ZooPreTrainedModel(PreTrainedModel):
    """Capabilities and weight initialisation shared by every family. Families set `config_class`, `AUTO_MAP`
    and `_can_record_outputs`.
    """

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ZooBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    # Every class of a family, so that a saved folder loads with any Auto class under trust_remote_code
    # (transformers' save_pretrained only writes the entry of the class being saved).
    AUTO_MAP: dict[str, str] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # transformers' generate calls inspect.signature(self.forward) at every decoding step for a class registered
        # for an auto class (prepare_inputs_for_generation's remote-code branch), which rebuilds the signature from
        # the (decorated) function each time: about fifty Python calls per token. inspect returns a function's
        # __signature__ first, so it is computed once here; it is the same signature inspect would build.
        forward = cls.__dict__.get("forward")
        if callable(forward) and "__signature__" not in getattr(forward, "__dict__", {}):
            forward.__signature__ = inspect.signature(forward)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, PositionScheme):
            module.reset_buffers()
        if isinstance(module, AttentionVariant):
            module.reset_parameters()

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self.AUTO_MAP}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' from_pretrained, with two failures made clear: a folder of another family (transformers
        only warns, then builds this class from a foreign config) and a damaged weights file."""
        folder = os.fspath(pretrained_model_name_or_path)
        config_file = os.path.join(folder, "config.json")
        if kwargs.get("config") is None and not kwargs.get("subfolder") and os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as handle:
                saved_type = json.load(handle).get("model_type")
            expected = cls.config_class.model_type
            if saved_type != expected:
                raise ValueError(
                    f"{folder} holds a {saved_type!r} model, not {expected!r}: {cls.__name__} cannot load it. Load it "
                    "with the Auto class of its task (e.g. AutoModel.from_pretrained(folder)), or the class named in "
                    "its config.json `architectures`.")
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:
            raise OSError(
                f"The weights in {folder} are damaged ({error}): the safetensors file is truncated or corrupt, e.g. "
                "from an interrupted copy or download. Copy or download it again, or re-save the model.") from None


def leading_positions_read(config, kwargs: dict, positions: int) -> int | None:
    """`positions` for `run_stack(leading_positions=...)` when a pooled head's caller gets back only what the head
    reads from them; None when every position's states are returned (output_hidden_states or output_attentions
    asked for, by argument or by config)."""
    for name in ("output_hidden_states", "output_attentions"):
        asked = kwargs.get(name)
        if asked if asked is not None else getattr(config, name, False):
            return None
    return positions


class ZooPooler(nn.Module):
    """BERT's pooler: tanh(W h_[CLS] + b)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


def classifier_dropout(config) -> nn.Dropout:
    p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout
    return ZooDropout(p, config.dropout_sampler)
