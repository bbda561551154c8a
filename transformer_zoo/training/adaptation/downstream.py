"""The domain-adaptation recipe's downstream check: fine-tuning of the unadapted and the adapted model on the same
labelled task, the same way (--downstream_mode), over seeds, with the comparison against the seed spread."""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import datasets
import torch
from transformers.utils import logging as hf_logging

from ... import ZooEncoderForMaskedLM, ZooEncoderModel
from ...metrics import majority_baseline, mean_std
from .arguments import DOWNSTREAM_LEARNING_RATES
from .data import normalise_dataset, stratified_subset

logger = hf_logging.get_logger(__name__)


def classification_start(model, pooler_state: dict | None, tokenizer, folder: Path, accelerator) -> str:
    """Save a folder the fine-tuning recipe loads as a classifier's starting point: for an encoder, the backbone
    with the source's pooler (so base and adapted model start the classifier from the same pooler); otherwise the
    language model itself. Both models of the downstream check go through this, so they load the same way."""
    if accelerator.is_main_process:
        if isinstance(model, ZooEncoderForMaskedLM):
            encoder = ZooEncoderModel(model.config, add_pooling_layer=True)
            missing, unexpected = encoder.load_state_dict(model.model.state_dict(), strict=False)
            if unexpected or any(not name.startswith("pooler.") for name in missing):
                raise RuntimeError(f"The encoder does not fit: missing {missing}, unexpected {unexpected}.")
            if pooler_state is not None:
                encoder.pooler.load_state_dict(pooler_state)
            encoder.save_pretrained(folder)
        else:
            model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return str(folder)


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 in hardware (elsewhere bf16 autocast is emulated and slower than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return False


def downstream_precision(setting: str, accelerator) -> str:
    """The fine-tunes' autocast: the run's own --mixed_precision when it has one (its accelerator applies it),
    else --downstream_mixed_precision, with auto resolved for this device."""
    if accelerator.mixed_precision != "no":
        if setting == "no":
            raise ValueError(f"--downstream_mixed_precision no cannot undo --mixed_precision "
                             f"{accelerator.mixed_precision}, which the whole run uses: drop one of them.")
        return accelerator.mixed_precision
    if setting == "auto":
        return "bf16" if native_bf16(accelerator.device) else "no"
    return setting


def precision_context(precision: str, accelerator):
    """bf16 autocast around a fine-tune when the accelerator itself does not apply one. Weights, gradients and the
    optimiser stay fp32; matmuls run in bf16. docs/urdu/convergence-lora.md measures the accuracy effect against fp32."""
    if precision == "no" or accelerator.mixed_precision != "no":
        return contextlib.nullcontext()
    # cache_enabled=False: autocast caches the bf16 copy of each weight until its outermost context exits, and this
    # one spans a whole fine-tune, so every forward would reuse the first step's weights (measured: the classifier
    # never left its initial uniform predictions). Accelerate enters its autocast per step, which clears the cache.
    return torch.autocast(device_type=accelerator.device.type, dtype=torch.bfloat16, cache_enabled=False)


def downstream_check(args, corpus: datasets.DatasetDict, options: dict | None, card: dict, specs: dict[str, str],
                     accelerator, output_dir: Path, dataset_name: str) -> dict | None:
    """Fine-tuning of each model in `specs` (name -> classification_start folder) on the labelled `corpus`, the same
    way (--downstream_mode), seeds --downstream_seeds, with early stopping on --downstream_stopping_metric."""
    from ..finetune import recipe as finetuning

    if "label" not in corpus["train"].column_names:
        logger.warning(f"{dataset_name!r} has no labels: the downstream check is skipped (use hadith-ur).")
        return None
    # The same normalised text for every model; test paragraphs come from the test split, which adaptation never
    # reads.
    task_corpus = datasets.DatasetDict(
        train=stratified_subset(corpus["train"], args.downstream_train_examples, args.data_seed),
        validation=stratified_subset(corpus["validation"], args.downstream_validation_examples, args.data_seed),
        test=stratified_subset(corpus["test"], args.downstream_test_examples, args.data_seed),
    )
    if options is not None:
        task_corpus = datasets.DatasetDict({k: normalise_dataset(v, options) for k, v in task_corpus.items()})
    if args.downstream_max_words:
        words = args.downstream_max_words
        task_corpus = task_corpus.map(lambda batch: {"text": [" ".join(t.split()[:words]) for t in batch["text"]]},
                                      batched=True, desc=f"first {words} words")
    names = corpus["train"].features["label"].names
    task_data = finetuning.TaskData(task_corpus, names, dict(card, sizes={k: len(v) for k, v in task_corpus.items()}))
    parser = finetuning.build_parser()
    precision = downstream_precision(args.downstream_mixed_precision, accelerator)
    summary = {}
    jobs = []  # (model name, fine-tuning arguments, seed), in the order the report lists them
    for name, spec in specs.items():
        argv = ["--model", spec, "--task", "sequence-classification", "--mode", args.downstream_mode,
                "--dataset", dataset_name,
                "--max_length", str(args.downstream_max_length), "--num_epochs", str(args.downstream_epochs),
                "--learning_rate", str(downstream_learning_rate(args)),
                "--attention_dropout", str(args.downstream_attention_dropout),
                "--per_device_batch_size", str(args.downstream_batch_size),
                "--eval_steps", str(args.downstream_eval_steps), "--save_steps", "none",
                "--early_stopping_patience", str(args.downstream_patience),
                "--early_stopping_metric", args.downstream_stopping_metric,
                "--report_to", "none", "--progress_bar", str(args.progress_bar),
                "--mixed_precision", args.mixed_precision, "--merge_lora", "false",
                "--save_steps", str(args.downstream_save_steps or "none"), "--save_total_limit", "1"]
        if args.dropout_sampler is not None:
            argv += ["--dropout_sampler", args.dropout_sampler]
        if args.resume:
            argv += ["--resume"]  # each fine-tune's newest checkpoint in its own folder, if it has one
        jobs.extend((name, parser.parse_args(argv), seed) for seed in args.downstream_seeds)
    finished = finished_fine_tunes(jobs, output_dir, args.resume, accelerator.is_main_process)
    to_run = [job for index, job in enumerate(jobs) if index not in finished]
    workers = downstream_workers(args.downstream_jobs, accelerator, len(to_run))
    if workers > 1:
        fresh = run_in_processes(to_run, workers, task_data, precision, output_dir)
    else:
        fresh = []
        for name, fine_args, seed in to_run:
            with precision_context(precision, accelerator):
                fresh.append(finetuning.run_once(fine_args, seed, output_dir / name / f"seed-{seed}", accelerator,
                                                 task_data))
    fresh = iter(fresh)
    results = [finished[index] if index in finished else next(fresh) for index in range(len(jobs))]
    for (name, _, seed), result in zip(jobs, results):
        if accelerator.is_main_process:
            print(f"downstream ({dataset_name}) {name} seed {seed}: test accuracy {result['test']['accuracy']:.4f}, "
                  f"macro-F1 {result['test']['macro_f1']:.4f} ({result['steps']} steps, best at "
                  f"{result['best_step']})", flush=True)
    for name in specs:
        runs = [result for (job_name, _, _), result in zip(jobs, results) if job_name == name]
        summary[name] = {
            "runs": [{"seed": r["seed"], "steps": r["steps"], "best_step": r["best_step"],
                      "train_seconds": r["train_seconds"], "truncated_examples": r.get("truncated_examples"),
                      **{k: r["test"][k] for k in ("accuracy", "macro_f1")}}
                     for r in runs],
            **{k: dict(zip(("mean", "std"), mean_std([r["test"][k] for r in runs]))) for k in ("accuracy",
                                                                                            "macro_f1")},
        }
    baseline = majority_baseline(list(task_corpus["train"]["label"]), list(task_corpus["test"]["label"]))
    summary["majority_baseline"] = {k: baseline[k] for k in ("accuracy", "macro_f1") if k in baseline}
    summary["sizes"] = {k: len(v) for k, v in task_corpus.items()}
    summary["seeds"] = list(args.downstream_seeds)
    # Not part of the protocol: the threads per fine-tune change the numbers only to float rounding.
    summary["execution"] = {"fine_tunes_at_once": workers,
                            "threads_per_fine_tune": threads_per_fine_tune(workers)}
    # How the numbers were made: a study refuses to put checks with different protocols side by side.
    summary["protocol"] = downstream_protocol(args, precision)
    if "unadapted" in summary and "adapted" in summary:
        summary["comparison"] = compare_over_seeds(summary["adapted"]["accuracy"], summary["unadapted"]["accuracy"],
                                                   len(args.downstream_seeds))
    return summary


# The file in each fine-tune's folder that says how it was started, so that --resume never continues or reuses a
# fine-tune made with other flags. Flags that do not change the numbers may differ.
FINE_TUNE_ARGS = "fine_tune_args.json"
RESUME_NEUTRAL_FLAGS = ("resume", "overwrite_output_dir", "config", "progress_bar", "save_steps", "save_total_limit")


def _fine_tune_flags(fine_args, seed: int) -> dict:
    flags = {key: value for key, value in vars(fine_args).items() if key not in RESUME_NEUTRAL_FLAGS}
    return json.loads(json.dumps({**flags, "seed": seed}, sort_keys=True, default=str))


def finished_fine_tunes(jobs: list, output_dir: Path, resume, write: bool) -> dict[int, dict]:
    """The results of the fine-tunes of `jobs` that an earlier, cut-off run of the same check finished (job index ->
    results), read back on --resume; the other jobs' folders get their flags written (by the main process) before
    they start. A folder whose recorded flags differ from the job's is refused: continuing it or reusing its
    results would mix two protocols."""
    finished = {}
    for index, (name, fine_args, seed) in enumerate(jobs):
        folder = output_dir / name / f"seed-{seed}"
        flags = _fine_tune_flags(fine_args, seed)
        recorded_file = folder / FINE_TUNE_ARGS
        if resume and recorded_file.is_file():
            recorded = json.loads(recorded_file.read_text(encoding="utf-8"))
            changed = sorted(key for key in recorded.keys() | flags.keys() if recorded.get(key) != flags.get(key))
            if changed:
                shown = ", ".join(f"{key}: {recorded.get(key)!r} then, {flags.get(key)!r} now" for key in changed[:4])
                raise ValueError(f"--resume: the downstream fine-tune in {folder} was started with other flags "
                                 f"({shown}); resume with the flags it was started with, or start afresh with "
                                 "--overwrite_output_dir.")
            if (folder / "results.json").is_file():
                finished[index] = json.loads((folder / "results.json").read_text(encoding="utf-8"))
                logger.warning(f"--resume: the downstream fine-tune {name} seed {seed} finished before the cut; "
                               f"its results are read back from {folder}.")
                continue
        if write:
            folder.mkdir(parents=True, exist_ok=True)
            recorded_file.write_text(json.dumps(flags, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return finished


def downstream_workers(setting: str | int, accelerator, fine_tunes: int) -> int:
    """How many fine-tunes run at once (--downstream_jobs). In parallel only on a CPU run of one process: a launched
    multi-process run already shares out the cores, and a GPU runs one fine-tune at a time better."""
    if accelerator.num_processes > 1 or accelerator.device.type != "cpu" or fine_tunes < 2:
        return 1
    threads = torch.get_num_threads()
    if setting == "auto":
        return 2 if threads >= 2 else 1
    return max(1, min(int(setting), fine_tunes, threads))


def threads_per_fine_tune(workers: int) -> int:
    """Each of `workers` fine-tunes at once gets an equal share of this process's threads."""
    return max(1, torch.get_num_threads() // workers)


def _fine_tune_in_process(fine_args, seed: int, folder: Path, task_data, precision: str, threads: int) -> dict:
    """One fine-tune in a worker process: its own CPU accelerator and `threads` threads."""
    from accelerate import Accelerator

    from ..finetune import recipe as finetuning

    torch.set_num_threads(threads)
    hf_logging.set_verbosity_error()  # the parent reports each fine-tune; two workers' load reports would interleave
    accelerator = Accelerator(cpu=True, mixed_precision=fine_args.mixed_precision)  # as the parent's run has it
    with precision_context(precision, accelerator):
        return finetuning.run_once(fine_args, seed, folder, accelerator, task_data)


def run_in_processes(jobs: list, workers: int, task_data, precision: str, output_dir: Path) -> list[dict]:
    """The fine-tunes of `jobs`, `workers` at a time, each process with an equal share of this one's threads.

    Small models on a few cores gain more from fine-tunes side by side than from more threads per matrix product:
    one LoRA step of the check (MiniLM, 16 x 64 tokens, bf16 autocast) took 219 ms on two threads, two one-thread
    steps side by side 342 and 363 ms (1.24x the work done). Processes, not threads: each fine-tune seeds torch's
    global generator (head initialisation, dropout), which threads would share. Results come back in job order."""
    from ..engine.workers import worker_pool

    threads = threads_per_fine_tune(workers)
    logger.info(f"Downstream: {len(jobs)} fine-tunes, {workers} at a time with {threads} thread(s) each.")
    # Spawned workers that end with this process (engine/workers.py).
    with worker_pool(workers) as pool:
        futures = []
        for name, fine_args, seed in jobs:
            quiet = copy.copy(fine_args)
            quiet.progress_bar = False  # two bars in one terminal would overwrite each other
            futures.append(pool.submit(_fine_tune_in_process, quiet, seed, output_dir / name / f"seed-{seed}",
                                       task_data, precision, threads))
        return [future.result() for future in futures]


def downstream_learning_rate(args) -> float:
    """--downstream_learning_rate, or the default rate of --downstream_mode."""
    if args.downstream_learning_rate is not None:
        return args.downstream_learning_rate
    return DOWNSTREAM_LEARNING_RATES[args.downstream_mode]


def downstream_protocol(args, precision: str) -> dict:
    """The settings that decide a downstream number (sizes are recorded beside it, seeds per run)."""
    return {"mode": args.downstream_mode, "epochs": args.downstream_epochs,
            "learning_rate": downstream_learning_rate(args),
            "batch_size": args.downstream_batch_size, "max_length": args.downstream_max_length,
            "eval_steps": args.downstream_eval_steps, "patience": args.downstream_patience,
            "stopping_metric": args.downstream_stopping_metric, "precision": precision,
            "attention_dropout": args.downstream_attention_dropout,
            # only when set, so that the protocols of checks made before the flag existed still compare equal
            **({"max_words": args.downstream_max_words} if getattr(args, "downstream_max_words", None) else {})}


def seed_spread_verdict(gain: float, spread: float | None) -> str:
    """How a gain (positive = better) compares with a seed standard deviation; None = fewer than 2 seeds."""
    if spread is None:
        return "the seed spread is unknown (fewer than 2 seeds)"
    if gain > 2 * spread:
        return "better by more than twice the seed spread"
    if gain > spread:
        return "better by more than the seed spread, but not twice it"
    if gain < -spread:
        return "worse by more than the seed spread"
    return "within the seed spread"


def compare_over_seeds(adapted: dict, unadapted: dict, seeds: int, higher_is_better: bool = True) -> dict:
    """The gain of adapted over unadapted (mean ± std dicts over `seeds` seeds) against the larger seed spread.

    With fewer than two seeds there is no spread to compare with: the verdict says so instead of pretending the
    spread is zero."""
    gain = (adapted["mean"] - unadapted["mean"]) * (1 if higher_is_better else -1)
    spread = max(adapted["std"], unadapted["std"]) if seeds >= 2 else None
    verdict = seed_spread_verdict(gain, spread)
    if spread is None:
        verdict += "; run more --downstream_seeds"
    return {"gain": gain, "spread": spread, "verdict": verdict}
