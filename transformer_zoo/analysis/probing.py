"""Linear probing of frozen hidden states, with control tasks.

A probe is a small classifier trained on frozen representations to predict a property; if a *linear* probe on layer
`l` predicts the property well, the property is linearly decodable from that layer (Belinkov 2022, "Probing
Classifiers: Promises, Shortcomings, and Advances", Computational Linguistics 48(1)). High probe accuracy alone does
not show the model *uses* the property, nor that the representation (rather than the probe) did the work; the
control task of Hewitt & Liang (2019, "Designing and Interpreting Probes with Control Tasks", EMNLP) addresses the
second point.

Control task and selectivity (Hewitt & Liang 2019):
    The control task keeps the inputs and the label *distribution* but replaces the labels with a random, fixed
    relabelling that has no relation to the input's linguistic content. `selectivity = probe accuracy - control
    accuracy` (same probe, same features, same split). A selective probe is accurate on the real task and not on the
    control one, i.e. its accuracy reflects the representation rather than the probe's capacity to memorise.

    Hewitt & Liang relabel per *word type*: every occurrence of a type gets the same random label, so a probe that
    memorises types does well on the control task on held-out tokens. Here labels are per *example* (sentence-level),
    so `control_labels` gives each example a random class (a permutation of the real labels, hence the same class
    distribution exactly). With no example repeated across train and test, held-out control accuracy is then at chance
    by construction: the control row is an empirical chance level for this split size (with its noise), and a control
    accuracy clearly above the majority baseline points to leakage (duplicates) or a bug. Read selectivity together
    with the majority baseline.

Layer 0 is the embedding output (the input to the first block); layer `l` is the output of block `l`, as returned by
the zoo models with `output_hidden_states=True`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from .figures import pyplot, save_figure


POOLINGS = ("mean", "first", "last")
# Inputs the zoo backbones accept; anything else a tokenizer returns (offsets, special-token masks...) is dropped.
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "pixel_values")


def _feature_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose hidden states are probed: the encoder of a seq2seq model, else the bare backbone."""
    if getattr(model.config, "model_type", None) == "zoo_seq2seq":
        return model.get_encoder()
    # Task heads (…ForSequenceClassification, …ForMaskedLM) wrap the backbone; probing ignores the head.
    return getattr(model, "base_model", model)


def _pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Pool [batch, length, hidden] to [batch, hidden] over the real (mask == 1) tokens."""
    mask = mask.to(hidden.dtype)
    if pooling == "mean":
        # Padding positions still carry vectors; averaging them in would make features depend on batch padding.
        counts = mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        return (hidden * mask.unsqueeze(-1)).sum(dim=1) / counts
    positions = torch.arange(hidden.shape[1], device=hidden.device).expand_as(mask)
    # first/last *real* token, so that left and right padding both work (decoders often pad on the left).
    if pooling == "first":
        index = torch.where(mask > 0, positions, hidden.shape[1]).min(dim=1).values
    else:
        index = torch.where(mask > 0, positions, -1).max(dim=1).values
    index = index.clamp(0, hidden.shape[1] - 1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]


def extract_layer_features(
    model: torch.nn.Module, batches: Iterable[Mapping[str, torch.Tensor]], *, pooling: str = "mean"
) -> list[np.ndarray]:
    """Pooled hidden states of every layer, for every example.

    Args:
        model: a zoo encoder, decoder or ViT model (bare or with a head), or a seq2seq model (its encoder is probed).
        batches: model inputs, e.g. tokenizer outputs (`input_ids`, `attention_mask`, ...) or `pixel_values`.
        pooling: "mean" (average over real tokens, padding excluded), "first" (first real token: [CLS] for BERT-style
            encoders and ViT) or "last" (last real token: the one that has seen the whole input in a causal decoder).

    Returns:
        One float32 array [n_examples, hidden_size] per layer, the embedding output first (num_layers + 1 arrays).
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}.")
    module = _feature_module(model)
    was_training = module.training
    module.eval()  # no dropout: features must be a deterministic function of the input
    per_layer: list[list[np.ndarray]] | None = None
    device = next(module.parameters()).device
    takes_token_types = getattr(module.config, "model_type", None) == "zoo_encoder" and getattr(
        module.config, "type_vocab_size", 0
    )
    try:
        with torch.no_grad():
            for batch in batches:
                inputs = {key: value.to(device) for key, value in batch.items()
                          if key in _MODEL_INPUTS and value is not None}
                if not takes_token_types:
                    inputs.pop("token_type_ids", None)
                outputs = module(**inputs, output_hidden_states=True)
                hidden_states = outputs.hidden_states
                if hidden_states is None:
                    raise ValueError(f"{type(module).__name__} returned no hidden_states.")
                first = hidden_states[0]
                mask = inputs.get("attention_mask")
                if mask is None or "pixel_values" in inputs:
                    # ViT (and unpadded text): every position is real.
                    mask = torch.ones(first.shape[:2], dtype=torch.long, device=first.device)
                if per_layer is None:
                    per_layer = [[] for _ in hidden_states]
                for layer, hidden in enumerate(hidden_states):
                    per_layer[layer].append(_pool(hidden.float(), mask, pooling).cpu().numpy())
    finally:
        module.train(was_training)
    if per_layer is None:
        raise ValueError("extract_layer_features got no batches.")
    return [np.concatenate(chunks).astype(np.float32) for chunks in per_layer]


