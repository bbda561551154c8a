"""Text read as text, for language-model pretraining: a document is a stream of characters with its line breaks,
never a bag of lines.

What a document is, by input: a `.txt` file, whole; each file of a folder of `.txt` files; each row of a JSON Lines,
CSV or Parquet file; for the built-in corpora, a Shakespeare play (speeches separated by a blank line) or a hadith
paragraph. Identical documents are kept once; lines are never de-duplicated (a play repeats its speakers' names and
short lines, and they are text to learn).

Splits are made of documents when there are enough of them (`MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT`), drawn by seed as
any corpus's examples are; with fewer, each document is cut into contiguous spans at line breaks: its first
characters train, the next ones validate, the last ones test (nanoGPT splits tiny shakespeare the same way, 90/10),
so no text is in two splits and validation reads text the model never saw.

The language-model objectives then tokenize each document whole and pack the stream into blocks
(`objectives.pack_sequences`).
"""

from __future__ import annotations

import datasets

# With fewer documents than this, whole-document splits would be too coarse (one novel, a handful of files): each
# document is cut into spans instead.
MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT = 20


def _cut(text: str, position: int) -> int:
    """The first line start at or after `position` (the text's end if none), so a cut never splits a line."""
    if position <= 0:
        return 0
    newline = text.find("\n", position - 1)
    return len(text) if newline < 0 else newline + 1


def span_split(texts: list[str], validation_fraction: float, test_fraction: float) -> dict[str, list[str]]:
    """Each text cut at line breaks into a train, a validation and a test span, in that order, by the fractions of
    its characters; a split whose fraction is 0 gets nothing. Spans that come out empty are left out."""
    splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for text in texts:
        first = _cut(text, round(len(text) * (1.0 - validation_fraction - test_fraction)))
        second = _cut(text, round(len(text) * (1.0 - test_fraction))) if test_fraction > 0 else len(text)
        second = max(second, first)
        for name, span in (("train", text[:first]), ("validation", text[first:second]), ("test", text[second:])):
            if span.strip():
                splits[name].append(span)
    return splits


def span_split_corpus(dataset: datasets.Dataset, source: str, validation_fraction: float,
                      test_fraction: float) -> datasets.DatasetDict:
    """`span_split` of a text corpus's documents, refusing a result with an empty split that was asked for."""
    splits = span_split(list(dataset["text"]), validation_fraction, test_fraction)
    for name, fraction in (("train", 1.0), ("validation", validation_fraction), ("test", test_fraction)):
        if fraction > 0 and not splits[name]:
            raise ValueError(f"{source!r} is too short to cut into train, validation and test spans at line breaks "
                             f"(its {name} span came out empty); use more text or other fractions.")
    return datasets.DatasetDict({name: datasets.Dataset.from_dict({"text": texts}, features=datasets.Features(
        {"text": datasets.Value("string")})) for name, texts in splits.items()})
