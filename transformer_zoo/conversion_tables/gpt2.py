"""GPT-2 (GPT2Model and its heads) <-> the zoo decoder: Conv1D weights transposed, q/k/v fused in c_attn."""

import torch
from transformers import GPT2Config

from ..configuration_zoo_decoder import ZooDecoderConfig
from .common import DECODER_HEAD_RULES, NativeFormat, Rule, _ABSOLUTE_LAYERNORM, _dropout, _plain_activation, _refuse, _transpose

def _split_fused_qkv_weight(weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # c_attn is one Conv1D [hidden, 3 * hidden] whose output columns are q | k | v.
    return tuple(part.contiguous() for part in weight.t().chunk(3, dim=0))


def _join_fused_qkv_weight(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat((q, k, v), dim=0).t().contiguous()


def _split_fused_qkv_bias(bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(part.contiguous() for part in bias.chunk(3, dim=0))


def _join_fused_qkv_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat((q, k, v), dim=0)


GPT2_BACKBONE_RULES = (
    Rule("wte.weight", "embed_tokens.weight"),
    Rule("wpe.weight", "positions.embedding.weight"),
    Rule("h.{layer}.ln_1.{param}", "layers.{layer}.self_attn_norm.{param}"),
    Rule(
        "h.{layer}.attn.c_attn.weight",
        tuple(f"layers.{{layer}}.self_attn.{name}_proj.weight" for name in "qkv"),
        _split_fused_qkv_weight,
        _join_fused_qkv_weight,
    ),
    Rule(
        "h.{layer}.attn.c_attn.bias",
        tuple(f"layers.{{layer}}.self_attn.{name}_proj.bias" for name in "qkv"),
        _split_fused_qkv_bias,
        _join_fused_qkv_bias,
    ),
    Rule("h.{layer}.attn.c_proj.weight", "layers.{layer}.self_attn.o_proj.weight", _transpose, _transpose),
    Rule("h.{layer}.attn.c_proj.bias", "layers.{layer}.self_attn.o_proj.bias"),
    Rule("h.{layer}.ln_2.{param}", "layers.{layer}.mlp_norm.{param}"),
    Rule("h.{layer}.mlp.c_fc.weight", "layers.{layer}.mlp.up_proj.weight", _transpose, _transpose),
    Rule("h.{layer}.mlp.c_fc.bias", "layers.{layer}.mlp.up_proj.bias"),
    Rule("h.{layer}.mlp.c_proj.weight", "layers.{layer}.mlp.down_proj.weight", _transpose, _transpose),
    Rule("h.{layer}.mlp.c_proj.bias", "layers.{layer}.mlp.down_proj.bias"),
    Rule("ln_f.{param}", "norm.{param}"),
)
GPT2_FIXED = dict(_ABSOLUTE_LAYERNORM, position_embedding_type="learned", norm_position="pre", embedding_norm=False)


def gpt2_config_to_zoo(config) -> dict:
    family = "GPT-2"
    _refuse(config.add_cross_attention, family, "add_cross_attention=True (GPT-2 with cross-attention layers)")
    _refuse(
        config.scale_attn_by_inverse_layer_idx,
        family,
        "scale_attn_by_inverse_layer_idx=True (attention scores divided by the layer index)",
    )
    _refuse(not config.scale_attn_weights, family, "scale_attn_weights=False (unscaled attention scores)")
    # reorder_and_upcast_attn only changes the order of fp32 operations inside eager attention: accepted.
    return dict(
        GPT2_FIXED,
        vocab_size=config.vocab_size,
        hidden_size=config.n_embd,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        intermediate_size=config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        hidden_act=_plain_activation(config.activation_function, family),
        max_position_embeddings=config.n_positions,
        layer_norm_eps=config.layer_norm_epsilon,
        embedding_dropout=_dropout(config.embd_pdrop),
        hidden_dropout=_dropout(config.resid_pdrop),
        attention_dropout=_dropout(config.attn_pdrop),
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


def gpt2_config_from_zoo(config) -> dict:
    return dict(
        vocab_size=config.vocab_size,
        n_embd=config.hidden_size,
        n_layer=config.num_hidden_layers,
        n_head=config.num_attention_heads,
        n_inner=config.intermediate_size,
        activation_function=config.hidden_act,
        n_positions=config.max_position_embeddings,
        layer_norm_epsilon=config.layer_norm_eps,
        embd_pdrop=config.embedding_dropout,
        resid_pdrop=config.hidden_dropout,
        attn_pdrop=config.attention_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


FORMAT = NativeFormat(
    "gpt2", "GPT-2", GPT2Config, gpt2_config_to_zoo, gpt2_config_from_zoo, GPT2_FIXED, ZooDecoderConfig,
    GPT2_BACKBONE_RULES, DECODER_HEAD_RULES, default_task="causal-lm",
)
