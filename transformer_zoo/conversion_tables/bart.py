"""BART (BartModel, BartForConditionalGeneration) <-> the zoo encoder-decoder with learned positions and an embedding
norm."""

import torch
from transformers import BartConfig

from ..configuration_zoo_seq2seq import ZooSeq2SeqConfig
from .common import NativeFormat, Rule, _refuse
from .fairseq import FAIRSEQ_LAYER_RULES, SEQ2SEQ_HEAD_RULES, _FAIRSEQ, _seq2seq_config_from_zoo, _seq2seq_config_to_zoo


# BART's learned position table has two extra leading rows: BartLearnedPositionalEmbedding looks up position + 2
# (a fairseq legacy), so rows 0 and 1 are never read. Conversion drops them; an export writes zeros there.
BART_POSITION_OFFSET = 2


def _drop_bart_offset_rows(table: torch.Tensor) -> torch.Tensor:
    return table[BART_POSITION_OFFSET:].contiguous()


def _add_bart_offset_rows(table: torch.Tensor) -> torch.Tensor:
    return torch.cat((table.new_zeros(BART_POSITION_OFFSET, table.shape[1]), table), dim=0)


BART_BACKBONE_RULES = FAIRSEQ_LAYER_RULES + (
    Rule("{stack}.embed_positions.weight", "{stack}.positions.embedding.weight", _drop_bart_offset_rows,
         _add_bart_offset_rows),
    Rule("{stack}.layernorm_embedding.{param}", "{stack}.embed_norm.{param}"),
)
BART_FIXED = dict(_FAIRSEQ, position_embedding_type="learned", embedding_norm=True)


def bart_config_to_zoo(config) -> dict:
    family = "BART"
    # mBART-style options that BartConfig does not define but a config.json could carry.
    _refuse(getattr(config, "normalize_before", False), family, "normalize_before=True (pre-norm layers)")
    _refuse(getattr(config, "add_final_layer_norm", False), family, "add_final_layer_norm=True")
    return dict(BART_FIXED, **_seq2seq_config_to_zoo(config, family))


def bart_config_from_zoo(config) -> dict:
    # BART's config also carries generation defaults (forced_eos_token_id...); the zoo's generation_config is copied.
    return dict(_seq2seq_config_from_zoo(config), forced_eos_token_id=None)


FORMAT = NativeFormat(
    "bart", "BART", BartConfig, bart_config_to_zoo, bart_config_from_zoo, BART_FIXED, ZooSeq2SeqConfig,
    BART_BACKBONE_RULES, SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
)
