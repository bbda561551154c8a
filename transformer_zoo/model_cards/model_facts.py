"""Numbers a model card states about a model, computed from the model itself: parameter counts, the architecture
fields shown, training compute, and how numbers are written. Read by the card renderer and by the training reports."""

from __future__ import annotations

import torch


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Total, trainable and embedding parameter counts (tied tensors counted once)."""
    seen, total, trainable, embedding = set(), 0, 0, 0
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            total += parameter.numel()
            trainable += parameter.numel() if parameter.requires_grad else 0
            if isinstance(module, torch.nn.Embedding):
                embedding += parameter.numel()
    return {"total": total, "trainable": trainable, "embedding": embedding, "non_embedding": total - embedding}


# Config fields shown in the card's architecture table, in this order, when the config has them.
ARCHITECTURE_FIELDS = (
    "model_type", "hidden_size", "num_hidden_layers", "encoder_layers", "decoder_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act", "vocab_size", "max_position_embeddings",
    "position_embedding_type", "norm_position", "norm_type", "tie_word_embeddings", "image_size", "patch_size",
    "num_channels", "pooling", "num_labels", "embedding_dropout", "attention_dropout", "hidden_dropout",
)


def training_compute_flops(non_embedding_parameters: int, tokens: int) -> float:
    """6 * N * D (Kaplan et al. 2020): forward (2ND) plus backward (4ND) FLOPs for N parameters and D tokens."""
    return 6.0 * non_embedding_parameters * tokens


def format_number(value) -> str:
    """A number as the cards write it: thousands separators for integers, 4 significant digits (or scientific
    notation far from 1) for floats."""
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3e}"
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
