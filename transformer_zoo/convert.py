"""Convert transformers checkpoints into the matching transformer-zoo family, with identical outputs.

Supported sources (exact class names; anything else is refused with the list below):

    BERT    BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
            BertForQuestionAnswering                                    -> ZooEncoder*
    GPT-2   GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification   -> ZooDecoder*
    Llama   LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification -> ZooDecoder*
    ViT     ViTModel, ViTForImageClassification                         -> ZooViT*
    Marian  MarianModel, MarianMTModel                                  -> ZooSeq2Seq*
    BART    BartModel, BartForConditionalGeneration                     -> ZooSeq2Seq*

Each source family is described by one `SourceFamily`: a function mapping the source config to zoo config fields
(refusing options the zoo cannot reproduce, naming them), and a table of renaming rules for parameter names, with the
few reshapes that need more than a rename (GPT-2's transposed Conv1D weights and fused q/k/v projection, BART's
position table offset). Every source tensor must be claimed by a rule and every zoo parameter must be filled, so a
conversion never drops or invents weights silently. The deliberate drops: BERT's `cls.predictions.bias` (an unused
alias of the decoder bias), Marian's sinusoidal table (checked against the formula the zoo recomputes), and, with a
warning, ViTModel's pooler and mask token (the zoo's ViT pools [CLS] without a dense layer).

This module is a library helper, not remote code: it is not copied into saved checkpoints.
"""

import copy
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedModel,
)
from transformers.activations import ACT2FN
from transformers.utils import logging

from .configuration_zoo_common import GATED_ACTIVATIONS
from .configuration_zoo_decoder import ZooDecoderConfig
from .configuration_zoo_encoder import ZooEncoderConfig
from .configuration_zoo_seq2seq import ZooSeq2SeqConfig
from .configuration_zoo_vit import ZooViTConfig
from .modeling_zoo_decoder import ZooDecoderForCausalLM, ZooDecoderForSequenceClassification, ZooDecoderModel
from .modeling_zoo_encoder import (
    ZooEncoderForMaskedLM,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from .modeling_zoo_layers import SinusoidalPositions
from .modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration, ZooSeq2SeqModel
from .modeling_zoo_vit import ZooViTForImageClassification, ZooViTModel


logger = logging.get_logger(__name__)

__all__ = [
    "SUPPORTED_SOURCES",
    "TASKS",
    "UnsupportedConversionError",
    "compare_outputs",
    "convert_checkpoint",
    "convert_model",
    "load_source_model",
    "random_inputs",
    "save_conversion",
]


class UnsupportedConversionError(ValueError):
    """The source uses a feature the zoo model cannot reproduce exactly (the message names it)."""


# ================================================================================================ renaming rules
@dataclass(frozen=True)
class Rule:
    """Renames source tensors whose name fully matches `pattern` (a regex over the name relative to the backbone,
    or to the whole model for head tensors) to `target`, a `re` replacement template such as r"layers.\\1.mlp".

    `target` may be a tuple when `transform` splits one tensor into several (GPT-2's fused q/k/v). `target=None`
    drops the tensor on purpose; `dropped_warning`, when set, is logged because the drop changes some output, and
    `check`, when set, verifies that the zoo recomputes the dropped tensor exactly (it raises otherwise).
    """

    pattern: str
    target: str | tuple[str, ...] | None
    transform: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]] | None = None
    dropped_warning: str | None = None
    check: Callable[[torch.Tensor], None] | None = None


def _transpose(weight: torch.Tensor) -> torch.Tensor:
    # GPT-2's Conv1D stores [in, out] and computes x @ W; nn.Linear stores [out, in].
    return weight.t().contiguous()


