"""Configuration shared by the four transformer-zoo families.

Every family config (encoder, decoder, seq2seq, ViT) subclasses `ZooConfig`. The fields are the knobs the field
ablates: position scheme, norm placement and type, activation, biases, key/value heads, dropouts and weight tying.
Field names follow transformers' canonical names wherever one exists, so library code (caches, output capture,
initialisation) reads them without an `attribute_map`.

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name (only `from .x import y`).
"""

import contextlib
import contextvars
import difflib
from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.activations import ACT2FN
from transformers.utils import logging


logger = logging.get_logger(__name__)


# Position schemes a token model may use. "relative" is the T5-style bucketed bias (Raffel et al. 2020), "alibi"
# the linear bias of Press et al. 2022, "rope" the rotary embedding of Su et al. 2021, "none" NoPE.
TOKEN_POSITION_TYPES = ("sinusoidal", "learned", "rope", "alibi", "relative", "none")
# Position schemes that enter attention as an additive score bias (no FlashAttention-2 kernel accepts one).
SCORE_BIAS_POSITION_TYPES = ("alibi", "relative")
NORM_POSITIONS = ("pre", "post")
NORM_TYPES = ("layernorm", "rmsnorm")
# Gated feed-forwards (Shazeer 2020): name -> the activation applied to the gate.
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}
# Where dropout masks are drawn on CPU (modeling_zoo_dropout.py).
DROPOUT_SAMPLERS = ("pcg64", "torch")
# Self-attention variants (modeling_zoo_attention_variants.ATTENTION_VARIANTS): exact ("full", through
# attn_implementation) or an efficient approximation. LINFORMER_SHARING: which projections Linformer shares.
ATTENTION_VARIANTS = ("full", "sliding_window", "linformer", "performer")
LINFORMER_SHARING = ("head", "layer", "key_value")


# Keywords PreTrainedConfig itself consumes besides its fields (from_pretrained and _from_config pass them).
BASE_CONFIG_KEYWORDS = frozenset({
    "attn_implementation", "experts_implementation", "output_attentions", "torch_dtype", "num_labels",
    "name_or_path", "per_layer_config",
})
# Other libraries' names for zoo fields: refused with the zoo's name (GPT-2, Llama, BERT, T5, Marian/BART, nanoGPT).
FOREIGN_FIELD_NAMES = {
    "n_layer": ("num_hidden_layers", "GPT-2"), "num_layers": ("num_hidden_layers", "T5/nanoGPT"),
    "n_layers": ("num_hidden_layers", "nanoGPT"), "n_head": ("num_attention_heads", "GPT-2"),
    "num_heads": ("num_attention_heads", "T5"), "n_heads": ("num_attention_heads", "nanoGPT"),
    "n_embd": ("hidden_size", "GPT-2"), "d_model": ("hidden_size", "T5/Marian/BART"), "dim": ("hidden_size", "LLaMA"),
    "n_inner": ("intermediate_size", "GPT-2"), "d_ff": ("intermediate_size", "T5"),
    "ffn_dim": ("intermediate_size", "OPT"), "d_kv": ("head_dim", "T5"),
    "n_positions": ("max_position_embeddings", "GPT-2"), "n_ctx": ("max_position_embeddings", "GPT-2"),
    "max_seq_len": ("max_position_embeddings", "LLaMA"), "max_seq_length": ("max_position_embeddings", "BERT tools"),
    "block_size": ("max_position_embeddings", "nanoGPT"), "n_kv_heads": ("num_key_value_heads", "LLaMA"),
    "num_kv_heads": ("num_key_value_heads", "LLaMA"), "layer_norm_epsilon": ("layer_norm_eps", "GPT-2"),
    "rms_norm_eps": ("layer_norm_eps", "Llama"), "norm_eps": ("layer_norm_eps", "LLaMA"),
    "activation_function": ("hidden_act", "GPT-2/BART"), "dense_act_fn": ("hidden_act", "T5"),
    "dropout": ("hidden_dropout, attention_dropout and embedding_dropout (one each)", "Marian/BART/nanoGPT"),
    "resid_pdrop": ("hidden_dropout", "GPT-2"), "hidden_dropout_prob": ("hidden_dropout", "BERT"),
    "dropout_rate": ("hidden_dropout", "T5"), "attn_pdrop": ("attention_dropout", "GPT-2"),
    "attention_probs_dropout_prob": ("attention_dropout", "BERT"), "embd_pdrop": ("embedding_dropout", "GPT-2"),
    "initializer_factor": ("initializer_range", "T5"), "init_std": ("initializer_range", "Marian/BART"),
    "tie_embeddings": ("tie_word_embeddings", "litgpt"), "n_vocab": ("vocab_size", "tiktoken"),
    "bias": ("attention_bias, mlp_bias and norm_bias", "nanoGPT"),
    "qkv_bias": ("attention_bias", "ViT"), "rope_base": ("rope_theta", "litgpt"),
}
# In the encoder-decoder the depth is per stack.
SEQ2SEQ_FIELD_NAMES = {"num_hidden_layers": "encoder_layers and decoder_layers"}


