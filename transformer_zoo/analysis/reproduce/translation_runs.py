"""The translation study's runs: which are finished (a run counts only if it recorded the settings it would run with
now), the shorter budgets a default model was continued from, and the study's totals over every run.

Split from `translation` (the study itself) so that the bookkeeping that makes `--resume` and `--report-only` work
reads in one place.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers.utils import logging

from .translation_setup import (DATA_VERSION, ModelShape, TranslationSettings, decoding_fingerprint, for_pair,
                                precision_fingerprint)
from .translation_table3 import row_settings

logger = logging.get_logger(__name__)


def default_settings(settings: TranslationSettings, name: str) -> dict[str, Any]:
    """Everything a pair's default model depends on (besides its seed): a finished run counts only if these match."""
    settings = for_pair(settings, name)
    return {"pair": name, "data_version": DATA_VERSION, "split_long_paragraphs": settings.split_long_paragraphs,
            "held_out": settings.held_out, "max_examples": settings.max_examples,
            "vocab_size": settings.vocab_size, "max_length": settings.max_length, "model": asdict(settings.model),
            "epochs": settings.epochs, "max_tokens": settings.max_tokens, "learning_rate": settings.learning_rate,
            "warmup_steps": settings.warmup_steps, "average_last": settings.average_last,
            "checkpoint_every": settings.checkpoint_every, "num_beams": settings.num_beams,
            "length_penalty": settings.length_penalty, "dev_bleu_sentences": settings.dev_bleu_sentences,
            "samples": settings.samples, **decoding_fingerprint(settings), **precision_fingerprint(settings)}


