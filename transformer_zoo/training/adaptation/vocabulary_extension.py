"""Vocabulary extension for language adaptation: train a subword tokenizer of the model's kind on the new language,
append its new pieces to the model's tokenizer, grow the embeddings and initialise the new rows (methods in
`embedding_init`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .embedding_init import (
    InitReport,
    _check_sources,
    align_pieces,
    focus_rows,
    trans_tokenization_rows,
)


def _backend_json(tokenizer) -> dict:
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("Vocabulary extension needs a fast (Rust `tokenizers`) tokenizer; load it with "
                         "AutoTokenizer.from_pretrained(...) (fast is the default).")
    return json.loads(tokenizer.backend_tokenizer.to_str())


def train_tokenizer_like(tokenizer, texts, *, vocab_size: int, min_frequency: int = 2, show_progress: bool = False):
    """A `tokenizers.Tokenizer` of the same kind (WordPiece or BPE) as `tokenizer`, with the same normaliser and
    pre-tokenizer (so its pieces are pieces the extended tokenizer will actually meet), trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, trainers
    from tokenizers.pre_tokenizers import ByteLevel

    state = _backend_json(tokenizer)
    kind = state["model"]["type"]
    if kind == "WordPiece":
        prefix = state["model"].get("continuing_subword_prefix", "##")
        new = Tokenizer(models.WordPiece(unk_token=state["model"]["unk_token"], continuing_subword_prefix=prefix))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            continuing_subword_prefix=prefix, show_progress=show_progress)
    elif kind == "BPE":
        affixes = {key: state["model"][key] for key in ("continuing_subword_prefix", "end_of_word_suffix")
                   if state["model"].get(key)}
        new = Tokenizer(models.BPE(**affixes))
        byte_level = "ByteLevel" in json.dumps(state.get("pre_tokenizer"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
                                      initial_alphabet=ByteLevel.alphabet() if byte_level else [])
    else:
        raise ValueError(f"Vocabulary extension supports WordPiece and BPE tokenizers; this one is {kind}. Pass "
                         "--extend_vocab false to adapt without new tokens.")
    full = Tokenizer.from_str(json.dumps(state))
    if full.normalizer is not None:
        new.normalizer = full.normalizer
    if full.pre_tokenizer is not None:
        new.pre_tokenizer = full.pre_tokenizer
    new.decoder = full.decoder or decoders.WordPiece()
    new.train_from_iterator(texts, trainer=trainer)
    return new


@dataclass
class VocabularyExtension:
    tokenizer: PreTrainedTokenizerFast  # the extended tokenizer
    new_tokens: list[str]  # in id order, starting at first_new_id
    first_new_id: int
    kind: str


def extend_tokenizer(tokenizer, trained, *, max_new_tokens: int | None = None) -> VocabularyExtension:
    """Append the pieces of `trained` (from `train_tokenizer_like`) that `tokenizer` lacks to its model vocabulary.

    They go into the WordPiece/BPE model itself, not in as "added tokens": added tokens are cut out of the text
    before the model runs (an added 'کتاب' would also match inside 'کتابوں'), whereas vocabulary pieces take part
    in the greedy longest match (WordPiece) or get merge rules (BPE) like the original ones. For BPE the trained
    merges that build the new tokens are appended after the original merges, in their trained order.
    """
    state = _backend_json(tokenizer)
    trained_state = json.loads(trained.to_str())
    kind = state["model"]["type"]
    if trained_state["model"]["type"] != kind:
        raise ValueError(f"The trained tokenizer is {trained_state['model']['type']}, the model's is {kind}.")
    vocab: dict[str, int] = state["model"]["vocab"]
    added = {entry["content"]: entry["id"] for entry in state.get("added_tokens", [])}
    first_new_id = max(list(vocab.values()) + list(added.values())) + 1
    candidates = sorted(trained_state["model"]["vocab"].items(), key=lambda item: item[1])
    new_tokens = [token for token, _ in candidates if token not in vocab and token not in added]
    if kind == "BPE":
        # Keep the new tokens in the order their merges were learnt, so a cap keeps every part a merge needs.
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained_state["model"]["merges"]]
        wanted = set(new_tokens)
        order, new_merges = [], []
        for left, right in merges:
            merged = left + right
            if merged in wanted and merged not in order:
                if max_new_tokens is not None and len(order) >= max_new_tokens:
                    break
                order.append(merged)
                new_merges.append([left, right])
        # New base symbols (alphabet; none for byte-level). Sorted: `tokenizers` numbers a trained alphabet in hash
        # order, which changes from run to run, and a resumed run must rebuild the very same ids.
        single = sorted(t for t in new_tokens if t not in set(order))
        new_tokens = single + order
        old_merges = state["model"]["merges"]
        state["model"]["merges"] = old_merges + ([" ".join(m) for m in new_merges] if old_merges and
                                                  isinstance(old_merges[0], str) else new_merges)
    else:
        # WordPiece numbers its alphabet and continuation symbols in hash order, different in every run: sort the
        # chosen pieces so the same text always gives the same ids (a resumed run rebuilds the tokenizer).
        new_tokens = sorted(new_tokens if max_new_tokens is None else new_tokens[:max_new_tokens])
    for offset, token in enumerate(new_tokens):
        vocab[token] = first_new_id + offset
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(json.dumps(state))
    special = {name: getattr(tokenizer, name) for name in
               ("pad_token", "bos_token", "eos_token", "unk_token", "mask_token", "cls_token", "sep_token")
               if getattr(tokenizer, name, None) is not None}
    extra = [str(token) for token in getattr(tokenizer, "additional_special_tokens", None) or []]
    extended = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=tokenizer.model_max_length,
        padding_side=tokenizer.padding_side, **special,
        **({"additional_special_tokens": extra} if extra else {}),
    )
    return VocabularyExtension(extended, new_tokens, first_new_id, kind)


