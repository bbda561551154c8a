"""BERT (BertModel and its heads) <-> the zoo encoder."""

from transformers import BertConfig

from ..configuration_zoo_encoder import ZooEncoderConfig
from .common import NativeFormat, Rule, _dropout, _plain_activation, _refuse, _ABSOLUTE_LAYERNORM

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

BERT_FIXED = dict(_ABSOLUTE_LAYERNORM, position_embedding_type="learned", norm_position="post", embedding_norm=True)


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


FORMAT = NativeFormat(
    "bert", "BERT", BertConfig, bert_config_to_zoo, bert_config_from_zoo, BERT_FIXED, ZooEncoderConfig,
    BERT_BACKBONE_RULES, BERT_HEAD_RULES,
)
