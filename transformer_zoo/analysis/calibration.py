"""Calibration of a classifier's probabilities: expected calibration error, reliability diagrams, and temperature
scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks").

Inputs may be torch tensors, NumPy arrays or nested lists: `probabilities` is [examples, classes] (rows summing to
1), `logits` is [examples, classes], `labels` is [examples] of class indices.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .figures import pyplot, save_figure


def _as_tensor(values, dtype=torch.float64) -> torch.Tensor:
    return torch.as_tensor(values).detach().to(dtype=dtype, device="cpu")


def _confidences_and_correctness(probabilities, labels) -> tuple[torch.Tensor, torch.Tensor]:
    probabilities, labels = _as_tensor(probabilities), _as_tensor(labels, torch.long)
    if probabilities.ndim != 2 or labels.ndim != 1 or probabilities.shape[0] != labels.shape[0]:
        raise ValueError(f"expected probabilities [examples, classes] and labels [examples], got "
                         f"{tuple(probabilities.shape)} and {tuple(labels.shape)}.")
    confidences, predictions = probabilities.max(dim=-1)
    return confidences, (predictions == labels).to(torch.float64)


def _bin_indices(confidences: torch.Tensor, n_bins: int) -> torch.Tensor:
    # Equal-width bins B_m = ((m-1)/M, m/M] as in Guo et al. (section 2); a confidence of exactly 0 joins the first.
    return (torch.ceil(confidences * n_bins).long() - 1).clamp(0, n_bins - 1)


def calibration_bins(probabilities, labels, n_bins: int = 15) -> list[dict]:
    """Per equal-width confidence bin: its edges, example count, mean confidence and accuracy (None when empty)."""
    confidences, correct = _confidences_and_correctness(probabilities, labels)
    bins = _bin_indices(confidences, n_bins)
    rows = []
    for m in range(n_bins):
        in_bin = bins == m
        count = int(in_bin.sum())
        rows.append({
            "lower": m / n_bins, "upper": (m + 1) / n_bins, "count": count,
            "confidence": float(confidences[in_bin].mean()) if count else None,
            "accuracy": float(correct[in_bin].mean()) if count else None,
        })
    return rows


def expected_calibration_error(probabilities, labels, n_bins: int = 15) -> float:
    """ECE = Σ_m |B_m|/n · |acc(B_m) − conf(B_m)| over equal-width confidence bins (Naeini et al. 2015; Guo et al.
    2017, eq. 3). 15 bins is Guo et al.'s choice. 0 for a perfectly calibrated model."""
    rows = calibration_bins(probabilities, labels, n_bins)
    total = sum(row["count"] for row in rows)
    return float(sum(row["count"] / total * abs(row["accuracy"] - row["confidence"]) for row in rows if row["count"]))


def reliability_diagram(probabilities, labels, path, n_bins: int = 15, title: str | None = None) -> Path:
    """Save a reliability diagram (accuracy per confidence bin against the diagonal; Niculescu-Mizil & Caruana 2005,
    Guo et al. 2017 fig. 1) as a PNG, with the gap to perfect calibration shaded and the ECE in the title."""
    plt = pyplot()

    rows = calibration_bins(probabilities, labels, n_bins)
    ece = expected_calibration_error(probabilities, labels, n_bins)
    width = 1.0 / n_bins
    centers = [row["lower"] + width / 2 for row in rows]
    accuracies = [row["accuracy"] or 0.0 for row in rows]
    confidences = [row["confidence"] if row["count"] else row["lower"] + width / 2 for row in rows]
    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    axis.bar(centers, accuracies, width=width, edgecolor="black", label="accuracy")
    axis.bar(centers, [c - a if r["count"] else 0.0 for c, a, r in zip(confidences, accuracies, rows)],
             bottom=accuracies, width=width, color="red", alpha=0.3, edgecolor="red", label="gap")
    axis.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy",
             title=title or f"Reliability diagram (ECE = {ece:.3f})")
    axis.legend(loc="upper left")
    return save_figure(figure, path)


def apply_temperature(logits, temperature: float) -> torch.Tensor:
    """Calibrated probabilities softmax(logits / T). T > 1 softens, T < 1 sharpens; the argmax is unchanged."""
    return torch.softmax(_as_tensor(logits) / float(temperature), dim=-1)


def negative_log_likelihood(logits, labels, temperature: float = 1.0) -> float:
    """Mean NLL of the labels under softmax(logits / T)."""
    return float(F.cross_entropy(_as_tensor(logits) / float(temperature), _as_tensor(labels, torch.long)))


def fit_temperature(logits, labels, max_iterations: int = 200) -> float:
    """The temperature T > 0 minimising the validation NLL of softmax(logits / T) (Guo et al. 2017, section 4.2).

    Optimised over log T so T stays positive without constraints; the problem is one-dimensional and smooth, so
    L-BFGS with a strong-Wolfe line search converges in a handful of steps. Fit on held-out data, not training data.
    """
    logits, labels = _as_tensor(logits), _as_tensor(labels, torch.long)
    log_temperature = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_temperature], lr=1.0, max_iter=max_iterations,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-10, tolerance_change=1e-12)

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_temperature.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_temperature.detach().exp())
