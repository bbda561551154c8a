"""Batched translation of a list of sentences with the model's own `generate()` (transformers' beam search).

transformers 5 removed the "translation" pipeline; this is the loop it ran, plus what it lacked: sentences are
sorted by length so each batch pads little, every output comes back in the input order, and the length limit follows
each batch's sources (Vaswani et al. 6.1: "maximum output length to input length + 50").

Length penalty: transformers' beam search ranks finished hypotheses by sum log p / length ** length_penalty. Vaswani
et al. use alpha = 0.6 with Wu et al.'s (2016) ((5 + length) / 6) ** alpha; the two agree in direction but not in
value, so a result with `length_penalty=0.6` here is transformers' form, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)


@torch.no_grad()
def translate(model, tokenizer, sources: Sequence[str], *, num_beams: int = 4, length_penalty: float = 0.6,
              batch_size: int = 32, max_source_tokens: int | None = None, extra_length: int = 50,
              progress: bool = False) -> list[str]:
    """Translate `sources` (strings) in batches; returns one detokenized string per source, in order.

    Args:
        num_beams: beam size (1 = greedy).
        length_penalty: exponent of transformers' length normalisation (see the module docstring).
        batch_size: sentences per generate() call.
        max_source_tokens: truncate longer sources to this many tokens, with a warning naming how many; default:
            the model's `max_position_embeddings` where its positions come from a table (learned, sinusoidal),
            else no limit. Outputs are capped at that table too.
        extra_length: outputs may be up to the batch's longest source + this many tokens.
    """
    from tqdm.auto import tqdm

    if isinstance(sources, str):
        raise ValueError("translate() takes a list of sentences, not one string; wrap it in a list.")
    if num_beams < 1 or batch_size < 1:
        raise ValueError(f"num_beams and batch_size must be positive, got {num_beams} and {batch_size}.")
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if end is None:
        raise ValueError("The tokenizer has no eos (or [SEP]) token, which ends each source as in training.")
    config = model.config
    # Learned and sinusoidal positions are tables of max_position_embeddings rows; the model refuses positions past
    # them. Relative schemes (RoPE, ALiBi, T5 buckets) have no such limit.
    position_limit = (config.max_position_embeddings
                      if config.position_embedding_type in ("learned", "sinusoidal") else None)
    limit = max_source_tokens if max_source_tokens is not None else position_limit
    encoded = [ids + [end] for ids in tokenizer(list(sources), add_special_tokens=False)["input_ids"]]
    if limit is not None:
        too_long = sum(len(ids) > limit for ids in encoded)
        if too_long:
            logger.warning(f"{too_long} of {len(encoded)} sources are longer than {limit} tokens and were truncated "
                           "(the model has no positions past that).")
            encoded = [ids[: limit - 1] + [end] if len(ids) > limit else ids for ids in encoded]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]), reverse=True)
    outputs: list[str | None] = [None] * len(encoded)
    model.eval()
    device = next(model.parameters()).device
    for start in tqdm(range(0, len(order), batch_size), desc="translating", disable=not progress, leave=False):
        rows = order[start:start + batch_size]
        batch = tokenizer.pad({"input_ids": [encoded[i] for i in rows]}, return_tensors="pt").to(device)
        longest = batch["input_ids"].shape[1]
        max_new = longest + extra_length
        if position_limit is not None:
            max_new = min(max_new, position_limit - 1)  # the decoder start token takes the first position
        beam = {"num_beams": num_beams, "length_penalty": length_penalty, "early_stopping": True} \
            if num_beams > 1 else {"num_beams": 1}  # greedy: transformers warns about beam-only flags
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   do_sample=False, max_new_tokens=max_new, **beam)
        for row, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True)):
            outputs[row] = text.strip()
    return outputs  # type: ignore[return-value]
