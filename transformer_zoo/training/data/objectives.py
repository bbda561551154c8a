"""Pretraining objectives on the data side: packing and the collators of every family.

* Causal LM (decoder): `pack_sequences` into blocks of `context_length`, then `causal_lm_collator`.
* Masked LM (encoder): `pack_sequences`, then `masked_lm_collator` (BERT's 80/10/10 rule, transformers' collator).
* Denoising (encoder-decoder pretraining): `pack_sequences`, then `denoising_collator`: **T5-style span
  corruption** (Raffel et al. 2020, section 3.1.4): random spans covering `noise_density` of the tokens (mean length
  `mean_span_length`) are cut out of the input, each replaced by one sentinel token, and the labels are the removed
  spans, each preceded by its sentinel, then eos. Sentinels are the tokenizer's <extra_id_0>, <extra_id_1>, ... when
  it has them (`train_tokenizer(..., num_sentinel_tokens=100)`), otherwise its mask token for every span (the spans
  still come back in order, so the input stays recoverable).
* Checks: `check_sequence_length` (position scheme limits).

The fine-tuning tasks' feature functions (translation, classification, token and image classification) are in
`features.py`.

Every function raises ValueError with the problem and the fix when its input cannot work.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from typing import Any

import datasets
import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling
from transformers.utils import logging

logger = logging.get_logger(__name__)

IGNORE_INDEX = -100
# Position schemes with a fixed table of max_position_embeddings rows; the others extrapolate.
BOUNDED_POSITION_TYPES = ("learned", "sinusoidal")


# ------------------------------------------------------------------------------------------------- helpers
def _require_column(dataset, column: str, option: str) -> None:
    names = dataset.column_names if hasattr(dataset, "column_names") else list(dataset)
    if isinstance(names, dict):  # a DatasetDict
        raise ValueError(f"Pass one split (e.g. dataset['train']), not a DatasetDict with splits {list(names)}.")
    if column not in names:
        raise ValueError(f"{option}={column!r} is not a column of the data set (columns: {', '.join(names)}).")


def _end_token_id(tokenizer) -> int | None:
    """eos, or [SEP] for BERT-style tokenizers without an eos."""
    if getattr(tokenizer, "eos_token_id", None) is not None:
        return tokenizer.eos_token_id
    return getattr(tokenizer, "sep_token_id", None)


def _start_token_id(tokenizer) -> int | None:
    """bos, or [CLS] for BERT-style tokenizers without a bos."""
    if getattr(tokenizer, "bos_token_id", None) is not None:
        return tokenizer.bos_token_id
    return getattr(tokenizer, "cls_token_id", None)


def _token_ids(example) -> list[int]:
    """input_ids of one example (a dict, a list or a tensor), without the padding marked by its attention_mask."""
    if isinstance(example, dict):
        if "input_ids" not in example:
            raise ValueError(f"A batch example has no 'input_ids' (keys: {', '.join(example)}); tokenize it first.")
        ids = example["input_ids"]
        mask = example.get("attention_mask")
    else:
        ids, mask = example, None
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if mask is not None:
        mask = mask.tolist() if hasattr(mask, "tolist") else list(mask)
        ids = [token for token, keep in zip(ids, mask) if keep]
    return [int(token) for token in ids]


def _pad(sequences: Sequence[Sequence[int]], value: int, multiple: int | None = None) -> torch.Tensor:
    length = max(len(s) for s in sequences)
    if multiple:
        length = -(-length // multiple) * multiple
    out = torch.full((len(sequences), length), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(list(sequence), dtype=torch.long)
    return out


class _SeededRNG:
    """A numpy Generator that is re-seeded (seed + worker id) in each DataLoader worker process."""

    def __init__(self, seed: int | None):
        self.seed, self._pid, self._rng = seed, None, None

    def get(self) -> np.random.Generator:
        if self._rng is None or self._pid != os.getpid():
            seed = self.seed
            info = torch.utils.data.get_worker_info()
            if seed is not None and info is not None:
                seed += info.id
            elif seed is None:
                seed = int(torch.randint(0, 2**31 - 1, ()).item())  # follows torch.manual_seed
            self._rng, self._pid = np.random.default_rng(seed), os.getpid()
        return self._rng


# ------------------------------------------------------------------------------------------------- packing
def _encode(tokenizer, texts, *, add_special_tokens: bool = False, **kwargs):
    # verbose=False: long documents are expected here (they are chunked afterwards), no length warning.
    return tokenizer(list(texts), add_special_tokens=add_special_tokens, verbose=False, **kwargs)["input_ids"]


def count_tokens(
    dataset: datasets.Dataset,
    tokenizer,
    *,
    text_column: str = "text",
    add_special_tokens: bool = False,
    num_proc: int | None = None,
    batch_size: int = 1000,
) -> int:
    """The number of tokens in `dataset[text_column]` (without special tokens unless asked)."""
    _require_column(dataset, text_column, "text_column")
    lengths = dataset.map(
        lambda batch: {"n": [len(ids) for ids in _encode(tokenizer, batch[text_column],
                                                         add_special_tokens=add_special_tokens)]},
        batched=True, batch_size=batch_size, num_proc=num_proc, remove_columns=dataset.column_names,
        desc="counting tokens",
    )
    return int(np.sum(lengths.with_format("numpy")["n"])) if len(lengths) else 0


def pack_sequences(
    dataset: datasets.Dataset,
    tokenizer,
    context_length: int,
    *,
    text_column: str = "text",
    add_eos: bool = True,
    add_bos: bool = False,
    num_proc: int | None = None,
    batch_size: int = 1000,
) -> datasets.Dataset:
    """Tokenize every text, concatenate them all, and cut the stream into blocks of exactly `context_length`.

    Each text is encoded without the tokenizer's own special tokens; with `add_eos` its end-of-sequence token (eos,
    or [SEP] for BERT-style tokenizers) follows it so documents stay separated; with `add_bos` its bos ([CLS])
    precedes it. Only the final partial block is dropped, so at most `context_length - 1` tokens are lost in all.
    Returns a Dataset with one column, "input_ids"; the counts (texts, tokens, blocks, dropped_tokens) are logged
    and stored as JSON in its `info.description` under "packing".
    """
    _require_column(dataset, text_column, "text_column")
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1:
        raise ValueError(f"context_length must be a positive integer, got {context_length!r}.")
    prefix, suffix = [], []
    if add_bos:
        start = _start_token_id(tokenizer)
        if start is None:
            raise ValueError("add_bos=True but the tokenizer has neither a bos nor a [CLS] token; set add_bos=False.")
        prefix = [start]
    if add_eos:
        end = _end_token_id(tokenizer)
        if end is None:
            raise ValueError(
                "add_eos=True but the tokenizer has neither an eos nor a [SEP] token, so documents could not be "
                "separated: set tokenizer.eos_token (e.g. tokenizer.add_special_tokens({'eos_token': '</s>'})) or "
                "pass add_eos=False."
            )
        suffix = [end]

    def tokenize(batch):
        return {"input_ids": [prefix + ids + suffix for ids in _encode(tokenizer, batch[text_column])]}

    tokenized = dataset.map(
        tokenize, batched=True, batch_size=batch_size, num_proc=num_proc, remove_columns=dataset.column_names,
        desc="tokenizing",
    )
    if len(tokenized) == 0:
        raise ValueError("pack_sequences got an empty data set; check the split and the text column.")
    import pyarrow as pa

    column = tokenized.with_format("arrow")[:]["input_ids"]  # a list array, in row order
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    flat = np.concatenate([chunk.flatten().to_numpy(zero_copy_only=False) for chunk in chunks]).astype(np.int32)
    total = len(flat)
    blocks = total // context_length
    if blocks == 0:
        raise ValueError(
            f"The corpus has only {total} tokens, fewer than context_length={context_length}: no full block can be "
            "made. Use more text or a smaller context_length."
        )
    dropped = total - blocks * context_length
    logger.info(
        f"Packed {total} tokens from {len(tokenized)} texts into {blocks} blocks of {context_length}; dropped "
        f"{dropped} tokens (the last partial block)."
    )
    array = pa.array(flat[: blocks * context_length])
    table = pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(array, context_length)})
    stats = {"texts": len(tokenized), "tokens": int(total), "blocks": int(blocks), "context_length": context_length,
             "dropped_tokens": int(dropped)}
    return datasets.Dataset(table, info=datasets.DatasetInfo(description=json.dumps({"packing": stats})))


# ------------------------------------------------------------------------------------------------- LM collators
def masked_lm_collator(
    tokenizer,
    mlm_probability: float = 0.15,
    *,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    pad_to_multiple_of: int | None = None,
    seed: int | None = None,
) -> DataCollatorForLanguageModeling:
    """transformers' masked-LM collator: selects `mlm_probability` of the (non-special) tokens; of those, 80 % become
    the mask token, 10 % a random token, 10 % stay (Devlin et al. 2019); labels are -100 elsewhere."""
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise ValueError(
            "Masked-LM training needs a mask token and this tokenizer has none: use a tokenizer from "
            "train_tokenizer (both kinds have one), or add one with tokenizer.add_special_tokens({'mask_token': "
            "'<mask>'}) and model.resize_token_embeddings(len(tokenizer))."
        )
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise ValueError("Masked-LM batches need a pad token; set tokenizer.pad_token (see check_tokenizer_matches).")
    if not 0.0 < mlm_probability < 1.0:
        raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability}.")
    return DataCollatorForLanguageModeling(
        tokenizer, mlm=True, mlm_probability=mlm_probability, mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob, pad_to_multiple_of=pad_to_multiple_of, seed=seed,
    )


class CausalLMCollator:
    """Pads a batch on the right and sets labels = input_ids with -100 at the padding (the model shifts them).

    Padding is read from the attention mask, not from the pad id, so a tokenizer whose pad token is its eos token
    (GPT-2 style) keeps its real eos tokens in the loss.
    """

    def __init__(self, tokenizer, *, pad_to_multiple_of: int | None = None):
        self.tokenizer, self.pad_to_multiple_of = tokenizer, pad_to_multiple_of

    def __call__(self, examples: list[Any]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("CausalLMCollator got an empty batch.")
        sequences = [_token_ids(example) for example in examples]
        if any(len(s) == 0 for s in sequences):
            raise ValueError("A batch example has no tokens; filter out empty texts before batching.")
        lengths = {len(s) for s in sequences}
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if pad_id is None:
            if len(lengths) > 1 or self.pad_to_multiple_of:
                raise ValueError(
                    "This batch needs padding but the tokenizer has no pad token: set tokenizer.pad_token = "
                    "tokenizer.eos_token (the padding is masked out of the loss), or pack the corpus with "
                    "pack_sequences so that every example has the same length."
                )
            pad_id = 0
        input_ids = _pad(sequences, pad_id, self.pad_to_multiple_of)
        attention_mask = _pad([[1] * len(s) for s in sequences], 0, self.pad_to_multiple_of)
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def causal_lm_collator(tokenizer, *, pad_to_multiple_of: int | None = None) -> CausalLMCollator:
    """Collator for causal-LM training: labels = input_ids, padding -> -100 (see `CausalLMCollator`)."""
    return CausalLMCollator(tokenizer, pad_to_multiple_of=pad_to_multiple_of)


# ------------------------------------------------------------------------------------------------- denoising
def random_spans_noise_mask(
    length: int, noise_density: float, mean_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """T5's noise mask: a boolean array of `length` with round(length * noise_density) True values in
    round(num_noise / mean_span_length) spans, alternating with kept spans, starting with a kept one
    (port of `random_spans_noise_mask` in the T5 code base, with numpy)."""
    if length < 1:
        raise ValueError("Cannot corrupt an empty sequence.")
    if length == 1:
        return np.ones(1, dtype=bool)
    num_noise = int(np.clip(round(length * noise_density), 1, length - 1))
    num_spans = int(np.clip(round(num_noise / mean_span_length), 1, min(num_noise, length - num_noise)))
    num_keep = length - num_noise

    def segment(num_items, num_segments):
        # Random composition of num_items into num_segments positive parts.
        cuts = np.sort(rng.choice(np.arange(1, num_items), size=num_segments - 1, replace=False))
        return np.diff(np.concatenate([[0], cuts, [num_items]]))

    noise_lengths, keep_lengths = segment(num_noise, num_spans), segment(num_keep, num_spans)
    mask = np.zeros(length, dtype=bool)
    position = 0
    for keep, noise in zip(keep_lengths, noise_lengths):
        position += keep
        mask[position: position + noise] = True
        position += noise
    return mask


def span_corruption(
    input_ids: Sequence[int],
    *,
    sentinel_ids: Sequence[int],
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    rng: np.random.Generator | None = None,
    eos_token_id: int | None = None,
) -> tuple[list[int], list[int]]:
    """T5 span corruption of one sequence: returns (inputs, labels).

    inputs = the kept tokens with each removed span replaced by its sentinel; labels = each removed span preceded by
    its sentinel. `sentinel_ids` gives one id per span in order (<extra_id_0>, <extra_id_1>, ...); a single id is
    reused for every span. `eos_token_id`, if given, ends both sequences. Example (sentinels X, Y):
    [a b c d e f] -> inputs [a X d Y f </s>], labels [X b c Y e </s>].
    """
    ids = [int(token) for token in input_ids]
    if not ids:
        raise ValueError("span_corruption got an empty sequence; filter out empty examples first.")
    if not sentinel_ids:
        raise ValueError("span_corruption needs at least one sentinel id (or the mask token id).")
    if not 0.0 < noise_density < 1.0 or mean_span_length < 1:
        raise ValueError(
            f"noise_density must be in (0, 1) and mean_span_length >= 1; got {noise_density} and {mean_span_length}."
        )
    rng = rng if rng is not None else np.random.default_rng()
    mask = random_spans_noise_mask(len(ids), noise_density, mean_span_length, rng)
    starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))
    if len(sentinel_ids) > 1 and len(starts) > len(sentinel_ids):
        raise ValueError(
            f"This sequence has {len(starts)} noise spans but only {len(sentinel_ids)} sentinel tokens: add more "
            "(train_tokenizer(..., num_sentinel_tokens=100)), use shorter sequences, or reuse the mask token."
        )
    inputs, labels, span = [], [], -1
    for index, token in enumerate(ids):
        if mask[index]:
            if index == 0 or not mask[index - 1]:
                span += 1
                sentinel = sentinel_ids[span] if len(sentinel_ids) > 1 else sentinel_ids[0]
                inputs.append(sentinel)
                labels.append(sentinel)
            labels.append(token)
        else:
            inputs.append(token)
    if eos_token_id is not None:
        inputs.append(eos_token_id)
        labels.append(eos_token_id)
    return inputs, labels


def sentinel_token_ids(tokenizer) -> list[int]:
    """The tokenizer's <extra_id_0>, <extra_id_1>, ... ids, or [mask id] when it has none."""
    vocab = tokenizer.get_vocab()
    ids, index = [], 0
    while f"<extra_id_{index}>" in vocab:
        ids.append(vocab[f"<extra_id_{index}>"])
        index += 1
    if ids:
        return ids
    if getattr(tokenizer, "mask_token_id", None) is not None:
        return [tokenizer.mask_token_id]
    raise ValueError(
        "Span corruption needs sentinel tokens (<extra_id_0>, ...) or a mask token, and this tokenizer has neither: "
        "train one with train_tokenizer(..., num_sentinel_tokens=100), or add a mask token and resize the embeddings."
    )


