"""Train a tokenizer on a corpus (with the `tokenizers` library) and check that it fits a model config.

Two kinds, both returned as a `transformers.PreTrainedTokenizerFast` that saves and loads with `save_pretrained` /
`AutoTokenizer.from_pretrained`:

* "bpe": byte-level BPE as in GPT-2/RoBERTa. Every byte is in the base alphabet, so no text is ever unknown (Urdu
  included). Special tokens `<pad> <s> </s> <unk> <mask>` take ids 0-4. Like GPT-2 it adds no special tokens when
  encoding; `pack_sequences` and the collators add `</s>` (and `<s>` if asked) themselves.
* "wordpiece": BERT-style WordPiece with `[PAD] [CLS] [SEP] [UNK] [MASK]` at ids 0-4 and a post-processor that wraps
  every text as `[CLS] text [SEP]` (pairs as `[CLS] a [SEP] b [SEP]` with token types 0/1).

The ids 0-4 match the zoo's tiny presets (pad 0, bos/`[CLS]` 1 = the seq2seq decoder start, eos/`[SEP]` 2), so a
tokenizer trained here fits those configs without further changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils import logging

logger = logging.get_logger(__name__)

TOKENIZER_KINDS = ("bpe", "wordpiece", "char")

# Special tokens by kind, in id order (ids 0..4). Keys are transformers' special-token attribute names.
DEFAULT_SPECIAL_TOKENS: dict[str, dict[str, str]] = {
    "bpe": {
        "pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"
    },
    "wordpiece": {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
                  "mask_token": "[MASK]"},
    "char": {
        "pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"
    },
}
_SPECIAL_KEYS = ("pad_token", "bos_token", "eos_token", "unk_token", "mask_token", "cls_token", "sep_token")


def _texts(texts: Iterable[str], counter: list[int]) -> Iterator[str]:
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(
                f"train_tokenizer expects an iterable of strings, got an item of type {type(text).__name__}; "
                "pass e.g. dataset['train']['text'] or a generator of strings."
            )
        if text:
            counter[0] += 1
            yield text


def train_tokenizer(
    texts: Iterable[str],
    *,
    kind: str = "bpe",
    vocab_size: int = 8000,
    lowercase: bool = False,
    special_tokens: dict[str, Any] | None = None,
    min_frequency: int = 2,
    model_max_length: int | None = None,
    num_sentinel_tokens: int = 0,
    show_progress: bool = True,
    length: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE ("bpe"), WordPiece ("wordpiece") or character ("char") tokenizer on `texts`.

    "char" has one token per character seen in `texts` (nanoGPT's tiny-shakespeare vocabulary: 65 characters), up to
    `vocab_size` of the most frequent, line breaks and spaces included; a character never seen is <unk>. For a small
    corpus it puts almost no parameters in the embeddings, and every token is one character of the text.

    Args:
        texts: an iterable of strings (read once, streamed; a `datasets` column works).
        kind: "bpe" (GPT-2 style), "wordpiece" (BERT style) or "char"; see the module docstring for the special
            tokens.
        vocab_size: the size of the vocabulary including special tokens (the trainer may stop below it on a small
            corpus; `len(tokenizer)` is the real size).
        lowercase: lowercase the text before tokenising (WordPiece also strips accents then, like BERT uncased).
        special_tokens: overrides of the defaults, e.g. {"pad_token": "<|pad|>"}, plus optionally
            "extra_special_tokens": [...] (or the v4 name "additional_special_tokens"); a value of None removes that
            token.
        min_frequency: a merge / word piece must occur at least this often.
        model_max_length: stored on the tokenizer (truncation length); default: no limit.
        num_sentinel_tokens: add <extra_id_0> ... <extra_id_{n-1}> (T5 span-corruption sentinels).
        show_progress: show the trainer's progress bar.
        length: the number of texts, if known (for the progress bar).
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"Unknown tokenizer kind {kind!r}; choose 'bpe' (byte-level, GPT-2 style), 'wordpiece' or "
                         "'char' (one token per character).")
    if isinstance(texts, str):
        raise ValueError("train_tokenizer expects an iterable of strings, not one string; wrap it in a list.")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}.")
    if num_sentinel_tokens < 0:
        raise ValueError(f"num_sentinel_tokens must be >= 0, got {num_sentinel_tokens}.")
    special = dict(DEFAULT_SPECIAL_TOKENS[kind])
    additional = []
    for key, value in (special_tokens or {}).items():
        if key in ("additional_special_tokens", "extra_special_tokens"):
            additional = list(value)
        elif key not in _SPECIAL_KEYS:
            raise ValueError(
                f"Unknown special token name {key!r}; use {', '.join(_SPECIAL_KEYS)} or extra_special_tokens."
            )
        elif value is None:
            special.pop(key, None)
        else:
            special[key] = str(value)
    additional += [f"<extra_id_{i}>" for i in range(num_sentinel_tokens)]
    ordered = list(dict.fromkeys(list(special.values()) + additional))  # id order, without repeats
    minimum = len(ordered) + (256 if kind == "bpe" else 1)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for a {kind} tokenizer with {len(ordered)} special tokens"
            + (" and the 256 byte symbols" if kind == "bpe" else "")
            + f"; use at least {minimum} (a few thousand is typical)."
        )

    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False))
        if lowercase:
            tokenizer.normalizer = normalizers.Lowercase()
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=ordered, show_progress=show_progress,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    elif kind == "char":
        unk = special.get("unk_token")
        if unk is None:
            raise ValueError("A character tokenizer needs an unk_token for characters it never saw; do not set it to "
                             "None.")
        # Every character is its own "word" of a word-level model, newlines and spaces included; tokens are fused
        # back without separators. (tokenizers has no character model; this is its documented way to build one.)
        tokenizer = Tokenizer(models.WordLevel(unk_token=unk))
        if lowercase:
            tokenizer.normalizer = normalizers.Lowercase()
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tokenizer.decoder = decoders.Fuse()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=ordered,
                                            show_progress=show_progress)
    else:
        unk = special.get("unk_token")
        if unk is None:
            raise ValueError("A WordPiece tokenizer needs an unk_token; do not set it to None.")
        tokenizer = Tokenizer(models.WordPiece(unk_token=unk))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=ordered, show_progress=show_progress,
            continuing_subword_prefix="##",
        )

    counter = [0]
    tokenizer.train_from_iterator(_texts(texts, counter), trainer=trainer, length=length)
    if counter[0] == 0:
        raise ValueError("train_tokenizer got no non-empty texts; check the corpus and its text column.")

    if kind == "wordpiece":
        cls, sep = special.get("cls_token"), special.get("sep_token")
        if cls and sep:
            tokenizer.post_processor = processors.TemplateProcessing(
                single=f"{cls}:0 $A:0 {sep}:0",
                pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
            )

    kwargs: dict[str, Any] = dict(special)
    if additional:
        kwargs["extra_special_tokens"] = additional  # transformers 5 name of additional_special_tokens
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    # BERT-style tokenizers also return token_type_ids (segment A/B), which the encoder family embeds.
    kwargs["model_input_names"] = (
        ["input_ids", "token_type_ids", "attention_mask"] if kind == "wordpiece" else ["input_ids", "attention_mask"]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **kwargs)
    logger.info(f"Trained a {kind} tokenizer with {len(fast)} tokens on {counter[0]} texts.")
    return fast


# ------------------------------------------------------------------------------------------------- checks
# Objectives and the tokens they need. "mlm": masked LM; "clm": causal LM; "seq2seq": translation / denoising;
# "classification" / "token-classification": fine-tuning with padded batches.
_OBJECTIVE_NEEDS = {
    "mlm": ("pad_token", "mask_token"),
    "clm": ("pad_token", "eos_token"),
    "seq2seq": ("pad_token", "eos_token"),
    "classification": ("pad_token",),
    "token-classification": ("pad_token",),
}
_DEFAULT_OBJECTIVE = {"zoo_encoder": "mlm", "zoo_decoder": "clm", "zoo_seq2seq": "seq2seq"}
_FIXES = {
    "pad_token": "set one before training, e.g. `tokenizer.pad_token = tokenizer.eos_token` (causal LM) or "
    "`tokenizer.add_special_tokens({'pad_token': '<pad>'})` followed by "
    "`model.resize_token_embeddings(len(tokenizer))`",
    "mask_token": "masked-LM pretraining replaces tokens by the mask token: use a tokenizer that has one (both kinds "
    "from train_tokenizer do; pass --tokenizer <folder>), or `tokenizer.add_special_tokens({'mask_token': '<mask>'})` "
    "then `model.resize_token_embeddings(len(tokenizer))`",
    "eos_token": "sequences must end with an end-of-sequence token: set `tokenizer.eos_token` (for a BERT-style "
    "tokenizer `tokenizer.eos_token = tokenizer.sep_token`) or pass --tokenizer with a BPE tokenizer",
}


def _has(tokenizer, name: str) -> bool:
    if getattr(tokenizer, name, None) is None:
        return False
    if name == "eos_token":
        return tokenizer.eos_token_id is not None
    return getattr(tokenizer, f"{name}_id", None) is not None


def check_tokenizer_matches(tokenizer, config, *, objective: str | None = None) -> None:
    """Raise ValueError if `tokenizer` cannot feed a model built from `config` for `objective`.

    Checks:
      * every token id fits the embedding table: len(tokenizer) <= config.vocab_size;
      * the tokens the objective needs exist: pad (batching) for all, mask for "mlm", eos for "clm"/"seq2seq".
        For "clm" and "seq2seq" a tokenizer with a [SEP] but no eos (BERT style) is accepted: the collators use
        [SEP] as the end of sequence.
    `objective` defaults by family: zoo_encoder -> "mlm", zoo_decoder -> "clm", zoo_seq2seq -> "seq2seq"; pass
    "classification" or "token-classification" when fine-tuning. Mismatched special-token ids between the
    tokenizer and the config (pad/bos/eos/decoder start) are logged as warnings.
    """
    vocab_size = getattr(config, "vocab_size", None)
    if vocab_size is None:
        raise ValueError(
            f"{type(config).__name__} has no vocab_size: it is not a text model (e.g. ViT), so no tokenizer applies."
        )
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {vocab_size}: ids >= "
            f"{vocab_size} would index past the embedding table. Build the config with vocab_size={len(tokenizer)} "
            f"(or larger), call `model.resize_token_embeddings(len(tokenizer))` on an existing model, or pass "
            "--tokenizer with the tokenizer the model was trained with."
        )
    if objective is None:
        objective = _DEFAULT_OBJECTIVE.get(getattr(config, "model_type", ""), "classification")
    if objective not in _OBJECTIVE_NEEDS:
        raise ValueError(f"Unknown objective {objective!r}; choose one of {', '.join(_OBJECTIVE_NEEDS)}.")
    for name in _OBJECTIVE_NEEDS[objective]:
        if _has(tokenizer, name):
            continue
        if name == "eos_token" and _has(tokenizer, "sep_token"):
            continue
        raise ValueError(f"The {objective} objective needs a {name.replace('_token', '')} token, and the tokenizer "
                         f"has none: {_FIXES[name]}.")
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        config_id, tokenizer_id = getattr(config, name, None), getattr(tokenizer, name, None)
        if name == "bos_token_id" and tokenizer_id is None:
            tokenizer_id = getattr(tokenizer, "cls_token_id", None)
        if name == "eos_token_id" and tokenizer_id is None:
            tokenizer_id = getattr(tokenizer, "sep_token_id", None)
        if config_id is not None and tokenizer_id is not None and config_id != tokenizer_id:
            logger.warning(
                f"config.{name}={config_id} but the tokenizer's is {tokenizer_id}; set config.{name}={tokenizer_id} "
                "so that padding, generation and loss masking use the same token."
            )
    start = getattr(config, "decoder_start_token_id", None)
    if start is not None and not 0 <= start < len(tokenizer):
        raise ValueError(
            f"config.decoder_start_token_id={start} is not a token of this tokenizer (size {len(tokenizer)}); set it "
            "to the tokenizer's bos (or [CLS]) id."
        )


__all__ = ["DEFAULT_SPECIAL_TOKENS", "TOKENIZER_KINDS", "check_tokenizer_matches", "train_tokenizer"]


def load_tokenizer(tokenizer: str | None, model: str | None = None, *, model_flag: str = "--model",
                   fix: str = "pass --tokenizer", **kwargs):
    """--tokenizer, or the tokenizer saved with the model (`model_flag` names where the model was given: a flag, or
    "the model folder"); a failure is one line that names what to fix. kwargs go to AutoTokenizer.from_pretrained."""
    try:
        return AutoTokenizer.from_pretrained(tokenizer or model, **kwargs)
    except (OSError, ValueError) as error:
        reason = " ".join(str(error).split())  # transformers' message spans lines; the scripts' errors are one
        if tokenizer:
            raise ValueError(f"--tokenizer {tokenizer!r}: cannot load a tokenizer ({reason}).") from error
        raise ValueError(f"{model_flag} {model!r} has no tokenizer that loads ({reason}); {fix}.") from error


def check_tokenizer_source(tokenizer: str) -> None:
    """A --tokenizer that is neither an existing path nor a possible Hub id (a missing folder such as ./tok or
    /data/tok) is named now; transformers would report it as a malformed repository id, after the data and model."""
    if Path(tokenizer).exists():
        return
    try:
        validate_repo_id(tokenizer)
    except HFValidationError as error:
        raise ValueError(f"--tokenizer {tokenizer!r}: no such file or folder (nor a Hub id: {error}).") from error
