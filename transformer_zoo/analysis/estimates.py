"""Back-of-the-envelope estimates for planning a run: training compute, wall-clock time, training memory and the
key/value cache of generation.

Everything here is arithmetic on parameter counts and config fields; models are only ever built on the meta device
(shapes without storage), so estimating a 1B-parameter model allocates nothing.
"""

from __future__ import annotations

import torch
from torch import nn

# Bytes of one value in each training precision.
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
TORCH_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}

# Optimizer states kept per trainable parameter, always in fp32 (4 bytes each) as PyTorch's optimizers do:
#   AdamW (Loshchilov & Hutter 2019): first and second moment -> 2 states = 8 bytes.
#   SGD with momentum: one momentum buffer -> 1 state = 4 bytes (plain SGD without momentum keeps none).
#   Adafactor (Shazeer & Stern 2018, default beta1=None): no momentum, and the second moment of an r x c matrix is
#   factored into r + c values, which is negligible per parameter -> counted as 0 states.
OPTIMIZER_STATES_PER_PARAMETER = {"adamw": 2, "sgd": 1, "adafactor": 0}
OPTIMIZER_STATE_BYTES = 4

# Resulting bytes per trainable parameter (weights + gradients + optimizer states), following the accounting of
# ZeRO (Rajbhandari et al. 2020, section 3.1): mixed-precision Adam keeps fp16/bf16 weights (2) and gradients (2)
# plus an fp32 master copy of the weights (4) and two fp32 moments (4 + 4) = 16 bytes ("2Ψ + 2Ψ + 12Ψ").
#
#   precision   optimizer   weights  grads  master  states  total
#   fp32        adamw          4       4      -       8      16
#   bf16/fp16   adamw          2       2      4       8      16
#   fp32        sgd            4       4      -       4      12
#   bf16/fp16   sgd            2       2      4       4      12
#   fp32        adafactor      4       4      -       0       8
#   bf16/fp16   adafactor      2       2      4       0       8
#
# Activations are not included: they depend on batch, sequence length, recomputation and kernels, not on N.


def _base_model_class_for(config):
    """The pretraining model class of a zoo config (LM head / classifier included), from the package's registry."""
    from .. import FAMILIES

    if config.model_type not in FAMILIES:
        raise ValueError(f"model_type {config.model_type!r} is not a transformer-zoo family; "
                         f"choose one of {', '.join(FAMILIES)}.")
    _, models = FAMILIES[config.model_type]
    # The second entry is the family's pretraining head (masked LM, causal LM, seq2seq LM, image classifier).
    return models[1][1] if len(models) > 1 else models[0][1]


def build_meta_model(config) -> nn.Module:
    """Instantiate the family's pretraining model on the meta device: parameter shapes, no memory."""
    with torch.device("meta"):
        return _base_model_class_for(config)(config)


def _as_model(model_or_config) -> nn.Module:
    return model_or_config if isinstance(model_or_config, nn.Module) else build_meta_model(model_or_config)


def total_parameters(model_or_config) -> int:
    """All parameters, a tied weight counted once (`parameters()` de-duplicates shared tensors)."""
    return sum(p.numel() for p in _as_model(model_or_config).parameters())


def non_embedding_parameters(model_or_config) -> int:
    """Parameters excluding token and position embeddings, the N of Kaplan et al. (2020, section 2.1), whose scaling
    laws and C = 6ND count only the weights that do matmul work per token.

    Excluded: the weights of every `nn.Embedding` (tokens, learned positions, token types, relative buckets) and the
    standalone position-embedding / [CLS] / distillation-token parameters of ViT. An LM head tied to the token
    embedding is the same tensor and so is excluded with it; an untied head counts (it is a matmul per token).
    """
    model = _as_model(model_or_config)
    embedding_tensors = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    standalone_suffixes = ("position_embeddings", "cls_token", "distillation_token")
    count = 0
    for name, parameter in model.named_parameters():  # de-duplicates tied tensors
        if id(parameter) in embedding_tensors or name.endswith(standalone_suffixes):
            continue
        count += parameter.numel()
    return count


def training_flops(num_parameters: float, num_tokens: float) -> float:
    """Training compute C ≈ 6·N·D FLOPs (Kaplan et al. 2020, section 2.1): 2ND for the forward pass (one multiply and
    one add per parameter per token) and twice that for the backward pass. Attention's context-dependent term
    (2·n_layer·n_ctx·d_model per token forward) is ignored, as there, because it is small when d_model ≫ n_ctx/12."""
    return 6.0 * float(num_parameters) * float(num_tokens)


