"""Table 3 of Vaswani et al. (2017) on English-Spanish (Bible): every row that fits the data, at a budget where the
base translates, each row trained exactly as the base, scored as the paper scores, with criteria fixed before the
runs.

The rows, over the base (the default model's shape: 3+3 layers, width 256, 4 heads, feed-forward 1024, dropout
0.1, label smoothing 0.1, sinusoidal positions; 4 epochs):

* (A) 1, 8 and 16 heads at constant compute (d_k = d_v = d/h);
* (B) a smaller key size: d_k = d/16 at 4 heads (a quarter of the base's; the zoo's `head_dim` sets keys and
  values together, where the paper's (B) shrinks keys only);
* (C) half and 1.5 x width (d_model and d_ff), 2 and 4 layers instead of 3 (the paper's 4 and 8 of 6);
* (D) no dropout; no label smoothing;
* (E) learned positions instead of sinusoids.

Each run: the inverse-square-root schedule after 400 warmup steps, token-count batches, the average of the last 5
checkpoints (50 steps apart); then beam search (4, length penalty 0.6) on the whole dev and test splits with the
averaged weights (BLEU and chrF, sacreBLEU), and on dev with the last weights (the paper's table 3 protocol: beam
search, no averaging); loss and perplexity per target token on dev (the pair's own tokenizer, the same for every
row). During training, dev loss and greedy dev BLEU on 500 sentences are recorded `ablation_curve_points` times.

The criteria (`CLAIMS`) were committed before the study's first run. A criterion changed after seeing numbers gets
a new entry in its claim's `criteria` with the reason, and the report shows every version's verdict.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .common import clearly_better, format_mean_std, mean_std
from .translation_setup import (DATA_VERSION, LANGUAGE_PAIRS, ModelShape, PairData, TranslationSettings, build_model,
                                decoding_fingerprint, decoding_limit_text, precision_fingerprint, snapshot_options,
                                split_features, steps_for)

# row -> (table-3 group, label, ModelShape fields over the ablation base, the paper's nearest row, its dev
# perplexity and BLEU on newstest2013). The paper's base: 6 layers, d_model 512, 8 heads, d_k 64; PPL 4.92, BLEU 25.8.
TABLE3_ROWS: dict[str, tuple[str, str, dict[str, Any], str, float, float]] = {
    "base": ("base", "base (4 heads, d_k = d/4)", {}, "base (8 heads, d_k 64)", 4.92, 25.8),
    "heads_1": ("A", "1 head (d_k = d)", {"heads": 1}, "h = 1, d_k 512", 5.29, 24.9),
    "heads_8": ("A", "8 heads (d_k = d/8)", {"heads": 8}, "h = 16, d_k 32 (2 x base heads)", 4.91, 25.8),
    "heads_16": ("A", "16 heads (d_k = d/16)", {"heads": 16}, "h = 32, d_k 16 (4 x base heads)", 5.01, 25.4),
    "small_dk": ("B", "4 heads, d_k = d/16", {"head_dim": "d/16"}, "d_k = 16 (1/4 of base)", 5.16, 25.1),
    "narrow": ("C", "half width (d, d_ff / 2)", {"hidden_size": "d/2", "intermediate_size": "ff/2"},
               "d_model 256", 5.75, 24.5),
    "wide": ("C", "1.5 x width (d, d_ff x 1.5)", {"hidden_size": "3d/2", "intermediate_size": "3ff/2"},
             "d_model 1024 (2 x)", 4.66, 26.0),
    "layers_2": ("C", "2 layers (of 3)", {"layers": 2}, "N = 4 (of 6)", 5.19, 25.3),
    "layers_4": ("C", "4 layers (of 3)", {"layers": 4}, "N = 8 (of 6)", 4.88, 25.5),
    "no_dropout": ("D", "no dropout", {"dropout": 0.0}, "P_drop = 0.0", 5.77, 24.6),
    "no_smoothing": ("D", "no label smoothing", {"label_smoothing": 0.0}, "eps_ls = 0.0", 4.67, 25.3),
    "learned_positions": ("E", "learned positions", {"position_embedding_type": "learned"},
                          "positional embedding instead of sinusoids", 4.92, 25.7),
}
_FRACTIONS = {"d/16": 1 / 16, "d/2": 1 / 2, "3d/2": 3 / 2, "ff/2": 1 / 2, "3ff/2": 3 / 2}


def row_shape(base: ModelShape, row: str) -> ModelShape:
    """The ablation base with a row's changes; widths given as fractions ("d/2") are taken of the base's."""
    fields = {}
    for key, value in TABLE3_ROWS[row][2].items():
        if isinstance(value, str) and value in _FRACTIONS:
            reference = base.intermediate_size if value.startswith(("ff", "3ff")) else base.hidden_size
            value = max(1, int(round(reference * _FRACTIONS[value])))
        fields[key] = value
    return dataclasses.replace(base, **fields)


def row_settings(settings: TranslationSettings, row: str) -> dict[str, Any]:
    """Everything a row's numbers depend on (besides its seed): a finished run counts only if these match."""
    return {"pair": settings.pairs[0], "data_version": DATA_VERSION, "held_out": settings.held_out,
            "max_examples": settings.max_examples,
            "vocab_size": settings.vocab_size, "max_length": settings.max_length,
            "shape": asdict(row_shape(settings.ablation_model, row)), "epochs": settings.ablation_epochs,
            "max_tokens": settings.max_tokens, "learning_rate": settings.learning_rate,
            "warmup_steps": settings.ablation_warmup_steps, "average_last": settings.average_last,
            "checkpoint_every": settings.checkpoint_every, "num_beams": settings.num_beams,
            "length_penalty": settings.length_penalty, "curve_points": settings.ablation_curve_points,
            "dev_bleu_sentences": settings.dev_bleu_sentences, **decoding_fingerprint(settings),
            **precision_fingerprint(settings)}


