"""Fine-tuning features on the data side: the functions `dataset.map` / `set_transform` apply for each task.

* Translation: `translation_features` (source -> input_ids, target -> labels, both ending in eos).
* Classification: `classification_features`; token classification: `token_classification_features` with labels on
  the first piece of each word and -100 on continuation pieces; images: `image_classification_transform`.
* Checks: `check_labels` (class ids in range).

Every function raises ValueError with the problem and the fix when its input cannot work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .objectives import IGNORE_INDEX, _encode, _end_token_id


# ------------------------------------------------------------------------------------------------- translation
def translation_features(
    batch: dict[str, list],
    tokenizer,
    source_column: str = "source",
    target_column: str = "target",
    max_length: int = 128,
    *,
    max_target_length: int | None = None,
) -> dict[str, list[list[int]]]:
    """For `dataset.map(..., batched=True)`: source texts -> input_ids/attention_mask, targets -> labels.

    Both sides are truncated to `max_length` (targets to `max_target_length` if given) *including* a final eos (or
    [SEP]), which tells the decoder where to stop; no bos/[CLS] is added (the model prepends its decoder start
    token when it shifts the labels). Padding is left to the collator (`transformers.DataCollatorForSeq2Seq` pads
    labels with -100).
    """
    for column, option in ((source_column, "source_column"), (target_column, "target_column")):
        if column not in batch:
            raise ValueError(f"{option}={column!r} is not in the batch (columns: {', '.join(batch)}).")
    end = _end_token_id(tokenizer)
    if end is None:
        raise ValueError("Translation needs an eos (or [SEP]) token to end each sequence; set tokenizer.eos_token.")
    max_target_length = max_target_length or max_length
    if max_length < 2 or max_target_length < 2:
        raise ValueError("max_length (and max_target_length) must be at least 2: one token plus eos.")

    def encode(texts, limit):
        return [ids[: limit - 1] + [end] for ids in _encode(tokenizer, [t or "" for t in texts])]

    input_ids = encode(batch[source_column], max_length)
    return {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": encode(batch[target_column], max_target_length),
    }


# ------------------------------------------------------------------------------------------------- classification
def _max_length(tokenizer, max_length: int | None) -> int | None:
    if max_length is not None:
        return max_length
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if limit is not None and limit < 1_000_000 else None


def classification_features(
    batch: dict[str, list],
    tokenizer,
    *,
    text_column: str = "text",
    label_column: str | None = "label",
    text_pair_column: str | None = None,
    max_length: int | None = None,
) -> dict[str, list]:
    """For `dataset.map(..., batched=True)`: tokenize (with the tokenizer's special tokens, truncating to
    `max_length`, default the tokenizer's model_max_length) and copy the class ids to "labels"."""
    if text_column not in batch:
        raise ValueError(f"text_column={text_column!r} is not in the batch (columns: {', '.join(batch)}).")
    pair = None
    if text_pair_column is not None:
        if text_pair_column not in batch:
            raise ValueError(
                f"text_pair_column={text_pair_column!r} is not in the batch (columns: {', '.join(batch)})."
            )
        pair = batch[text_pair_column]
    limit = _max_length(tokenizer, max_length)
    features = dict(tokenizer(batch[text_column], pair, truncation=limit is not None, max_length=limit))
    if label_column is not None:
        if label_column not in batch:
            raise ValueError(
                f"label_column={label_column!r} is not in the batch (columns: {', '.join(batch)}); pass "
                "label_column=None for unlabelled data."
            )
        features["labels"] = list(batch[label_column])
    return features


def align_word_labels(word_ids: Sequence[int | None], word_labels: Sequence[int], *,
                      label_all_tokens: bool = False) -> list[int]:
    """Labels per token from labels per word: the first piece of each word gets the word's label, continuation
    pieces -100 (or the word's label with `label_all_tokens`), special tokens (word id None) -100."""
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(IGNORE_INDEX)
        else:
            if word >= len(word_labels):
                raise ValueError(f"Token points at word {word} but only {len(word_labels)} word labels were given.")
            labels.append(word_labels[word] if word != previous or label_all_tokens else IGNORE_INDEX)
        previous = word
    return labels


def token_classification_features(
    batch: dict[str, list],
    tokenizer,
    *,
    tokens_column: str = "tokens",
    tags_column: str = "tags",
    max_length: int | None = None,
    label_all_tokens: bool = False,
) -> dict[str, list]:
    """For `dataset.map(..., batched=True)` on pre-split words (`tokens_column`, lists of words) with one tag id per
    word (`tags_column`): tokenize with is_split_into_words and align the tags with `align_word_labels`."""
    for column, option in ((tokens_column, "tokens_column"), (tags_column, "tags_column")):
        if column not in batch:
            raise ValueError(f"{option}={column!r} is not in the batch (columns: {', '.join(batch)}).")
    for words, tags in zip(batch[tokens_column], batch[tags_column]):
        if len(words) != len(tags):
            raise ValueError(f"An example has {len(words)} words but {len(tags)} tags; they must match one to one.")
    limit = _max_length(tokenizer, max_length)
    encoded = tokenizer(list(batch[tokens_column]), is_split_into_words=True, truncation=limit is not None,
                        max_length=limit)
    features = dict(encoded)
    features["labels"] = [
        align_word_labels(encoded.word_ids(i), tags, label_all_tokens=label_all_tokens)
        for i, tags in enumerate(batch[tags_column])
    ]
    return features


def check_labels(labels: Sequence[int], num_labels: int, *, what: str = "labels") -> None:
    """ValueError if any label (other than -100) is outside 0..num_labels-1."""
    values = np.asarray([label for label in np.ravel(np.asarray(labels, dtype=object)) if label != IGNORE_INDEX])
    if values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= num_labels:
        raise ValueError(
            f"{what} range over {low}..{high} but the model has num_labels={num_labels} (valid ids 0.."
            f"{num_labels - 1}). Build the model with num_labels={max(high + 1, num_labels)} (and id2label), or "
            "map the labels to 0..num_labels-1."
        )


def image_classification_transform(
    image_processor,
    *,
    image_column: str = "image",
    label_column: str | None = "label",
    num_channels: int | None = None,
) -> Callable[[dict[str, list]], dict[str, Any]]:
    """A function for `dataset.set_transform` / `with_transform`: images -> "pixel_values" (a float tensor from
    `image_processor`), class ids -> "labels". Images are converted to RGB, or to grayscale ("L") when
    `num_channels` is 1 (default: 1 if the processor normalises one channel, else 3)."""
    if num_channels is None:
        mean = getattr(image_processor, "image_mean", None)
        num_channels = len(mean) if isinstance(mean, (list, tuple)) else 3
    if num_channels not in (1, 3):
        raise ValueError(f"num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.")
    mode = "L" if num_channels == 1 else "RGB"

    def transform(batch: dict[str, list]) -> dict[str, Any]:
        if image_column not in batch:
            raise ValueError(f"image_column={image_column!r} is not in the batch (columns: {', '.join(batch)}).")
        images = [image.convert(mode) if image.mode != mode else image for image in batch[image_column]]
        out = {"pixel_values": image_processor(images, return_tensors="pt")["pixel_values"]}
        if label_column is not None:
            if label_column not in batch:
                raise ValueError(f"label_column={label_column!r} is not in the batch (columns: {', '.join(batch)}).")
            out["labels"] = torch.as_tensor(batch[label_column], dtype=torch.long)
        return out

    return transform


__all__ = [
    "align_word_labels",
    "check_labels",
    "classification_features",
    "image_classification_transform",
    "token_classification_features",
    "translation_features",
]
