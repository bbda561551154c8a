"""Analysis tools for researchers: compute/memory/KV-cache estimates, calibration, attention inspection (including
ViT [CLS]-attention overlays), attention-head masking, importance and pruning, and linear probing of hidden states."""

from .attention import (
    attention_rollout,
    capture_attentions,
    cls_attention_map,
    head_entropy,
    head_similarity,
    head_statistics_table,
    mean_attention_distance,
    plot_attention_map,
    plot_cls_attention_overlay,
)
from .heads import (
    attention_modules,
    gradient_importance,
    iterative_pruning,
    loss_change_importance,
    masked_heads,
    masks_without,
    plot_pruning_curve,
    prune_heads,
)
from .calibration import (
    apply_temperature,
    expected_calibration_error,
    fit_temperature,
    reliability_diagram,
)
from .probing import (
    control_labels,
    extract_layer_features,
    plot_probe_accuracy,
    probe_layers,
    train_probe,
)
from .estimates import (
    kv_cache_bytes,
    memory_estimate,
    non_embedding_parameters,
    training_flops,
    training_time_seconds,
)

__all__ = [
    "apply_temperature",
    "attention_modules",
    "attention_rollout",
    "capture_attentions",
    "cls_attention_map",
    "control_labels",
    "expected_calibration_error",
    "extract_layer_features",
    "fit_temperature",
    "gradient_importance",
    "head_entropy",
    "head_similarity",
    "head_statistics_table",
    "iterative_pruning",
    "kv_cache_bytes",
    "loss_change_importance",
    "masked_heads",
    "masks_without",
    "mean_attention_distance",
    "memory_estimate",
    "non_embedding_parameters",
    "plot_attention_map",
    "plot_cls_attention_overlay",
    "plot_probe_accuracy",
    "plot_pruning_curve",
    "probe_layers",
    "prune_heads",
    "reliability_diagram",
    "training_flops",
    "train_probe",
    "training_time_seconds",
]