# ================================================================================================ one row
def train_row(pair: PairData, settings: TranslationSettings, row: str, seed: int, progress: bool) -> dict[str, Any]:
    """Train one row for one seed as the base is trained, and score it (see the module docstring)."""
    from ...translation import corpus_scores, translate
    from ...translation.training import evaluate_loss, train_translation

    started = time.perf_counter()
    shape = row_shape(settings.ablation_model, row)
    model = build_model(shape, pair.tokenizer, settings.max_length, seed, settings.device)
    steps = steps_for(pair.train, settings.ablation_epochs, settings.max_tokens)
    average = settings.average_last if (settings.average_last - 1) * settings.checkpoint_every < steps else 1
    dev = pair.splits["validation"]
    dev_sources, dev_references = list(dev["source"]), list(dev["target"])
    eval_tokens = settings.max_tokens * 2

    def curve_point(current):  # cheap: greedy decoding of the first dev sentences
        scores = evaluate_loss(current, pair.dev, eval_tokens)
        hypotheses = translate(current, pair.tokenizer, dev_sources[: settings.dev_bleu_sentences], num_beams=1,
                               batch_size=64, extra_length=settings.decode_extra_length)
        scores["greedy_bleu"] = corpus_scores(hypotheses, dev_references[: settings.dev_bleu_sentences])["bleu"]
        return scores

    def final(current):  # as the paper scores: beam search on the whole dev split
        scores = evaluate_loss(current, pair.dev, eval_tokens)
        hypotheses = translate(current, pair.tokenizer, dev_sources, num_beams=settings.num_beams,
                               length_penalty=settings.length_penalty, batch_size=32,
                               extra_length=settings.decode_extra_length)
        scores.update({f"beam_{key}": value for key, value in corpus_scores(hypotheses, dev_references).items()
                       if key in ("bleu", "chrf")})
        return scores

    training = train_translation(
        model, pair.train, steps=steps, max_tokens=settings.max_tokens, learning_rate=settings.learning_rate,
        warmup_steps=min(settings.ablation_warmup_steps, max(1, steps // 2)), label_smoothing=shape.label_smoothing,
        average_last=average, checkpoint_every=settings.checkpoint_every, seed=seed, evaluate=curve_point,
        eval_every=max(1, steps // max(1, settings.ablation_curve_points)), evaluate_before_average=True,
        final_evaluate=final, description=f"table 3/{row} seed {seed}", progress=progress,
        precision=settings.precision,
        **snapshot_options(settings, f"table3-{row}", row_settings(settings, row), seed))
    group, label, _, paper_row, paper_perplexity, paper_bleu = TABLE3_ROWS[row]
    record = {"experiment": "translation", "arm": row, "seed": seed, "group": group, "label": label,
              "row_settings": row_settings(settings, row), "settings": asdict(shape),
              "parameters": sum(p.numel() for p in model.parameters()), "steps_done": training.steps,
              "loss_curve": training.loss_curve, "dev_curve": training.evaluations, "diverged": training.diverged,
              "checkpoints_averaged": training.averaged, "train_seconds": training.seconds,
              "earlier_attempts_cpu_seconds": training.earlier_cpu_seconds}
    if training.diverged:
        record["metrics"] = {}
        record["seconds"] = time.perf_counter() - started
        return record
    last = next(e for e in training.evaluations if e["step"] == training.steps and e["averaged"] == 1)
    averaged = training.evaluations[-1]
    test = pair.splits["test"]
    hypotheses = translate(model, pair.tokenizer, list(test["source"]), num_beams=settings.num_beams,
                           length_penalty=settings.length_penalty, batch_size=32,
                           extra_length=settings.decode_extra_length)
    test_scores = corpus_scores(hypotheses, list(test["target"]))
    record["metrics"] = {
        "dev_loss": averaged["loss"], "dev_perplexity": averaged["perplexity"], "dev_bleu": averaged["beam_bleu"],
        "dev_chrf": averaged["beam_chrf"], "dev_loss_last": last["loss"], "dev_bleu_last": last["beam_bleu"],
        "test_bleu": test_scores["bleu"], "test_chrf": test_scores["chrf"],
        "test_loss": evaluate_loss(model, split_features(pair, "test", settings), eval_tokens)["loss"]}
    record["sacrebleu_signature"] = test_scores["bleu_signature"]
    record["seconds"] = time.perf_counter() - started
    return record


# ================================================================================================ criteria
BLEU_MARGIN = 0.5  # BLEU points: a smaller difference counts as none, whatever the seeds say
LOSS_MARGIN = 0.02  # nats per target token (about 2 % in perplexity)
BASE_BLEU_FLOOR = 20.0  # the base must translate for the rows to mean anything


@dataclass(frozen=True)
class Criterion:
    """How a claim is decided. `kind`: "better" (the mean of `better` beats `worse` in `metric` by more than the
    seed spread and `margin`), "best_better" (the best of `better`'s rows beats `worse` so), "not_best_and_worse"
    (`worse` is not the best of `better`'s rows, and the best beats it so), "similar" (each metric's |difference|
    within the spread or `margin`), "at_least" (the mean of `better` in `metric` is at least `margin`).
    `written`: when and why (the first version of every claim was committed before the study's first run)."""

    kind: str
    metrics: tuple[str, ...]
    better: tuple[str, ...]
    worse: str = ""
    margins: tuple[float, ...] = ()
    written: str = "before the runs (commit of 2026-12-04)"


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    paper: str
    criteria: tuple[Criterion, ...]


def _dev_loss(better: str, worse: str) -> Criterion:
    return Criterion("better", ("dev_loss",), (better,), worse, (LOSS_MARGIN,))


CLAIMS: tuple[Claim, ...] = (
    Claim("base", "The base translates: its dev BLEU (beam search, averaged checkpoints) is at least 20.",
          "the issue's precondition: below it, differences between rows are noise",
          (Criterion("at_least", ("dev_bleu",), ("base",), margins=(BASE_BLEU_FLOOR,)),)),
    Claim("A1", "(A) Single-head attention is worse than the best head count.", "0.9 BLEU worse (24.9 vs 25.8)",
          (Criterion("best_better", ("test_bleu",), ("base", "heads_8", "heads_16"), "heads_1", (BLEU_MARGIN,)),)),
    Claim("A2", "(A) Quality also drops off with too many heads.", "32 heads: 25.4 vs 25.8 BLEU",
          (Criterion("not_best_and_worse", ("test_bleu",), ("heads_1", "base", "heads_8", "heads_16"), "heads_16",
                     (BLEU_MARGIN,)),)),
    Claim("B", "(B) Reducing the attention key size d_k hurts model quality.", "d_k 16: PPL 5.16 vs 4.92",
          (_dev_loss("base", "small_dk"),)),
    Claim("C1", "(C) Bigger models are better: the half-width model is worse than the base.",
          "d_model 256: PPL 5.75 vs 4.92", (_dev_loss("base", "narrow"),)),
    Claim("C2", "(C) Bigger models are better: the wider model beats the base.", "d_model 1024: PPL 4.66 vs 4.92",
          (_dev_loss("wide", "base"),)),
    Claim("C3", "(C) Fewer layers are worse.", "N = 4: PPL 5.19 vs 4.92", (_dev_loss("base", "layers_2"),)),
    Claim("C4", "(C) More layers are better.", "N = 8: PPL 4.88 vs 4.92 (BLEU 25.5 vs 25.8)",
          (_dev_loss("layers_4", "base"),)),
    Claim("D1", "(D) Dropout is very helpful in avoiding over-fitting.", "no dropout: PPL 5.77 vs 4.92",
          (_dev_loss("base", "no_dropout"),)),
    Claim("D2", "(D) Label smoothing hurts perplexity, as the model learns to be more unsure ...",
          "no smoothing: PPL 4.67 vs 4.92", (_dev_loss("no_smoothing", "base"),)),
    Claim("D3", "(D) ... but improves accuracy and BLEU.", "no smoothing: BLEU 25.3 vs 25.8",
          (Criterion("better", ("test_bleu",), ("base",), "no_smoothing", (BLEU_MARGIN,)),)),
    Claim("E", "(E) Learned positional embeddings give nearly identical results to sinusoids.",
          "PPL 4.92 vs 4.92, BLEU 25.7 vs 25.8",
          (Criterion("similar", ("test_bleu", "dev_loss"), ("learned_positions",), "base",
                     (2 * BLEU_MARGIN, 2 * LOSS_MARGIN)),)),
)

_LOWER_IS_BETTER = {"dev_loss": True, "dev_perplexity": True, "test_loss": True}


def decide(criterion: Criterion, rows: Mapping[str, Mapping[str, Sequence[float]]],
           pending: Collection[str] = ()) -> dict[str, Any]:
    """A criterion's verdict from per-row lists over seeds of each metric; "waiting" while a row it needs has no
    finished run, or is in `pending` (some of its seeds still to run: a verdict on part of a row's seeds would judge
    against a spread it does not have yet)."""
    needed = set(criterion.better) | ({criterion.worse} if criterion.worse else set())
    missing = sorted(row for row in needed if row in pending or not rows.get(row)
                     or not all(rows[row].get(m) for m in criterion.metrics))
    if missing:
        return {"held": None, "evidence": f"waiting for {', '.join(missing)}"}
    metric, margin = criterion.metrics[0], criterion.margins[0] if criterion.margins else 0.0
    lower = _LOWER_IS_BETTER.get(metric, False)
    mean = {row: mean_std(rows[row][metric])[0] for row in needed}
    if criterion.kind == "at_least":
        row = criterion.better[0]
        return {"held": mean[row] >= margin, "evidence": f"{metric} {format_mean_std(rows[row][metric], 2)} "
                                                         f"against {margin:g}"}
    if criterion.kind == "similar":
        parts, held = [], True
        for metric, margin in zip(criterion.metrics, criterion.margins):
            a, b = rows[criterion.better[0]][metric], rows[criterion.worse][metric]
            difference = mean_std(a)[0] - mean_std(b)[0]
            tolerance = max(math.hypot(mean_std(a)[1], mean_std(b)[1]), margin)
            held &= abs(difference) <= tolerance
            parts.append(f"{metric} {difference:+.3f} (tolerance {tolerance:.3f})")
        return {"held": held, "evidence": f"{criterion.better[0]} - {criterion.worse}: " + ", ".join(parts)}
    pick = min if lower else max
    if criterion.kind == "better":
        best = criterion.better[0]
    else:
        candidates = [row for row in criterion.better if row != criterion.worse or criterion.kind != "best_better"]
        best = pick(candidates, key=lambda row: mean[row])
    if criterion.kind == "not_best_and_worse" and best == criterion.worse:
        return {"held": False, "evidence": f"{criterion.worse} is the best row ({metric} {mean[best]:.3f})"}
    held, evidence = clearly_better(rows[best][metric], rows[criterion.worse][metric], lower_is_better=lower,
                                    min_difference=margin)
    return {"held": held, "evidence": f"{metric}: {best} {mean[best]:.3f}, {criterion.worse} "
                                      f"{mean[criterion.worse]:.3f}; {evidence}"}


def table3_claims(rows: Mapping[str, Mapping[str, Sequence[float]]],
                  pending: Collection[str] = ()) -> list[dict[str, Any]]:
    """Every claim with every version of its criterion decided; `held` (the latest version's) is None while a row it
    needs is unfinished: no run yet, or named in `pending` (seeds still to run)."""
    claims = []
    for claim in CLAIMS:
        versions = []
        for criterion in claim.criteria:
            versions.append({"criterion": describe(criterion), "written": criterion.written, **decide(criterion, rows, pending)})
        latest = versions[-1]
        claims.append({"claim": claim.text, "key": claim.key, "paper": claim.paper, "criterion": latest["criterion"],
                       "held": latest["held"], "evidence": latest["evidence"], "versions": versions})
    return claims


def describe(criterion: Criterion) -> str:
    metric = criterion.metrics[0]
    margin = criterion.margins[0] if criterion.margins else 0.0
    unit = "BLEU" if "bleu" in metric else "nats"
    if criterion.kind == "at_least":
        return f"mean {metric} of {criterion.better[0]} at least {margin:g}"
    if criterion.kind == "similar":
        return (f"{criterion.better[0]} and {criterion.worse} within the seed spread or "
                + " and ".join(f"{m} {g:g}" for m, g in zip(criterion.metrics, criterion.margins)))
    side = "below" if _LOWER_IS_BETTER.get(metric, False) else "above"
    if criterion.kind == "better":
        return (f"mean {metric} of {criterion.better[0]} {side} {criterion.worse}'s by more than the seed spread "
                f"and {margin:g} {unit}")
    if criterion.kind == "best_better":
        return (f"mean {metric} of the best of {', '.join(criterion.better)} {side} {criterion.worse}'s by more "
                f"than the seed spread and {margin:g} {unit}")
    return (f"{criterion.worse} is not the best of {', '.join(criterion.better)} by {metric}, and the best is "
            f"{side} it by more than the seed spread and {margin:g} {unit}")


# ================================================================================================ report
METRICS = ("dev_loss", "dev_perplexity", "dev_bleu", "dev_chrf", "dev_bleu_last", "test_bleu", "test_chrf")


def summarise(runs: Sequence[Mapping[str, Any]], rows: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Per row, each metric's list over the finished (not diverged) seeds."""
    return {row: {metric: [run["metrics"][metric] for run in runs if run["arm"] == row and run.get("metrics")]
                  for metric in METRICS} for row in rows}


def table3_markdown(results: Mapping[str, Any]) -> list[str]:
    s = results["settings"]
    a = s["ablation_model"]
    seeds = results["seeds"]
    runs = results["runs"]
    lines = ["## Table 3: the paper's ablations", "",
             f"On {results['ablation_data']}. Base: {a['layers']}+{a['layers']} layers, width {a['hidden_size']}, "
             f"{a['heads']} heads, feed-forward {a['intermediate_size']}, dropout {a['dropout']}, label smoothing "
             f"{a['label_smoothing']}, {a['position_embedding_type']} positions; every row trained as the base: "
             f"{s['ablation_epochs']} epochs of batches of at most {s['max_tokens']} padded tokens, peak learning rate "
             f"{s['learning_rate']} after {s['ablation_warmup_steps']} warmup steps (inverse square root), the last "
             f"{s['average_last']} checkpoints averaged; beam {s['num_beams']}, length penalty "
             f"{s['length_penalty']}{decoding_limit_text(s)}. Dev perplexity per target token and BLEU / chrF "
             f"(sacreBLEU) of the averaged weights; 'dev BLEU, last' is the paper's table-3 protocol (beam search, no "
             f"averaging). Mean ± std over "
             f"seeds {', '.join(map(str, seeds))}. The paper's numbers are dev perplexity and BLEU on newstest2013 "
             "English-German with a 6-layer, width-512 base: compare directions of effect, not values.", ""]
    finished = {(run["arm"], run["seed"]) for run in runs}
    rows = list(results["table3_rows"])
    missing = [f"{row} seed {seed}" for row in rows for seed in seeds if (row, seed) not in finished]
    if missing:
        lines += [f"**Partial report: {len(missing)} of {len(rows) * len(seeds)} runs not finished** "
                  f"({', '.join(missing)}); their rows show what is finished, and claims that need them wait.", ""]
    lines += ["| group | row | parameters | seeds done | dev perplexity | dev BLEU | dev BLEU, last | test BLEU | "
              "test chrF | the paper's row: PPL, BLEU | training minutes per run |", "|---" * 11 + "|"]
    summary = results["summary"]
    for row in rows:
        group, label, _, paper_row, paper_perplexity, paper_bleu = TABLE3_ROWS[row]
        row_runs = [run for run in runs if run["arm"] == row]
        values = summary.get(row, {})
        done = [run for run in row_runs if run.get("metrics")]
        cells = [format_mean_std(values[m], 2 if m != "dev_perplexity" else 2) if values.get(m) else "–"
                 for m in ("dev_perplexity", "dev_bleu", "dev_bleu_last", "test_bleu", "test_chrf")]
        diverged = sum(1 for run in row_runs if run.get("diverged"))
        seeds_done = f"{len(done)}/{len(seeds)}" + (f" ({diverged} diverged)" if diverged else "")
        parameters = f"{row_runs[0]['parameters'] / 1e6:.2f} M" if row_runs else "–"
        # Training time over every attempt (a run resumed from a snapshot carries its earlier attempts' time);
        # a run's `seconds` is its last attempt's alone.
        minutes = f"{np.mean([run['train_seconds'] for run in row_runs]) / 60:.0f}" if row_runs else "–"
        lines.append(f"| {group} | {label} | {parameters} | {seeds_done} | " + " | ".join(cells)
                     + f" | {paper_row}: {paper_perplexity}, {paper_bleu} | {minutes} |")
    lines += ["", "| claim | the paper | criterion (fixed before the runs) | measured | held? |",
              "|---|---|---|---|---|"]
    for claim in results["table3_claims"]:
        for number, version in enumerate(claim["versions"], start=1):
            mark = {True: "**yes**", False: "**no**", None: "waiting"}[version["held"]]
            name = claim["claim"] if number == 1 else f"(criterion v{number}, written {version['written']})"
            lines.append(f"| {name} | {claim['paper'] if number == 1 else ''} | {version['criterion']} | "
                         f"{version['evidence']} | {mark} |")
    lines += ["", differences_from_paper(results), ""]
    return lines


def differences_from_paper(results: Mapping[str, Any]) -> str:
    """What separates this study from the paper's table 3, in the study's own numbers (a quick preset's report
    describes its own small base, not the default study's)."""
    s = results["settings"]
    a = s["ablation_model"]
    base_runs = [run for run in results["runs"] if run["arm"] == "base"]
    size = f" of about {base_runs[0]['parameters'] / 1e6:.1f} M parameters" if base_runs else ""
    steps = (f", about {int(np.median([run['steps_done'] for run in base_runs])):,} steps" if base_runs else "")
    seeds = len(results["seeds"])
    pair = results.get("ablation_pair")
    data = LANGUAGE_PAIRS.get(pair, pair) if pair else ""
    small_dk = next((run for run in results["runs"] if run["arm"] == "small_dk"), None)
    values = (f" ({small_dk['parameters'] / 1e6:.2f} M parameters against the base's "
              f"{base_runs[0]['parameters'] / 1e6:.2f} M, where the paper's d_k = 16 row had 58 M against 65 M: "
              "what it loses is capacity as well as key size)" if small_dk and base_runs else "")
    return (f"What differs from the paper: the data (the {data + ' ' if data else ''}pairs above, against 4.5 M "
            f"sentence pairs of WMT 2014 English-German), the size (a {a['layers']}+{a['layers']}-layer, "
            f"width-{a['hidden_size']} base{size} against 65 M), the training ({s['ablation_epochs']:g} "
            f"epochs{steps} of at most {s['max_tokens']:,} padded tokens, against 100,000 steps of 25,000 source and "
            "25,000 target tokens), the tokenizer (a shared byte-level BPE of "
            f"{s['vocab_size']:,} pieces against 37,000 word pieces), (B) shrinks values with keys{values}, and the "
            f"scores are reported on test as well as dev. {seeds} seed{'s' if seeds != 1 else ''} per row: a "
            "difference has to clear both the seed spread and a fixed margin to count." + over_fitting_text(results))


def over_fitting_text(results: Mapping[str, Any]) -> str:
    """Whether the row without dropout had begun to over-fit: its dev loss between its last two curve points (the
    last weights, before averaging), per seed. Dropout's benefit in the paper is against over-fitting; a budget that
    ends while the dev loss still falls cannot show it."""
    moves = []
    for run in results["runs"]:
        if run["arm"] != "no_dropout":
            continue
        points = [e for e in run.get("dev_curve") or [] if e.get("averaged", 1) == 1 and "loss" in e]
        if len(points) >= 2:
            moves.append((points[-2], points[-1]))
    if not moves:
        return ""
    falling = sum(after["loss"] < before["loss"] for before, after in moves)
    said = "; ".join(f"{before['loss']:.3f} at step {before['step']:,} -> {after['loss']:.3f} at step "
                     f"{after['step']:,}" for before, after in moves)
    if falling == len(moves):
        return (f" Without dropout the dev loss was still falling at the end in every seed ({said}): at this budget "
                "the model had not begun to over-fit, which is what dropout guards against in the paper.")
    return (f" Without dropout the dev loss rose between its last two points in {len(moves) - falling} of "
            f"{len(moves)} seeds ({said}).")


def plot_table3(results: Mapping[str, Any], path) -> Any:
    from ..figures import pyplot, save_figure

    plt = pyplot()
    figure, (bleu_axes, loss_axes, bars) = plt.subplots(1, 3, figsize=(17, 4.8))
    rows = list(results["table3_rows"])
    for index, row in enumerate(rows):
        row_runs = [run for run in results["runs"] if run["arm"] == row and run.get("dev_curve")]
        if not row_runs:
            continue
        style = dict(color=f"C{index % 10}", linestyle="-" if index < 10 else "--", label=row)
        # Greedy BLEU on the first dev sentences is measured on the way only (the end is scored by beam search, a
        # different measure, in the table); the dev loss is the same measure on the way and at the last step.
        for axes, key in ((bleu_axes, "greedy_bleu"), (loss_axes, "loss")):
            points = [[e for e in run["dev_curve"] if e.get("averaged", 1) == 1 and key in e] for run in row_runs]
            length = min(len(p) for p in points)
            if length:
                axes.plot([e["step"] for e in points[0][:length]],
                          np.mean([[e[key] for e in p[:length]] for p in points], axis=0), **style)
        values = [run["metrics"]["test_bleu"] for run in row_runs if run.get("metrics")]
        if values:
            bars.bar(index, np.mean(values), yerr=np.std(values, ddof=1) if len(values) > 1 else 0, capsize=3,
                     color=style["color"], alpha=0.75)
            bars.plot([index] * len(values), values, "k.", ms=5)
    bleu_axes.set(xlabel="step", ylabel="dev BLEU, greedy, first 500 sentences", title="dev BLEU while training")
    loss_axes.set(xlabel="step", ylabel="dev loss per target token (nats)", title="dev loss while training")
    bars.set_xticks(range(len(rows)))
    bars.set_xticklabels(rows, rotation=45, ha="right", fontsize="small")
    bars.set(ylabel="test BLEU, beam 4, averaged (dots: seeds)", title="table 3 rows")
    bleu_axes.legend(fontsize="x-small", ncol=2)
    for axes in (bleu_axes, loss_axes, bars):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)
