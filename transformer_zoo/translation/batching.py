"""Token-count batches: each batch holds as many sentence pairs as fit a budget of padded tokens.

Vaswani et al. (2017, 5.1) batch "by approximate sequence length", about 25 k source and 25 k target tokens per
batch. fairseq calls this `--max-tokens`; transformers' Trainer and Accelerate batch by a fixed number of examples,
and `DataCollatorForSeq2Seq` only pads, so the grouping is written here (a few lines over numpy).

The budget counts *padded* tokens, max(source, target length) x rows, because that is what the model computes on.
Pairs are sorted by length within random windows (so batches are of similar length, yet not the same every epoch),
cut into batches that fit the budget, and the batches shuffled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def token_batches(source_lengths: Sequence[int], target_lengths: Sequence[int], max_tokens: int, *,
                  seed: int | None = 0, window: int = 100) -> list[list[int]]:
    """Indices of the pairs, grouped into batches of at most `max_tokens` padded tokens on the longer side.

    Args:
        source_lengths: token count of each pair's source (with its special tokens).
        target_lengths: token count of each pair's target (with its special tokens).
        max_tokens: the budget per batch: rows x the longest sequence in the batch (source or target) stays within it.
        seed: shuffles the pairs before sorting within windows, and the batch order; None keeps a fixed,
            length-sorted order (evaluation).
        window: pairs are sorted by length within windows of `window` x (pairs per batch); larger windows give
            tighter padding and less randomness.

    Raises:
        ValueError: for mismatched lengths or a pair longer than the whole budget (it could never be batched; the
            message says which and how long).
    """
    source = np.asarray(source_lengths, dtype=np.int64)
    target = np.asarray(target_lengths, dtype=np.int64)
    if source.shape != target.shape or source.ndim != 1:
        raise ValueError(f"source_lengths and target_lengths must be equally long lists; got {source.shape} and "
                         f"{target.shape}.")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}.")
    longest = np.maximum(source, target)
    if len(longest) and longest.max() > max_tokens:
        index = int(longest.argmax())
        raise ValueError(f"Pair {index} has {int(longest[index])} tokens, more than max_tokens={max_tokens}: raise "
                         "max_tokens or truncate the data (e.g. max_length) first.")
    if len(longest) == 0:
        return []
    rng = np.random.default_rng(seed) if seed is not None else None
    order = rng.permutation(len(longest)) if rng is not None else np.arange(len(longest))
    per_batch = max(1, max_tokens // max(1, int(np.median(longest))))
    chunk = max(1, window * per_batch) if rng is not None else len(order)
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = order[start:start + chunk]
        part = part[np.argsort(longest[part], kind="stable")]
        current: list[int] = []
        width = 0
        for index in part.tolist():
            new_width = max(width, int(longest[index]))
            if current and new_width * (len(current) + 1) > max_tokens:
                batches.append(current)
                current, new_width = [], int(longest[index])
            current.append(index)
            width = new_width
        if current:
            batches.append(current)
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches
