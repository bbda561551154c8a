"""Evaluation metrics as local `evaluate` modules (they load offline), plus baselines and seed statistics.

Each metric is a folder `<name>/<name>.py` holding an `evaluate.Metric`, so `evaluate.load(path)` loads it without
the Hugging Face Hub:

| name       | computes                                                  | library      |
|------------|-----------------------------------------------------------|--------------|
| accuracy   | fraction correct                                          | scikit-learn |
| f1         | F1, macro-averaged by default                             | scikit-learn |
| seqeval    | entity-level precision/recall/F1 for BIO tags             | seqeval      |
| sacrebleu  | corpus BLEU with its signature                            | sacrebleu    |
| chrf       | chrF / chrF++                                             | sacrebleu    |
| perplexity | exp(mean token loss) from losses (no model download)      | -            |

`load_metric(name)` returns our module for these names and otherwise passes `name` to `evaluate.load` (a path to a
metric script or folder, or a Hub module where the Hub can be reached).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path


METRICS_DIR = Path(__file__).resolve().parent
LOCAL_METRICS = ("accuracy", "f1", "seqeval", "sacrebleu", "chrf", "perplexity")


def metric_path(name: str) -> str:
    """The folder of a local metric module (for `evaluate.load`)."""
    if name not in LOCAL_METRICS:
        raise ValueError(f"{name!r} is not a transformer-zoo metric; local metrics are {', '.join(LOCAL_METRICS)}.")
    return str(METRICS_DIR / name)


def load_metric(name: str, **kwargs):
    """Load an evaluation module: ours for the names in `LOCAL_METRICS`, otherwise `evaluate.load(name, **kwargs)`
    (a local metric script or folder, or a Hub module when the Hub can be reached)."""
    import evaluate

    if not isinstance(name, str) or not name:
        raise ValueError(f"A metric name must be a non-empty string, got {name!r}.")
    if name in LOCAL_METRICS:
        return evaluate.load(metric_path(name), **kwargs)
    if os.path.exists(name):
        return evaluate.load(name, **kwargs)
    try:
        return evaluate.load(name, **kwargs)
    except Exception as error:
        raise ValueError(
            f"Could not load the metric {name!r} ({type(error).__name__}: {error}). It is not one of the local "
            f"metrics ({', '.join(LOCAL_METRICS)}), not an existing path to a metric script or folder, and could "
            "not be fetched from the Hugging Face Hub (offline?). Use a local metric or pass a path."
        ) from error


def majority_baseline(
    train_labels: Sequence[int], eval_labels: Sequence[int], *, labels: Sequence[int] | None = None
) -> dict:
    """Accuracy and macro-F1 of always predicting the most frequent training label (ties: the smallest label).

    Macro-F1 averages over the classes present in `eval_labels` or predicted (scikit-learn's default), or over
    `labels` when given. Any classifier should beat these numbers; report them next to its scores.
    """
    from sklearn.metrics import accuracy_score, f1_score

    if len(train_labels) == 0 or len(eval_labels) == 0:
        raise ValueError("majority_baseline needs non-empty train_labels and eval_labels.")
    counts = Counter(int(label) for label in train_labels)
    majority = min(counts, key=lambda label: (-counts[label], label))
    predictions = [majority] * len(eval_labels)
    references = [int(label) for label in eval_labels]
    return {
        "majority_label": majority,
        "accuracy": float(accuracy_score(references, predictions)),
        "macro_f1": float(f1_score(references, predictions, labels=labels, average="macro", zero_division=0.0)),
    }


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1 in the denominator; 0.0 for a single value), e.g. over seeds."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_std needs at least one value.")
    if any(not math.isfinite(v) for v in values):
        raise ValueError(f"mean_std got a non-finite value: {values}.")
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


__all__ = ["LOCAL_METRICS", "METRICS_DIR", "load_metric", "majority_baseline", "mean_std", "metric_path"]
