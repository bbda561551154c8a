"""How well a tokenizer covers a language: fertility, character-level splitting and unknown tokens.

Words are defined independently of any tokenizer, as maximal runs of letters, combining marks and digits
(`\\p{L}\\p{M}\\p{N}`, with the `regex` module), so the numbers of two tokenizers on the same text are comparable.
Each text is encoded once, in context, with character offsets (`return_offsets_mapping`); a piece belongs to the
word its character span overlaps. This works the same for WordPiece, BPE (byte-level included) and Unigram.

* fertility: pieces per word (1.0 = every word is one token; English BERT on English is about 1.2-1.4);
* single_character_word_share: share of words of two or more characters whose every piece covers at most one
  character (the word was spelled out letter by letter, or byte by byte);
* unknown_share: share of all pieces that are the unknown token; unknown_word_share: share of words with one.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from pathlib import Path

import regex


WORD_RE = regex.compile(r"[\p{L}\p{M}\p{N}]+")
STAT_NAMES = ("texts", "words", "pieces_in_words", "fertility", "single_character_word_share", "unknown_share",
              "unknown_word_share")


def tokenizer_statistics(tokenizer, texts: Iterable[str], *, batch_size: int = 256) -> dict:
    """Fertility, single-character-word share and unknown shares of `tokenizer` on `texts` (see the module)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("tokenizer_statistics needs a fast (Rust `tokenizers`) tokenizer for character offsets; "
                         "load it with AutoTokenizer.from_pretrained(...) (fast is the default).")
    texts = [text for text in texts if isinstance(text, str) and text.strip()]
    if not texts:
        raise ValueError("tokenizer_statistics got no non-empty texts.")
    unk_id = tokenizer.unk_token_id
    words = pieces_in_words = single_char_words = long_words = unknown_words = 0
    pieces_total = unknown_total = 0
    for start in range(0, len(texts), batch_size):
        batch = texts[start:start + batch_size]
        encoded = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        for text, ids, offsets in zip(batch, encoded["input_ids"], encoded["offset_mapping"]):
            spans = [match.span() for match in WORD_RE.finditer(text)]
            starts = [span[0] for span in spans]
            per_word: list[list[tuple[int, int, int]]] = [[] for _ in spans]
            pieces_total += len(ids)
            unknown_total += sum(1 for token in ids if unk_id is not None and token == unk_id)
            for token, (piece_start, piece_end) in zip(ids, offsets):
                if piece_end <= piece_start:
                    continue
                # the word whose span overlaps this piece (the last word starting before the piece ends)
                index = bisect.bisect_right(starts, piece_end - 1) - 1
                if index >= 0 and spans[index][1] > piece_start:
                    per_word[index].append((token, piece_start, piece_end))
            for (word_start, word_end), pieces in zip(spans, per_word):
                words += 1
                pieces_in_words += len(pieces)
                if unk_id is not None and any(token == unk_id for token, _, _ in pieces):
                    unknown_words += 1
                if word_end - word_start >= 2:
                    long_words += 1
                    covered = [min(end, word_end) - max(begin, word_start) for _, begin, end in pieces]
                    if pieces and all(width <= 1 for width in covered):
                        single_char_words += 1
    return {
        "texts": len(texts), "words": words, "pieces_in_words": pieces_in_words,
        "fertility": pieces_in_words / words if words else float("nan"),
        "single_character_word_share": single_char_words / long_words if long_words else float("nan"),
        "unknown_share": unknown_total / pieces_total if pieces_total else float("nan"),
        "unknown_word_share": unknown_words / words if words else float("nan"),
    }


def statistics_table(rows: dict[str, dict]) -> str:
    """A markdown table: one column per tokenizer (`rows`: name -> tokenizer_statistics result)."""
    names = list(rows)
    lines = ["| statistic | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for stat in STAT_NAMES:
        cells = []
        for name in names:
            value = rows[name].get(stat)
            cells.append(f"{value:,}" if isinstance(value, int) else f"{value:.3f}" if isinstance(value, float)
                         else str(value))
        lines.append(f"| {stat} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save_statistics(rows: dict[str, dict], directory: str | Path, stem: str = "tokenizer_stats") -> tuple[Path, Path]:
    """Write `rows` as <stem>.json and <stem>.md in `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / f"{stem}.json", directory / f"{stem}.md"
    json_path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(statistics_table(rows) + "\n", encoding="utf-8")
    return json_path, md_path


__all__ = ["STAT_NAMES", "WORD_RE", "save_statistics", "statistics_table", "tokenizer_statistics"]
