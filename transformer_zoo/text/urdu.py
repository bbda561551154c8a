"""Urdu text normalisation and sentence splitting.

Why a small table here instead of a library: the one maintained-looking Urdu package on PyPI, `urduhack` (1.1.1,
last released 2021), requires `tf2crf`, `tensorflow-datasets~=3.1` and `Click~=7.1` (TensorFlow 2 era pins that do
not install beside current stacks), and its character table maps the Arabic medial/initial yeh presentation forms
(U+FEF3, U+FEF4) to bari ye 'ے' instead of choti ye 'ی'. What Urdu needs is a few dozen code points, so this module
keeps them in one documented table, tested in tests/test_urdu_text.py.

`normalize_urdu(text)` applies, in order:

1. Arabic presentation forms (U+FB50-U+FDFF, U+FE70-U+FEFF: contextual glyphs that some PDF/OCR pipelines emit) are
   folded to their base letters with Unicode NFKC, one character at a time (NFKC on the whole text would also fold
   other compatibility characters, e.g. superscript digits, which is not Urdu normalisation). The ligature 'ﷺ'
   (U+FDFA) becomes the words it abbreviates.
2. Decomposed letters are composed (NFC: ا + ◌ٓ -> آ, ہ + ◌ٔ -> ۂ, ے + ◌ٔ -> ۓ, و + ◌ٔ -> ؤ), and choti ye followed
   by hamza above (ی + ◌ٔ, which has no precomposed form) becomes ئ.
3. `ARABIC_TO_URDU`: Arabic code points that look like, and are routinely typed for, Urdu letters are replaced by the
   Urdu ones (ي ى -> ی, ك ڪ -> ک, ه -> ہ, ة -> ۃ, ۀ -> ۂ, ە -> ہ). Arabic-script text in other languages (Arabic
   quotations inside Urdu prose) is changed too: this is the normalisation Urdu NLP wants, not a transliteration.
4. Diacritics (aerab: zabar, zer, pesh, tanween, shadd, jazm, khari zabar, Quranic annotation marks, honorific signs
   such as ◌ؓ) and the tatweel 'ـ' are removed when `remove_diacritics` (default True).
5. Digits: Arabic-Indic (٠-٩) and Urdu/Extended Arabic-Indic (۰-۹) digits become ASCII 0-9 (`digits="ascii"`, the
   default: most pretrained vocabularies know them), or all become Urdu digits (`digits="urdu"`), or stay (`"keep"`).
6. Invisible characters: the zero-width non-joiner U+200C marks a word-part boundary that a writer did not type as a
   space (ذمہ‌دار), so it becomes a space by default (`zwnj="space"`; "remove" deletes it, "keep" keeps it). The
   zero-width joiner and space, byte-order mark, soft hyphen and bidirectional marks are display-only and removed.
7. Punctuation (`punctuation=True`): after an Arabic-script letter, ASCII '?', ',', ';' become Urdu '؟', '،', '؛'
   and '.' becomes the Urdu full stop '۔' (not when a digit follows, so decimals survive).
8. White space: every run of white space (incl. no-break spaces) becomes one space; the ends are stripped.

`split_sentences(text)` splits after the Urdu full stop '۔', question marks '؟ ?', '!' and a '.' that ends Urdu
text, keeping the terminator (and a closing quote or bracket) with its sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator


#: Arabic code point -> the Urdu letter it stands for (step 3).
ARABIC_TO_URDU: dict[str, str] = {
    "\u064a": "\u06cc",  # ي ARABIC LETTER YEH -> ی FARSI YEH (choti ye)
    "\u0649": "\u06cc",  # ى ALEF MAKSURA -> ی
    "\u0643": "\u06a9",  # ك ARABIC LETTER KAF -> ک KEHEH
    "\u06aa": "\u06a9",  # ڪ SWASH KAF -> ک
    "\u0647": "\u06c1",  # ه ARABIC LETTER HEH -> ہ HEH GOAL (gol he)
    "\u06d5": "\u06c1",  # ە AE -> ہ
    "\u0629": "\u06c3",  # ة TEH MARBUTA -> ۃ TEH MARBUTA GOAL
    "\u06c0": "\u06c2",  # ۀ HEH WITH YEH ABOVE -> ۂ HEH GOAL WITH HAMZA ABOVE
}
#: Sequences composed in step 2 that Unicode NFC leaves alone.
COMPOSE: dict[str, str] = {
    "\u06cc\u0654": "\u0626",  # ی + hamza above -> ئ
}
#: Diacritics removed in step 4 (ranges, inclusive).
DIACRITIC_RANGES: tuple[tuple[int, int], ...] = (
    (0x0610, 0x061A),  # honorific and Quranic signs (◌ؐ ◌ؑ ◌ؒ ◌ؓ ...)
    (0x064B, 0x065F),  # tanween, zabar/zer/pesh, shadd, jazm, maddah, hamza above/below (left over after step 2)
    (0x0670, 0x0670),  # khari zabar (superscript alef)
    (0x06D6, 0x06DC),  # Quranic annotation signs
    (0x06DF, 0x06E4),
    (0x06E7, 0x06E8),
    (0x06EA, 0x06ED),
    (0x0640, 0x0640),  # tatweel (kashida), a stretching glyph
)
ARABIC_INDIC_DIGITS = "٠١٢٣٤٥٦٧٨٩"  # U+0660-0669
URDU_DIGITS = "۰۱۲۳۴۵۶۷۸۹"  # U+06F0-06F9 (Extended Arabic-Indic, the Urdu forms)
ZWNJ = "\u200c"
#: Display-only characters removed in step 6: ZWSP, ZWJ, LRM, RLM, Arabic letter mark, BOM, soft hyphen, LRE..RLO.
INVISIBLE = "\u200b\u200d\u200e\u200f\u061c\ufeff\u00ad\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: ASCII punctuation -> Urdu form, after an Arabic-script letter (step 7).
URDU_PUNCTUATION: dict[str, str] = {"?": "؟", ",": "،", ";": "؛", ".": "۔"}
SENTENCE_TERMINATORS = "۔؟?!"

_DIACRITICS = {code: None for start, end in DIACRITIC_RANGES for code in range(start, end + 1)}
_ARABIC_MAP = str.maketrans(ARABIC_TO_URDU)
_ARABIC_LETTER = r"[\u0621-\u064a\u066e-\u06d3\u06d5\u06fa-\u06ff]"
_PUNCT_RE = re.compile(r"(?<=" + _ARABIC_LETTER + r")\s*([?,;]|\.(?!\d))")
# The end of a sentence: a run of terminators, or a '.' after an Arabic-script letter and not before a digit;
# a closing quote or bracket that follows stays with the sentence.
_SENTENCE_END_RE = re.compile(
    r"(?:[" + SENTENCE_TERMINATORS + r"]+|(?<=" + _ARABIC_LETTER + r")\.(?!\d))[.!?؟۔]*[\"'”’»)\]]*"
)
DIGIT_MODES = ("ascii", "urdu", "keep")
ZWNJ_MODES = ("space", "remove", "keep")


def _is_presentation_form(char: str) -> bool:
    code = ord(char)
    return 0xFB50 <= code <= 0xFDFF or 0xFE70 <= code <= 0xFEFF and code != 0xFEFF


def normalize_urdu(
    text: str,
    *,
    remove_diacritics: bool = True,
    digits: str = "ascii",
    zwnj: str = "space",
    punctuation: bool = True,
) -> str:
    """Normalise Urdu text (see the module docstring for the steps and the tables)."""
    if not isinstance(text, str):
        raise TypeError(f"normalize_urdu expects a str, got {type(text).__name__}.")
    if digits not in DIGIT_MODES:
        raise ValueError(f"digits must be one of {', '.join(DIGIT_MODES)}; got {digits!r}.")
    if zwnj not in ZWNJ_MODES:
        raise ValueError(f"zwnj must be one of {', '.join(ZWNJ_MODES)}; got {zwnj!r}.")
    # 1. presentation forms
    if any(_is_presentation_form(char) for char in text):
        text = "".join(unicodedata.normalize("NFKC", c) if _is_presentation_form(c) else c for c in text)
    # 2. composition (before step 3: NFC composes ي + hamza into ئ, which step 3 must not see as two letters)
    text = unicodedata.normalize("NFC", text)
    for sequence, composed in COMPOSE.items():
        text = text.replace(sequence, composed)
    # 3. Arabic -> Urdu code points
    text = text.translate(_ARABIC_MAP)
    # NFC again: step 3 can create ی/ہ + hamza pairs that now compose (ہ + ◌ٔ -> ۂ).
    text = unicodedata.normalize("NFC", text)
    for sequence, composed in COMPOSE.items():
        text = text.replace(sequence, composed)
    # 4. diacritics
    if remove_diacritics:
        text = text.translate(_DIACRITICS)
    # 5. digits
    if digits == "ascii":
        text = text.translate(str.maketrans(ARABIC_INDIC_DIGITS + URDU_DIGITS, "0123456789" * 2))
    elif digits == "urdu":
        text = text.translate(str.maketrans(ARABIC_INDIC_DIGITS + "0123456789", URDU_DIGITS * 2))
    # 6. invisible characters
    text = text.translate({ord(c): None for c in INVISIBLE})
    if zwnj == "space":
        text = text.replace(ZWNJ, " ")
    elif zwnj == "remove":
        text = text.replace(ZWNJ, "")
    # 7. punctuation
    if punctuation:
        text = _PUNCT_RE.sub(lambda match: URDU_PUNCTUATION[match.group(1)], text)
    # 8. white space (str.split() knows every Unicode space, incl. no-break spaces)
    return " ".join(text.split())


def split_sentences(text: str) -> list[str]:
    """The sentences of one (normalised) text, each with its terminator; empty pieces are dropped."""
    if not isinstance(text, str):
        raise TypeError(f"split_sentences expects a str, got {type(text).__name__}.")
    sentences, start = [], 0
    for match in _SENTENCE_END_RE.finditer(text):
        sentences.append(text[start:match.end()])
        start = match.end()
    sentences.append(text[start:])
    result = []
    for sentence in (piece.strip() for piece in sentences):
        if not sentence:
            continue
        if result and not any(char.isalnum() for char in sentence):
            result[-1] += sentence  # a stray terminator run ("۔ ۔"): it belongs to the previous sentence
        else:
            result.append(sentence)
    return result


def normalized_sentences(texts: Iterable[str], **options) -> Iterator[str]:
    """normalize_urdu then split_sentences over many texts (options go to normalize_urdu)."""
    for text in texts:
        yield from split_sentences(normalize_urdu(text, **options))


__all__ = [
    "ARABIC_TO_URDU", "COMPOSE", "DIACRITIC_RANGES", "URDU_PUNCTUATION", "normalize_urdu", "normalized_sentences",
    "split_sentences",
]
