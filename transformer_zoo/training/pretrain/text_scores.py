"""Bits per byte of a pretraining run's validation and test text: the language model's cost of the text in units
that do not depend on its tokenizer, so runs with different vocabularies (BPE of 300 or 8,000 pieces, WordPiece,
characters) compare directly, and with other tools' numbers on the same text (nanoGPT reports loss per character).

* Causal LM: exact (`analysis.bits_per_byte.causal_lm_bits_per_byte`): every token of each text scored once,
  texts longer than the context scored in overlapping windows of `context_length`.
* Masked LM: the pseudo-log-likelihood (Salazar et al. 2020), each token masked in turn: one forward pass per
  token, so it is computed on the first `texts` pieces of a split (64 by default) that fit the model's positions
  (a document read as a stream is cut at line breaks into runs of whole lines that fit).
  It is not a probability of the text: compare it only between masked LMs, on the same texts.
* Other objectives (span denoising, translation, images) report none.
"""

from __future__ import annotations

from ...analysis.bits_per_byte import (
    causal_lm_bits_per_byte,
    masked_lm_pseudo_bits_per_byte,
)

# Texts scored per split by default: all of them for causal LMs (one pass), this many for masked LMs (a pass a token).
MASKED_LM_TEXTS = 64


def split_texts(split, limit: int | None) -> list[str]:
    texts = [text for text in split["text"] if isinstance(text, str) and text.strip()]
    return texts if limit is None else texts[:limit]


def fitting_pieces(texts: list[str], tokenizer, limit: int, count: int) -> list[str]:
    """The first `count` pieces of `texts` that fit `limit` tokens with the special tokens: each text whole if it
    fits, else cut at line breaks into runs of whole lines that do (a line too long on its own is left out). A masked
    LM's pseudo-likelihood scores a sequence it can read in one pass, and a document read as a stream is longer."""
    def fits(piece):
        return len(tokenizer(piece, add_special_tokens=True)["input_ids"]) <= limit

    pieces: list[str] = []
    for text in texts:
        if fits(text):
            pieces.append(text)
        else:
            run: list[str] = []
            for line in text.split("\n"):
                if run and not fits("\n".join(run + [line])):
                    pieces.append("\n".join(run))
                    run = []
                    if len(pieces) >= count:
                        break
                if fits(line):
                    run.append(line)
            if run and len(pieces) < count:
                pieces.append("\n".join(run))
        if len(pieces) >= count:
            break
    return [piece for piece in pieces[:count] if piece.strip()]


def bits_per_byte_metrics(model, tokenizer, corpus, objective: str, *, context_length: int,
                          texts: int | None = None) -> dict[str, dict[str, float]]:
    """{"validation": {...}, "test": {...}} with `bits_per_byte` (causal) or `pseudo_bits_per_byte` (masked), the
    texts and bytes scored; empty dicts for objectives without one, and for an empty split."""
    scores: dict[str, dict[str, float]] = {"validation": {}, "test": {}}
    if objective not in ("clm", "mlm") or tokenizer is None:
        return scores
    for name in scores:
        if objective == "clm":
            chosen = split_texts(corpus[name], texts)
            if not chosen:
                continue
            result = causal_lm_bits_per_byte(model, tokenizer, chosen, window=context_length)
            scores[name] = {"bits_per_byte": result["bits_per_byte"], "bits_per_byte_texts": len(chosen),
                            "bits_per_byte_bytes": result["bytes"]}
        else:
            # The length the model trained on: its position table may be longer than what an efficient-attention
            # variant was built for (linformer_max_length).
            limit = min(context_length, model.config.max_position_embeddings)
            chosen = fitting_pieces(split_texts(corpus[name], None), tokenizer, limit, texts or MASKED_LM_TEXTS)
            if not chosen:
                continue
            result = masked_lm_pseudo_bits_per_byte(model, tokenizer, chosen, max_length=limit)
            scores[name] = {"pseudo_bits_per_byte": result["bits_per_byte"], "bits_per_byte_texts": len(chosen),
                            "bits_per_byte_bytes": result["bytes"]}
    return scores
