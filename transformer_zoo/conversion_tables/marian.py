"""Marian (MarianModel, MarianMTModel) <-> the zoo encoder-decoder with sinusoidal positions."""

import torch
from transformers import MarianConfig

from ..configuration_zoo_seq2seq import ZooSeq2SeqConfig
from ..modeling_zoo_positions import SinusoidalPositions
from .common import NativeFormat, Rule, UnsupportedConversionError, _refuse
from .fairseq import FAIRSEQ_LAYER_RULES, SEQ2SEQ_HEAD_RULES, _FAIRSEQ, _seq2seq_config_from_zoo, _seq2seq_config_to_zoo


def _check_sinusoidal_table(table: torch.Tensor) -> None:
    # Marian's table is frozen and not trained, so it is normally the formula's; a hand-edited one would not convert.
    expected = SinusoidalPositions.compute_table(*table.shape).to(table.dtype)
    difference = (table.float() - expected.float()).abs().max().item()
    if difference > 1e-6:
        raise UnsupportedConversionError(
            f"Marian's sinusoidal position table differs from the standard sin | cos formula by up to "
            f"{difference:.3g}; the zoo model recomputes that formula and would not reproduce this table."
        )


MARIAN_BACKBONE_RULES = FAIRSEQ_LAYER_RULES + (
    # Marian's frozen sinusoidal table; the zoo recomputes the same table (concatenated sin | cos halves), and an
    # export checks the one transformers builds.
    Rule("{stack}.embed_positions.weight", None, check=_check_sinusoidal_table),
)
MARIAN_FIXED = dict(_FAIRSEQ, position_embedding_type="sinusoidal", embedding_norm=False)


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


FORMAT = NativeFormat(
    "marian", "Marian", MarianConfig, marian_config_to_zoo, marian_config_from_zoo, MARIAN_FIXED, ZooSeq2SeqConfig,
    MARIAN_BACKBONE_RULES, SEQ2SEQ_HEAD_RULES, default_task="seq2seq-lm",
)
