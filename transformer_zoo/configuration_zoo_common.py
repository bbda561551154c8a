"""Configuration shared by the four transformer-zoo families.

Every family config (encoder, decoder, seq2seq, ViT) subclasses `ZooConfig`. The fields are the knobs the field
ablates: position scheme, norm placement and type, activation, biases, key/value heads, dropouts and weight tying.
Field names follow transformers' canonical names wherever one exists, so library code (caches, output capture,
initialisation) reads them without an `attribute_map`.

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name (only `from .x import y`).
"""

import difflib
from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.activations import ACT2FN


# Position schemes a token model may use. "relative" is the T5-style bucketed bias (Raffel et al. 2020), "alibi"
# the linear bias of Press et al. 2022, "rope" the rotary embedding of Su et al. 2021, "none" NoPE.
TOKEN_POSITION_TYPES = ("sinusoidal", "learned", "rope", "alibi", "relative", "none")
# Position schemes that enter attention as an additive score bias (no FlashAttention-2 kernel accepts one).
SCORE_BIAS_POSITION_TYPES = ("alibi", "relative")
NORM_POSITIONS = ("pre", "post")
NORM_TYPES = ("layernorm", "rmsnorm")
# Gated feed-forwards (Shazeer 2020): name -> the activation applied to the gate.
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}


def known_activations() -> list[str]:
    return sorted(set(ACT2FN.keys()) | set(GATED_ACTIVATIONS))


@strict
class ZooConfig(PreTrainedConfig):
    """Fields shared by every transformer-zoo family. Not registered itself: use a family config.

    Subclasses set `PRESETS` (name -> field overrides) and may extend `validate_zoo`.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    # Which position schemes this family accepts (ViT overrides).
    POSITION_TYPES: ClassVar[tuple[str, ...]] = TOKEN_POSITION_TYPES

    hidden_size: int = 768
    num_attention_heads: int = 12
    # None = as many key/value heads as query heads (MHA); 1 = MQA; in between = GQA.
    num_key_value_heads: int | None = None
    # None = hidden_size // num_attention_heads.
    head_dim: int | None = None
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    position_embedding_type: str = "learned"
    rope_theta: float = 10000.0
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    norm_position: str = "post"
    norm_type: str = "layernorm"
    layer_norm_eps: float = 1e-12
    norm_bias: bool = True
    attention_bias: bool = True
    mlp_bias: bool = True
    # A norm applied to the summed embeddings (BERT, BART), independent of norm_position.
    embedding_norm: bool = False
    # Multiply token embeddings by sqrt(hidden_size), as Vaswani et al. do (section 3.4).
    scale_embedding: bool = False
    embedding_dropout: float = 0.1
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1
    classifier_dropout: float | None = None
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        # The base class turns unknown keyword arguments into attributes silently; a typo such as
        # `num_hidden_layer=2` would then train the default model. Refuse names that are close to a real field.
        fields = set(self.__dataclass_fields__) | set(self.attribute_map)
        for key in kwargs:
            if key in fields or key.startswith("_"):
                continue
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)
            if close:
                raise ValueError(
                    f"{type(self).__name__} got an unknown field {key!r}; did you mean {close[0]!r}? "
                    f"Fields are listed in the class docstring and README."
                )
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        super().__post_init__(**kwargs)

    # ----------------------------------------------------------------------------------------------- presets
    @classmethod
    def from_preset(cls, name: str, **overrides):
        """Build a config from a named preset (see `PRESETS`), with field overrides on top."""
        if name not in cls.PRESETS:
            raise ValueError(
                f"Unknown {cls.__name__} preset {name!r}. Available presets: {', '.join(sorted(cls.PRESETS))}."
            )
        return cls(**{**cls.PRESETS[name], **overrides})

    @classmethod
    def preset_names(cls) -> list[str]:
        return sorted(cls.PRESETS)

    # ----------------------------------------------------------------------------------------------- derived
    @property
    def attention_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def uses_score_bias(self) -> bool:
        return self.position_embedding_type in SCORE_BIAS_POSITION_TYPES

    # ----------------------------------------------------------------------------------------------- validation
    # `@strict` runs every `validate_*` method at construction and again in `save_pretrained`.
    def validate_architecture(self):
        for name in ("hidden_size", "num_attention_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); change one of them or set head_dim explicitly."
            )
        if self.num_key_value_heads < 1 or self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_key_value_heads "
                f"({self.num_key_value_heads}): use num_key_value_heads=num_attention_heads for MHA, 1 for MQA, "
                "or a divisor in between for GQA."
            )
        if self.position_embedding_type == "rope" and self.attention_head_dim % 2 != 0:
            raise ValueError(
                f"position_embedding_type='rope' rotates pairs of dimensions, so the head dimension must be even; "
                f"got {self.attention_head_dim}."
            )

    def validate_zoo(self):
        if self.position_embedding_type not in self.POSITION_TYPES:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} is not a known position scheme for "
                f"{type(self).__name__}; choose one of {', '.join(self.POSITION_TYPES)}."
            )
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={self.norm_position!r}; choose 'pre' or 'post'.")
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"norm_type={self.norm_type!r}; choose one of {', '.join(NORM_TYPES)}.")
        if self.hidden_act not in ACT2FN and self.hidden_act not in GATED_ACTIVATIONS:
            raise ValueError(
                f"hidden_act={self.hidden_act!r} is not a known activation; choose e.g. relu, gelu, gelu_new, "
                f"silu, swiglu or geglu (all: {', '.join(known_activations())})."
            )
        for name in ("embedding_dropout", "attention_dropout", "hidden_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}.")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout must be in [0, 1) or None, got {self.classifier_dropout}.")
        if self.max_position_embeddings < 1:
            raise ValueError(f"max_position_embeddings must be positive, got {self.max_position_embeddings}.")
        if self.position_embedding_type == "relative" and (
            self.relative_attention_num_buckets < 2 or self.relative_attention_max_distance < 2
        ):
            raise ValueError("relative_attention_num_buckets and relative_attention_max_distance must be >= 2.")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}.")


@strict
class ZooTextConfig(ZooConfig):
    """Fields of the families that read token ids (encoder, decoder, encoder-decoder)."""

    vocab_size: int = 30522
    tie_word_embeddings: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def validate_vocabulary(self):
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {self.vocab_size}.")