def settings_from_dict(values: Mapping[str, Any]) -> TranslationSettings:
    """The `TranslationSettings` a report's JSON recorded (unknown keys from other versions are ignored)."""
    known = {field.name for field in dataclasses.fields(TranslationSettings)}
    fields = {key: value for key, value in values.items() if key in known}
    for key in ("model", "ablation_model"):
        if isinstance(fields.get(key), Mapping):
            fields[key] = ModelShape(**fields[key])
    for key in ("pairs", "ablation_rows"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    return TranslationSettings(**fields)


def _expected(task: tuple, settings: TranslationSettings) -> dict[str, Any]:
    kind, name, row, _ = task
    expected = default_settings(settings, name) if kind == "default" else row_settings(settings, row)
    return json.loads(json.dumps(expected))  # as a JSON line records it (tuples become lists)


def finished_runs(settings: TranslationSettings, tasks: Sequence[tuple]) -> dict[tuple, dict[str, Any]]:
    """The tasks already done: lines of `settings.partial_file`, then runs of `settings.previous_report`, each kept
    only if it recorded the settings the task would run with now."""
    wanted = {task: _expected(task, settings) for task in tasks}
    found: dict[tuple, dict[str, Any]] = {}
    if settings.previous_report and Path(settings.previous_report).exists():
        report = json.loads(Path(settings.previous_report).read_text())
        recorded = settings_from_dict(report.get("settings", {}))
        for name, output in report.get("pairs", {}).items():
            task = ("default", name, None, output.get("seed", report["seeds"][0]))
            # Reports written before runs carried their settings: the report's own settings stand for them, with
            # the data of that time (version 1).
            output = dict(output, task_settings=output.get("task_settings") or
                          dict(_expected(task, recorded), data_version=1))
            if wanted.get(task) == output["task_settings"]:
                found[task] = output
        for output in report.get("runs", []):
            task = ("ablation", report.get("ablation_pair"), output["arm"], output["seed"])
            if wanted.get(task) is not None and wanted[task] == output.get("row_settings"):
                found[task] = output
    if settings.partial_file and Path(settings.partial_file).exists():
        for line in Path(settings.partial_file).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by a kill mid-write: that run is simply done again
                logger.warning(f"{settings.partial_file}: skipping an unreadable line (a run cut off while written)")
                continue
            task = tuple(entry["task"])
            output = entry["output"]
            recorded = output.get("task_settings") if task[0] == "default" else output.get("row_settings")
            if wanted.get(task) is not None and wanted[task] == recorded:
                found[task] = output
    return found


# What the report keeps of a shorter budget's run (not its samples or loss curve: the longer run has its own).
BUDGET_FIELDS = ("epochs", "steps", "test_bleu", "test_chrf", "retrieval_bleu", "retrieval_chrf", "copy_bleu",
                 "copy_chrf", "test_loss", "train_seconds", "dev_evaluations", "decoding", "language_pair", "pair",
                 "test_sentences", "checkpoints_averaged")


def shorter_budgets(settings: TranslationSettings, tasks: Sequence[tuple]) -> dict[str, list[dict[str, Any]]]:
    """Each default model's finished runs under earlier settings: fewer epochs than it now trains (the budgets it was
    continued from: a longer budget continues a shorter one's final state), or the same or fewer epochs in another
    training precision (a run retrained in bf16 to fit a sitting), every other setting the same; fewest epochs first.
    The report shows them beside the current run, so settings changed after seeing numbers leave the earlier
    numbers, and their verdicts, in view. Each carries its `precision`."""
    found: dict[str, dict[tuple, dict[str, Any]]] = {}
    if not (settings.partial_file and Path(settings.partial_file).exists()):
        return {}
    wanted = {task[1]: _expected(task, settings) for task in tasks if task[0] == "default"}
    varying = ("epochs", "precision")
    for line in Path(settings.partial_file).read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue
        if not entry or entry["task"][0] != "default" or entry["task"][1] not in wanted:
            continue
        name, output = entry["task"][1], entry["output"]
        recorded, expected = output.get("task_settings") or {}, wanted[name]
        same = ({k: v for k, v in recorded.items() if k not in varying}
                == {k: v for k, v in expected.items() if k not in varying})
        epochs = recorded.get("epochs", expected["epochs"])
        precision = recorded.get("precision", "fp32")
        if same and (epochs < expected["epochs"]
                     or (epochs == expected["epochs"] and precision != expected.get("precision", "fp32"))):
            found.setdefault(name, {})[(epochs, precision)] = dict(
                {key: output[key] for key in BUDGET_FIELDS if key in output}, precision=precision)
    return {name: [runs[key] for key in sorted(runs)] for name, runs in found.items()}


def study_totals(tasks: Sequence[tuple], done: Mapping[tuple, Mapping[str, Any]]) -> dict[str, Any]:
    """How much the finished runs cost and where they ran. A run resumed from a snapshot took several attempts:
    its training time (`train_seconds`) covers them all, its run time (`seconds`) and CPU time (`cpu_seconds`) only
    the last, and the CPU time of the training before it is in `earlier_attempts_cpu_seconds`. Runs recorded before
    that field (or resumed from a snapshot written before it) count their last attempt's CPU time alone, and are
    counted apart, so the CPU total says what it covers."""
    outputs = [done[task] for task in tasks if task in done]
    every_attempt = [output["cpu_seconds"] + output["earlier_attempts_cpu_seconds"] for output in outputs
                     if output.get("cpu_seconds") is not None
                     and output.get("earlier_attempts_cpu_seconds") is not None]
    last_attempt_only = [output["cpu_seconds"] for output in outputs if output.get("cpu_seconds") is not None
                         and output.get("earlier_attempts_cpu_seconds") is None]
    # Which runs ran where (runs from before devices were recorded ran on this project's CPUs).
    machines: dict[str, list[str]] = {}
    for task in tasks:
        if task in done:
            kind, name, row, seed = task
            output = done[task]
            where = f"{output.get('device', 'cpu')}, {output.get('threads', '?')} thread(s)"
            machines.setdefault(where, []).append(f"{row} seed {seed}" if kind == "ablation" else name)
    spans = [(output["started_at"], output["finished_at"]) for output in outputs if "started_at" in output]
    return {"runs": len(outputs), "of": len(tasks), "machines": machines,
            "cpu_hours_every_attempt": sum(every_attempt) / 3600, "runs_with_every_attempt_cpu": len(every_attempt),
            "cpu_hours_last_attempt_only": sum(last_attempt_only) / 3600,
            "runs_with_last_attempt_cpu_only": len(last_attempt_only),
            "run_hours": sum(output["seconds"] for output in outputs) / 3600,
            "training_hours": sum(output.get("train_seconds", 0.0) for output in outputs) / 3600,
            "first_start_to_last_finish_hours": (max(e for _, e in spans) - min(s for s, _ in spans)) / 3600
            if spans else None}
