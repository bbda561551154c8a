"""Batched translation of a list of sentences with the model's own `generate()` (transformers' beam search).

transformers 5 removed the "translation" pipeline; this is the loop it ran, plus what it lacked: sentences are
sorted by length so each batch pads little, every output comes back in the input order, and the length limit follows
each batch's sources (Vaswani et al. 6.1: "maximum output length to input length + 50"), and, given a sentence
splitter, a source longer than the model can read is translated in pieces of whole sentences instead of truncated.

Length penalty: transformers' beam search ranks finished hypotheses by sum log p / length ** length_penalty. Vaswani
et al. use alpha = 0.6 with Wu et al.'s (2016) ((5 + length) / 6) ** alpha; the two agree in direction but not in
value, so a result with `length_penalty=0.6` here is transformers' form, and says so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Beside a saved translation model: how it should be decoded, so that every user of the folder (scripts/translate.py,
# translate-test) splits long sources as its own test decode did. transformers' generation_config.json has no place
# for a source-side sentence splitter or the length the model was trained on.
DECODING_FILE = "translation_decoding.json"
SENTENCE_SPLITTERS = ("urdu", "english")
# Vaswani et al. 6.1: "maximum output length to input length + 50".
PAPER_EXTRA_LENGTH = 50


def sentence_splitter(name: str | None) -> Callable[[str], list[str]] | None:
    """The sentence splitter named `name` ("urdu": terminators ۔ ؟ ! and the rest; "english": . ! ? before a capital),
    or None for None / "none"."""
    if name in (None, "none"):
        return None
    if name == "urdu":
        from ..text.urdu import split_sentences

        return split_sentences
    if name == "english":
        from ..training.data.urdu_translation import english_sentences

        return english_sentences
    raise ValueError(f"Unknown sentence splitter {name!r}; choose one of {', '.join(SENTENCE_SPLITTERS)} or none.")


def save_decoding_defaults(folder: str | os.PathLike, *, max_source_tokens: int, source_sentences: str | None) -> None:
    """Write DECODING_FILE into a saved model's folder: the longest source it was trained on (tokens, end token
    included) and its source language's sentence splitter."""
    sentence_splitter(source_sentences)  # refuse an unknown name now, not when the folder is used
    Path(folder, DECODING_FILE).write_text(json.dumps({"max_source_tokens": max_source_tokens,
                                                       "source_sentences": source_sentences}, indent=1) + "\n",
                                           encoding="utf-8")


def load_decoding_defaults(folder: str | os.PathLike) -> dict:
    """DECODING_FILE of a model folder as translate() keywords (max_source_tokens, split_sentences), plus "names"
    (the file's own values, to record); {} when the folder has none."""
    path = Path(folder, DECODING_FILE)
    if not path.is_file():
        return {}
    values = json.loads(path.read_text(encoding="utf-8"))
    limit = values.get("max_source_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 2):
        raise ValueError(f"{path}: max_source_tokens must be an integer of at least 2, got {limit!r}.")
    return {"max_source_tokens": limit, "split_sentences": sentence_splitter(values.get("source_sentences")),
            "names": values}


@torch.no_grad()
def translate(model, tokenizer, sources: Sequence[str], *, num_beams: int = 4, length_penalty: float = 0.6,
              batch_size: int = 32, max_source_tokens: int | None = None,
              extra_length: int = PAPER_EXTRA_LENGTH,
              split_sentences: Callable[[str], list[str]] | None = None, counts: dict | None = None,
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
        split_sentences: a sentence splitter for the source language. A source longer than the limit is then
            translated in pieces of whole consecutive sentences, each within the limit, and the pieces'
            translations are joined with a space, instead of losing its end to truncation; only a single sentence
            longer than the limit is still truncated.
        counts: a dict to fill with what happened to long sources: `over_limit` (sources longer than the limit),
            `split` (of those, translated in pieces), `pieces` (how many), `truncated` (sources or pieces cut).
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
    sources = list(sources)
    encoded = [ids + [end] for ids in tokenizer(sources, add_special_tokens=False)["input_ids"]]
    owner = list(range(len(sources)))  # the source each encoded piece belongs to
    tally = {"over_limit": 0, "split": 0, "pieces": 0, "truncated": 0}
    if limit is not None:
        tally["over_limit"] = sum(len(ids) > limit for ids in encoded)
        if split_sentences is not None and tally["over_limit"]:
            encoded, owner, tally["split"], tally["pieces"] = _sentence_pieces(
                tokenizer, sources, encoded, split_sentences, limit, end)
        tally["truncated"] = sum(len(ids) > limit for ids in encoded)
        if tally["truncated"]:
            logger.warning(f"{tally['truncated']} of {len(encoded)} sources{' or pieces' if tally['split'] else ''} "
                           f"are longer than {limit} tokens and were truncated (the model has no positions past "
                           "that)" + ("." if split_sentences is not None else "; pass split_sentences to translate "
                                      "long sources in pieces of whole sentences instead."))
            encoded = [ids[: limit - 1] + [end] if len(ids) > limit else ids for ids in encoded]
    if counts is not None:
        counts.update(tally)
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
        if max_new < 1:  # a negative extra_length (outputs shorter than their sources) can leave nothing
            raise ValueError(f"extra_length={extra_length} leaves no room for an output after a {longest}-token "
                             "source; use a larger extra_length.")
        beam = {"num_beams": num_beams, "length_penalty": length_penalty, "early_stopping": True} \
            if num_beams > 1 else {"num_beams": 1}  # greedy: transformers warns about beam-only flags
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   do_sample=False, max_new_tokens=max_new, **beam)
        for row, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True)):
            outputs[row] = text.strip()
    joined: list[list[str]] = [[] for _ in sources]
    for source, text in zip(owner, outputs):
        joined[source].append(text)
    return [" ".join(filter(None, parts)) for parts in joined]


def _sentence_pieces(tokenizer, sources: list[str], encoded: list[list[int]], split_sentences, limit: int,
                     end: int) -> tuple[list[list[int]], list[int], int, int]:
    """Each source longer than `limit` tokens as pieces of whole consecutive sentences, each piece as long as the
    limit allows (fewer pieces keep more context); the others as they are. Returns the encoded pieces, the source of
    each, how many sources were split and into how many pieces."""
    pieces, owner, split, count = [], [], 0, 0
    for index, (source, ids) in enumerate(zip(sources, encoded)):
        sentences = split_sentences(source) if len(ids) > limit else []
        if len(sentences) < 2:  # short, or one long sentence: whole (and truncated if long)
            pieces.append(ids)
            owner.append(index)
            continue
        lengths = [len(row) for row in tokenizer(sentences, add_special_tokens=False)["input_ids"]]
        groups: list[list[str]] = [[]]
        used = 1  # the eos token
        for sentence, length in zip(sentences, lengths):
            # +1: the space between sentences may be a token of its own; measured exactly below
            if groups[-1] and used + length + 1 > limit:
                groups.append([])
                used = 1
            groups[-1].append(sentence)
            used += length + 1
        texts = [" ".join(group) for group in groups]
        pieces += [row + [end] for row in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        owner += [index] * len(texts)
        split += 1
        count += len(texts)
    return pieces, owner, split, count
