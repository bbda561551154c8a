"""Encoder-only (BERT-style) configuration. `ZooEncoderConfig()` is BERT-base (Devlin et al. 2019)."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict

from .configuration_zoo_common import ZooConfig, ZooTextConfig


_TINY = dict(
    vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    max_position_embeddings=128,
)


@strict
class ZooEncoderConfig(ZooTextConfig):
    """A bidirectional encoder with a masked-LM head and task heads. Defaults are BERT-base (110M parameters).

    Encoder-specific fields:
        type_vocab_size: number of token types (segments A/B); 0 removes the token-type embedding.
        sparse_prediction: when the masked-LM head is given labels, project only the labelled positions onto the
            vocabulary (about 15 % of them in BERT-style training) and return logits for those alone, shape
            (number of labelled positions, vocab_size), in the order of the flattened labels. The loss and its
            gradients are the same; the step does less work. ModernBERT's option of the same name. Off by default, so
            that `logits` keeps transformers' (batch, length, vocab) shape; calls without labels always return every
            position's logits.
    """

    model_type = "zoo_encoder"
    SAVED_FIELDS: ClassVar[tuple[str, ...]] = ZooConfig.SAVED_FIELDS + ("num_hidden_layers", "vocab_size")
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "bert-base": {},
        "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
        # all-MiniLM-L6-v2 / MiniLM-L6-H384 shape
        "minilm-l6": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
        "tiny": _TINY,
        # A modern pre-norm encoder (RoPE, RMSNorm, SwiGLU, no biases) for ablations against BERT.
        "tiny-modern": dict(
            _TINY, position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm", hidden_act="swiglu",
            attention_bias=False, mlp_bias=False, norm_bias=False, embedding_norm=False, type_vocab_size=0,
        ),
    }

    vocab_size: int = 30522
    hidden_size: int = 768
    # Blocks in the stack.
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    position_embedding_type: str = "learned"
    norm_position: str = "post"
    layer_norm_eps: float = 1e-12
    embedding_norm: bool = True
    type_vocab_size: int = 2
    sparse_prediction: bool = False
    pad_token_id: int | None = 0

    def validate_encoder(self):
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0 (0 disables token types), got {self.type_vocab_size}.")
        if self.num_hidden_layers < 1:
            raise ValueError(f"num_hidden_layers must be positive, got {self.num_hidden_layers}.")