def _split_fused_qkv_weight(weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # c_attn is one Conv1D [hidden, 3 * hidden] whose output columns are q | k | v.
    return tuple(part.contiguous() for part in weight.t().chunk(3, dim=0))


def _split_fused_qkv_bias(bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(part.contiguous() for part in bias.chunk(3, dim=0))


# BART's learned position table has two extra leading rows: BartLearnedPositionalEmbedding looks up position + 2
# (a fairseq legacy), so rows 0 and 1 are never read.
BART_POSITION_OFFSET = 2


def _drop_bart_offset_rows(table: torch.Tensor) -> torch.Tensor:
    return table[BART_POSITION_OFFSET:].contiguous()


def _check_sinusoidal_table(table: torch.Tensor) -> None:
    # Marian's table is frozen and not saved, so it is normally the formula's; a hand-edited one would not convert.
    expected = SinusoidalPositions.compute_table(*table.shape).to(table.dtype)
    difference = (table.float() - expected.float()).abs().max().item()
    if difference > 1e-6:
        raise UnsupportedConversionError(
            f"Marian's sinusoidal position table differs from the standard sin | cos formula by up to "
            f"{difference:.3g}; the zoo model recomputes that formula and would not reproduce this table."
        )


_W = r"(weight|bias)"  # a Linear or LayerNorm parameter, carried over as \N in the target

BERT_BACKBONE_RULES = (
    Rule(r"embeddings\.word_embeddings\.weight", "embed_tokens.weight"),
    Rule(r"embeddings\.token_type_embeddings\.weight", "embed_token_types.weight"),
    Rule(r"embeddings\.position_embeddings\.weight", "positions.embedding.weight"),
    Rule(rf"embeddings\.LayerNorm\.{_W}", r"embed_norm.\1"),
    Rule(rf"encoder\.layer\.(\d+)\.attention\.self\.query\.{_W}", r"layers.\1.self_attn.q_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.attention\.self\.key\.{_W}", r"layers.\1.self_attn.k_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.attention\.self\.value\.{_W}", r"layers.\1.self_attn.v_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.attention\.output\.dense\.{_W}", r"layers.\1.self_attn.o_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.{_W}", r"layers.\1.self_attn_norm.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.intermediate\.dense\.{_W}", r"layers.\1.mlp.up_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.output\.dense\.{_W}", r"layers.\1.mlp.down_proj.\2"),
    Rule(rf"encoder\.layer\.(\d+)\.output\.LayerNorm\.{_W}", r"layers.\1.mlp_norm.\2"),
    Rule(rf"pooler\.dense\.{_W}", r"pooler.dense.\1"),
)
BERT_HEAD_RULES = (
    Rule(rf"cls\.predictions\.transform\.dense\.{_W}", r"lm_head.dense.\1"),
    Rule(rf"cls\.predictions\.transform\.LayerNorm\.{_W}", r"lm_head.norm.\1"),
    Rule(rf"cls\.predictions\.decoder\.{_W}", r"lm_head.decoder.\1"),
    # BertLMPredictionHead.bias is an alias of decoder.bias kept for old checkpoints; forward reads decoder.bias only.
    Rule(r"cls\.predictions\.bias", None),
    Rule(rf"classifier\.{_W}", r"classifier.\1"),
    Rule(rf"qa_outputs\.{_W}", r"qa_outputs.\1"),
)

GPT2_BACKBONE_RULES = (
    Rule(r"wte\.weight", "embed_tokens.weight"),
    Rule(r"wpe\.weight", "positions.embedding.weight"),
    Rule(rf"h\.(\d+)\.ln_1\.{_W}", r"layers.\1.self_attn_norm.\2"),
    Rule(
        r"h\.(\d+)\.attn\.c_attn\.weight",
        tuple(rf"layers.\1.self_attn.{name}_proj.weight" for name in "qkv"),
        _split_fused_qkv_weight,
    ),
    Rule(
        r"h\.(\d+)\.attn\.c_attn\.bias",
        tuple(rf"layers.\1.self_attn.{name}_proj.bias" for name in "qkv"),
        _split_fused_qkv_bias,
    ),
    Rule(r"h\.(\d+)\.attn\.c_proj\.weight", r"layers.\1.self_attn.o_proj.weight", _transpose),
    Rule(r"h\.(\d+)\.attn\.c_proj\.bias", r"layers.\1.self_attn.o_proj.bias"),
    Rule(rf"h\.(\d+)\.ln_2\.{_W}", r"layers.\1.mlp_norm.\2"),
    Rule(r"h\.(\d+)\.mlp\.c_fc\.weight", r"layers.\1.mlp.up_proj.weight", _transpose),
    Rule(r"h\.(\d+)\.mlp\.c_fc\.bias", r"layers.\1.mlp.up_proj.bias"),
    Rule(r"h\.(\d+)\.mlp\.c_proj\.weight", r"layers.\1.mlp.down_proj.weight", _transpose),
    Rule(r"h\.(\d+)\.mlp\.c_proj\.bias", r"layers.\1.mlp.down_proj.bias"),
    Rule(rf"ln_f\.{_W}", r"norm.\1"),
)
DECODER_HEAD_RULES = (
    Rule(r"lm_head\.weight", "lm_head.weight"),
    Rule(r"score\.weight", "score.weight"),
)

LLAMA_BACKBONE_RULES = (
    Rule(r"embed_tokens\.weight", "embed_tokens.weight"),
    Rule(rf"layers\.(\d+)\.self_attn\.([qkvo]_proj)\.{_W}", r"layers.\1.self_attn.\2.\3"),
    Rule(rf"layers\.(\d+)\.mlp\.(gate_proj|up_proj|down_proj)\.{_W}", r"layers.\1.mlp.\2.\3"),
    Rule(r"layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.self_attn_norm.weight"),
    Rule(r"layers\.(\d+)\.post_attention_layernorm\.weight", r"layers.\1.mlp_norm.weight"),
    Rule(r"norm\.weight", "norm.weight"),
)

VIT_BACKBONE_RULES = (
    Rule(r"embeddings\.cls_token", "cls_token"),
    Rule(r"embeddings\.position_embeddings", "position_embeddings"),
    Rule(rf"embeddings\.patch_embeddings\.projection\.{_W}", r"patch_embeddings.projection.\1"),
    Rule(
        r"embeddings\.mask_token",
        None,
        dropped_warning="ViT's mask_token (only read with bool_masked_pos, for masked image modeling) is not "
        "converted: ZooViTModel has no masked-patch input.",
    ),
    Rule(rf"layers\.(\d+)\.attention\.([qkvo]_proj)\.{_W}", r"layers.\1.self_attn.\2.\3"),
    Rule(rf"layers\.(\d+)\.layernorm_before\.{_W}", r"layers.\1.self_attn_norm.\2"),
    Rule(rf"layers\.(\d+)\.layernorm_after\.{_W}", r"layers.\1.mlp_norm.\2"),
    Rule(rf"layers\.(\d+)\.mlp\.fc1\.{_W}", r"layers.\1.mlp.up_proj.\2"),
    Rule(rf"layers\.(\d+)\.mlp\.fc2\.{_W}", r"layers.\1.mlp.down_proj.\2"),
    Rule(rf"layernorm\.{_W}", r"norm.\1"),
    Rule(
        rf"pooler\.dense\.{_W}",
        None,
        dropped_warning="ViTModel's pooler (dense + tanh on [CLS]) is not converted: ZooViTModel's pooler_output "
        "is the normalised [CLS] state itself, so pooler_output differs while last_hidden_state is identical. "
        "ViTForImageClassification never uses that pooler.",
    ),
)
VIT_HEAD_RULES = (Rule(rf"classifier\.{_W}", r"classifier.\1"),)


def _seq2seq_backbone_rules(learned_positions: bool) -> tuple[Rule, ...]:
    """Marian and BART share layer names (fairseq's); they differ in positions and the embedding norm."""
    rules = [
        Rule(r"shared\.weight", "shared.weight"),
        Rule(r"(encoder|decoder)\.embed_tokens\.weight", r"\1.embed_tokens.weight"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.self_attn\.([qkv]_proj)\.{_W}", r"\1.layers.\2.self_attn.\3.\4"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.self_attn\.out_proj\.{_W}", r"\1.layers.\2.self_attn.o_proj.\3"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.{_W}", r"\1.layers.\2.self_attn_norm.\3"),
        Rule(rf"decoder\.layers\.(\d+)\.encoder_attn\.([qkv]_proj)\.{_W}", r"decoder.layers.\1.cross_attn.\2.\3"),
        Rule(rf"decoder\.layers\.(\d+)\.encoder_attn\.out_proj\.{_W}", r"decoder.layers.\1.cross_attn.o_proj.\2"),
        Rule(rf"decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.{_W}", r"decoder.layers.\1.cross_attn_norm.\2"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.fc1\.{_W}", r"\1.layers.\2.mlp.up_proj.\3"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.fc2\.{_W}", r"\1.layers.\2.mlp.down_proj.\3"),
        Rule(rf"(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.{_W}", r"\1.layers.\2.mlp_norm.\3"),
    ]
    if learned_positions:
        rules += [
            Rule(
                r"(encoder|decoder)\.embed_positions\.weight", r"\1.positions.embedding.weight", _drop_bart_offset_rows
            ),
            Rule(rf"(encoder|decoder)\.layernorm_embedding\.{_W}", r"\1.embed_norm.\2"),
        ]
    else:
        # Marian's frozen sinusoidal table; the zoo recomputes the same table (concatenated sin | cos halves).
        rules.append(Rule(r"(encoder|decoder)\.embed_positions\.weight", None, check=_check_sinusoidal_table))
    return tuple(rules)


SEQ2SEQ_HEAD_RULES = (
    Rule(r"lm_head\.weight", "lm_head.weight"),
    Rule(r"final_logits_bias", "final_logits_bias"),
)


# ================================================================================================ config mapping
def _refuse(condition: bool, family: str, feature: str) -> None:
    if condition:
        raise UnsupportedConversionError(
            f"Cannot convert this {family} checkpoint: {feature}. The zoo model has no equivalent, so its outputs "
            "would differ from the source's."
        )


# Activation aliases that name the same function in ACT2FN; the zoo stores the canonical name.
ACTIVATION_ALIASES = {"swish": "silu"}


def _plain_activation(name, family: str) -> str:
    _refuse(not isinstance(name, str), family, f"a non-string activation ({name!r})")
    name = ACTIVATION_ALIASES.get(name, name)
    _refuse(name not in ACT2FN or name in GATED_ACTIVATIONS, family, f"activation {name!r}")
    return name


def _gated_activation(gate_activation, family: str) -> str:
    """Llama applies `hidden_act` to the gate of a gated MLP; the zoo names the pair (silu -> swiglu)."""
    gate_activation = ACTIVATION_ALIASES.get(gate_activation, gate_activation)
    zoo_names = {gate: zoo_name for zoo_name, gate in GATED_ACTIVATIONS.items()}
    _refuse(
        gate_activation not in zoo_names,
        family,
        f"gated MLP activation {gate_activation!r} (supported: {', '.join(sorted(zoo_names))})",
    )
    return zoo_names[gate_activation]


def _dropout(value) -> float:
    return float(value or 0.0)


def bert_config_to_zoo(config) -> dict:
    family = "BERT"
    _refuse(config.is_decoder, family, "is_decoder=True (a causal BERT)")
    _refuse(config.add_cross_attention, family, "add_cross_attention=True (BERT as a cross-attending decoder)")
    # transformers 5 dropped relative_key(_query) from BERT but old config.json files still carry the field.
    position_type = getattr(config, "position_embedding_type", "absolute")
    _refuse(position_type != "absolute", family, f"position_embedding_type={position_type!r} (only 'absolute')")
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=_plain_activation(config.hidden_act, family),
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        position_embedding_type="learned",
        norm_position="post",
        norm_type="layernorm",
        layer_norm_eps=config.layer_norm_eps,
        embedding_norm=True,
        scale_embedding=False,
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
        embedding_dropout=_dropout(config.hidden_dropout_prob),
        hidden_dropout=_dropout(config.hidden_dropout_prob),
        attention_dropout=_dropout(config.attention_probs_dropout_prob),
        classifier_dropout=config.classifier_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


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
        vocab_size=config.vocab_size,
        hidden_size=config.n_embd,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        intermediate_size=config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        hidden_act=_plain_activation(config.activation_function, family),
        max_position_embeddings=config.n_positions,
        position_embedding_type="learned",
        norm_position="pre",
        norm_type="layernorm",
        layer_norm_eps=config.layer_norm_epsilon,
        embedding_norm=False,
        scale_embedding=False,
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
        embedding_dropout=_dropout(config.embd_pdrop),
        hidden_dropout=_dropout(config.resid_pdrop),
        attention_dropout=_dropout(config.attn_pdrop),
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
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
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads or config.num_attention_heads,
        head_dim=head_dim,
        intermediate_size=config.intermediate_size,
        hidden_act=_gated_activation(config.hidden_act, family),
        max_position_embeddings=config.max_position_embeddings,
        position_embedding_type="rope",
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        norm_position="pre",
        norm_type="rmsnorm",
        layer_norm_eps=config.rms_norm_eps,
        norm_bias=False,
        embedding_norm=False,
        scale_embedding=False,
        attention_bias=config.attention_bias,
        mlp_bias=config.mlp_bias,
        embedding_dropout=0.0,
        hidden_dropout=0.0,
        attention_dropout=_dropout(config.attention_dropout),
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


def vit_config_to_zoo(config) -> dict:
    family = "ViT"
    _refuse(not isinstance(config.image_size, int), family, f"non-square image_size={config.image_size!r}")
    _refuse(not isinstance(config.patch_size, int), family, f"non-square patch_size={config.patch_size!r}")
    # ZooAttention's attention_bias covers q, k, v and o together; ViT always biases its output projection.
    _refuse(not config.qkv_bias, family, "qkv_bias=False (biased output projection without q/k/v biases)")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return dict(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        head_dim=head_dim,
        intermediate_size=config.intermediate_size,
        hidden_act=_plain_activation(config.hidden_act, family),
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_channels=config.num_channels,
        position_embedding_type="learned",
        pooling="cls",
        use_distillation_token=False,
        conv_stem=False,
        norm_position="pre",
        norm_type="layernorm",
        layer_norm_eps=config.layer_norm_eps,
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
        embedding_dropout=_dropout(config.hidden_dropout_prob),
        hidden_dropout=_dropout(config.hidden_dropout_prob),
        attention_dropout=_dropout(config.attention_probs_dropout_prob),
        initializer_range=config.initializer_range,
    )


def _seq2seq_config_to_zoo(config, family: str) -> dict:
    """Fields Marian and BART share: fairseq-style post-norm encoder-decoders with one d_model (each stack may have
    its own head count and feed-forward width)."""
    # Training-time only: eval outputs are unaffected, but fine-tuning the converted model will regularise differently.
    if _dropout(config.activation_dropout) > 0:
        logger.warning(
            f"{family} activation_dropout={config.activation_dropout} has no zoo equivalent (ZooMLP has no dropout "
            "after its activation); eval outputs are identical, training dropout differs."
        )
    if _dropout(config.encoder_layerdrop) > 0 or _dropout(config.decoder_layerdrop) > 0:
        logger.warning(f"{family} LayerDrop (encoder/decoder_layerdrop) is not supported by the zoo and is ignored.")
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        num_attention_heads=config.encoder_attention_heads,
        intermediate_size=config.encoder_ffn_dim,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        hidden_act=_plain_activation(config.activation_function, family),
        max_position_embeddings=config.max_position_embeddings,
        norm_position="post",
        norm_type="layernorm",
        # Both build their LayerNorms with nn.LayerNorm's default eps, not a config value.
        layer_norm_eps=1e-5,
        scale_embedding=bool(config.scale_embedding),
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
        embedding_dropout=_dropout(config.dropout),
        hidden_dropout=_dropout(config.dropout),
        attention_dropout=_dropout(config.attention_dropout),
        initializer_range=config.init_std,
        tie_word_embeddings=config.tie_word_embeddings,
        decoder_start_token_id=config.decoder_start_token_id,
    )


def marian_config_to_zoo(config) -> dict:
    family = "Marian"
    _refuse(
        not config.share_encoder_decoder_embeddings,
        family,
        "separate source and target vocabularies (share_encoder_decoder_embeddings=False)",
    )
    _refuse(
        config.decoder_vocab_size not in (None, config.vocab_size),
        family,
        f"a target vocabulary of a different size (decoder_vocab_size={config.decoder_vocab_size}, "
        f"vocab_size={config.vocab_size})",
    )
    return dict(_seq2seq_config_to_zoo(config, family), position_embedding_type="sinusoidal", embedding_norm=False)


def bart_config_to_zoo(config) -> dict:
    family = "BART"
    # mBART-style options that BartConfig does not define but a config.json could carry.
    _refuse(getattr(config, "normalize_before", False), family, "normalize_before=True (pre-norm layers)")
    _refuse(getattr(config, "add_final_layer_norm", False), family, "add_final_layer_norm=True")
    return dict(_seq2seq_config_to_zoo(config, family), position_embedding_type="learned", embedding_norm=True)


# ================================================================================================ families
@dataclass(frozen=True)
class SourceFamily:
    """How one transformers architecture maps onto a zoo family."""

    model_type: str  # the source config's model_type
    config_to_zoo: Callable[[object], dict]
    zoo_config_class: type
    backbone_rules: tuple[Rule, ...]
    head_rules: tuple[Rule, ...]
    has_token_ids: bool = True  # text families carry pad/bos/eos ids; ViT does not
    default_task: str = "base"  # the head convert_checkpoint loads when config.architectures does not say


SOURCE_FAMILIES = {
    "bert": SourceFamily("bert", bert_config_to_zoo, ZooEncoderConfig, BERT_BACKBONE_RULES, BERT_HEAD_RULES),
    "gpt2": SourceFamily(
        "gpt2", gpt2_config_to_zoo, ZooDecoderConfig, GPT2_BACKBONE_RULES, DECODER_HEAD_RULES, default_task="causal-lm"
    ),
    "llama": SourceFamily(
        "llama", llama_config_to_zoo, ZooDecoderConfig, LLAMA_BACKBONE_RULES, DECODER_HEAD_RULES,
        default_task="causal-lm",
    ),
    "vit": SourceFamily(
        "vit", vit_config_to_zoo, ZooViTConfig, VIT_BACKBONE_RULES, VIT_HEAD_RULES, has_token_ids=False
    ),
    "marian": SourceFamily(
        "marian", marian_config_to_zoo, ZooSeq2SeqConfig, _seq2seq_backbone_rules(learned_positions=False),
        SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
    ),
    "bart": SourceFamily(
        "bart", bart_config_to_zoo, ZooSeq2SeqConfig, _seq2seq_backbone_rules(learned_positions=True),
        SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
    ),
}

# Source class name -> (source model_type, zoo class). Exact names: a subclass or a relative (RoBERTa, mBART) may
# differ in ways these tables do not know about.
SUPPORTED_SOURCES: dict[str, tuple[str, type[PreTrainedModel]]] = {
    "BertModel": ("bert", ZooEncoderModel),
    "BertForMaskedLM": ("bert", ZooEncoderForMaskedLM),
    "BertForSequenceClassification": ("bert", ZooEncoderForSequenceClassification),
    "BertForTokenClassification": ("bert", ZooEncoderForTokenClassification),
    "BertForQuestionAnswering": ("bert", ZooEncoderForQuestionAnswering),
    "GPT2Model": ("gpt2", ZooDecoderModel),
    "GPT2LMHeadModel": ("gpt2", ZooDecoderForCausalLM),
    "GPT2ForSequenceClassification": ("gpt2", ZooDecoderForSequenceClassification),
    "LlamaModel": ("llama", ZooDecoderModel),
    "LlamaForCausalLM": ("llama", ZooDecoderForCausalLM),
    "LlamaForSequenceClassification": ("llama", ZooDecoderForSequenceClassification),
    "ViTModel": ("vit", ZooViTModel),
    "ViTForImageClassification": ("vit", ZooViTForImageClassification),
    "MarianModel": ("marian", ZooSeq2SeqModel),
    "MarianMTModel": ("marian", ZooSeq2SeqForConditionalGeneration),
    "BartModel": ("bart", ZooSeq2SeqModel),
    "BartForConditionalGeneration": ("bart", ZooSeq2SeqForConditionalGeneration),
}


def _shared_config_kwargs(config, family: SourceFamily) -> dict:
    """Labels and special tokens, copied as they are."""
    kwargs = dict(id2label=config.id2label, label2id=config.label2id, problem_type=config.problem_type)
    if family.has_token_ids:
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            kwargs[name] = getattr(config, name, None)
    return kwargs


def zoo_config_for(source_config, family: SourceFamily):
    kwargs = {**family.config_to_zoo(source_config), **_shared_config_kwargs(source_config, family)}
    return family.zoo_config_class(**kwargs)


# ================================================================================================ weights
def _rename_state_dict(source_model: PreTrainedModel, zoo_model: PreTrainedModel, family: SourceFamily) -> dict:
    """Source state dict -> zoo state dict through the family's rules. Raises on any tensor no rule claims."""
    source_is_head = source_model.base_model is not source_model
    source_prefix = source_model.base_model_prefix + "." if source_is_head else ""
    zoo_prefix = zoo_model.base_model_prefix + "." if zoo_model.base_model is not zoo_model else ""

    converted: dict[str, torch.Tensor] = {}
    unclaimed: list[str] = []
    warnings: set[str] = set()
    for name, tensor in source_model.state_dict().items():
        if name.startswith(source_prefix):  # always true for a bare backbone (empty prefix)
            rules, relative, out_prefix = family.backbone_rules, name[len(source_prefix) :], zoo_prefix
        else:
            rules, relative, out_prefix = family.head_rules, name, ""
        match = rule = None
        for rule in rules:
            match = re.fullmatch(rule.pattern, relative)
            if match:
                break
        if match is None:
            unclaimed.append(name)
            continue
        if rule.target is None:
            if rule.check:
                rule.check(tensor)
            if rule.dropped_warning:
                warnings.add(rule.dropped_warning)
            continue
        values = rule.transform(tensor) if rule.transform else tensor
        targets = rule.target if isinstance(rule.target, tuple) else (rule.target,)
        values = values if isinstance(values, tuple) else (values,)
        for target, value in zip(targets, values, strict=True):
            converted[out_prefix + match.expand(target)] = value
    if unclaimed:
        raise UnsupportedConversionError(
            f"No conversion rule for these {type(source_model).__name__} tensors: {', '.join(unclaimed[:10])}"
            f"{' ...' if len(unclaimed) > 10 else ''}. The checkpoint has parts the zoo model does not know."
        )
    for warning in sorted(warnings):
        logger.warning(warning)
    return converted


def _fill_tied_parameters(converted: dict, zoo_model: PreTrainedModel, source_name: str) -> None:
    """Zoo parameters that share one tensor (tied embeddings) must receive one value: fill the names the source
    does not provide from their tie partners, and refuse sources whose corresponding tensors differ.
    """
    groups: dict[int, list[str]] = {}
    for name, parameter in zoo_model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    for names in groups.values():
        if len(names) < 2:
            continue
        provided = [name for name in names if name in converted]
        if not provided:
            continue
        reference = converted[provided[0]]
        for name in provided[1:]:
            if not torch.equal(converted[name], reference):
                raise UnsupportedConversionError(
                    f"{source_name} has different values for {provided[0]!r} and {name!r}, which the zoo model ties "
                    "into one tensor (e.g. separate encoder/decoder embeddings, or an untied output layer under "
                    "tie_word_embeddings=True)."
                )
        for name in names:
            converted.setdefault(name, reference)


@torch.no_grad()
def convert_model(source_model: PreTrainedModel) -> PreTrainedModel:
    """Build the zoo model equivalent to an instantiated transformers model (see the module docstring for the list).

    The result has the source's dtype, train/eval mode, labels, special tokens and generation config, and gives the
    same outputs (to float rounding). Raises `UnsupportedConversionError` naming any feature the zoo cannot match.
    """
    source_name = type(source_model).__name__
    if source_name not in SUPPORTED_SOURCES:
        raise UnsupportedConversionError(
            f"Cannot convert a {source_name}: supported source classes are {', '.join(SUPPORTED_SOURCES)}."
        )
    model_type, zoo_class = SUPPORTED_SOURCES[source_name]
    family = SOURCE_FAMILIES[model_type]
    if source_model.config.model_type != model_type:
        raise UnsupportedConversionError(
            f"{source_name} carries a config of model_type={source_model.config.model_type!r}, expected "
            f"{model_type!r}."
        )

    zoo_config = zoo_config_for(source_model.config, family)
    init_kwargs = {}
    if zoo_class is ZooEncoderModel:
        # BertModel(add_pooling_layer=False) has no pooler; mirror it rather than invent one.
        init_kwargs["add_pooling_layer"] = getattr(source_model, "pooler", None) is not None
    # Built normally (random init, then overwritten): transformers' no_init_weights context would also skip the
    # weight tying done in post_init.
    zoo_model = zoo_class(zoo_config, **init_kwargs)

    state = _rename_state_dict(source_model, zoo_model, family)
    _fill_tied_parameters(state, zoo_model, source_name)
    expected = set(zoo_model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        # A table bug rather than a user error: the rules and the zoo layout disagree.
        raise RuntimeError(
            f"Converting {source_name}: zoo tensors without a source {missing[:10]}, converted names the zoo model "
            f"lacks {unexpected[:10]}."
        )
    # load_state_dict copies into the zoo's float32 parameters (exact for any source dtype); then match the source.
    zoo_model.load_state_dict(state, strict=True)
    source_parameter = next(source_model.parameters())
    zoo_model.to(device=source_parameter.device, dtype=source_parameter.dtype)

    if zoo_model.can_generate() and source_model.can_generate():
        # Beam settings, forced BOS/EOS, max_length... live in the generation config, not the model config.
        zoo_model.generation_config = copy.deepcopy(source_model.generation_config)
    zoo_model.train(source_model.training)
    return zoo_model


# ================================================================================================ checkpoints
# Task names accepted by convert_checkpoint / the CLI, and the transformers Auto class that loads each head.
TASKS = {
    "base": AutoModel,
    "masked-lm": AutoModelForMaskedLM,
    "causal-lm": AutoModelForCausalLM,
    "seq2seq-lm": AutoModelForSeq2SeqLM,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
    "question-answering": AutoModelForQuestionAnswering,
    "image-classification": AutoModelForImageClassification,
}


def _source_load_error(src: str, error: Exception) -> OSError:
    where = "local folder" if os.path.isdir(src) else "Hub id (no such local folder)"
    return OSError(
        f"Could not load the source checkpoint {src!r} as a {where}.\n{error}\nPass a local folder holding "
        "config.json and the weights (or a folder and gguf_file, the name of a GGUF file in it), or a Hub id with "
        "network access."
    )


def load_source_model(src: str, *, task: str = "auto", gguf_file: str | None = None) -> PreTrainedModel:
    """Load a transformers model from a folder or Hub id, without remote code.

    task="auto" loads the class in config.architectures when it is a supported source, else the family's default
    head (causal LM for GPT-2/Llama, seq2seq LM for Marian/BART, the bare model for BERT/ViT).
    """
    if task != "auto" and task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose 'auto' or one of {', '.join(TASKS)}.")
    load_kwargs = dict(trust_remote_code=False)
    if gguf_file:
        load_kwargs["gguf_file"] = gguf_file
    try:
        config = AutoConfig.from_pretrained(src, **load_kwargs)
    except (OSError, ValueError) as error:
        raise _source_load_error(src, error) from error
    if config.model_type not in SOURCE_FAMILIES:
        raise UnsupportedConversionError(
            f"{src!r} is a {config.model_type!r} model; convertible model types are {', '.join(SOURCE_FAMILIES)}."
        )
    if task == "auto":
        architecture = (config.architectures or [None])[0]
        if architecture in SUPPORTED_SOURCES:
            loader = getattr(transformers, architecture)
        else:
            loader = TASKS[SOURCE_FAMILIES[config.model_type].default_task]
    else:
        loader = TASKS[task]
    try:
        return loader.from_pretrained(src, **load_kwargs)
    except OSError as error:
        raise _source_load_error(src, error) from error


def _save_preprocessor(src: str, out_dir: str, is_text: bool, gguf_file: str | None) -> None:
    """Copy the source's tokenizer (text) or image processor (ViT) into out_dir when src has one."""
    kwargs = dict(trust_remote_code=False)
    try:
        if is_text:
            if gguf_file:
                kwargs["gguf_file"] = gguf_file  # transformers rebuilds the tokenizer from the GGUF metadata
            processor = AutoTokenizer.from_pretrained(src, **kwargs)
        else:
            processor = AutoImageProcessor.from_pretrained(src, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        # A checkpoint without tokenizer files is normal (e.g. weights-only folders); say so and go on.
        kind = "tokenizer" if is_text else "image processor"
        logger.warning(f"No {kind} saved: {src!r} has none that loads ({type(error).__name__}: {error}).")
        return
    processor.save_pretrained(out_dir)
    logger.info(f"Saved the source's {type(processor).__name__} to {out_dir}.")


# sentence-transformers keeps its pipeline beside the transformers files: modules.json lists the modules (the
# transformer at path "", then e.g. 1_Pooling/, 2_Normalize/), and sentence_*config.json files hold settings such as
# max_seq_length. Without them SentenceTransformer(folder) guesses a plain mean-pooling pipeline over 512 tokens.
SENTENCE_TRANSFORMERS_INDEX = "modules.json"


def _copy_sentence_transformers_modules(src: str, out_dir: str) -> list[str]:
    """Copy a sentence-transformers folder's module files from `src` to `out_dir`; returns what was copied."""
    index = os.path.join(src, SENTENCE_TRANSFORMERS_INDEX)
    if not os.path.isfile(index):
        return []
    with open(index, encoding="utf-8") as handle:
        modules = json.load(handle)
    copied = [SENTENCE_TRANSFORMERS_INDEX]
    shutil.copyfile(index, os.path.join(out_dir, SENTENCE_TRANSFORMERS_INDEX))
    for name in sorted(os.listdir(src)):
        if name.startswith("sentence_") and name.endswith("config.json") or name == "config_sentence_transformers.json":
            shutil.copyfile(os.path.join(src, name), os.path.join(out_dir, name))
            copied.append(name)
    for module in modules:
        path = os.path.normpath(module.get("path") or "")
        if path in ("", ".") or path.startswith("..") or os.path.isabs(path):
            continue  # the transformer itself (the converted model), or a path outside the folder
        source_path = os.path.join(src, path)
        if os.path.isdir(source_path):
            shutil.copytree(source_path, os.path.join(out_dir, path), dirs_exist_ok=True)
            copied.append(path + "/")
    logger.info(f"Copied the sentence-transformers modules of {src!r}: {', '.join(copied)}.")
    return copied


def save_conversion(
    zoo_model: PreTrainedModel, out_dir: str, *, src: str | None = None, gguf_file: str | None = None
) -> str:
    """Save a converted model (safetensors, plus generation_config.json where it generates) to `out_dir`, with the
    tokenizer (text families) or image processor (ViT) of `src` when `src` has one that loads.
    """
    os.makedirs(out_dir, exist_ok=True)
    zoo_model.save_pretrained(out_dir, safe_serialization=True)
    if src is not None:
        _save_preprocessor(src, out_dir, not isinstance(zoo_model.config, ZooViTConfig), gguf_file)
        if os.path.isdir(src):
            _copy_sentence_transformers_modules(src, out_dir)
    return out_dir


def convert_checkpoint(src: str, out_dir: str, *, gguf_file: str | None = None, task: str = "auto") -> str:
    """Load `src` (a local folder or Hub id) with transformers, convert it, and save the zoo model (safetensors),
    its generation config where it generates, and the source's tokenizer or image processor to `out_dir`.

    Returns `out_dir`. `gguf_file` names a GGUF file inside `src` (dequantised by transformers on load); `task`
    picks the head to load (see `load_source_model`).
    """
    source_model = load_source_model(src, task=task, gguf_file=gguf_file)
    zoo_model = convert_model(source_model)
    save_conversion(zoo_model, out_dir, src=src, gguf_file=gguf_file)
    logger.info(f"Converted {type(source_model).__name__} from {src!r} to {type(zoo_model).__name__} in {out_dir}.")
    return out_dir


# ================================================================================================ verification
def random_inputs(source_model: PreTrainedModel, *, seed: int = 0, batch_size: int = 2, length: int = 12) -> dict:
    """A fixed random batch the source model accepts: token ids with a right-padded second row (where padding is
    meaningful), or pixel values for ViT. Used by the CLI to compare a conversion against its source.
    """
    generator = torch.Generator().manual_seed(seed)
    config = source_model.config
    if config.model_type == "vit":
        size = config.image_size
        pixel_values = torch.randn(batch_size, config.num_channels, size, size, generator=generator)
        return {"pixel_values": pixel_values.to(source_model.device)}

    pad_token_id = config.pad_token_id
    if type(source_model).__name__.endswith("ForSequenceClassification") and config.model_type in ("gpt2", "llama"):
        if pad_token_id is None:
            # These heads find the last token through pad_token_id and refuse batches without one.
            batch_size = 1
    input_ids = torch.randint(0, config.vocab_size, (batch_size, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if batch_size > 1:
        attention_mask[1, length - length // 3 :] = 0  # right padding: no query row is fully masked
    if pad_token_id is not None:
        # Real tokens never equal the pad id, padded ones always do (decoder classifiers look for it).
        input_ids[input_ids == pad_token_id] = (pad_token_id + 1) % config.vocab_size
        input_ids[attention_mask == 0] = pad_token_id
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if config.is_encoder_decoder:
        decoder_shape = (batch_size, length // 2)
        inputs["decoder_input_ids"] = torch.randint(0, config.vocab_size, decoder_shape, generator=generator)
    return {name: tensor.to(source_model.device) for name, tensor in inputs.items()}


# Output fields compared between source and zoo, when both models return them.
COMPARED_OUTPUTS = ("logits", "start_logits", "end_logits", "last_hidden_state", "pooler_output")


@torch.no_grad()
def compare_outputs(source_model: PreTrainedModel, zoo_model: PreTrainedModel, inputs: dict) -> dict[str, float]:
    """Max |difference| per output field on `inputs`, both models run in eval mode. Pass float32 models: the
    project's 1e-5 bar is meant for float32 outputs.
    """
    was_training = source_model.training, zoo_model.training
    source_model.eval()
    zoo_model.eval()
    try:
        source_out, zoo_out = source_model(**inputs), zoo_model(**inputs)
    finally:
        source_model.train(was_training[0])
        zoo_model.train(was_training[1])
    differences = {}
    for field in COMPARED_OUTPUTS:
        if field == "pooler_output" and getattr(zoo_model.base_model, "pooler", None) is None:
            continue  # the zoo pools without a dense layer (ViT): not a converted output
        source_value, zoo_value = getattr(source_out, field, None), getattr(zoo_out, field, None)
        if source_value is None or zoo_value is None:
            continue
        differences[field] = (source_value.float() - zoo_value.float()).abs().max().item()
    return differences