def known_activations() -> list[str]:
    return sorted(set(ACT2FN.keys()) | set(GATED_ACTIVATIONS))


# True while a config is rebuilt from a dict the library wrote (config.json, `to_dict`). Such a dict may carry any
# attribute set on a config after construction (libraries and transformers' own test helpers do
# `config.some_new_attribute = ...`), and a folder that save_pretrained wrote must always load; the typo guard is
# for keywords a *user* passes to the constructor.
_LOADING_SAVED_CONFIG = contextvars.ContextVar("zoo_loading_saved_config", default=False)


@contextlib.contextmanager
def _loading_saved_config():
    token = _LOADING_SAVED_CONFIG.set(True)
    try:
        yield
    finally:
        _LOADING_SAVED_CONFIG.reset(token)


@strict
class ZooConfig(PreTrainedConfig):
    """Fields shared by every transformer-zoo family. Not registered itself: use a family config.

    Subclasses set `PRESETS` (name -> field overrides) and may extend `validate_zoo`.
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    # Which position schemes this family accepts (ViT overrides).
    POSITION_TYPES: ClassVar[tuple[str, ...]] = TOKEN_POSITION_TYPES

    # Width of every token vector (d_model).
    hidden_size: int = 768
    # Query heads per attention layer; head_dim defaults to hidden_size // num_attention_heads.
    num_attention_heads: int = 12
    # None = as many key/value heads as query heads (MHA); 1 = MQA; in between = GQA.
    num_key_value_heads: int | None = None
    # None = hidden_size // num_attention_heads, resolved at construction (transformers' RoPE set-up, caches and
    # generation utilities read config.head_dim, as LlamaConfig resolves it).
    head_dim: int | None = None
    # Width of the feed-forward layer (d_ff); for gated activations, of each of its two input projections.
    intermediate_size: int = 3072
    # Feed-forward activation: any transformers activation (relu, gelu, gelu_new, silu, ...) or a gated one (swiglu,
    # geglu, reglu; Shazeer 2020).
    hidden_act: str = "gelu"
    # Longest sequence the model is built for: the learned position table's length, and the limit inputs are checked
    # against.
    max_position_embeddings: int = 512
    # How order enters: sinusoidal | learned (added to the embeddings), rope (rotates queries and keys), alibi |
    # relative (a score bias), none (NoPE); ViT: learned | sincos2d | none.
    position_embedding_type: str = "learned"
    # RoPE's base (Su et al. 2021); only read with position_embedding_type="rope".
    rope_theta: float = 10000.0
    # T5 relative-position buckets (Raffel et al. 2020); only read with position_embedding_type="relative".
    relative_attention_num_buckets: int = 32
    # Distance beyond which T5 relative positions share the last bucket.
    relative_attention_max_distance: int = 128
    # pre: x + f(norm(x)) (GPT-2, Llama; stable when deep), post: norm(x + f(x)) (Vaswani et al., BERT).
    norm_position: str = "post"
    # layernorm or rmsnorm (Zhang & Sennrich 2019: no centring, no bias).
    norm_type: str = "layernorm"
    # The epsilon of every norm.
    layer_norm_eps: float = 1e-12
    # Whether LayerNorms have a bias (RMSNorm never has one).
    norm_bias: bool = True
    # Biases on the query, key, value and output projections.
    attention_bias: bool = True
    # Biases on the feed-forward projections.
    mlp_bias: bool = True
    # A norm applied to the summed embeddings (BERT, BART), independent of norm_position.
    embedding_norm: bool = False
    # Multiply token embeddings by sqrt(hidden_size), as Vaswani et al. do (section 3.4).
    scale_embedding: bool = False
    # Dropout on the summed embeddings (Vaswani et al. 5.4: P_drop = 0.1 for base).
    embedding_dropout: float = 0.1
    # Dropout on the attention probabilities.
    attention_dropout: float = 0.1
    # Dropout on each sublayer's output before the residual add.
    hidden_dropout: float = 0.1
    # Dropout before a classification head; None = hidden_dropout.
    classifier_dropout: float | None = None
    # Where dropout masks come from on CPU: "pcg64" (numpy's PCG64, seeded from torch's generator; several times
    # faster) or "torch" (PyTorch's own masks). The same Bernoulli mask either way (modeling_zoo_dropout.py).
    dropout_sampler: str = "pcg64"
    # Standard deviation of the normal initialisation of weights.
    initializer_range: float = 0.02
    # Self-attention variant (docs/efficient-attention.md): full (exact, through attn_implementation) | sliding_window
    # | linformer | performer. The fields below only matter for their variant.
    attention_variant: str = "full"
    # sliding_window: keys visible on each side of a query.
    attention_window: int = 256
    # sliding_window: slots (0 = first token, e.g. [CLS]) that attend to and are attended by every token.
    global_attention_indices: list[int] | None = None
    # linformer: the length keys and values are projected to (Wang et al. 2020).
    linformer_k: int = 256
    # linformer: the longest sequence (None = max_position_embeddings).
    linformer_max_length: int | None = None
    # linformer: which projections are shared: head | layer | key_value.
    linformer_sharing: str = "layer"
    # performer: random features per layer (Choromanski et al. 2021).
    performer_features: int = 256
    # performer: redraw the features every N training forwards (0 = never).
    performer_redraw_interval: int = 0
    # performer: the seed of the random features.
    performer_seed: int = 0
    # Attention heads removed by physical pruning (transformer_zoo.analysis.heads.prune_heads), as transformers'
    # `pruned_heads` used to be: attention -> original indices of the removed query heads. The attention is a layer
    # index for single-stack families, "encoder.<i>", "decoder.<i>" or "cross.<i>" for the encoder-decoder (see
    # `attention_key`). ZooAttention builds its projections for the heads that remain, so a saved pruned model
    # reloads with the smaller layers. JSON stores int keys as strings; they are turned back into ints on load.
    pruned_heads: dict[int | str, list[int]] | None = None

    def __post_init__(self, **kwargs):
        # The base class turns unknown keyword arguments into attributes silently (a typo such as
        # `num_hidden_layer=2`, or GPT-2's `n_layer=3`, would then train the default model and write a dead key into
        # config.json), and drops generation settings. What a user passes must be a field; a dict the library wrote
        # (from_dict / from_json_file) may carry any attribute and always loads.
        if not _LOADING_SAVED_CONFIG.get():
            fields = set(self.__dataclass_fields__) | set(self.attribute_map)
            unknown = [key for key in kwargs
                       if key not in fields and key not in BASE_CONFIG_KEYWORDS and not key.startswith("_")]
            if unknown:
                raise ValueError(self._unknown_fields_message(unknown, fields))
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        self._check_head_split()
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        self.pruned_heads = self._normalised_pruned_heads(self.pruned_heads)
        super().__post_init__(**kwargs)

    @classmethod
    def _unknown_fields_message(cls, unknown: list[str], fields: set[str]) -> str:
        from transformers import GenerationConfig

        generation = set(GenerationConfig._get_default_generation_params())
        hints = []
        for key in unknown:
            if key in FOREIGN_FIELD_NAMES:
                ours, source = FOREIGN_FIELD_NAMES[key]
                ours = SEQ2SEQ_FIELD_NAMES.get(ours, ours) if "encoder_layers" in fields else ours
                hints.append(f"unknown field {key!r}: use {ours} instead ({source}'s name)")
            elif key in generation:
                hints.append(f"unknown field {key!r}: it is a generation setting; set "
                             f"model.generation_config.{key} or pass {key}=... to generate()")
            else:
                close = difflib.get_close_matches(key, fields | BASE_CONFIG_KEYWORDS, n=1, cutoff=0.75)
                hints.append(f"unknown field {key!r}" + (f"; did you mean {close[0]!r}?" if close else ""))
        return (f"{cls.__name__} got {'; '.join(hints)} (every field: the class docstring, docs/reference/configuration.md, "
                f"or {cls.__name__}.__dataclass_fields__)")

    # ----------------------------------------------------------------------------------------------- loading
    # Fields that decide the weights' shapes and the position scheme. A saved config.json always carries them
    # (`to_diff_dict` keeps them even at their defaults), so one that lacks them was edited or damaged: refused,
    # naming the field, instead of silently building the default (a random position table, other shapes).
    SAVED_FIELDS: ClassVar[tuple[str, ...]] = (
        "hidden_size", "num_attention_heads", "intermediate_size", "hidden_act", "position_embedding_type",
        "norm_position", "norm_type",
    )

    def to_diff_dict(self):
        diff = super().to_diff_dict()
        for name in self.SAVED_FIELDS:
            diff.setdefault(name, getattr(self, name))
        return diff

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        # Only a dict written by save_pretrained / to_json (it names the transformers version) must be complete; a
        # hand-made partial dict takes the defaults, as the constructor does.
        if "transformers_version" in config_dict:
            missing = [name for name in cls.SAVED_FIELDS if name not in config_dict]
            if missing:
                raise ValueError(
                    f"This saved {cls.__name__} config (config.json) lacks {', '.join(map(repr, missing))}: "
                    "transformer-zoo writes these fields in every saved config, so the file was edited or damaged. "
                    "Restore it from the run that saved the model (or add the values the model was trained with); "
                    "defaults would build a different model.")
        with _loading_saved_config():
            return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_json_file(cls, json_file):
        # Through from_dict, so a JSON file gets the same completeness check and loading rules.
        return cls.from_dict(cls._dict_from_json_file(json_file))

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
        return self.head_dim

    def attention_shape(self, key: int | str) -> tuple[int, int, int]:
        """(query heads, key/value heads, head dimension) of one attention module before pruning, named by its
        `attention_key`. One shape for the whole model here; the encoder-decoder gives each stack its own."""
        return self.num_attention_heads, self.num_key_value_heads, self.head_dim

    def feed_forward_size(self, key: int | str) -> int:
        """Inner width of the feed-forward sublayer in the block of attention `key` (see `attention_shape`)."""
        return self.intermediate_size

    @property
    def uses_score_bias(self) -> bool:
        return self.position_embedding_type in SCORE_BIAS_POSITION_TYPES

    # ----------------------------------------------------------------------------------------------- pruned heads
    @staticmethod
    def _normalised_pruned_heads(pruned_heads):
        """{key: sorted unique head indices}, int layer keys restored from JSON's strings; None when nothing is
        pruned (so an unpruned config saves no `pruned_heads` entry)."""
        if pruned_heads is None:
            return None
        if not isinstance(pruned_heads, dict):
            raise ValueError(
                f"pruned_heads must be a dict of attention -> list of head indices (e.g. {{0: [1, 3]}}), got "
                f"{type(pruned_heads).__name__}."
            )
        normalised = {}
        for key, heads in pruned_heads.items():
            if isinstance(key, str) and key.strip().isdigit():
                key = int(key)
            elif isinstance(key, str):
                key = key.strip()
            if isinstance(heads, int) or not all(isinstance(h, int) and not isinstance(h, bool) for h in heads):
                raise ValueError(f"pruned_heads[{key!r}] must be a list of integer head indices, got {heads!r}.")
            if heads:
                normalised[key] = sorted(set(heads))
        return normalised or None

    def attention_key(self, layer_idx: int, is_causal: bool, is_cross_attention: bool = False) -> int | str:
        """The `pruned_heads` key of one attention module: its layer index, or for the encoder-decoder
        "encoder.<i>" (encoder self-attention), "decoder.<i>" (decoder self-attention) or "cross.<i>"."""
        if not getattr(self, "is_encoder_decoder", False):
            return layer_idx
        stack = "cross" if is_cross_attention else ("decoder" if is_causal else "encoder")
        return f"{stack}.{layer_idx}"

    def attention_layer_counts(self) -> dict[str, int]:
        """How many attention modules of each kind this config builds ("layers" for a single stack)."""
        if getattr(self, "is_encoder_decoder", False):
            return {"encoder": self.encoder_layers, "decoder": self.decoder_layers, "cross": self.decoder_layers}
        return {"layers": self.num_hidden_layers}

    def kept_heads(self, key: int | str) -> list[int]:
        """Original indices of the query heads an attention module keeps after `pruned_heads`."""
        removed = set((self.pruned_heads or {}).get(key, ()))
        return [head for head in range(self.attention_shape(key)[0]) if head not in removed]

    def key_value_group_size(self, key: int | str) -> int:
        """Query heads per key/value head in one attention module (1 for MHA)."""
        num_heads, num_key_value_heads, _ = self.attention_shape(key)
        return num_heads // num_key_value_heads

    def kept_key_value_heads(self, key: int | str) -> list[int]:
        """Original indices of the key/value heads an attention module keeps: a key/value head goes only when every
        query head of its group is pruned."""
        group_size = self.key_value_group_size(key)
        return sorted({head // group_size for head in self.kept_heads(key)})

    # ----------------------------------------------------------------------------------------------- validation
    # `@strict` runs every `validate_*` method at construction and again in `save_pretrained`.
    def _check_head_split(self):
        # Before head_dim is derived from it (so runs ahead of the `validate_*` methods).
        for name in ("hidden_size", "num_attention_heads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}.")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); change one of them or set head_dim explicitly."
            )

    def validate_architecture(self):
        for name in ("hidden_size", "num_attention_heads", "intermediate_size", "head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
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
        if self.dropout_sampler not in DROPOUT_SAMPLERS:
            raise ValueError(f"dropout_sampler={self.dropout_sampler!r}; choose one of {', '.join(DROPOUT_SAMPLERS)} "
                             "(pcg64: faster masks on CPU; torch: PyTorch's own masks).")
        if self.max_position_embeddings < 1:
            raise ValueError(f"max_position_embeddings must be positive, got {self.max_position_embeddings}.")
        if self.position_embedding_type == "relative" and (
            self.relative_attention_num_buckets < 2 or self.relative_attention_max_distance < 2
        ):
            raise ValueError("relative_attention_num_buckets and relative_attention_max_distance must be >= 2.")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}.")
        if not self.rope_theta > 0:
            # theta <= 0 gives NaN or garbage rotation frequencies (1 / theta^(2i/d)).
            raise ValueError(f"rope_theta must be positive (10000 in Su et al., 500000 in Llama 3), got {self.rope_theta}.")
        if not self.initializer_range >= 0:
            raise ValueError(f"initializer_range must be >= 0 (the std of the initial weights), got "
                             f"{self.initializer_range}.")
        if self.num_labels is not None and self.num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 = regression), got {self.num_labels}.")

    def validate_attention_variant(self):
        variant = self.attention_variant
        if variant not in ATTENTION_VARIANTS:
            raise ValueError(f"attention_variant={variant!r} is unknown; choose one of {', '.join(ATTENTION_VARIANTS)}.")
        if variant != "full" and self.position_embedding_type in SCORE_BIAS_POSITION_TYPES:
            raise ValueError(
                f"attention_variant={variant!r} cannot use position_embedding_type={self.position_embedding_type!r}: "
                "that scheme adds a bias to the n x n score matrix, which this variant never forms. Use rope, "
                "learned, sinusoidal or none with it, or attention_variant='full' for ALiBi/relative."
            )
        if variant == "linformer":
            if self.position_embedding_type == "rope":
                raise ValueError(
                    "attention_variant='linformer' cannot use position_embedding_type='rope': the projection sums "
                    "keys rotated by different angles, so scores no longer depend on relative position. Use "
                    "learned, sinusoidal or none (absolute positions added to the embeddings)."
                )
            if self.model_type in ("zoo_decoder", "zoo_seq2seq"):
                raise ValueError(
                    f"attention_variant='linformer' cannot be used by {type(self).__name__}: its decoder is causal and "
                    "Linformer's projection mixes future positions into every key. Use it for encoders (zoo_encoder, "
                    "zoo_vit); for decoders use 'performer' or 'sliding_window'."
                )
            max_length = self.linformer_max_length or self.max_position_embeddings
            if self.linformer_max_length is not None and self.linformer_max_length < 1:
                raise ValueError(f"linformer_max_length must be positive or None, got {self.linformer_max_length}.")
            if not 1 <= self.linformer_k <= max_length:
                raise ValueError(
                    f"linformer_k={self.linformer_k} must be between 1 and the longest sequence, linformer_max_length "
                    f"(None = max_position_embeddings) = {max_length}. Lower linformer_k or set linformer_max_length "
                    "to the longest input (for ViT: number of patches + class tokens)."
                )
            if self.linformer_sharing not in LINFORMER_SHARING:
                raise ValueError(
                    f"linformer_sharing={self.linformer_sharing!r}; choose 'head' (one projection pair per head), "
                    "'layer' (one pair per layer, shared by heads) or 'key_value' (one matrix per layer for both)."
                )
        if variant == "sliding_window":
            if self.attention_window < 1:
                raise ValueError(
                    f"attention_window must be >= 1 (keys visible on each side), got {self.attention_window}.")
            indices = self.global_attention_indices or []
            if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in indices):
                raise ValueError(
                    f"global_attention_indices must be non-negative slot indices (e.g. [0] for [CLS]), got {indices}.")
        elif self.global_attention_indices:
            raise ValueError(
                f"global_attention_indices={self.global_attention_indices} only applies to "
                f"attention_variant='sliding_window' (got {variant!r}); drop it or switch the variant."
            )
        if variant == "performer":
            if self.performer_features < 1:
                raise ValueError(f"performer_features must be positive, got {self.performer_features}.")
            if self.performer_redraw_interval < 0:
                raise ValueError(
                    f"performer_redraw_interval must be >= 0 (0 = never redraw), got {self.performer_redraw_interval}.")

    def validate_pruned_heads(self):
        if not self.pruned_heads:
            return
        counts = self.attention_layer_counts()
        if "layers" in counts:
            valid_keys = set(range(counts["layers"]))
            key_help = f"layer indices 0..{counts['layers'] - 1}"
        else:
            valid_keys = {f"{stack}.{i}" for stack, n in counts.items() for i in range(n)}
            key_help = (f"'encoder.<i>' (i < {counts['encoder']}), 'decoder.<i>' or 'cross.<i>' "
                        f"(i < {counts['decoder']})")
        for key, heads in self.pruned_heads.items():
            if key not in valid_keys:
                raise ValueError(f"pruned_heads has an unknown attention {key!r}; keys are {key_help}.")
            num_heads, num_key_value_heads, _ = self.attention_shape(key)
            group_size = self.key_value_group_size(key)
            if heads[0] < 0 or heads[-1] >= num_heads:
                raise ValueError(
                    f"pruned_heads[{key!r}] = {heads} names a head outside 0..{num_heads - 1}.")
            if len(heads) == num_heads:
                raise ValueError(
                    f"pruned_heads[{key!r}] removes all {num_heads} heads; an attention layer needs at "
                    "least one. Keep one head, or mask the whole layer at run time with "
                    "transformer_zoo.analysis.heads.masked_heads instead.")
            if self.uses_score_bias and not (isinstance(key, str) and key.startswith("cross.")):
                raise ValueError(
                    f"pruned_heads[{key!r}]: self-attention heads cannot be pruned physically with "
                    f"position_embedding_type={self.position_embedding_type!r}, whose score bias the stack computes "
                    "for every original head. Mask the heads at run time instead (masked_heads), or use a position "
                    "scheme without a score bias (rope, learned, sinusoidal).")
            if group_size > 1:
                # repeat_kv gives every key/value head the same number of query heads, so the groups that remain
                # must all keep the same number of query heads.
                kept_per_group = {}
                for head in self.kept_heads(key):
                    kept_per_group[head // group_size] = kept_per_group.get(head // group_size, 0) + 1
                if len(set(kept_per_group.values())) > 1:
                    raise ValueError(
                        f"pruned_heads[{key!r}] = {heads} leaves key/value groups of unequal size "
                        f"(query heads kept per key/value head: {kept_per_group}). With grouped-query attention "
                        f"({num_key_value_heads} key/value heads of {group_size} query heads each) prune whole "
                        "groups (heads g*size .. g*size+size-1, which also removes the key/value head) and/or the same "
                        "number of query heads from every remaining group.")


@strict
class ZooTextConfig(ZooConfig):
    """Fields of the families that read token ids (encoder, decoder, encoder-decoder)."""

    # Number of token ids the embedding (and the language-model head) has rows for.
    vocab_size: int = 30522
    # Share the input embedding with the output projection (Vaswani et al. 3.4; Press & Wolf 2017).
    tie_word_embeddings: bool = True
    # Return and reuse the key/value cache when decoding (transformers' caches).
    use_cache: bool = True
    # Padding id: its embedding row gets no gradient; None = no padding row.
    pad_token_id: int | None = 0
    # Beginning-of-sequence id, for generation.
    bos_token_id: int | None = None
    # End-of-sequence id (or ids): generation stops on it.
    eos_token_id: int | list[int] | None = None
    # On CPU in float32, language-model heads write their logits into rows padded to a whole number of cache lines
    # when vocab_size is not a multiple of 16: the same values (`logits` is a view, its row stride the padded width),
    # a faster product (modeling_zoo_vocabulary.py). False: the plain `lm_head` output.
    row_aligned_logits: bool = True

    def special_token_ids(self):
        """(field name, id) for every special token id the config names (eos_token_id may be a list)."""
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name, None)
            for token_id in value if isinstance(value, list) else [value]:
                if token_id is not None:
                    yield name, token_id

    def validate_vocabulary(self):
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {self.vocab_size}.")

    def validate_token_ids(self):
        """Special token ids outside the vocabulary warn, as transformers' own configs do, and are not refused:
        transformers builds, trains and saves such models (`GPT2Config(vocab_size=8192)` keeps GPT-2's 50256, and
        Hub configs hold `pad_token_id=-1`). An id only matters once it reaches the model as an input, and the model
        checks its inputs when they arrive. This replaces transformers' own warning with one that says when it
        bites."""
        for name, token_id in self.special_token_ids():
            if not 0 <= token_id < self.vocab_size:
                logger.warning_once(
                    f"{name}={token_id} is not a token of the vocabulary (ids 0..{self.vocab_size - 1}). The model "
                    f"builds, trains and saves; {OUT_OF_VOCABULARY_CONSEQUENCES[name]} Set {name} to an id below "
                    f"vocab_size={self.vocab_size} (or None) before using it.")


# What a special token id outside the vocabulary breaks, and when (ZooTextConfig.validate_token_ids).
OUT_OF_VOCABULARY_CONSEQUENCES = {
    "pad_token_id": "padding with it is refused when it reaches the model (a padded batch, generate() padding rows "
                    "that have finished), and no embedding row is kept at zero for padding.",
    "bos_token_id": "a prompt or batch holding it is refused when it reaches the model.",
    "eos_token_id": "generate() never stops on it (the model cannot produce it) and runs to max_new_tokens, and an "
                    "input holding it is refused when it reaches the model.",
    "decoder_start_token_id": "generate() and labels-derived decoder inputs start with it and are refused when it "
                              "reaches the decoder.",
}
