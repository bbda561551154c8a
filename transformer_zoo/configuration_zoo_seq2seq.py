"""Encoder-decoder configuration. `ZooSeq2SeqConfig()` is the Transformer base of Vaswani et al. (2017)."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict

from .configuration_zoo_common import ZooTextConfig


@strict
class ZooSeq2SeqConfig(ZooTextConfig):
    """The original encoder-decoder Transformer. Defaults are "Transformer base" (Vaswani et al. 2017, table 3):
    6+6 post-norm layers, d_model 512, 8 heads, d_ff 2048, ReLU, sinusoidal positions, dropout 0.1 on the summed
    embeddings and on every residual branch (no attention dropout in the paper), embeddings scaled by sqrt(d_model),
    one 37k shared source/target vocabulary whose embedding is tied to the output layer.

    The encoder and decoder share width, heads and feed-forward size (as in the paper); their depths are
    `encoder_layers` and `decoder_layers`. `num_hidden_layers` reads as the decoder depth (what caches need).
    """

    model_type = "zoo_seq2seq"
    attribute_map = {"num_hidden_layers": "decoder_layers"}
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "transformer-base": {},
        "transformer-big": dict(
            hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
            embedding_dropout=0.3, hidden_dropout=0.3,
        ),
        "tiny": dict(
            vocab_size=1000, hidden_size=64, encoder_layers=2, decoder_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=128,
        ),
    }

    vocab_size: int = 37000
    hidden_size: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "relu"
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    norm_position: str = "post"
    layer_norm_eps: float = 1e-6
    scale_embedding: bool = True
    attention_dropout: float = 0.0
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1

    def validate_seq2seq(self):
        if self.encoder_layers < 1 or self.decoder_layers < 1:
            raise ValueError(
                f"encoder_layers and decoder_layers must be positive, got {self.encoder_layers} and "
                f"{self.decoder_layers}."
            )
        if self.decoder_start_token_id is None:
            raise ValueError("decoder_start_token_id must be set: generation starts every target with it.")
