"""Decoder-only (GPT-style) configuration. `ZooDecoderConfig()` is GPT-2 small (Radford et al. 2019)."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict

from .configuration_zoo_common import ZooConfig, ZooTextConfig


_TINY = dict(
    vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
    max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
)
_LLAMA_STYLE = dict(
    position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm", hidden_act="swiglu",
    attention_bias=False, mlp_bias=False, norm_bias=False, layer_norm_eps=1e-5,
    embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0,
)


@strict
class ZooDecoderConfig(ZooTextConfig):
    """A causal decoder with a language-model head. Defaults are GPT-2 small (124M parameters).

    Decoder-specific fields:
        loss_chunk_size: when set, the causal-LM loss with labels is computed this many token rows at a time without
            materialising the (tokens x vocabulary) logits, and `logits` is None in that output. Same loss and
            gradients; a memory lever for long sequences and large vocabularies, slower on CPU (docs/speed.md).
            None (default): the logits are computed and returned.
        decoding_head_copy: while `generate` decodes on CPU in float32, multiply by a column-major copy of the
            output projection (the same product, several times faster there; one extra copy of that weight in memory
            during the call, none after). False: always the row-major `lm_head` (modeling_zoo_generation.py).
    """

    model_type = "zoo_decoder"
    SAVED_FIELDS: ClassVar[tuple[str, ...]] = ZooConfig.SAVED_FIELDS + ("num_hidden_layers", "vocab_size")
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "gpt2": {},
        "gpt2-medium": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
        "gpt2-large": dict(hidden_size=1280, num_hidden_layers=36, num_attention_heads=20, intermediate_size=5120),
        "smollm2-135m": dict(
            _LLAMA_STYLE, vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
            num_key_value_heads=3, intermediate_size=1536, max_position_embeddings=8192, rope_theta=100000.0,
            bos_token_id=1, eos_token_id=2, pad_token_id=None,
        ),
        "tiny": _TINY,
        "tiny-llama": dict(_TINY, **_LLAMA_STYLE, num_key_value_heads=2, intermediate_size=176),
    }

    vocab_size: int = 50257
    hidden_size: int = 768
    # Blocks in the stack.
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 1024
    position_embedding_type: str = "learned"
    norm_position: str = "pre"
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = None
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    loss_chunk_size: int | None = None
    decoding_head_copy: bool = True

    def validate_decoder(self):
        if self.num_hidden_layers < 1:
            raise ValueError(f"num_hidden_layers must be positive, got {self.num_hidden_layers}.")
        if self.loss_chunk_size is not None and self.loss_chunk_size < 1:
            raise ValueError(f"loss_chunk_size must be a positive number of token rows or None, got "
                             f"{self.loss_chunk_size}.")
