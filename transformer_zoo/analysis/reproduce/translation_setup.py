"""What the translation experiment's two parts share: the settings, the shape of a model, the data of a language
pair (de-duplicated, split, tokenized) and building a model from a shape.

The default model of each pair and the ablation base of table 3 are both `ModelShape`s; a table-3 row is the base
with a few fields changed (`translation_table3.row_shape`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...translation.decoding import PAPER_EXTRA_LENGTH

# What a pair's data is, for telling finished runs apart: 2 = the BPE vocabulary learnt from the training split only
# (version 1 read the whole corpus table, dev and test text included, when learning its merges).
DATA_VERSION = 2
LANGUAGE_PAIRS = {"bible-en-es": "English-Spanish (Bible)", "quran-en-ur": "English-Urdu (Quran)",
                  "urdu-translation-en-ur": "English-Urdu (hadith + Quran)",
                  "urdu-translation-ur-en": "Urdu-English (hadith + Quran)"}


@dataclass(frozen=True)
class ModelShape:
    """The architecture and regularisation of one model (fields of `ZooSeq2SeqConfig`, plus label smoothing)."""

    hidden_size: int = 256
    layers: int = 3  # encoder and decoder each
    heads: int = 4
    intermediate_size: int = 1024
    head_dim: int | None = None  # None: hidden_size // heads
    dropout: float = 0.1
    label_smoothing: float = 0.1
    position_embedding_type: str = "sinusoidal"


# The Urdu pairs' paragraphs: 256 tokens a side covers about 93 % of them whole (measured with the pair's 8,000-piece
# BPE: 1,951 of 28,036 training targets longer); longer training paragraphs whose sentences align are split.
# Epochs: an epoch of these pairs is about 626 steps (2.5 times the Bible's). Two epochs (1,252 steps, the report of
# 2026-12-03) reached 11.5 test BLEU / 27.3 chrF against retrieval's 19.5 / 39.9; extrapolated from the dev loss, 12
# epochs would clear retrieval. They did for en-ur (2026-12-06: 20.23 / 40.55 against 19.19 / 38.24, past the
# study's margins of 1 BLEU and 2 chrF), not for ur-en (19.48 / 40.82 against 19.45 / 39.94: level on BLEU), whose dev
# loss was still falling (2.52 at step 6,260, 2.49 at 7,512). An 18-epoch continuation (~10 h of a core at 3.2-3.6 s a
# step beside the machine's other job) reached step 6,900 of 11,268 before the machine it ran on was replaced, its
# snapshot with it (2026-12-07). A run must now fit one ~3 h sitting on 2 cores: ur-en trains 12 epochs in bf16
# autocast on two threads (--only defaults --jobs 1 --threads 2: 0.95-1.00 s a step against 1.02-1.11 s in fp32 in
# benchmarks/results/translation_step_precision_cpu.json, 0.76-0.83 against 1.12-1.24 in an earlier uncommitted
# run), about 2-2.1 h of training. Its model is the one translate-test reads. The fp32 12-epoch run stays in
# the report beside it (`earlier_runs`).
URDU_EPOCHS = {"urdu-translation-en-ur": 12.0, "urdu-translation-ur-en": 12.0}
URDU_PRECISION = {"urdu-translation-ur-en": "bf16"}
URDU_PARAGRAPHS = {name: {"max_length": 256, "split_long_paragraphs": True, "epochs": epochs,
                          **({"precision": URDU_PRECISION[name]} if name in URDU_PRECISION else {})}
                   for name, epochs in URDU_EPOCHS.items()}


@dataclass(frozen=True)
class TranslationSettings:
    # The first pair is also table 3's; ur-en before en-ur because the Urdu study's translate-test arm needs it.
    # The Urdu pairs read paragraphs: a longer context, long ones split (below).
    pairs: tuple[str, ...] = ("bible-en-es", "urdu-translation-ur-en", "urdu-translation-en-ur")
    held_out: int = 1000  # dev and test sentences each, at most 5 % of a corpus
    max_examples: int | None = None  # a subset of each corpus (tests)
    vocab_size: int = 8000
    max_length: int = 128  # tokens per side, eos included
    # The default model of each pair.
    model: ModelShape = ModelShape()
    epochs: float = 5.0
    max_tokens: int = 4096  # padded tokens per batch
    learning_rate: float = 1e-3
    warmup_steps: int = 400
    average_last: int = 5
    checkpoint_every: int = 50
    num_beams: int = 4
    length_penalty: float = 0.6
    # Outputs may run to the batch's longest source + this many tokens. A model that has not learnt to stop runs
    # every beam to that limit, so the quick preset's barely-trained models decode with less.
    decode_extra_length: int = PAPER_EXTRA_LENGTH
    # Table 3, on the first pair: the base and every row trained alike (the optimiser, schedule, batches and
    # checkpoint averaging above), for `ablation_epochs`. The default base is the default model's shape: at 4 epochs
    # its dev BLEU is past 20 (the default run's greedy dev BLEU: 22.5 after 3.3 epochs, 28.4 after 5).
    ablation_model: ModelShape = ModelShape()
    ablation_epochs: float = 4.0
    ablation_warmup_steps: int = 400
    ablation_rows: tuple[str, ...] | None = None  # None: all of translation_table3.TABLE3_ROWS
    ablation_curve_points: int = 5  # dev loss and greedy dev BLEU this many times during each row's training
    dev_bleu_sentences: int = 500  # greedy BLEU on the first dev sentences (the curves during training)
    samples: int = 5  # test translations shown in the report
    model_dir: str | None = None  # save each pair's default model (and tokenizer) here
    jobs: int = 1  # runs side by side in worker processes of one thread each (see run_translation)
    # Where the models train and decode ("cpu" or "cuda"). Not part of a run's settings fingerprint: the same study
    # on another device; each run records the device it ran on, and the report says which rows came from where.
    device: str = "cpu"
    partial_file: str | None = None  # append each finished run here as a JSON line (a cut-off study keeps them)
    resume: bool = False  # reuse the finished runs in partial_file (and `previous_report`) whose settings match
    previous_report: str | None = None  # a translation.json whose matching runs count as finished (with resume)
    report_only: bool = False  # train nothing: report what is finished, marking what is missing
    # Train only these runs this time ("defaults": the language pairs' default models; "table3": the rows); the report
    # still covers every run, marking the others missing. A default model too long for one sitting (Urdu-English
    # takes ~10 h of a core) need not hold a worker while table 3's hour-long runs finish and are kept.
    train_only: str | None = None
    # A run in progress writes its whole training state here every `snapshot_every` steps, so a study stopped
    # mid-run continues that run from its last snapshot (translation.training.train_translation); None: no snapshots.
    snapshot_dir: str | None = None
    snapshot_every: int = 100
    # Training arithmetic: "fp32", or "bf16" (autocast forward, fp32 weights and optimiser: train_translation).
    # Decoding and evaluation stay in fp32.
    precision: str = "fp32"
    # Training paragraphs longer than max_length (either side) become their aligned sentence pairs where they have
    # them (transformer_zoo.training.data.urdu_translation); the rest are truncated and counted.
    split_long_paragraphs: bool = False
    # Per-pair changes to the fields above (a pair's data or budget), e.g. a longer max_length for paragraphs.
    pair_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: dict(URDU_PARAGRAPHS))


def for_pair(settings: TranslationSettings, name: str) -> TranslationSettings:
    """The settings a pair's default model trains with: `settings` with the pair's overrides applied."""
    overrides = dict(settings.pair_overrides.get(name, {}))
    for key in ("model", "ablation_model"):
        if isinstance(overrides.get(key), Mapping):
            overrides[key] = ModelShape(**overrides[key])
    return dataclasses.replace(settings, **overrides) if overrides else settings


@dataclass
class PairData:
    name: str
    splits: Any  # datasets.DatasetDict with source/target columns
    tokenizer: Any
    train: Any  # PairFeatures
    dev: Any
    description: str
    lengths: dict[str, Any] = field(default_factory=dict)  # long paragraphs split, pairs truncated per split


def load_pair_splits(name: str, held_out: int, max_examples: int | None):
    """A corpus's train, dev and test splits: dev and test of `held_out` pairs each, at most 5 % of its unique pairs.

    The fraction needs the corpus size after de-duplication. A subset (max_examples) is almost always smaller than
    the corpus, so its size is the first guess and the corpus loads once; a whole corpus, or a subset that came out
    smaller than asked, is counted by loading it once more."""
    from ...training.data.corpora import load_corpus

    def split(total):
        fraction = min(0.05, held_out / total)
        return load_corpus(name, max_examples=max_examples, validation_fraction=fraction, test_fraction=fraction,
                           seed=0)

    if max_examples:
        splits = split(max_examples)
        if sum(len(part) for part in splits.values()) == max_examples:
            return splits
    total = len(load_corpus(name, max_examples=max_examples, validation_fraction=0.0, test_fraction=0.0)["train"])
    return split(total)


def load_pair(name: str, settings: TranslationSettings) -> PairData:
    from ...training.data.tokenization import train_tokenizer
    from ...training.data.urdu_translation import split_aligned_paragraphs
    from ...translation.training import encode_pairs

    splits = load_pair_splits(name, settings.held_out, settings.max_examples)
    total = sum(len(part) for part in splits.values())
    train = splits["train"]
    # The training split's rows only (a split's `.data` is the whole corpus table, dev and test included).
    columns = train.select_columns(["source", "target"])[:]
    sources, targets = columns["source"], columns["target"]
    tokenizer = train_tokenizer(sources + targets, kind="bpe", vocab_size=settings.vocab_size, show_progress=False)
    lengths: dict[str, Any] = {}
    if settings.split_long_paragraphs:
        limit = settings.max_length - 1  # eos is added

        def too_long(source, target):
            ids = tokenizer([source, target], add_special_tokens=False)["input_ids"]
            return max(len(ids[0]), len(ids[1])) > limit

        sources, targets, lengths["train_split"] = split_aligned_paragraphs(
            sources, targets, too_long, source_is_urdu=name.endswith("ur-en"))
    features = encode_pairs(tokenizer, sources, targets, settings.max_length)
    dev = encode_pairs(tokenizer, splits["validation"]["source"], splits["validation"]["target"],
                       settings.max_length)
    lengths["truncated"] = {
        split: _truncated(tokenizer, data_sources, data_targets, settings.max_length)
        for split, (data_sources, data_targets) in {
            "train": (sources, targets), "validation": (splits["validation"]["source"], splits["validation"]["target"]),
            "test": (splits["test"]["source"], splits["test"]["target"])}.items()}
    sizes = {split: len(splits[split]) for split in ("train", "validation", "test")}
    description = (f"{LANGUAGE_PAIRS.get(name, name)}: {sizes['train']:,} / {sizes['validation']:,} / "
                   f"{sizes['test']:,} train / dev / test pairs after de-duplication "
                   f"(of {total:,} unique pairs), shared byte-level BPE of "
                   f"{len(tokenizer):,} tokens")
    if "train_split" in lengths:
        counts = lengths["train_split"]
        description += (f"; {counts['long_pairs']:,} training pairs longer than {settings.max_length - 1} tokens, "
                        f"{counts['split_pairs']:,} of them split into {counts['sentence_pairs_from_split']:,} aligned "
                        "sentence pairs")
    return PairData(name, splits, tokenizer, features, dev, description, lengths)


def _truncated(tokenizer, sources, targets, max_length: int) -> dict[str, int]:
    """How many pairs of a split have a side longer than `max_length` - 1 tokens (cut when encoded)."""
    ids = tokenizer(list(sources) + list(targets), add_special_tokens=False)["input_ids"]
    n = len(sources)
    return {"pairs": n, "source_truncated": sum(len(row) > max_length - 1 for row in ids[:n]),
            "target_truncated": sum(len(row) > max_length - 1 for row in ids[n:])}


def source_sentences(pair_name: str) -> str:
    """The name of the sentence splitter of a pair's source language (`transformer_zoo.translation.sentence_splitter`):
    the test decode translates a source longer than the training length in pieces of whole sentences."""
    return "urdu" if pair_name.endswith("ur-en") else "english"


def split_features(pair: PairData, split: str, settings: TranslationSettings):
    from ...translation.training import encode_pairs

    data = pair.splits[split]
    return encode_pairs(pair.tokenizer, data["source"], data["target"], settings.max_length)


def decoding_fingerprint(settings: TranslationSettings) -> dict[str, Any]:
    """The decoding length limit, for a run's settings fingerprint: empty at the paper's + 50, so the runs recorded
    before the limit was a setting (all at + 50) still count as finished."""
    extra = settings.decode_extra_length
    return {} if extra == PAPER_EXTRA_LENGTH else {"decode_extra_length": extra}


def precision_fingerprint(settings: TranslationSettings) -> dict[str, Any]:
    """The training arithmetic, for a run's settings fingerprint: empty in fp32, so the runs recorded before it was a
    setting (all fp32) still count as finished."""
    return {} if settings.precision == "fp32" else {"precision": settings.precision}


def decoding_limit_text(settings: Mapping[str, Any]) -> str:
    """The report's words for a decoding length limit other than the paper's (`settings` as a report records it)."""
    extra = settings.get("decode_extra_length", PAPER_EXTRA_LENGTH)
    return ("" if extra == PAPER_EXTRA_LENGTH else
            f", outputs up to the longest source + {extra} tokens (the paper: + {PAPER_EXTRA_LENGTH})")


def build_model(shape: ModelShape, tokenizer, max_length: int, seed: int, device: str = "cpu"):
    from ...configuration_zoo_seq2seq import ZooSeq2SeqConfig
    from ...modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration

    config = ZooSeq2SeqConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size, encoder_layers=shape.layers,
        decoder_layers=shape.layers, num_attention_heads=shape.heads, intermediate_size=shape.intermediate_size,
        head_dim=shape.head_dim, position_embedding_type=shape.position_embedding_type,
        # Learned positions get a row for every position training shows (the longest source or target, + the
        # decoder start token); a sinusoidal table costs nothing, so it leaves room for longer outputs.
        max_position_embeddings=max_length + 1 if shape.position_embedding_type == "learned" else 2 * max_length + 64,
        embedding_dropout=shape.dropout, hidden_dropout=shape.dropout, attention_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)  # the weights are drawn on the CPU, so a seed gives the same start on every device
    return ZooSeq2SeqForConditionalGeneration(config).to(device)


def steps_for(features, epochs: float, max_tokens: int) -> int:
    return max(1, math.ceil(epochs * len(features.token_batches(max_tokens, seed=0))))


def snapshot_options(settings: TranslationSettings, task_name: str, fingerprint: Mapping[str, Any],
                     seed: int) -> dict[str, Any]:
    """`train_translation`'s snapshot arguments for one run: its file, and a key that changes with its settings but
    not with its budget (epochs): the training has no horizon, so a longer budget continues a shorter one's state
    (`train_translation`, `keep_final_state`)."""
    if not settings.snapshot_dir:
        return {}
    fingerprint = {key: value for key, value in fingerprint.items() if key != "epochs"}
    key = json.dumps({"settings": fingerprint, "seed": seed}, sort_keys=True, default=str)
    return {"snapshot": Path(settings.snapshot_dir) / f"{task_name}-seed{seed}.pt",
            "snapshot_every": settings.snapshot_every, "snapshot_key": key}
