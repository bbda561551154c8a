#!/usr/bin/env python
"""Urdu adaptation study: which way of adapting an English model to Urdu helps, measured in units that do not depend
on the tokenizer.

Each arm is one run of recipes/domain_adapt.py per seed, at the recipe's default budget (or --quick / --full), in
its own process; the seed sets the adaptation and the downstream fine-tuning alike. Arms:

  unadapted            all-MiniLM-L6-v2 as it is (its own tokenizer; a masked-LM head fitted per language)
  none                 continued masked-LM pretraining only, no new vocabulary
  random               + 8k Urdu pieces, rows from transformers' default resizing (Hewitt 2021)
  mean                 + Urdu pieces, rows = mean of the old pieces spelling them (Gee et al. 2022)
  focus                + Urdu pieces, FOCUS from fastText on the adaptation text (Dobler & de Melo 2023)
  trans-tokenization   + Urdu pieces, aligned English pieces via eflomal on en-ur pairs (Remy et al. 2024)
  lora                 + Urdu pieces (mean rows), LoRA adapters with only the new rows trainable (PEFT
                       trainable_token_indices)
  smollm2-unadapted    SmolLM2-135M (Llama-style decoder) as it is: exact bits per byte, and the same downstream
                       check as a sequence classifier
  smollm2-none         SmolLM2-135M after causal-LM continued pretraining without new vocabulary, the same measures
                       ('smollm2' names both)
  from-scratch         the adapted arms' architecture and extended tokenizer, random weights, the same text and
                       steps: is the English pretraining worth anything?
  translate-test       the Urdu test paragraphs translated to English by our own ur->en model, classified by the
                       unadapted model fine-tuned on the English task (needs the translation study's saved model)
  unadapted-equal-text, lora-equal-text
                       the equal-text control: both fine-tuned on the first 20 words of every paragraph, in
                       128 tokens (about the words the unadapted tokenizer fits in the study's 64)

Per arm: bits per byte of held-out Urdu and English (same bytes for every model), fertility, throughput, and the
downstream "which collection" task (fine-tuning with early stopping; mean ± std over seeds; majority baseline).
Writes, under --output-dir: study.json, study.md, bits_per_byte.png (validation bits per byte against training
steps), downstream.png (accuracy per arm with error bars), and study.partial.jsonl with one line per finished run (a
cut-off study keeps its runs, and a rerun skips them; a run cut off half way is resumed from its checkpoints, not
started again).

    python benchmarks/urdu_adaptation.py --jobs 2                       # the committed study (docs/urdu/)
    python benchmarks/urdu_adaptation.py --quick --arms unadapted,mean --seeds 1 --output-dir /tmp/urdu-quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's transformer_zoo (the verdicts and the recipe's defaults come from it)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from urdu_adaptation_report import markdown, plots  # noqa: E402  (study.md and the plots)
from urdu_study_arms import (ARM_ALIASES, ARMS, UNADAPTED_MODEL_ARMS, VARIANT_ARMS,  # noqa: E402  (the arms)
                             arm_precision)
from urdu_study_summary import latest_records, recipe_default_arm, summarise  # noqa: E402  (study.json)
from transformer_zoo.training.engine.workers import ends_with_parent  # noqa: E402  (runs end with the study)

QUICK = ["--max_train_paragraphs", "200", "--eval_paragraphs", "30", "--urdu_vocab_size", "600", "--max_steps", "4",
         "--eval_steps", "2", "--save_steps", "none", "--head_warmup_steps", "2", "--bpb_sentences", "4",
         "--curve_sentences", "3", "--downstream_train_examples", "36", "--downstream_validation_examples", "12",
         "--downstream_test_examples", "12", "--downstream_eval_steps", "2", "--per_device_batch_size", "8"]
# The study's downstream check fine-tunes every weight (steadier than the recipe's default LoRA check, whose fine-tunes
# were still improving after twice the epochs: docs/urdu/convergence-lora.md), at the recipe's peak rate for it. The
# recipe keeps LoRA by default because full fine-tuning takes its default run past 15 minutes.
# At most 8 epochs with patience 5 (250 steps, two epochs): under the recipe's 4 epochs the unadapted model was still
# improving at the last evaluation and gained +0.025 test accuracy with 8 (docs/urdu/convergence-full-4epochs.md),
# and the 300-paragraph validation loss moves by ~0.03 between evaluations, so a shorter patience stops on noise.
# The precision is each arm's (arm_precision), given explicitly: the recipe's "auto" resolves by machine.
STUDY_DOWNSTREAM = ["--downstream_mode", "full", "--downstream_epochs", "8", "--downstream_patience", "5"]
# Every study run checkpoints its fine-tunes once per validation (50 steps, the recipe's --downstream_eval_steps), so
# that a run cut off (a machine taken back, a session's end) resumes where it stopped: one of SmolLM2's fine-tunes
# takes hours of a core. Checkpoints do not change the numbers, so this is not part of the protocol.
STUDY_SAVE_STEPS = ["--downstream_save_steps", "50"]
# A --quick study checks the pipeline, not convergence: at most two downstream epochs instead of the study's eight (its
# end-to-end test runs eight downstream fine-tunes, and at eight epochs that test was the longest in the suite).
QUICK_DOWNSTREAM = ["--downstream_epochs", "2", "--downstream_patience", "2"]
QUICK_SMOLLM2_MEASURES = ["--bpb_sentences", "3", "--per_device_batch_size", "2"]
QUICK_SMOLLM2_TRAINING = ["--max_steps", "2", "--eval_steps", "1"]


def task_flags(arm: str, seed: int, budget: str, english_task: bool, threads: int) -> list[str]:
    if arm in VARIANT_ARMS:  # the base arm, its downstream check with the variant's flags and precision
        base, extra = VARIANT_ARMS[arm]
        flags = task_flags(base, seed, budget, english_task, threads)
        return flags[:-2] + ["--downstream_mixed_precision", arm_precision(arm, budget)] + extra
    flags = ["--seed", str(seed), "--progress_bar", "false", "--report_to", "none", "--cpu_threads", str(threads),
             "--overwrite_output_dir"]
    budget_flags = {"quick": QUICK, "full": ["--full"], "default": []}[budget]
    # Every arm, the decoder included, has the same downstream check (the decoder as a sequence classifier).
    flags += ["--downstream_seeds", str(seed)]
    flags += budget_flags
    flags += ARMS[arm]
    decoder = arm.startswith("smollm2")
    if decoder and budget == "quick":
        flags += (QUICK_SMOLLM2_TRAINING if arm == "smollm2-none" else []) + QUICK_SMOLLM2_MEASURES
    if arm in UNADAPTED_MODEL_ARMS:
        flags += ["--downstream_models", "unadapted"]
    else:
        flags += ["--measure_unadapted", "false", "--downstream_models", "adapted"]
    if not decoder:  # (a decoder's bits per byte are exact: no pseudo-likelihood variants)
        flags += ["--word_l2r", "true"]  # the study reports both pseudo-likelihoods; the recipe only Salazar et al.'s
    flags += STUDY_SAVE_STEPS + STUDY_DOWNSTREAM + (QUICK_DOWNSTREAM if budget == "quick" else [])
    if english_task and not decoder:
        flags += ["--english_downstream", "true"]
    return flags + ["--downstream_mixed_precision", arm_precision(arm, budget)]  # last: variants replace it


def budget_downstream_flags(budget: str, arm: str = "unadapted") -> list[str]:
    """The downstream flags of a budget's preset for an arm (a --redo-downstream run keeps its budget's task
    sizes)."""
    flags = {"quick": QUICK, "default": []}[budget]
    pairs = zip(flags[::2], flags[1::2])
    extra = VARIANT_ARMS[arm][1] if arm in VARIANT_ARMS else []
    return [item for flag, value in pairs if flag.startswith("--downstream") for item in (flag, value)] \
        + STUDY_DOWNSTREAM + (QUICK_DOWNSTREAM if budget == "quick" else []) \
        + ["--downstream_mixed_precision", arm_precision(arm, budget)] + extra


def current_protocol(budget: str, arm: str = "unadapted") -> dict:
    """The downstream protocol a new run of an arm would use."""
    from types import SimpleNamespace

    import torch

    from transformer_zoo.training.adaptation.downstream import downstream_precision, downstream_protocol
    from transformer_zoo.training.adaptation.recipe import build_parser

    args = build_parser().parse_args(budget_downstream_flags(budget, arm))
    # The recipe's own resolution of the precision, for the accelerator a CPU run creates.
    run = SimpleNamespace(mixed_precision=args.mixed_precision, device=torch.device("cpu"))
    return downstream_protocol(args, downstream_precision(args.downstream_mixed_precision, run))


def _environment(threads: int) -> dict:
    # This checkout's package, whatever an editable install points at: a study run from a snapshot of the tree
    # keeps using that snapshot while the working tree changes.
    return dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def redo_task(entry: dict, budget: str, threads: int, work: Path, english_task: bool) -> dict:
    """Repeat one run's downstream check on the models it saved (benchmarks/urdu_downstream_rerun.py); the record
    rebuilt from its updated results.json."""
    arm, seed = entry["arm"], entry["seed"]
    out = work / arm / f"seed-{seed}"
    command = [sys.executable, "benchmarks/urdu_downstream_rerun.py", str(out), "--cpu_threads", str(threads),
               *budget_downstream_flags(budget, arm)]
    # The study's --english-task-arms decides, not the finished run's own flag (which may be from another study).
    command += ["--english_downstream", "true" if english_task else "false"]
    started = time.perf_counter()
    with (out.parent / f"seed-{seed}.redo.log").open("w") as log:
        code = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              env=_environment(threads), **ends_with_parent()).returncode
    if code != 0:
        raise RuntimeError(f"{arm} seed {seed}: the downstream re-run failed (exit {code}); see "
                           f"{out.parent}/seed-{seed}.redo.log")
    results = json.loads((out / "results.json").read_text())
    common = {key: entry[key] for key in ("seed", "wall_seconds", "cpu_seconds", "threads") if key in entry}
    common["downstream_redo_seconds"] = round(time.perf_counter() - started, 1)
    return record(arm, results, "unadapted" if arm in UNADAPTED_MODEL_ARMS else "adapted", common)


def run_task(arm: str, seed: int, budget: str, english_task: bool, threads: int, work: Path) -> dict:
    """One recipe run and its record."""
    out = work / arm / f"seed-{seed}"
    flags = task_flags(arm, seed, budget, english_task, threads)
    if arm == "translate-test":  # the seeds share one translation of the test paragraphs (the translator is fixed)
        flags += ["--downstream_translate_test_cache", str(work / arm / "translations.jsonl")]
    out.parent.mkdir(parents=True, exist_ok=True)
    attempts = start_attempt(out, flags)
    if attempts > 1:  # an earlier attempt with these flags was cut off: the recipe continues it
        flags = ["--resume" if flag == "--overwrite_output_dir" else flag for flag in flags]
        print(f"{arm} seed {seed}: resuming the attempt that was cut off (attempt {attempts}).", flush=True)
    command = [sys.executable, "recipes/domain_adapt.py", "--output_dir", str(out), *flags]
    env = _environment(threads)
    started = time.perf_counter()
    with (out.parent / f"seed-{seed}.log").open("a" if attempts > 1 else "w") as log:
        # The run ends with this study (a study killed and started again would otherwise find it still running).
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   **ends_with_parent())
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed (exit {process.returncode}); see {out.parent}/seed-{seed}.log")
    results = json.loads((out / "results.json").read_text())
    common = {"seed": seed, "wall_seconds": round(time.perf_counter() - started, 1),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "threads": threads}
    if attempts > 1:  # the times above are the last attempt's; the fine-tunes' own train_seconds span all of them
        common["attempts"] = attempts
    return record(arm, results, "unadapted" if arm in UNADAPTED_MODEL_ARMS else "adapted", common)


def start_attempt(out: Path, flags: list[str]) -> int:
    """Counts this attempt of the run in `out` (its flags beside it, in OUT.attempt.json) and returns the count: 1
    for a fresh start, more when an earlier attempt with the same flags left its folder behind. Other flags (another
    budget, a changed arm) start afresh."""
    ledger = out.parent / f"{out.name}.attempt.json"
    earlier = json.loads(ledger.read_text()) if ledger.is_file() else None
    attempts = earlier["attempts"] + 1 if earlier and earlier["flags"] == flags and out.is_dir() else 1
    ledger.write_text(json.dumps({"flags": flags, "attempts": attempts}) + "\n")
    return attempts


def record(arm: str, results: dict, which: str, common: dict) -> dict:
    measures = results[which]
    urdu, english = measures["urdu"], measures.get("english", {})
    entry = {"arm": arm, **common, "bpb_urdu": urdu["bits_per_byte"],
             "bpb_urdu_word_l2r": urdu.get("bits_per_byte_word_l2r"), "bpb_english": english.get("bits_per_byte"),
             "bpb_english_word_l2r": english.get("bits_per_byte_word_l2r"), "fertility": urdu["fertility"],
             "single_character_word_share": urdu["single_character_word_share"],
             "unknown_share": urdu["unknown_share"], "tokens_per_byte": urdu["tokens_per_byte"],
             "tokens_per_second": urdu.get("tokens_per_second"), "bytes_per_second": urdu.get("bytes_per_second"),
             "steps": results["steps"] if which == "adapted" else 0, "best_step": results.get("best_step"),
             "new_tokens": results["new_tokens"] if which == "adapted" else 0,
             "new_row_sources": results.get("new_row_sources") if which == "adapted" else None,
             "train_seconds": results["train_seconds"] if which == "adapted" else 0.0}
    if which == "adapted":
        entry["curve"] = results["curve"]
    else:
        entry["curve"] = [{"step": 0, "bits_per_byte": urdu.get("curve_bits_per_byte")}]
    for language, check in (results.get("downstream") or {}).items():
        if language == "translate_test":  # translate-test stands in the study's Urdu column, with its translator
            language = "urdu"
            entry["translation_quality"] = check.get("translation_quality")
        if check and which in check:
            run = check[which]["runs"][0]
            entry[f"downstream_{language}"] = {k: run[k] for k in ("accuracy", "macro_f1", "steps", "best_step")}
            entry[f"majority_{language}"] = check["majority_baseline"]["accuracy"]
            entry["downstream_sizes"] = check["sizes"]
            entry["downstream_protocol"] = check.get("protocol")  # None: a run from before protocols were recorded
    return entry


def _finished(record: dict) -> bool:
    """Whether a record counts as done: a decoder run from before the decoder arms had the downstream check does
    not (it is run again, with the check, and the new record supersedes it)."""
    return not record["arm"].startswith("smollm2") or "downstream_urdu" in record


def write_outputs(records: list[dict], folder: Path, setup: dict) -> dict:
    records = latest_records(records)
    study = summarise(records, recipe_default_arm())
    study["setup"] = setup
    (folder / "study.json").write_text(json.dumps(study, indent=2) + "\n")
    (folder / "study.md").write_text(markdown(study, setup, records))
    plots(study, folder)
    return study


def _arms_named(name: str) -> tuple[str, ...]:
    """The arms a name in --arms or --tasks stands for: itself, or an alias's arms."""
    return ARM_ALIASES.get(name.strip(), (name.strip(),))


