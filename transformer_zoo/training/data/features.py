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
from transformers.utils import logging as hf_logging

from .objectives import IGNORE_INDEX, _encode, _end_token_id

logger = hf_logging.get_logger(__name__)


# ------------------------------------------------------------------------------------------------- translation
def translation_features(
    batch: dict[str, list],
    tokenizer,
    source_column: str = "source",
    target_column: str = "target",
    max_length: int = 128,
    *,
    max_target_length: int | None = None,
    mark_truncated: bool = False,
) -> dict[str, list[list[int]]]:
    """For `dataset.map(..., batched=True)`: source texts -> input_ids/attention_mask, targets -> labels.

    Both sides are truncated to `max_length` (targets to `max_target_length` if given) *including* a final eos (or
    [SEP]), which tells the decoder where to stop; no bos/[CLS] is added (the model prepends its decoder start
    token when it shifts the labels). Padding is left to the collator (`transformers.DataCollatorForSeq2Seq` pads
    labels with -100). `mark_truncated` adds the columns `truncated_source` and `truncated_target` (booleans:
    which rows were cut), for the caller to count and report (`take_truncation_counts`).
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
        full = _encode(tokenizer, [t or "" for t in texts])
        return [ids[: limit - 1] + [end] for ids in full], [len(ids) > limit - 1 for ids in full]

    input_ids, source_cut = encode(batch[source_column], max_length)
    labels, target_cut = encode(batch[target_column], max_target_length)
    features = {"input_ids": input_ids, "attention_mask": [[1] * len(ids) for ids in input_ids], "labels": labels}
    if mark_truncated:
        features.update(truncated_source=source_cut, truncated_target=target_cut)
    return features


# ------------------------------------------------------------------------------------------------- classification
def _max_length(tokenizer, max_length: int | None) -> int | None:
    if max_length is not None:
        return max_length
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if limit is not None and limit < 1_000_000 else None


def truncated_rows(encoded, tokenizer, limit: int | None, texts, pair=None, **kwargs) -> list[bool]:
    """Which rows of `encoded` (`tokenizer(texts, pair, truncation=True, max_length=limit, **kwargs)`) were cut
    short: a fast tokenizer's encodings keep what truncation removed (`overflowing`); a slow one is asked again
    without truncation."""
    if limit is None:
        return [False] * len(encoded["input_ids"])
    if encoded.encodings is not None:
        return [bool(encoding.overflowing) for encoding in encoded.encodings]
    whole = tokenizer(texts, pair, truncation=False, verbose=False, **kwargs)["input_ids"]
    return [len(ids) > limit for ids in whole]


TRUNCATION_COLUMNS = ("truncated", "truncated_source", "truncated_target")


def take_truncation_counts(splits: dict) -> tuple[dict, dict[str, dict[str, int]]]:
    """({split: dataset without the columns the feature functions' `mark_truncated` added},
    {split: {column: rows cut}})."""
    kept, counts = {}, {}
    for name, dataset in splits.items():
        columns = [column for column in TRUNCATION_COLUMNS if column in dataset.column_names]
        counts[name] = {column: int(sum(dataset[column])) for column in columns}
        kept[name] = dataset.remove_columns(columns) if columns else dataset
    return kept, counts


# What truncation means, by task (or by side, for a translation's two).
TRUNCATION_EFFECTS = {
    "sequence-classification": "the classifier sees only their first tokens",
    "token-classification": "their last words are neither trained on nor scored by seqeval",
    "causal-lm": "the text past the limit is not trained on or scored",
    "truncated_source": "the model sees only their first tokens",
    "truncated_target": "the model learns to end its output there (BLEU and chrF compare with the whole "
                        "references)",
}
TRUNCATED_ROWS = {"truncated": " examples", "truncated_source": " sources", "truncated_target": " targets"}


def report_truncation(truncated: dict, sizes: dict, *, task: str | None, flag: str, limit: int) -> None:
    """One warning per split (and side) whose rows `flag` (= `limit` tokens) cut short: how many, and what it
    means for `task`. `truncated`: {split: take_truncation_counts' counts}; `sizes`: {split: rows}."""
    for name, counts in truncated.items():
        for column, count in counts.items():
            if count:
                effect = TRUNCATION_EFFECTS[task if column == "truncated" else column]
                logger.warning(f"{count:,} of {sizes[name]:,} {name}{TRUNCATED_ROWS[column]} "
                               f"({count / sizes[name]:.1%}) are longer than {flag} {limit} tokens and were "
                               f"truncated: {effect}. Raise {flag} to keep them whole.")


def classification_features(
    batch: dict[str, list],
    tokenizer,
    *,
    text_column: str = "text",
    label_column: str | None = "label",
    text_pair_column: str | None = None,
    max_length: int | None = None,
    mark_truncated: bool = False,
) -> dict[str, list]:
    """For `dataset.map(..., batched=True)`: tokenize (with the tokenizer's special tokens, truncating to
    `max_length`, default the tokenizer's model_max_length) and copy the class ids to "labels". `mark_truncated`
    adds a boolean column `truncated` (which rows were cut)."""
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
    encoded = tokenizer(batch[text_column], pair, truncation=limit is not None, max_length=limit)
    features = dict(encoded)
    if mark_truncated:
        features["truncated"] = truncated_rows(encoded, tokenizer, limit, batch[text_column], pair)
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
    mark_truncated: bool = False,
) -> dict[str, list]:
    """For `dataset.map(..., batched=True)` on pre-split words (`tokens_column`, lists of words) with one tag id per
    word (`tags_column`): tokenize with is_split_into_words and align the tags with `align_word_labels`.
    `mark_truncated` adds a boolean column `truncated` (rows cut short: their last words have no label)."""
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
    if mark_truncated:
        features["truncated"] = truncated_rows(encoded, tokenizer, limit, list(batch[tokens_column]),
                                               is_split_into_words=True)
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
