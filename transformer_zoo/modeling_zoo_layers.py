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
pre- or post-norm residual. `ZooStackMixin` (modeling_zoo_stack.py) turns a `PreTrainedModel` into a stack of blocks:
embeddings -> N blocks -> final norm (pre-norm only). The four families are such stacks with different flags and heads.
`ZooPreTrainedModel` here is their common base.

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import inspect
import json
import os
from collections.abc import Callable

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .configuration_zoo_common import GATED_ACTIVATIONS
from .modeling_zoo_attention_kernels import eager_attention_forward, sdpa_math_attention
from .modeling_zoo_attention_variants import AttentionVariant, build_attention_variant
from .modeling_zoo_checks import check_model_folder, check_new_vocabulary_size, warn_layer_count_mismatch
from .modeling_zoo_dropout import ZooDropout, pcg64_applies
from .modeling_zoo_positions import PositionScheme, apply_rotary


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
                cos, sin = (angles.unsqueeze(1) for angles in position_embeddings)  # broadcast over heads, once
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

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        check_new_vocabulary_size(self.config, new_num_tokens, pad_to_multiple_of)
        return super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)

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
        """transformers' from_pretrained, with three failures made clear: a local folder that does not exist
        (transformers reads it as a malformed Hub id), a folder of another family (transformers only warns, then
        builds this class from a foreign config) and a damaged weights file. `None` with `config=` and
        `state_dict=` (a model from weights in memory, no folder) is transformers' call, passed on as it is."""
        if pretrained_model_name_or_path is None:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        check_model_folder(pretrained_model_name_or_path, exists_only=True)
        folder = os.fspath(pretrained_model_name_or_path)
        config_file = os.path.join(folder, "config.json")
        if kwargs.get("config") is None and not kwargs.get("subfolder") and os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as handle:
                saved_type = json.load(handle).get("model_type")
            expected = cls.config_class.model_type
            # A config.json without model_type loads with this class's own config, as transformers' classes do.
            if saved_type is not None and saved_type != expected:
                raise ValueError(
                    f"{folder} holds a {saved_type!r} model, not {expected!r}: {cls.__name__} cannot load it. Load it "
                    "with the Auto class of its task (e.g. AutoModel.from_pretrained(folder)), or the class named in "
                    "its config.json `architectures`.")
        wants_loading_info = kwargs.pop("output_loading_info", False)
        try:
            model, loading_info = super().from_pretrained(pretrained_model_name_or_path, *args,
                                                          output_loading_info=True, **kwargs)
        except SafetensorError as error:
            raise OSError(
                f"The weights in {folder} are damaged ({error}): the safetensors file is truncated or corrupt, e.g. "
                "from an interrupted copy or download. Copy or download it again, or re-save the model.") from None
        warn_layer_count_mismatch(model, loading_info, folder)
        return (model, loading_info) if wants_loading_info else model


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
