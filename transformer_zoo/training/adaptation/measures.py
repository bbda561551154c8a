"""What the domain-adaptation recipe measures on a model, in units that do not depend on its tokenizer.

* Bits per UTF-8 byte of a fixed held-out sample (transformer_zoo.analysis.bits_per_byte): exact for causal LMs; for
  masked LMs the pseudo-log-likelihood of Salazar et al. (2020) and, beside it, its word-l2r variant (Kauf & Ivanova
  2023), which does not reward spelling words letter by letter.
* Throughput of a forward pass over that sample, in tokens and in bytes per second: a tokenizer that needs fewer
  pieces for the same text also reads it faster.
* Tokenizer statistics (fertility, words spelt letter by letter, unknown tokens).

`held_out_sample` picks the sample: whole sentences, in a fixed order, cut to what fits the model's window under
the *original* tokenizer (the longest one), so every model is scored on the very same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from ...analysis.bits_per_byte import (
    causal_lm_bits_per_byte,
    masked_lm_pseudo_bits_per_byte,
    utf8_bytes,
)
from ...text.tokenizer_stats import tokenizer_statistics
from ...text.urdu import split_sentences


def held_out_sample(texts: Sequence[str], tokenizer, *, sentences: int, max_tokens: int) -> list[str]:
    """The first `sentences` sentences of `texts` (paragraphs, in order) with at least three words and at most
    `max_tokens` tokens under `tokenizer` (special tokens included). Refuses when too few qualify."""
    chosen: list[str] = []
    for text in texts:
        for sentence in split_sentences(text) if "۔" in text or "؟" in text else _latin_sentences(text):
            sentence = sentence.strip()
            if len(sentence.split()) < 3:
                continue
            if len(tokenizer(sentence, add_special_tokens=True)["input_ids"]) > max_tokens:
                continue
            chosen.append(sentence)
            if len(chosen) == sentences:
                return chosen
    raise ValueError(f"Only {len(chosen)} held-out sentences of 3+ words fit in {max_tokens} tokens; {sentences} were "
                     "asked for. Pass fewer (--bpb_sentences) or more held-out text (--eval_paragraphs).")


def _latin_sentences(text: str) -> list[str]:
    import re

    return [part for part in re.split(r"(?<=[.!?])\s+", text) if part]


def bits_per_byte(model, tokenizer, sentences: Sequence[str], objective: str, *, batch_size: int = 64,
                  word_l2r: bool = True) -> dict:
    """{"bits_per_byte", "tokens_per_byte", and for masked LMs "bits_per_byte_word_l2r"} on `sentences`."""
    if objective == "clm":
        result = causal_lm_bits_per_byte(model, tokenizer, sentences, batch_size=min(batch_size, 16))
        return {"bits_per_byte": result["bits_per_byte"], "tokens_per_byte": result["tokens_per_byte"]}
    if objective != "mlm":
        raise ValueError(f"Bits per byte is defined here for masked and causal LMs, not {objective!r}.")
    plain = masked_lm_pseudo_bits_per_byte(model, tokenizer, sentences, batch_size=batch_size)
    out = {"bits_per_byte": plain["bits_per_byte"], "tokens_per_byte": plain["tokens_per_byte"]}
    if word_l2r:
        out["bits_per_byte_word_l2r"] = masked_lm_pseudo_bits_per_byte(
            model, tokenizer, sentences, batch_size=batch_size, within_word="l2r")["bits_per_byte"]
    return out


@torch.no_grad()
def forward_throughput(model, tokenizer, sentences: Sequence[str], *, batch_size: int = 32, repeats: int = 2) -> dict:
    """Tokens and UTF-8 bytes per second of an inference forward pass over `sentences` (best of `repeats`)."""
    model.eval()
    device = next(model.parameters()).device
    backbone = getattr(model, "model", model)  # the encoder/decoder stack: the head is not what a reader runs
    batches = [tokenizer(list(sentences[i:i + batch_size]), padding=True, return_tensors="pt")
               for i in range(0, len(sentences), batch_size)]
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for batch in batches:
            backbone(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
        best = min(best, time.perf_counter() - started)
    return {"tokens_per_second": tokens / best, "bytes_per_second": utf8_bytes(sentences) / best,
            "seconds": best, "tokens": tokens}


def language_measures(model, tokenizer, sentences: Sequence[str], objective: str, *, statistics_texts=None,
                      throughput: bool = True, word_l2r: bool = True) -> dict:
    """Bits per byte, throughput and tokenizer statistics of one model on one language's held-out sample."""
    out = bits_per_byte(model, tokenizer, sentences, objective, word_l2r=word_l2r)
    if throughput:
        out.update(forward_throughput(model, tokenizer, sentences))
    stats = tokenizer_statistics(tokenizer, statistics_texts or sentences)
    out.update({key: stats[key] for key in ("fertility", "single_character_word_share", "unknown_share")})
    return out
