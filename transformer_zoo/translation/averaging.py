"""Checkpoint averaging (Vaswani et al. 2017, 6.1: the base models average the last 5 checkpoints, written at
10-minute intervals): the element-wise mean of several state dicts of the same model.

Read and written as safetensors only (never pickles). Floating-point tensors are averaged in float64 and cast back
to their dtype; integer and boolean buffers (e.g. position ids, counters) must agree across checkpoints and are
copied, since their mean means nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

WEIGHTS_NAME = "model.safetensors"


def average_state_dicts(state_dicts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean of `state_dicts` (same keys, shapes and dtypes), tensor by tensor."""
    if not state_dicts:
        raise ValueError("average_state_dicts needs at least one state dict.")
    first = state_dicts[0]
    for number, other in enumerate(state_dicts[1:], start=2):
        if set(other) != set(first):
            missing, extra = sorted(set(first) - set(other)), sorted(set(other) - set(first))
            raise ValueError(f"Checkpoint {number} has different tensors from checkpoint 1 (missing: "
                             f"{missing[:5]}, extra: {extra[:5]}): only checkpoints of one model can be averaged.")
    averaged = {}
    for name, tensor in first.items():
        tensors = [state[name] for state in state_dicts]
        for number, other in enumerate(tensors[1:], start=2):
            if other.shape != tensor.shape or other.dtype != tensor.dtype:
                raise ValueError(f"{name}: checkpoint {number} has shape {tuple(other.shape)} {other.dtype}, "
                                 f"checkpoint 1 {tuple(tensor.shape)} {tensor.dtype}.")
        if tensor.is_floating_point() or tensor.is_complex():
            total = torch.zeros_like(tensor, dtype=torch.complex128 if tensor.is_complex() else torch.float64)
            for other in tensors:
                total += other.to(total.dtype)
            averaged[name] = (total / len(tensors)).to(tensor.dtype)
        else:
            for number, other in enumerate(tensors[1:], start=2):
                if not torch.equal(other, tensor):
                    raise ValueError(f"{name} is a {tensor.dtype} tensor that differs between checkpoints 1 and "
                                     f"{number}; integer tensors cannot be averaged.")
            averaged[name] = tensor.clone()
    return averaged


def weights_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_dir():
        candidates = [path / WEIGHTS_NAME, path / "model" / WEIGHTS_NAME]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            if list(path.glob("*.bin")) or list(path.glob("*.pt")):
                raise ValueError(f"{path} holds only pickled weights (.bin/.pt); they are not read (unpickling can "
                                 "run code). Save the checkpoints as safetensors (save_pretrained does).")
            sharded = sorted(path.glob("model-*-of-*.safetensors"))
            if sharded:
                raise ValueError(f"{path} holds a sharded checkpoint; average unsharded ones (save_pretrained with "
                                 "a larger max_shard_size).")
            raise ValueError(f"No {WEIGHTS_NAME} in {path}.")
        return found
    if path.suffix != ".safetensors":
        raise ValueError(f"{path}: only .safetensors files (or folders holding {WEIGHTS_NAME}) can be averaged.")
    if not path.is_file():
        raise ValueError(f"Checkpoint not found: {path}.")
    return path


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Average the safetensors weights of `paths` (files, or folders holding model.safetensors). Returns the
    averaged state dict and the first file's metadata (e.g. {"format": "pt"})."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not paths:
        raise ValueError("Give at least one checkpoint to average.")
    files = [weights_file(path) for path in paths]
    if len(set(map(os.path.realpath, files))) != len(files):
        raise ValueError("The same checkpoint is listed twice; each checkpoint counts once in the average.")
    with safe_open(str(files[0]), framework="pt") as handle:
        metadata = handle.metadata() or {}
    return average_state_dicts([load_file(str(file)) for file in files]), metadata