class DenoisingCollator:
    """Encoder-decoder pretraining batches by T5-style span corruption (see the module docstring).

    Returns input_ids, attention_mask and labels (padding -100); the zoo seq2seq model derives its decoder inputs
    from the labels. With `decoder_start_token_id` the collator also returns decoder_input_ids.
    """

    def __init__(
        self,
        tokenizer,
        *,
        noise_density: float = 0.15,
        mean_span_length: float = 3.0,
        seed: int | None = None,
        sentinel_ids: Sequence[int] | None = None,
        decoder_start_token_id: int | None = None,
        pad_to_multiple_of: int | None = None,
    ):
        if not 0.0 < noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {noise_density}.")
        if mean_span_length < 1:
            raise ValueError(f"mean_span_length must be >= 1, got {mean_span_length}.")
        if getattr(tokenizer, "pad_token_id", None) is None:
            raise ValueError(
                "Denoising batches need a pad token; set tokenizer.pad_token (see check_tokenizer_matches)."
            )
        self.eos_token_id = _end_token_id(tokenizer)
        if self.eos_token_id is None:
            raise ValueError(
                "Denoising needs an eos (or [SEP]) token to end inputs and labels; set tokenizer.eos_token."
            )
        self.tokenizer, self.noise_density, self.mean_span_length = tokenizer, noise_density, mean_span_length
        self.sentinel_ids = list(sentinel_ids) if sentinel_ids is not None else sentinel_token_ids(tokenizer)
        self.decoder_start_token_id, self.pad_to_multiple_of = decoder_start_token_id, pad_to_multiple_of
        self._rng = _SeededRNG(seed)

    def __call__(self, examples: list[Any]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("DenoisingCollator got an empty batch.")
        rng = self._rng.get()
        pairs = [
            span_corruption(
                _token_ids(example), sentinel_ids=self.sentinel_ids, noise_density=self.noise_density,
                mean_span_length=self.mean_span_length, rng=rng, eos_token_id=self.eos_token_id,
            )
            for example in examples
        ]
        inputs, labels = [p[0] for p in pairs], [p[1] for p in pairs]
        pad = self.tokenizer.pad_token_id
        batch = {
            "input_ids": _pad(inputs, pad, self.pad_to_multiple_of),
            "attention_mask": _pad([[1] * len(s) for s in inputs], 0, self.pad_to_multiple_of),
            "labels": _pad(labels, IGNORE_INDEX, self.pad_to_multiple_of),
        }
        if self.decoder_start_token_id is not None:
            shifted = batch["labels"].new_full(batch["labels"].shape, pad)
            shifted[:, 1:] = batch["labels"][:, :-1].masked_fill(batch["labels"][:, :-1] == IGNORE_INDEX, pad)
            shifted[:, 0] = self.decoder_start_token_id
            batch["decoder_input_ids"] = shifted
        return batch


def denoising_collator(
    tokenizer, noise_density: float = 0.15, mean_span_length: float = 3.0, **kwargs
) -> DenoisingCollator:
    """A `DenoisingCollator` (T5-style span corruption; keyword options: seed, sentinel_ids, decoder_start_token_id,
    pad_to_multiple_of)."""
    return DenoisingCollator(tokenizer, noise_density=noise_density, mean_span_length=mean_span_length, **kwargs)


# ------------------------------------------------------------------------------------------------- lengths
def check_sequence_length(config, length: int) -> None:
    """Check that sequences of `length` tokens fit the model's position scheme.

    learned / sinusoidal positions have a table of `max_position_embeddings` rows: a longer input raises
    ValueError. rope / alibi / relative / none have no table and run on longer inputs, but were not trained there,
    so only a warning is given.
    """
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}.")
    if hasattr(config, "image_size"):
        raise ValueError(
            f"{type(config).__name__} is a vision model: its sequence length is fixed by image_size/patch_size "
            f"({config.image_size}/{config.patch_size}); resize the images to image_size instead."
        )
    scheme = getattr(config, "position_embedding_type", None)
    limit = getattr(config, "max_position_embeddings", None)
    if scheme is None or limit is None:
        raise ValueError(f"{type(config).__name__} has no position_embedding_type/max_position_embeddings to check.")
    if length <= limit:
        return
    if scheme in BOUNDED_POSITION_TYPES:
        raise ValueError(
            f"Sequences of {length} tokens do not fit position_embedding_type={scheme!r} with "
            f"max_position_embeddings={limit}: positions >= {limit} have no embedding. Use a context/max length "
            f"<= {limit}, or build the config with max_position_embeddings >= {length}."
        )
    warnings.warn(
        f"Sequences of {length} tokens exceed max_position_embeddings={limit}. position_embedding_type={scheme!r} "
        "has no position table, so this runs, but the model was not built for this length (extrapolation).",
        UserWarning,
        stacklevel=2,
    )


__all__ = [
    "IGNORE_INDEX",
    "CausalLMCollator",
    "DenoisingCollator",
    "causal_lm_collator",
    "check_sequence_length",
    "count_tokens",
    "denoising_collator",
    "masked_lm_collator",
    "pack_sequences",
    "random_spans_noise_mask",
    "sentinel_token_ids",
    "span_corruption",
]
