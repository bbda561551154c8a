"""The mapping between transformers' native architectures and the zoo families, one table per native format, read in
both directions: `transformer_zoo.convert` (native -> zoo) and `transformer_zoo.export` (zoo -> native) share it.

Per native format (`NativeFormat`):
- `config_to_zoo`: the native config -> zoo config fields. The zoo fields the native architecture fixes (its norm
  placement, position scheme, biases...) are a plain dict, `fixed`, so an export can name every zoo field that keeps
  a config from the format; `config_from_zoo` is the inverse for the fields that vary.
- parameter renaming rules (`Rule`): name templates with named slots such as "{layer}", matched either way, and the
  few reshapes that need more than a rename as a pair of functions (to the zoo, back to the native layout).

This module is a library helper, not remote code: it is not copied into saved checkpoints.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import torch
from transformers import BartConfig, BertConfig, GPT2Config, LlamaConfig, MarianConfig, PreTrainedModel, ViTConfig
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


class UnsupportedConversionError(ValueError):
    """The source uses a feature the target cannot reproduce exactly (the message names it)."""


# ================================================================================================ renaming rules
# Slots a name template may contain, and what each matches.
SLOTS = {
    "layer": r"\d+",
    "param": r"weight|bias",
    "stack": r"encoder|decoder",
    "qkv": r"q|k|v",
    "qkvo": r"q|k|v|o",
    "mlp": r"gate_proj|up_proj|down_proj",
}
_SLOT = re.compile(r"\{(\w+)\}")


def _template_regex(template: str) -> re.Pattern:
    parts, position = [], 0
    for slot in _SLOT.finditer(template):
        parts.append(re.escape(template[position : slot.start()]))
        parts.append(f"(?P<{slot.group(1)}>{SLOTS[slot.group(1)]})")
        position = slot.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


@dataclass(frozen=True)
class Rule:
    """One family of parameter names: `native` (relative to the backbone, or to the whole model for head tensors)
    corresponds to `zoo`, templates with the same slots, e.g. "h.{layer}.ln_1.{param}" <-> "layers.{layer}.
    self_attn_norm.{param}".

    `zoo` is a tuple when one native tensor holds several zoo tensors (GPT-2's fused q/k/v); `to_zoo` then splits it
    and `to_native` joins the parts. A reshape is always given as that pair. `zoo=None` marks a native tensor the zoo
    has no counterpart for: `check` verifies that the zoo recomputes it exactly (Marian's sinusoidal table; an export
    runs it on the native model's own value), `dropped_warning` is logged on conversion when dropping it changes an
    output, and `export_value` (native tensor -> value) is what an export writes there.
    """

    native: str
    zoo: str | tuple[str, ...] | None
    to_zoo: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]] | None = None
    to_native: Callable[..., torch.Tensor] | None = None
    dropped_warning: str | None = None
    check: Callable[[torch.Tensor], None] | None = None
    export_value: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self):
        if (self.to_zoo is None) != (self.to_native is None):
            raise TypeError(f"Rule {self.native!r}: give both to_zoo and to_native (a reshape and its inverse).")

    @cached_property
    def native_regex(self) -> re.Pattern:
        return _template_regex(self.native)

    @cached_property
    def zoo_templates(self) -> tuple[str, ...]:
        return () if self.zoo is None else self.zoo if isinstance(self.zoo, tuple) else (self.zoo,)

    @cached_property
    def zoo_regexes(self) -> tuple[re.Pattern, ...]:
        return tuple(_template_regex(template) for template in self.zoo_templates)

    def match_native(self, name: str) -> dict | None:
        match = self.native_regex.fullmatch(name)
        return match.groupdict() if match else None

    def match_zoo(self, name: str) -> tuple[int, dict] | None:
        """(index of the zoo template that matches, its slot values), or None."""
        for index, regex in enumerate(self.zoo_regexes):
            match = regex.fullmatch(name)
            if match:
                return index, match.groupdict()
        return None

    def native_name(self, slots: dict) -> str:
        return self.native.format(**slots)

    def zoo_names(self, slots: dict) -> tuple[str, ...]:
        return tuple(template.format(**slots) for template in self.zoo_templates)


def find_rule(rules, name: str, side: str):
    """The first rule whose `side` ("native" or "zoo") template matches `name`, with its match; (None, None) if none."""
    for rule in rules:
        match = rule.match_native(name) if side == "native" else rule.match_zoo(name)
        if match is not None:
            return rule, match
    return None, None


def _transpose(weight: torch.Tensor) -> torch.Tensor:
    # GPT-2's Conv1D stores [in, out] and computes x @ W; nn.Linear stores [out, in]. Its own inverse.
    return weight.t().contiguous()


# Reshapes that only change how a linear layer stores its weight (GPT-2's Conv1D): an adapter's low-rank factors on
# that layer are stored the same way in both (PEFT's Conv1D LoRA keeps nn.Linear's A and B).
LAYOUT_ONLY_RESHAPES = (_transpose,)


def _split_fused_qkv_weight(weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # c_attn is one Conv1D [hidden, 3 * hidden] whose output columns are q | k | v.
    return tuple(part.contiguous() for part in weight.t().chunk(3, dim=0))


def _join_fused_qkv_weight(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat((q, k, v), dim=0).t().contiguous()


def _split_fused_qkv_bias(bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(part.contiguous() for part in bias.chunk(3, dim=0))


def _join_fused_qkv_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat((q, k, v), dim=0)


# BART's learned position table has two extra leading rows: BartLearnedPositionalEmbedding looks up position + 2
# (a fairseq legacy), so rows 0 and 1 are never read. Conversion drops them; an export writes zeros there.
BART_POSITION_OFFSET = 2


def _drop_bart_offset_rows(table: torch.Tensor) -> torch.Tensor:
    return table[BART_POSITION_OFFSET:].contiguous()


def _add_bart_offset_rows(table: torch.Tensor) -> torch.Tensor:
    return torch.cat((table.new_zeros(BART_POSITION_OFFSET, table.shape[1]), table), dim=0)


def _check_sinusoidal_table(table: torch.Tensor) -> None:
    # Marian's table is frozen and not trained, so it is normally the formula's; a hand-edited one would not convert.
    expected = SinusoidalPositions.compute_table(*table.shape).to(table.dtype)
    difference = (table.float() - expected.float()).abs().max().item()
    if difference > 1e-6:
        raise UnsupportedConversionError(
            f"Marian's sinusoidal position table differs from the standard sin | cos formula by up to "
            f"{difference:.3g}; the zoo model recomputes that formula and would not reproduce this table."
        )


def _identity_matrix(weight: torch.Tensor) -> torch.Tensor:
    return torch.eye(weight.shape[0], weight.shape[1], dtype=weight.dtype)


def _zeros(tensor: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(tensor)


BERT_BACKBONE_RULES = (
    Rule("embeddings.word_embeddings.weight", "embed_tokens.weight"),
    Rule("embeddings.token_type_embeddings.weight", "embed_token_types.weight"),
    Rule("embeddings.position_embeddings.weight", "positions.embedding.weight"),
    Rule("embeddings.LayerNorm.{param}", "embed_norm.{param}"),
    Rule("encoder.layer.{layer}.attention.self.query.{param}", "layers.{layer}.self_attn.q_proj.{param}"),
    Rule("encoder.layer.{layer}.attention.self.key.{param}", "layers.{layer}.self_attn.k_proj.{param}"),
    Rule("encoder.layer.{layer}.attention.self.value.{param}", "layers.{layer}.self_attn.v_proj.{param}"),
    Rule("encoder.layer.{layer}.attention.output.dense.{param}", "layers.{layer}.self_attn.o_proj.{param}"),
    Rule("encoder.layer.{layer}.attention.output.LayerNorm.{param}", "layers.{layer}.self_attn_norm.{param}"),
    Rule("encoder.layer.{layer}.intermediate.dense.{param}", "layers.{layer}.mlp.up_proj.{param}"),
    Rule("encoder.layer.{layer}.output.dense.{param}", "layers.{layer}.mlp.down_proj.{param}"),
    Rule("encoder.layer.{layer}.output.LayerNorm.{param}", "layers.{layer}.mlp_norm.{param}"),
    Rule("pooler.dense.{param}", "pooler.dense.{param}"),
)
BERT_HEAD_RULES = (
    Rule("cls.predictions.transform.dense.{param}", "lm_head.dense.{param}"),
    Rule("cls.predictions.transform.LayerNorm.{param}", "lm_head.norm.{param}"),
    Rule("cls.predictions.decoder.{param}", "lm_head.decoder.{param}"),
    # BertLMPredictionHead.bias is tied to decoder.bias (kept for old checkpoints); the export fills it by that tie.
    Rule("cls.predictions.bias", None),
    Rule("classifier.{param}", "classifier.{param}"),
    Rule("qa_outputs.{param}", "qa_outputs.{param}"),
)

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
DECODER_HEAD_RULES = (
    Rule("lm_head.weight", "lm_head.weight"),
    Rule("score.weight", "score.weight"),
)

LLAMA_BACKBONE_RULES = (
    Rule("embed_tokens.weight", "embed_tokens.weight"),
    Rule("layers.{layer}.self_attn.{qkvo}_proj.{param}", "layers.{layer}.self_attn.{qkvo}_proj.{param}"),
    Rule("layers.{layer}.mlp.{mlp}.{param}", "layers.{layer}.mlp.{mlp}.{param}"),
    Rule("layers.{layer}.input_layernorm.weight", "layers.{layer}.self_attn_norm.weight"),
    Rule("layers.{layer}.post_attention_layernorm.weight", "layers.{layer}.mlp_norm.weight"),
    Rule("norm.weight", "norm.weight"),
)

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


def _seq2seq_backbone_rules(learned_positions: bool) -> tuple[Rule, ...]:
    """Marian and BART share layer names (fairseq's); they differ in positions and the embedding norm."""
    rules = [
        Rule("shared.weight", "shared.weight"),
        Rule("{stack}.embed_tokens.weight", "{stack}.embed_tokens.weight"),
        Rule("{stack}.layers.{layer}.self_attn.{qkv}_proj.{param}", "{stack}.layers.{layer}.self_attn.{qkv}_proj.{param}"),
        Rule("{stack}.layers.{layer}.self_attn.out_proj.{param}", "{stack}.layers.{layer}.self_attn.o_proj.{param}"),
        Rule("{stack}.layers.{layer}.self_attn_layer_norm.{param}", "{stack}.layers.{layer}.self_attn_norm.{param}"),
        Rule("decoder.layers.{layer}.encoder_attn.{qkv}_proj.{param}", "decoder.layers.{layer}.cross_attn.{qkv}_proj.{param}"),
        Rule("decoder.layers.{layer}.encoder_attn.out_proj.{param}", "decoder.layers.{layer}.cross_attn.o_proj.{param}"),
        Rule("decoder.layers.{layer}.encoder_attn_layer_norm.{param}", "decoder.layers.{layer}.cross_attn_norm.{param}"),
        Rule("{stack}.layers.{layer}.fc1.{param}", "{stack}.layers.{layer}.mlp.up_proj.{param}"),
        Rule("{stack}.layers.{layer}.fc2.{param}", "{stack}.layers.{layer}.mlp.down_proj.{param}"),
        Rule("{stack}.layers.{layer}.final_layer_norm.{param}", "{stack}.layers.{layer}.mlp_norm.{param}"),
    ]
    if learned_positions:
        rules += [
            Rule(
                "{stack}.embed_positions.weight",
                "{stack}.positions.embedding.weight",
                _drop_bart_offset_rows,
                _add_bart_offset_rows,
            ),
            Rule("{stack}.layernorm_embedding.{param}", "{stack}.embed_norm.{param}"),
        ]
    else:
        # Marian's frozen sinusoidal table; the zoo recomputes the same table (concatenated sin | cos halves).
        rules.append(Rule("{stack}.embed_positions.weight", None, check=_check_sinusoidal_table))
    return tuple(rules)


SEQ2SEQ_HEAD_RULES = (
    Rule("lm_head.weight", "lm_head.weight"),
    Rule("final_logits_bias", "final_logits_bias"),
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


# The zoo fields each native architecture fixes. An exported config must have exactly these values; every other zoo
# field is carried by a native field (config_from_zoo) and checked by converting the exported config back.
_ABSOLUTE_LAYERNORM = dict(norm_type="layernorm", attention_bias=True, mlp_bias=True, norm_bias=True, scale_embedding=False)
BERT_FIXED = dict(_ABSOLUTE_LAYERNORM, position_embedding_type="learned", norm_position="post", embedding_norm=True)
GPT2_FIXED = dict(_ABSOLUTE_LAYERNORM, position_embedding_type="learned", norm_position="pre", embedding_norm=False)
LLAMA_FIXED = dict(
    position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm", norm_bias=False, embedding_norm=False,
    scale_embedding=False, embedding_dropout=0.0, hidden_dropout=0.0,
)
VIT_FIXED = dict(
    position_embedding_type="learned", pooling="cls", use_distillation_token=False, conv_stem=False,
    norm_position="pre", norm_type="layernorm", attention_bias=True, mlp_bias=True, norm_bias=True,
)
# Both build their LayerNorms with nn.LayerNorm's default eps, not a config value.
_FAIRSEQ = dict(norm_position="post", norm_type="layernorm", layer_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
                norm_bias=True)
MARIAN_FIXED = dict(_FAIRSEQ, position_embedding_type="sinusoidal", embedding_norm=False)
BART_FIXED = dict(_FAIRSEQ, position_embedding_type="learned", embedding_norm=True)


def bert_config_to_zoo(config) -> dict:
    family = "BERT"
    _refuse(config.is_decoder, family, "is_decoder=True (a causal BERT)")
    _refuse(config.add_cross_attention, family, "add_cross_attention=True (BERT as a cross-attending decoder)")
    # transformers 5 dropped relative_key(_query) from BERT but old config.json files still carry the field.
    position_type = getattr(config, "position_embedding_type", "absolute")
    _refuse(position_type != "absolute", family, f"position_embedding_type={position_type!r} (only 'absolute')")
    return dict(
        BERT_FIXED,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=_plain_activation(config.hidden_act, family),
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps,
        embedding_dropout=_dropout(config.hidden_dropout_prob),
        hidden_dropout=_dropout(config.hidden_dropout_prob),
        attention_dropout=_dropout(config.attention_probs_dropout_prob),
        classifier_dropout=config.classifier_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
    )


def bert_config_from_zoo(config) -> dict:
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=config.hidden_act,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps,
        hidden_dropout_prob=config.hidden_dropout,
        attention_probs_dropout_prob=config.attention_dropout,
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
        scale_embedding=bool(config.scale_embedding),
        embedding_dropout=_dropout(config.dropout),
        hidden_dropout=_dropout(config.dropout),
        attention_dropout=_dropout(config.attention_dropout),
        initializer_range=config.init_std,
        tie_word_embeddings=config.tie_word_embeddings,
        decoder_start_token_id=config.decoder_start_token_id,
    )


def _seq2seq_config_from_zoo(config) -> dict:
    return dict(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.hidden_act,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        dropout=config.hidden_dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        init_std=config.initializer_range,
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
    return dict(MARIAN_FIXED, **_seq2seq_config_to_zoo(config, family))


def marian_config_from_zoo(config) -> dict:
    return dict(
        _seq2seq_config_from_zoo(config), share_encoder_decoder_embeddings=True, decoder_vocab_size=config.vocab_size
    )


def bart_config_to_zoo(config) -> dict:
    family = "BART"
    # mBART-style options that BartConfig does not define but a config.json could carry.
    _refuse(getattr(config, "normalize_before", False), family, "normalize_before=True (pre-norm layers)")
    _refuse(getattr(config, "add_final_layer_norm", False), family, "add_final_layer_norm=True")
    return dict(BART_FIXED, **_seq2seq_config_to_zoo(config, family))


def bart_config_from_zoo(config) -> dict:
    # BART's config also carries generation defaults (forced_eos_token_id...); the zoo's generation_config is copied.
    return dict(_seq2seq_config_from_zoo(config), forced_eos_token_id=None)


# ================================================================================================ formats
@dataclass(frozen=True)
class NativeFormat:
    """How one transformers architecture maps onto a zoo family, both ways."""

    model_type: str  # the native config's model_type
    name: str  # as people write it, for messages
    native_config_class: type
    config_to_zoo: Callable[[object], dict]
    config_from_zoo: Callable[[object], dict]
    fixed: dict  # zoo fields the architecture fixes
    zoo_config_class: type
    backbone_rules: tuple[Rule, ...]
    head_rules: tuple[Rule, ...]
    has_token_ids: bool = True  # text families carry pad/bos/eos ids; ViT does not
    default_task: str = "base"  # the head convert_checkpoint loads when config.architectures does not say
    classes: dict = field(default_factory=dict)  # native class name -> zoo class, filled below


NATIVE_FORMATS = {
    "bert": NativeFormat(
        "bert", "BERT", BertConfig, bert_config_to_zoo, bert_config_from_zoo, BERT_FIXED, ZooEncoderConfig,
        BERT_BACKBONE_RULES, BERT_HEAD_RULES,
    ),
    "gpt2": NativeFormat(
        "gpt2", "GPT-2", GPT2Config, gpt2_config_to_zoo, gpt2_config_from_zoo, GPT2_FIXED, ZooDecoderConfig,
        GPT2_BACKBONE_RULES, DECODER_HEAD_RULES, default_task="causal-lm",
    ),
    "llama": NativeFormat(
        "llama", "Llama", LlamaConfig, llama_config_to_zoo, llama_config_from_zoo, LLAMA_FIXED, ZooDecoderConfig,
        LLAMA_BACKBONE_RULES, DECODER_HEAD_RULES, default_task="causal-lm",
    ),
    "vit": NativeFormat(
        "vit", "ViT", ViTConfig, vit_config_to_zoo, vit_config_from_zoo, VIT_FIXED, ZooViTConfig, VIT_BACKBONE_RULES,
        VIT_HEAD_RULES, has_token_ids=False,
    ),
    "marian": NativeFormat(
        "marian", "Marian", MarianConfig, marian_config_to_zoo, marian_config_from_zoo, MARIAN_FIXED, ZooSeq2SeqConfig,
        _seq2seq_backbone_rules(learned_positions=False), SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
    ),
    "bart": NativeFormat(
        "bart", "BART", BartConfig, bart_config_to_zoo, bart_config_from_zoo, BART_FIXED, ZooSeq2SeqConfig,
        _seq2seq_backbone_rules(learned_positions=True), SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
    ),
}
# The name convert.py has always used.
SOURCE_FAMILIES = NATIVE_FORMATS

# Native class name -> (native model_type, zoo class). Exact names: a subclass or a relative (RoBERTa, mBART) may
# differ in ways these tables do not know about. Read backwards, it is the export's class table.
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
for _class_name, (_model_type, _zoo_class) in SUPPORTED_SOURCES.items():
    NATIVE_FORMATS[_model_type].classes[_class_name] = _zoo_class


def native_class_name(model_type: str, zoo_class: type) -> str | None:
    """The transformers class that a zoo class exports to in one format (None when the format has no such head)."""
    for class_name, candidate in NATIVE_FORMATS[model_type].classes.items():
        if candidate is zoo_class:
            return class_name
    return None


def _shared_config_kwargs(config, native_format: NativeFormat) -> dict:
    """Labels and special tokens, copied as they are."""
    kwargs = dict(id2label=config.id2label, label2id=config.label2id, problem_type=config.problem_type)
    if native_format.has_token_ids:
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            kwargs[name] = getattr(config, name, None)
    return kwargs


def zoo_config_for(native_config, native_format: NativeFormat):
    kwargs = {**native_format.config_to_zoo(native_config), **_shared_config_kwargs(native_config, native_format)}
    return native_format.zoo_config_class(**kwargs)


def native_config_for(zoo_config, native_format: NativeFormat):
    """The native config that expresses `zoo_config` (see transformer_zoo.export for the check that it does)."""
    kwargs = {**native_format.config_from_zoo(zoo_config), **_shared_config_kwargs(zoo_config, native_format)}
    return native_format.native_config_class(**kwargs)
