"""ViT (ViTModel, ViTForImageClassification) <-> the zoo ViT; the export writes an identity pooler."""

import torch
from transformers import ViTConfig

from ..configuration_zoo_vit import ZooViTConfig
from .common import NativeFormat, Rule, _dropout, _plain_activation, _refuse

def _identity_matrix(weight: torch.Tensor) -> torch.Tensor:
    return torch.eye(weight.shape[0], weight.shape[1], dtype=weight.dtype)


def _zeros(tensor: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(tensor)


VIT_BACKBONE_RULES = (
    Rule("embeddings.cls_token", "cls_token"),
    Rule("embeddings.position_embeddings", "position_embeddings"),
    Rule("embeddings.patch_embeddings.projection.{param}", "patch_embeddings.projection.{param}"),
    Rule(
        "embeddings.mask_token",
        None,
        dropped_warning="ViT's mask_token (only read with bool_masked_pos, for masked image modeling) is not "
        "converted: ZooViTModel has no masked-patch input.",
    ),
    Rule("layers.{layer}.attention.{qkvo}_proj.{param}", "layers.{layer}.self_attn.{qkvo}_proj.{param}"),
    Rule("layers.{layer}.layernorm_before.{param}", "layers.{layer}.self_attn_norm.{param}"),
    Rule("layers.{layer}.layernorm_after.{param}", "layers.{layer}.mlp_norm.{param}"),
    Rule("layers.{layer}.mlp.fc1.{param}", "layers.{layer}.mlp.up_proj.{param}"),
    Rule("layers.{layer}.mlp.fc2.{param}", "layers.{layer}.mlp.down_proj.{param}"),
    Rule("layernorm.{param}", "norm.{param}"),
    # The zoo's pooler_output is the normalised [CLS] state itself; an export writes an identity pooler (with
    # pooler_act="linear" in the config), which gives exactly that.
    Rule(
        "pooler.dense.weight",
        None,
        dropped_warning="ViTModel's pooler (dense + tanh on [CLS]) is not converted: ZooViTModel's pooler_output "
        "is the normalised [CLS] state itself, so pooler_output differs while last_hidden_state is identical. "
        "ViTForImageClassification never uses that pooler.",
        export_value=_identity_matrix,
    ),
    Rule("pooler.dense.bias", None, export_value=_zeros),
)
VIT_HEAD_RULES = (Rule("classifier.{param}", "classifier.{param}"),)


VIT_FIXED = dict(
    position_embedding_type="learned", pooling="cls", use_distillation_token=False, conv_stem=False,
    norm_position="pre", norm_type="layernorm", attention_bias=True, mlp_bias=True, norm_bias=True,
)
# Both build their LayerNorms with nn.LayerNorm's default eps, not a config value.


def vit_config_to_zoo(config) -> dict:
    family = "ViT"
    _refuse(not isinstance(config.image_size, int), family, f"non-square image_size={config.image_size!r}")
    _refuse(not isinstance(config.patch_size, int), family, f"non-square patch_size={config.patch_size!r}")
    # ZooAttention's attention_bias covers q, k, v and o together; ViT always biases its output projection.
    _refuse(not config.qkv_bias, family, "qkv_bias=False (biased output projection without q/k/v biases)")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return dict(
        VIT_FIXED,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        head_dim=head_dim,
        intermediate_size=config.intermediate_size,
        hidden_act=_plain_activation(config.hidden_act, family),
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_channels=config.num_channels,
        layer_norm_eps=config.layer_norm_eps,
        embedding_dropout=_dropout(config.hidden_dropout_prob),
        hidden_dropout=_dropout(config.hidden_dropout_prob),
        attention_dropout=_dropout(config.attention_probs_dropout_prob),
        initializer_range=config.initializer_range,
    )


def vit_config_from_zoo(config) -> dict:
    return dict(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=config.hidden_act,
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_channels=config.num_channels,
        layer_norm_eps=config.layer_norm_eps,
        hidden_dropout_prob=config.hidden_dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        initializer_range=config.initializer_range,
        qkv_bias=True,
        # See VIT_BACKBONE_RULES: an identity pooler reproduces the zoo's pooler_output.
        pooler_act="linear",
        pooler_output_size=config.hidden_size,
    )


FORMAT = NativeFormat(
    "vit", "ViT", ViTConfig, vit_config_to_zoo, vit_config_from_zoo, VIT_FIXED, ZooViTConfig, VIT_BACKBONE_RULES,
    VIT_HEAD_RULES, has_token_ids=False,
)