def _parse_tasks(text: str, parser) -> list[tuple[str, int]]:
    try:
        wanted = [(arm, int(part.split(":")[1])) for part in text.split(",") for arm in _arms_named(part.split(":")[0])]
    except (IndexError, ValueError):
        parser.error(f"--tasks takes arm:seed pairs, got {text!r}")
    bad = [arm for arm, _ in wanted if arm not in ARMS and arm not in VARIANT_ARMS]
    if bad:
        parser.error(f"unknown arm(s) in --tasks: {', '.join(bad)}")
    return wanted


def redo_downstream(records: list[dict], args, budget: str, threads: int, work: Path, folder: Path, partial: Path,
                    setup: dict, parser, english: set[str]) -> dict | None:
    wanted = _parse_tasks(args.tasks, parser) if args.tasks else None

    def stale(r):  # a check made under another protocol than the arm's now (the old decoder runs have none)
        return not r["arm"].startswith("smollm2") and r.get("downstream_protocol") != current_protocol(budget, r["arm"])

    todo = [r for r in records if stale(r) and (wanted is None or (r["arm"], r["seed"]) in wanted)]
    if wanted is not None:  # --tasks gives the order too
        todo.sort(key=lambda r: wanted.index((r["arm"], r["seed"])))
    print(f"{len(todo)} downstream checks to repeat under each arm's current protocol; {args.jobs} at a time.", flush=True)
    setup["downstream_redo"] = {"when": setup["when"], "command": setup["command"]}
    failures, lock = [], threading.Lock()

    def one(entry):
        try:
            new = redo_task(entry, budget, threads, work, entry["arm"] in english)
        except RuntimeError as error:
            failures.append(str(error))
            print(f"FAILED: {error}", flush=True)
            return
        with lock:
            records[records.index(entry)] = new
            temporary = partial.with_suffix(".tmp")
            temporary.write_text("".join(json.dumps(r) + "\n" for r in records))
            temporary.replace(partial)  # whole-file replace: a cut-off redo keeps every record
        print(f"{entry['arm']} seed {entry['seed']}: accuracy {entry.get('downstream_urdu', {}).get('accuracy')} -> "
              f"{new.get('downstream_urdu', {}).get('accuracy')} ({new['downstream_redo_seconds']:.0f} s)", flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, todo))
    setup["load_average_end"] = os.getloadavg()
    if failures:
        raise SystemExit(f"{len(failures)} re-run(s) failed: " + "; ".join(failures))
    remaining = [f"{r['arm']}:{r['seed']}" for r in records if stale(r)]
    if remaining:  # the outputs would mix protocols
        print(f"Not rebuilding the outputs: {', '.join(remaining)} still have another downstream protocol.")
        return None
    return write_outputs(records, folder, setup)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms (default: all: {', '.join(ARMS)}); 'smollm2' names both "
                        "decoder arms")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, each arm once per seed")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--quick", action="store_true", help="a tiny budget (seconds per run): checks the pipeline")
    budget.add_argument("--full", action="store_true", help="the recipe's --full preset (hours per run on 2 cores)")
    parser.add_argument("--tasks", default=None,
                        help="explicit runs in this order, as arm:seed pairs (e.g. mean:2,unadapted:3; smollm2:1 is "
                        "both decoder runs of seed 1); overrides the "
                        "seed-by-seed order of --arms x --seeds (to finish the most needed runs first)")
    parser.add_argument("--english-task-arms", default="unadapted,DEFAULT",
                        help="arms that also run the English version of the downstream task ('DEFAULT' = the "
                        "recipe's default arm; 'none'); it doubles their downstream time")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time, each on cpu-count/jobs threads (2 on 2 cores: one thread each)")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "docs" / "urdu",
                        help="where study.json/.md/.png and study.partial.jsonl go")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="the runs' output folders (default: OUTPUT_DIR/runs, not committed)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per run (default: CPU cores / --jobs); e.g. --jobs 1 --threads 1 leaves "
                        "a core to another study running beside this one")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild study.json/.md/.png from study.partial.jsonl without running anything")
    parser.add_argument("--redo-downstream", action="store_true",
                        help="repeat the downstream checks of the recorded runs whose protocol differs from the "
                        "recipe's current one, on the models those runs saved in --work-dir (the adaptation is not "
                        "repeated), then rebuild the outputs; --tasks limits it to those runs")
    args = parser.parse_args(argv)
    arms = [arm for name in args.arms.split(",") if name.strip() for arm in _arms_named(name)]
    unknown = [a for a in arms if a not in ARMS and a not in VARIANT_ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; choose from {', '.join([*ARMS, *VARIANT_ARMS])}")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    default_arm = recipe_default_arm()
    english = {a.strip().replace("DEFAULT", default_arm) for a in args.english_task_arms.split(",")} - {"none"}
    budget_name = "quick" if args.quick else "full" if args.full else "default"
    folder = args.output_dir
    folder.mkdir(parents=True, exist_ok=True)
    work = args.work_dir or folder / "runs"
    partial = folder / "study.partial.jsonl"
    records = [json.loads(line) for line in partial.read_text().splitlines() if line.strip()] \
        if partial.is_file() else []
    setup = {"command": " ".join(argv if argv is not None else sys.argv[1:]),
             "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "budget": budget_name,
             "machine": f"{os.cpu_count()} CPU cores, torch threads per run {threads},"
                        f" {args.jobs} run(s) at a time", "load_average_start": os.getloadavg(),
             "english_task_arms": sorted(english)}
    if args.report_only:
        previous = folder / "study.json"
        if previous.is_file():  # the runs' own set-up (command, machine, load), not this rebuild's
            setup = dict(json.loads(previous.read_text()).get("setup", setup),
                         rebuilt=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        return write_outputs(records, folder, setup)
    if args.redo_downstream:
        if budget_name == "full":
            parser.error("--redo-downstream repeats default or --quick budget checks, not --full ones")
        return redo_downstream(records, args, budget_name, threads, work, folder, partial, setup, parser, english)
    done = {(r["arm"], r["seed"]) for r in records if _finished(r)}
    # Seed by seed, so that a cut-off study has every arm at the first seeds.
    tasks = [(arm, seed) for seed in seeds for arm in arms if (arm, seed) not in done]
    if args.tasks:
        wanted = _parse_tasks(args.tasks, parser)
        tasks = [task for task in wanted if task not in done]
    print(f"{len(tasks)} runs to do ({len(done)} already in {partial}); {args.jobs} at a time.", flush=True)

    failures = []

    def one(task):
        arm, seed = task
        started = time.perf_counter()
        try:
            new = [run_task(arm, seed, budget_name, arm in english, threads, work)]
        except RuntimeError as error:  # one failed run must not stop the others; it is reported at the end
            failures.append(str(error))
            print(f"FAILED: {error}", flush=True)
            return []
        with partial.open("a") as handle:
            for entry in new:
                handle.write(json.dumps(entry) + "\n")
        records.extend(new)
        print(f"{arm} seed {seed}: done in {time.perf_counter() - started:.0f} s; "
              + "; ".join(f"{e['arm']} Urdu bpb {e['bpb_urdu']:.4f}"
                          + (f", accuracy {e['downstream_urdu']['accuracy']:.3f}" if 'downstream_urdu' in e else "")
                          for e in new), flush=True)
        return new

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for _ in pool.map(one, tasks):
            setup["load_average_end"] = os.getloadavg()
            write_outputs(records, folder, setup)
    setup["load_average_end"] = os.getloadavg()
    study = write_outputs(records, folder, setup)
    if failures:
        raise SystemExit(f"{len(failures)} run(s) failed: " + "; ".join(failures))
    return study


if __name__ == "__main__":
    main()