def training_time_seconds(flops: float, throughput_flops_per_s: float) -> float:
    """Wall-clock seconds to do `flops` at a sustained `throughput_flops_per_s` (peak × utilisation, i.e. MFU)."""
    if throughput_flops_per_s <= 0:
        raise ValueError(f"throughput must be positive, got {throughput_flops_per_s}.")
    return float(flops) / float(throughput_flops_per_s)


def _precision_name(precision) -> str:
    if isinstance(precision, torch.dtype):
        if precision not in TORCH_DTYPE_NAMES:
            raise ValueError(f"unsupported dtype {precision}; use float32, bfloat16 or float16.")
        return TORCH_DTYPE_NAMES[precision]
    name = str(precision).lower()
    if name not in PRECISION_BYTES:
        raise ValueError(f"precision {precision!r}: choose one of {', '.join(PRECISION_BYTES)}.")
    return name


def memory_estimate(num_parameters: int, *, precision="fp32", optimizer: str = "adamw",
                    trainable_parameters: int | None = None, master_weights: bool | None = None) -> dict:
    """Bytes of training state (see the table above; activations excluded).

    `num_parameters` are all weights held in memory, stored in `precision`. `trainable_parameters` (default: all)
    get gradients and optimizer states: with LoRA (Hu et al. 2021) only the adapters do, which is the point of it.
    `master_weights` (default: True for bf16/fp16) keeps an fp32 copy of the trainable weights for the update, as
    mixed-precision training does (Micikevicius et al. 2018); counted with the optimizer states, as in ZeRO.
    """
    precision = _precision_name(precision)
    optimizer = optimizer.lower()
    if optimizer not in OPTIMIZER_STATES_PER_PARAMETER:
        raise ValueError(f"optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZER_STATES_PER_PARAMETER)}.")
    trainable = num_parameters if trainable_parameters is None else trainable_parameters
    if not 0 <= trainable <= num_parameters:
        raise ValueError(f"trainable_parameters ({trainable}) must be between 0 and num_parameters "
                         f"({num_parameters}).")
    if master_weights is None:
        master_weights = precision != "fp32"
    value_bytes = PRECISION_BYTES[precision]
    weights = num_parameters * value_bytes
    gradients = trainable * value_bytes
    master = trainable * 4 if master_weights else 0
    states = trainable * OPTIMIZER_STATES_PER_PARAMETER[optimizer] * OPTIMIZER_STATE_BYTES
    total = weights + gradients + master + states
    return {
        "precision": precision,
        "optimizer": optimizer,
        "num_parameters": int(num_parameters),
        "trainable_parameters": int(trainable),
        "weights_bytes": int(weights),
        "gradients_bytes": int(gradients),
        "master_weights_bytes": int(master),
        "optimizer_states_bytes": int(states + master),  # ZeRO counts the master copy with the optimizer states
        "total_bytes": int(total),
    }


def kv_cache_bytes(config, batch_size: int, sequence_length: int, dtype="fp16", *,
                   source_length: int | None = None) -> int:
    """Bytes of the key/value cache: 2 (K and V) · layers · batch · sequence · kv_heads · head_dim · bytes.

    Grouped-query and multi-query attention (Ainslie et al. 2023; Shazeer 2019) shrink it through kv_heads. For an
    encoder-decoder, the decoder caches its self-attention over the `sequence_length` generated tokens plus the
    cross-attention keys/values over the `source_length` encoder states (default: `sequence_length`) in every
    decoder layer. Encoders and ViT do not generate, so they have no cache (ValueError).
    """
    value_bytes = PRECISION_BYTES[_precision_name(dtype)]
    model_type = getattr(config, "model_type", None)
    if model_type in ("zoo_encoder", "zoo_vit"):
        raise ValueError(f"{model_type} is not autoregressive and keeps no key/value cache.")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads

    def layer_kv_bytes_per_token(key) -> int:
        # Zoo configs know each attention's shape (the encoder-decoder's stacks may differ); physically pruned heads
        # (config.pruned_heads) take their key/value heads with them when a whole group goes.
        if hasattr(config, "attention_shape"):
            return 2 * batch_size * len(config.kept_key_value_heads(key)) * config.attention_shape(key)[2] * value_bytes
        return 2 * batch_size * kv_heads * head_dim * value_bytes

    if model_type == "zoo_seq2seq" or getattr(config, "is_encoder_decoder", False):
        layers = getattr(config, "decoder_layers", None) or config.num_hidden_layers
        source = sequence_length if source_length is None else source_length
        return int(sum(
            layer_kv_bytes_per_token(f"decoder.{i}") * sequence_length
            + layer_kv_bytes_per_token(f"cross.{i}") * source
            for i in range(layers)
        ))
    return int(sum(
        layer_kv_bytes_per_token(i) * sequence_length for i in range(config.num_hidden_layers)
    ))
