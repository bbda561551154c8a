"""Encoder-decoder configuration. `ZooSeq2SeqConfig()` is the Transformer base of Vaswani et al. (2017)."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict

from .configuration_zoo_common import ZooConfig, ZooTextConfig


@strict
class ZooSeq2SeqConfig(ZooTextConfig):
    """The original encoder-decoder Transformer. Defaults are "Transformer base" (Vaswani et al. 2017, table 3):
    6+6 post-norm layers, d_model 512, 8 heads, d_ff 2048, ReLU, sinusoidal positions, dropout 0.1 on the summed
    embeddings and on every residual branch (no attention dropout in the paper), embeddings scaled by sqrt(d_model),
    one 37k shared source/target vocabulary whose embedding is tied to the output layer.

    The encoder and decoder share the width `hidden_size`; their depths are `encoder_layers` and `decoder_layers`.
    `num_hidden_layers` reads as the decoder depth (what caches need). Heads and feed-forward width are shared too
    (as in the paper) unless a stack overrides them, as Marian and BART configs may:
        encoder_attention_heads / decoder_attention_heads: query heads of the encoder's self-attention / of the
            decoder's self- and cross-attention (None = num_attention_heads);
        encoder_head_dim / decoder_head_dim: their head dimensions (None = head_dim when the stack keeps
            num_attention_heads, else hidden_size // the stack's heads);
        encoder_ffn_dim / decoder_ffn_dim: feed-forward widths (None = intermediate_size).
    All six are resolved at construction and saved, so a reloaded config builds the same model. Key/value heads:
    with num_key_value_heads == num_attention_heads (the default) every stack uses as many key/value heads as query
    heads; otherwise num_key_value_heads applies to both stacks and must divide each stack's head count.
    decoding_head_copy: while `generate` decodes on CPU in float32, multiply by a column-major copy of the output
    projection (the same product, several times faster there; one extra copy of that weight in memory during the
    call, none after). False: always the row-major `lm_head` (modeling_zoo_generation.py).
    """

    model_type = "zoo_seq2seq"
    attribute_map = {"num_hidden_layers": "decoder_layers"}
    SAVED_FIELDS: ClassVar[tuple[str, ...]] = ZooConfig.SAVED_FIELDS + ("encoder_layers", "decoder_layers", "vocab_size")
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
    # Blocks in the encoder stack (N = 6 in Vaswani et al.).
    encoder_layers: int = 6
    # Blocks in the decoder stack.
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
    # Always True: transformers' generation and caches read it.
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    # The id the decoder starts from when generating (and that shifted labels begin with).
    decoder_start_token_id: int | None = 1
    encoder_attention_heads: int | None = None
    decoder_attention_heads: int | None = None
    encoder_head_dim: int | None = None
    decoder_head_dim: int | None = None
    encoder_ffn_dim: int | None = None
    decoder_ffn_dim: int | None = None
    decoding_head_copy: bool = True

    # Per-stack shape field suffix -> the shared field it follows unless a stack sets its own (see __post_init__).
    STACK_SHAPE_SOURCES: ClassVar[dict[str, str]] = {
        "attention_heads": "num_attention_heads", "head_dim": "head_dim", "ffn_dim": "intermediate_size"}

    def __setattr__(self, key, value):
        """A shared shape set after construction (`config.head_dim = 16`, as transformers' own tests do before
        building a flex-attention model) reaches the stacks that follow it: a per-stack field still equal to the
        shared field's old value takes the new one, as it would have at construction. A stack given a shape of its
        own (an asymmetric Marian or BART checkpoint) keeps it."""
        followers = [f"{stack}_{suffix}" for suffix, source in self.STACK_SHAPE_SOURCES.items() if source == key
                     for stack in ("encoder", "decoder")]
        old = self.__dict__.get(key)
        super().__setattr__(key, value)
        for follower in followers:
            if old is not None and self.__dict__.get(follower) == old:
                super().__setattr__(follower, value)

    def __post_init__(self, **kwargs):
        head_dim_given = self.head_dim is not None
        super().__post_init__(**kwargs)
        for stack in ("encoder", "decoder"):
            heads = getattr(self, f"{stack}_attention_heads")
            if heads is None:
                heads = self.num_attention_heads
                setattr(self, f"{stack}_attention_heads", heads)
            if not isinstance(heads, int) or heads < 1:
                raise ValueError(f"{stack}_attention_heads must be a positive integer, got {heads!r}.")
            if getattr(self, f"{stack}_head_dim") is None:
                if head_dim_given or heads == self.num_attention_heads:
                    setattr(self, f"{stack}_head_dim", self.head_dim)
                elif self.hidden_size % heads:
                    raise ValueError(
                        f"hidden_size ({self.hidden_size}) is not divisible by {stack}_attention_heads ({heads}); "
                        f"change one of them or set {stack}_head_dim explicitly."
                    )
                else:
                    setattr(self, f"{stack}_head_dim", self.hidden_size // heads)
            if getattr(self, f"{stack}_ffn_dim") is None:
                setattr(self, f"{stack}_ffn_dim", self.intermediate_size)

    @staticmethod
    def stack_of(key: int | str) -> str:
        """The stack ("encoder" or "decoder") an attention key ("encoder.<i>", "decoder.<i>", "cross.<i>") lives in.
        Cross-attention belongs to the decoder and has its head count, as in Marian and BART."""
        return "encoder" if str(key).startswith("encoder") else "decoder"

    def attention_shape(self, key):
        stack = self.stack_of(key)
        num_heads = getattr(self, f"{stack}_attention_heads")
        num_key_value_heads = num_heads if self.num_key_value_heads == self.num_attention_heads else self.num_key_value_heads
        return num_heads, num_key_value_heads, getattr(self, f"{stack}_head_dim")

    def feed_forward_size(self, key):
        return getattr(self, f"{self.stack_of(key)}_ffn_dim")

    def validate_stack_shapes(self):
        for stack in ("encoder", "decoder"):
            num_heads, num_key_value_heads, head_dim = self.attention_shape(stack)
            if head_dim < 1 or self.feed_forward_size(stack) < 1:
                raise ValueError(
                    f"{stack}_head_dim and {stack}_ffn_dim must be positive, got {head_dim} and "
                    f"{self.feed_forward_size(stack)}."
                )
            if num_heads % num_key_value_heads:
                raise ValueError(
                    f"{stack}_attention_heads ({num_heads}) must be a multiple of num_key_value_heads "
                    f"({num_key_value_heads}); set num_key_value_heads=num_attention_heads for multi-head attention "
                    "in both stacks, or a divisor of both stacks' head counts."
                )
            if self.position_embedding_type == "rope" and head_dim % 2:
                raise ValueError(f"position_embedding_type='rope' needs an even {stack}_head_dim, got {head_dim}.")

    def validate_seq2seq(self):
        if self.encoder_layers < 1 or self.decoder_layers < 1:
            raise ValueError(
                f"encoder_layers and decoder_layers must be positive, got {self.encoder_layers} and "
                f"{self.decoder_layers}."
            )
        if self.decoder_start_token_id is None:
            raise ValueError("decoder_start_token_id must be set: generation starts every target with it.")
