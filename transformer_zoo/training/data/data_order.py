"""The order the training loop reads examples in: a function of (seed, epoch) only, so that a resumed run's data
position is two integers (transformer_zoo.training.engine.loop says why the loop batches the data itself); batches by
example count or by token count, and what a batch counts as (tokens, examples)."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def epoch_order(num_examples: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The example order of one epoch: a permutation that depends only on (seed, epoch)."""
    if not shuffle:
        return list(range(num_examples))
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(num_examples, generator=generator).tolist()


def micro_batch_stream(
    num_examples: int, global_micro_batch: int, *, seed: int, shuffle: bool, start_epoch: int = 0,
    start_micro_batch: int = 0,
) -> Iterator[tuple[int, int, list[int]]]:
    """Endless (epoch, micro-batch index, example indices of the global micro-batch), starting at a data position.

    The incomplete last micro-batch of an epoch is dropped so every process always gets the same batch shape.
    """
    per_epoch = num_examples // global_micro_batch
    epoch, position = start_epoch, start_micro_batch
    while True:
        if position < per_epoch:
            order = epoch_order(num_examples, seed, epoch, shuffle)
            while position < per_epoch:
                yield epoch, position, order[position * global_micro_batch : (position + 1) * global_micro_batch]
                position += 1
        epoch, position = epoch + 1, 0


def example_lengths(dataset) -> tuple[list[int], list[int]]:
    """(input lengths, label lengths) of tokenized examples, for token-count batches."""
    columns = getattr(dataset, "column_names", None)
    if not columns or "input_ids" not in columns:
        raise ValueError("max_tokens_per_batch needs tokenized examples with an input_ids column (text data); for "
                         "other data, batch by examples with per_device_batch_size.")
    inputs = [len(ids) for ids in dataset["input_ids"]]
    labels = [len(ids) for ids in dataset["labels"]] if "labels" in columns and isinstance(
        dataset[0]["labels"], (list, tuple)) else inputs
    return inputs, labels


def token_batch_plan(lengths: tuple[list[int], list[int]], global_tokens: int, world: int, *, seed: int,
                     shuffle: bool, epoch: int) -> list[list[int]]:
    """One epoch's token-count micro-batches (`transformer_zoo.translation.token_batches`), a function of
    (seed, epoch) only. Micro-batches of fewer examples than processes are dropped."""
    from ...translation.batching import token_batches

    plan = token_batches(*lengths, global_tokens, seed=seed * 100_003 + epoch if shuffle else None)
    return [batch for batch in plan if len(batch) >= world]


def token_batch_stream(
    lengths: tuple[list[int], list[int]], global_tokens: int, world: int, *, seed: int, shuffle: bool,
    start_epoch: int = 0, start_micro_batch: int = 0,
) -> Iterator[tuple[int, int, list[int]]]:
    """Like `micro_batch_stream`, over `token_batch_plan` epochs."""
    epoch, position = start_epoch, start_micro_batch
    while True:
        plan = token_batch_plan(lengths, global_tokens, world, seed=seed, shuffle=shuffle, epoch=epoch)
        while position < len(plan):
            yield epoch, position, plan[position]
            position += 1
        epoch, position = epoch + 1, 0


def fetch_examples(dataset, indices: list[int]) -> list:
    """`[dataset[i] for i in indices]`, in one query where the dataset answers one (`__getitems__`, which a
    `datasets.Dataset` has, and which torch's DataLoader fetcher uses the same way): an Arrow table answers a list
    of rows in one query much faster than row by row, which a small model's step notices."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is None:
        return [dataset[i] for i in indices]
    return list(getitems(list(indices)))


def move_to_device(batch: dict, device) -> dict:
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def batch_units(batch: dict, *, is_encoder_decoder: bool = False) -> tuple[int, int]:
    """(tokens, examples) in a batch. Tokens are non-padding input tokens, plus target tokens for an
    encoder-decoder; for images the token count is left to the caller (examples are images).
    """
    if "pixel_values" in batch:
        count = int(batch["pixel_values"].shape[0])
        return count, count
    input_ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    tokens = int(mask.sum()) if mask is not None else input_ids.numel()
    if is_encoder_decoder and "labels" in batch:
        tokens += int((batch["labels"] != -100).sum())
    return tokens, int(input_ids.shape[0])
