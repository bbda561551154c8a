"""Llama (LlamaModel and its heads) <-> the zoo decoder with RoPE, RMSNorm and a gated MLP."""

from transformers import LlamaConfig

from ..configuration_zoo_common import GATED_ACTIVATIONS
from ..configuration_zoo_decoder import ZooDecoderConfig
from .common import DECODER_HEAD_RULES, NativeFormat, Rule, _dropout, _gated_activation, _refuse

LLAMA_BACKBONE_RULES = (
    Rule("embed_tokens.weight", "embed_tokens.weight"),
    Rule("layers.{layer}.self_attn.{qkvo}_proj.{param}", "layers.{layer}.self_attn.{qkvo}_proj.{param}"),
    Rule("layers.{layer}.mlp.{mlp}.{param}", "layers.{layer}.mlp.{mlp}.{param}"),
    Rule("layers.{layer}.input_layernorm.weight", "layers.{layer}.self_attn_norm.weight"),
    Rule("layers.{layer}.post_attention_layernorm.weight", "layers.{layer}.mlp_norm.weight"),
    Rule("norm.weight", "norm.weight"),
)

LLAMA_FIXED = dict(
    position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm", norm_bias=False, embedding_norm=False,
    scale_embedding=False, embedding_dropout=0.0, hidden_dropout=0.0,
)


def llama_config_to_zoo(config) -> dict:
    family = "Llama"
    rope = dict(config.rope_parameters or {})
    rope_type = rope.get("rope_type", "default")
    _refuse(rope_type != "default", family, f"RoPE scaling rope_type={rope_type!r} (only 'default')")
    _refuse(
        rope.get("partial_rotary_factor", 1.0) != 1.0,
        family,
        f"partial_rotary_factor={rope.get('partial_rotary_factor')} (RoPE on part of the head)",
    )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return dict(
        LLAMA_FIXED,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads or config.num_attention_heads,
        head_dim=head_dim,
        intermediate_size=config.intermediate_size,
        hidden_act=_gated_activation(config.hidden_act, family),
        max_position_embeddings=config.max_position_embeddings,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        layer_norm_eps=config.rms_norm_eps,
        attention_bias=config.attention_bias,
        mlp_bias=config.mlp_bias,
        attention_dropout=_dropout(config.attention_dropout),
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


def llama_config_from_zoo(config) -> dict:
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        intermediate_size=config.intermediate_size,
        # A name outside GATED_ACTIVATIONS is kept as it is, for the export check to name.
        hidden_act=GATED_ACTIVATIONS.get(config.hidden_act, config.hidden_act),
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        rms_norm_eps=config.layer_norm_eps,
        attention_bias=config.attention_bias,
        mlp_bias=config.mlp_bias,
        attention_dropout=config.attention_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


FORMAT = NativeFormat(
    "llama", "Llama", LlamaConfig, llama_config_to_zoo, llama_config_from_zoo, LLAMA_FIXED, ZooDecoderConfig,
    LLAMA_BACKBONE_RULES, DECODER_HEAD_RULES, default_task="causal-lm",
)
