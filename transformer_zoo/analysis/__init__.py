"""Analysis tools for researchers: compute/memory/KV-cache estimates, calibration, attention inspection and
linear probing of hidden states."""

from .attention import (
    capture_attentions,
    head_entropy,
    head_similarity,
    head_statistics_table,
    mean_attention_distance,
    plot_attention_map,
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
    "capture_attentions",
    "control_labels",
    "expected_calibration_error",
    "extract_layer_features",
    "fit_temperature",
    "head_entropy",
    "head_similarity",
    "head_statistics_table",
    "kv_cache_bytes",
    "mean_attention_distance",
    "memory_estimate",
    "non_embedding_parameters",
    "plot_attention_map",
    "plot_probe_accuracy",
    "probe_layers",
    "reliability_diagram",
    "training_flops",
    "train_probe",
    "training_time_seconds",
]