def reload_extension(folder: Path, original_tokenizer) -> VocabularyExtension:
    """The VocabularyExtension of an extended tokenizer saved by an earlier run (for --resume): its new pieces are
    the ids past the original tokenizer's last id."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    original_ids = list(original_tokenizer.get_vocab().values())
    first_new_id = max(original_ids) + 1
    vocabulary = tokenizer.get_vocab()
    if any(vocabulary.get(token) != index for token, index in original_tokenizer.get_vocab().items()):
        raise ValueError(f"{folder} does not extend this model's tokenizer (its original pieces have other ids): "
                         "resume into the output folder of the same run, or start a new one without --resume.")
    new_tokens = [token for token, index in sorted(vocabulary.items(), key=lambda item: item[1])
                  if index >= first_new_id]
    kind = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["type"]
    return VocabularyExtension(tokenizer, new_tokens, first_new_id, kind)


def old_pieces(tokenizer, token: str, kind: str, vocab: dict[str, int] | None = None) -> list[int]:
    """The ids of the pieces the original `tokenizer` uses for the new vocabulary entry `token`.

    WordPiece: greedy longest match, as WordPiece does it, starting in continuation state for a '##' piece (the
    `tokenizers` API cannot start a word in that state, hence this loop). Where no piece matches, the one character
    becomes the unknown token and matching goes on (WordPiece itself would make the whole word unknown, which would
    give every new token with one unknown letter the same initial row). BPE: the original model's own `tokenize` on
    the token's string (already in the model's symbol alphabet, e.g. byte-level).
    """
    state_model = tokenizer.backend_tokenizer.model
    if vocab is None:  # pass it in when calling this for many tokens: building it costs more than the lookup
        vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    if kind == "BPE":
        return [piece.id for piece in state_model.tokenize(token)]
    prefix = getattr(state_model, "continuing_subword_prefix", "##")
    unk_id = tokenizer.unk_token_id
    continuation = token.startswith(prefix) and token != prefix
    surface = token[len(prefix):] if continuation else token
    ids, position = [], 0
    while position < len(surface):
        for end in range(len(surface), position, -1):
            piece = (prefix if continuation or position > 0 else "") + surface[position:end]
            if piece in vocab:
                ids.append(vocab[piece])
                position = end
                break
        else:
            ids.append(unk_id)
            position += 1
    return ids


def piece_tokenizer(trained, tokenizer) -> PreTrainedTokenizerFast:
    """The trained Urdu tokenizer (a `tokenizers.Tokenizer`) wrapped for transformers, with the model's unknown
    token: what FOCUS and trans-tokenization tokenize the Urdu text with."""
    return PreTrainedTokenizerFast(tokenizer_object=trained, unk_token=tokenizer.unk_token)


def resize_and_initialise(model, extension: VocabularyExtension, old_tokenizer, method: str = "mean", *,
                          texts=None, parallel_pairs=None, trained=None, seed: int = 0) -> InitReport:
    """Grow the input embeddings (and an output layer, tied or not, with its bias) to the extended tokenizer and
    initialise the new rows by `method` (see `embedding_init`). `texts` (the adaptation text) is needed by 'focus',
    `parallel_pairs` ((english, urdu) pairs) by 'trans-tokenization', and `trained` (the tokenizer of the new pieces,
    from `train_tokenizer_like`) by both. Returns an InitReport; its details["pieces"] maps each new token to the old
    piece ids it is spelt with.
    """
    _check_sources(method, texts, parallel_pairs, trained)
    new_size = len(extension.tokenizer)
    if new_size < model.get_input_embeddings().weight.shape[0]:
        raise ValueError(f"The extended tokenizer ({new_size} tokens) is smaller than the embedding table "
                         f"({model.get_input_embeddings().weight.shape[0]} rows); nothing to add.")
    old_input = model.get_input_embeddings().weight.detach().clone()
    output_layer = model.get_output_embeddings()
    tied = output_layer is not None and output_layer.weight is model.get_input_embeddings().weight
    old_output = output_layer.weight.detach().clone() if output_layer is not None and not tied else None
    old_bias = output_layer.bias.detach().clone() \
        if output_layer is not None and getattr(output_layer, "bias", None) is not None else None
    vocab = old_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    pieces = {token: old_pieces(old_tokenizer, token, extension.kind, vocab) for token in extension.new_tokens}
    report = InitReport(method, details={"pieces": pieces})
    if method == "random":
        # transformers' default: new rows drawn from the old rows' mean and covariance (mean_resizing=True).
        model.resize_token_embeddings(new_size)
        report.counts["sampled from the old rows' distribution"] = len(extension.new_tokens)
        _check_still_tied(model, tied)
        return report
    # mean_resizing=False: the new rows are all set below.
    model.resize_token_embeddings(new_size, mean_resizing=False)
    special_rows: dict[str, torch.Tensor] = {}
    if method == "focus":
        focus, no_vector = focus_rows(old_tokenizer, extension.tokenizer, piece_tokenizer(trained, old_tokenizer),
                                      old_input, texts, seed=seed)
        special_rows = {token: focus[extension.first_new_id + offset].to(old_input.dtype)
                        for offset, token in enumerate(extension.new_tokens)}
        report.details["no_fasttext_vector"] = sorted(no_vector & set(extension.new_tokens))
    elif method == "trans-tokenization":
        counts = align_pieces(old_tokenizer, extension.tokenizer, parallel_pairs)
        special_rows = trans_tokenization_rows(old_input, extension.new_tokens, counts)
        report.details["aligned_pairs"] = len(parallel_pairs)
    # A token the old tokenizer cannot spell at all (e.g. a byte symbol missing from a byte-level vocabulary, such as
    # the bytes that never occur in UTF-8) has no pieces: it starts at the mean of all old rows instead.
    every_old_row = torch.arange(old_input.shape[0])
    label = {"mean": "mean of old pieces", "focus": "FOCUS", "trans-tokenization": "aligned English pieces"}[method]
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        output_layer = model.get_output_embeddings()
        for offset, token in enumerate(extension.new_tokens):
            row = extension.first_new_id + offset
            ids = torch.tensor(pieces[token], dtype=torch.long) if pieces[token] else every_old_row
            if token in special_rows:
                embedding[row] = special_rows[token]
                source = label
                if method == "focus" and token in no_vector:
                    source = "FOCUS random (no fastText vector)"
            else:
                embedding[row] = old_input[ids].mean(0)
                source = "mean of old pieces" if method == "mean" else "mean of old pieces (fallback)"
            report.counts[source] = report.counts.get(source, 0) + 1
            if old_output is not None:
                output_layer.weight[row] = old_output[ids].mean(0)
            if old_bias is not None:
                output_layer.bias[row] = old_bias[ids].mean(0)
    _check_still_tied(model, tied)
    return report


def _check_still_tied(model, tied: bool) -> None:
    if tied and model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError("Resizing untied the output layer from the input embeddings; please report this.")