def train_probe(
    features: np.ndarray, labels: Sequence[int] | np.ndarray, *, train_idx: Sequence[int],
    test_idx: Sequence[int], seed: int = 0, max_iter: int = 2000,
) -> float:
    """Train a linear probe (standardised features -> logistic regression) and return its held-out accuracy.

    Standardising puts every layer on the same footing (hidden-state scales grow with depth in post-norm models), so
    the same L2 penalty means the same thing in every layer. The probe is kept linear and lightly regularised on
    purpose: a more expressive probe can learn the task itself (Hewitt & Liang 2019; Belinkov 2022).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    features = np.asarray(features)
    labels = np.asarray(labels)
    train_idx, test_idx = np.asarray(train_idx), np.asarray(test_idx)
    if len(train_idx) == 0 or len(test_idx) == 0:
        raise ValueError("train_probe needs non-empty train_idx and test_idx.")
    if np.unique(labels[train_idx]).size < 2:
        # LogisticRegression refuses one class; the only sensible prediction is that class.
        return float(np.mean(labels[test_idx] == labels[train_idx][0]))
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter, random_state=seed))
    probe.fit(features[train_idx], labels[train_idx])
    return float(np.mean(probe.predict(features[test_idx]) == labels[test_idx]))


def control_labels(labels: Sequence[int] | np.ndarray, seed: int = 0) -> np.ndarray:
    """Control-task labels (Hewitt & Liang 2019) for sentence-level labels.

    Each example gets a random class, drawn so that the class distribution is exactly that of `labels` (a seeded
    permutation of them): the same seed always gives the same relabelling, and the new label is unrelated to the input.
    See the module docstring for what the resulting selectivity means at the sentence level.
    """
    labels = np.asarray(labels)
    return np.random.default_rng(seed).permutation(labels)


def majority_baseline(labels: Sequence[int] | np.ndarray, *, train_idx, test_idx) -> float:
    """Held-out accuracy of always predicting the most frequent training class (the recipes' own baseline)."""
    from ..metrics import majority_baseline as majority_scores

    labels = np.asarray(labels)
    return float(majority_scores(labels[np.asarray(train_idx)], labels[np.asarray(test_idx)])["accuracy"])


def stratified_split(labels, *, test_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Train/test indices with the class proportions kept (falls back to a plain shuffle when a class is too rare)."""
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels)
    indices = np.arange(len(labels))
    _, counts = np.unique(labels, return_counts=True)
    stratify = labels if counts.min() >= 2 else None
    train_idx, test_idx = train_test_split(indices, test_size=test_fraction, random_state=seed, stratify=stratify)
    return np.sort(train_idx), np.sort(test_idx)


def text_batches(texts: Sequence[str], tokenizer, *, batch_size: int = 32, max_length: int = 128):
    """Tokenised, padded batches of `texts` (in order) for `extract_layer_features`."""
    if tokenizer.pad_token is None:
        # GPT-2-style tokenizers have no pad token; padding is masked out anyway, so any token will do. A copy, so the
        # caller's tokenizer is left as it was.
        tokenizer = copy.copy(tokenizer)
        tokenizer.pad_token = tokenizer.eos_token
    for start in range(0, len(texts), batch_size):
        yield tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")


def probe_layers(
    model: torch.nn.Module,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    tokenizer,
    *,
    pooling: str = "mean",
    seed: int = 0,
    train_idx: Sequence[int] | None = None,
    test_idx: Sequence[int] | None = None,
    test_fraction: float = 0.25,
    batch_size: int = 32,
    max_length: int = 128,
) -> list[dict]:
    """Probe every layer of `model` for `labels`, with a control task and a majority baseline.

    Args:
        train_idx: the training indices into `texts`; default: a stratified `test_fraction` split by `seed`.
        test_idx: the held-out indices into `texts` (given with `train_idx`).

    Returns:
        One row per layer (0 = embedding output): `layer`, `probe_accuracy`, `control_accuracy`,
        `selectivity` (probe - control) and `majority_baseline`, all on the held-out indices.
    """
    labels = np.asarray(labels)
    if len(texts) != len(labels):
        raise ValueError(f"Got {len(texts)} texts but {len(labels)} labels.")
    if (train_idx is None) != (test_idx is None):
        raise ValueError("Pass both train_idx and test_idx, or neither.")
    if train_idx is None:
        train_idx, test_idx = stratified_split(labels, test_fraction=test_fraction, seed=seed)
    features = extract_layer_features(
        model, text_batches(texts, tokenizer, batch_size=batch_size, max_length=max_length), pooling=pooling
    )
    control = control_labels(labels, seed=seed)
    majority = majority_baseline(labels, train_idx=train_idx, test_idx=test_idx)
    rows = []
    for layer, layer_features in enumerate(features):
        probe_accuracy = train_probe(layer_features, labels, train_idx=train_idx, test_idx=test_idx, seed=seed)
        control_accuracy = train_probe(layer_features, control, train_idx=train_idx, test_idx=test_idx, seed=seed)
        rows.append({
            "layer": layer,
            "probe_accuracy": probe_accuracy,
            "control_accuracy": control_accuracy,
            "selectivity": probe_accuracy - control_accuracy,
            "majority_baseline": majority,
        })
    return rows


def markdown_table(rows: Sequence[Mapping]) -> str:
    """The probe rows as a markdown table (layer 0 labelled as the embedding output)."""
    lines = ["| layer | probe accuracy | control accuracy | selectivity | majority baseline |",
             "|---|---|---|---|---|"]
    for row in rows:
        name = "0 (embeddings)" if row["layer"] == 0 else str(row["layer"])
        lines.append(f"| {name} | {row['probe_accuracy']:.3f} | {row['control_accuracy']:.3f} | "
                     f"{row['selectivity']:+.3f} | {row['majority_baseline']:.3f} |")
    return "\n".join(lines)


def plot_probe_accuracy(rows: Sequence[Mapping], path: str | Path, *, title: str | None = None) -> Path:
    """Save a PNG of probe accuracy per layer, with the control task and the majority baseline as lines."""
    plt = pyplot()

    layers = [row["layer"] for row in rows]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(layers, [row["probe_accuracy"] for row in rows], marker="o", label="probe (real labels)")
    axes.plot(layers, [row["control_accuracy"] for row in rows], marker="s", linestyle="--",
              label="control task (Hewitt & Liang 2019)")
    axes.plot(layers, [row["majority_baseline"] for row in rows], linestyle=":", color="grey",
              label="majority baseline")
    axes.set_xticks(layers)
    axes.set_xticklabels(["emb" if layer == 0 else str(layer) for layer in layers])
    axes.set_xlabel("layer (emb = embedding output)")
    axes.set_ylabel("held-out accuracy")
    axes.set_ylim(0.0, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    if title:
        axes.set_title(title)
    return save_figure(figure, path, dpi=120)


__all__ = [
    "POOLINGS",
    "control_labels",
    "extract_layer_features",
    "majority_baseline",
    "markdown_table",
    "plot_probe_accuracy",
    "probe_layers",
    "stratified_split",
    "text_batches",
    "train_probe",
]
