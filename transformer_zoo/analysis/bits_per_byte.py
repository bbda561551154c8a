"""Bits per byte: a language model's loss on a text that does not depend on its tokenizer, so that two models with
different vocabularies (an original and a vocabulary-extended one) can be compared on the same text.

* Causal LMs: exact. The summed negative log-likelihood (in bits) of every token of each text, conditioned on a start
  token and on everything before it, divided by the text's UTF-8 bytes. Texts longer than the model's window are
  scored in overlapping windows (each token scored once, with up to `window - stride` tokens of context), as
  transformers' perplexity guide does.
* Masked LMs: the pseudo-log-likelihood of Salazar et al. (2020, "Masked Language Model Scoring"): each token is
  masked in turn and scored given all the others; the sum over tokens, in bits, per UTF-8 byte. It is not a
  probability of the text (the scores do not chain), so compare it only between masked LMs, on the same texts. Its
  word-l2r variant (Kauf & Ivanova 2023) also masks the later pieces of the scored token's word, which removes most
  of the advantage a letter-by-letter tokenization gets from seeing the rest of its word.

Neither transformers nor evaluate ship these (evaluate's perplexity is per token, and loads a model by Hub id), so
they are written here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

LN2 = math.log(2.0)


def utf8_bytes(texts: Sequence[str]) -> int:
    return sum(len(text.encode("utf-8")) for text in texts)


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are scored in float32; float32 and float64 ones as they are."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("Pass a list of texts, not one string.")
    texts = list(texts)
    if not texts or any(not isinstance(text, str) or not text for text in texts):
        raise ValueError("Bits per byte needs a non-empty list of non-empty strings.")
    return texts


@torch.no_grad()
def causal_lm_bits_per_byte(model, tokenizer, texts: Sequence[str], *, window: int | None = None,
                            stride: int | None = None, batch_size: int = 8) -> dict[str, float]:
    """Exact bits per UTF-8 byte of `texts` under a causal LM (see the module docstring).

    Each text is tokenized without special tokens and preceded by the tokenizer's bos token (else its eos token, as
    GPT-2 does between documents); the first real token is therefore scored too. Returns {"bits_per_byte", "bits",
    "bytes", "tokens", "tokens_per_byte"}.
    """
    texts = _check_texts(texts)
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError("The tokenizer has neither a bos nor an eos token to start each text with, so the first "
                         "token of a text could not be scored; set tokenizer.bos_token.")
    window = window or getattr(model.config, "max_position_embeddings", None) or 1024
    stride = stride or window // 2
    if not 0 < stride <= window - 1:
        raise ValueError(f"stride must be in [1, window - 1], got {stride} with window {window}.")
    device = next(model.parameters()).device
    model.eval()
    # (ids, first position to score) per window; position 0 is the start token and is never scored.
    pieces: list[tuple[list[int], int]] = []
    tokens = 0
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids = [start] + ids
        tokens += len(ids) - 1
        scored_until = 1
        begin = 0
        while scored_until < len(ids):
            end = min(begin + window, len(ids))
            pieces.append((ids[begin:end], scored_until - begin))
            scored_until = end
            if end == len(ids):
                break
            begin = end - (window - stride)
    total_nats = 0.0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start
    for offset in range(0, len(pieces), batch_size):
        batch = pieces[offset:offset + batch_size]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        targets = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, (ids, first) in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            mask[row, :len(ids)] = 1
            targets[row, first:len(ids)] = torch.tensor(ids[first:])
        logits = _at_least_float32(model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits)
        # position p predicts token p + 1
        total_nats += float(torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten().to(device), ignore_index=-100, reduction="sum"))
    size = utf8_bytes(texts)
    bits = total_nats / LN2
    return {"bits_per_byte": bits / size, "bits": bits, "bytes": size, "tokens": tokens, "tokens_per_byte": tokens / size}


def _masked_position_logits(model, input_ids, attention_mask, rows, positions):
    """Vocabulary logits at one position per row. A zoo masked LM (a backbone `model.model` and a prediction head
    `model.lm_head`) runs its head on those positions alone: the same numbers as the full forward, without projecting
    every other position onto the vocabulary (most of a small encoder's forward with a 30 k vocabulary)."""
    if hasattr(model, "get_base_model"):  # PEFT injects its adapters in place: the base model runs them
        model = model.get_base_model()
    backbone, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if backbone is not None and head is not None and getattr(model.config, "model_type", None) == "zoo_encoder":
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return head(hidden[rows, positions])
    return model(input_ids=input_ids, attention_mask=attention_mask).logits[rows, positions]


@torch.no_grad()
def masked_lm_pseudo_bits_per_byte(model, tokenizer, texts: Sequence[str], *, max_length: int | None = None,
                                   batch_size: int = 64, within_word: str = "visible") -> dict[str, float]:
    """Pseudo-log-likelihood bits per UTF-8 byte of `texts` under a masked LM.

    Each text is tokenized with the tokenizer's special tokens ([CLS] ... [SEP]); every non-special token is replaced
    by the mask token in its own copy of the sequence and scored there.

    within_word="visible" is Salazar et al. (2020): the other pieces of the scored token's word stay visible. That
    favours fine tokenizations: a word spelt letter by letter is mostly predictable from its own other letters, so
    the score of a letter-level tokenizer is not comparable with that of a word-level one. within_word="l2r" is the
    PLL-word-l2r of Kauf & Ivanova (2023, "A Better Way to Do Masked Language Model Scoring"): the pieces of the same
    word to the right of the scored one are masked too, so a word's pieces are scored left to right, each seeing
    only the pieces before it; words are the tokenizer's pre-tokenized words (fast tokenizers' word_ids).

    A text longer than `max_length` (default: the model's position table) is refused rather than cut, since a cut
    text's bytes would not match its score. Returns {"bits_per_byte", "bits", "bytes", "tokens", "tokens_per_byte"}.
    """
    texts = _check_texts(texts)
    if tokenizer.mask_token_id is None:
        raise ValueError("The tokenizer has no mask token; pseudo-log-likelihood needs a masked LM and its tokenizer.")
    if within_word not in ("visible", "l2r"):
        raise ValueError(f"within_word must be 'visible' (Salazar et al. 2020) or 'l2r' (Kauf & Ivanova 2023), "
                         f"got {within_word!r}.")
    if within_word == "l2r" and not getattr(tokenizer, "is_fast", False):
        raise ValueError("within_word='l2r' needs a fast tokenizer (it reads the word of each token from word_ids).")
    max_length = max_length or getattr(model.config, "max_position_embeddings", None) or 512
    device = next(model.parameters()).device
    model.eval()
    encoded = tokenizer(texts, add_special_tokens=True, return_special_tokens_mask=True)
    # (sequence, scored position, positions masked besides it)
    copies: list[tuple[list[int], int, list[int]]] = []
    for index, (ids, special) in enumerate(zip(encoded["input_ids"], encoded["special_tokens_mask"])):
        if len(ids) > max_length:
            raise ValueError(f"Text {index} has {len(ids)} tokens, more than max_length={max_length}; split it into "
                             "shorter texts (sentences) first.")
        words = encoded.word_ids(index) if within_word == "l2r" else None
        for position, flag in enumerate(special):
            if flag:
                continue
            later = []
            if words is not None and words[position] is not None:
                later = [p for p in range(position + 1, len(ids)) if words[p] == words[position] and not special[p]]
            copies.append((ids, position, later))
    total_nats = 0.0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for offset in range(0, len(copies), batch_size):
        batch = copies[offset:offset + batch_size]
        width = max(len(ids) for ids, _, _ in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, position, later) in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            mask[row, :len(ids)] = 1
            if later:
                input_ids[row, later] = tokenizer.mask_token_id
        rows = torch.arange(len(batch))
        positions = torch.tensor([position for _, position, _ in batch])
        truth = input_ids[rows, positions].clone()
        input_ids[rows, positions] = tokenizer.mask_token_id
        logits = _at_least_float32(_masked_position_logits(model, input_ids.to(device), mask.to(device),
                                                           rows.to(device), positions.to(device)))
        log_probs = torch.log_softmax(logits, dim=-1)
        total_nats -= float(log_probs[torch.arange(len(batch), device=device), truth.to(device)].sum())
    size = utf8_bytes(texts)
    bits = total_nats / LN2
    return {"bits_per_byte": bits / size, "bits": bits, "bytes": size, "tokens": len(copies),
            "tokens_per_byte": len(copies) / size}
