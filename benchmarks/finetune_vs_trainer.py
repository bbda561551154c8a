#!/usr/bin/env python
"""The user's real job end to end: `accelerate launch recipes/finetune.py` (its defaults: all-MiniLM-L6-v2 + LoRA on
hadith-en) against the same job in transformers' Trainer (benchmarks/trainer_finetune_job.py: same data, weights,
LoRA settings, batch size and steps), each in its own process, in alternated pairs.

Per run: start-up (launch to the end of the first optimiser step, less one steady step), steady step (median gap
between consecutive step ends after the first two), between steps (first to last step end, less the steady steps:
a whole job's periodic evaluations and checkpoints), end of run (last step end to process exit: final evaluations,
saving, and for the recipe the best-model reload, merge, model card and plot), whole wall time and peak resident
memory. Arms: recipe, trainer, and with --attention-dropout-zero also both with attention dropout 0.

--max-steps 0 runs each job whole, as a user runs the recipe: its default length (one epoch of the 6,000-example
subset) with an evaluation and a checkpoint every 100 steps and the best model reloaded at the end, on both sides.

    python benchmarks/finetune_vs_trainer.py --pairs 4 --max-steps 20 --output benchmarks/results/finetune_vs_trainer_cpu.json
    python benchmarks/finetune_vs_trainer.py --pairs 2 --max-steps 0 --output benchmarks/results/finetune_vs_trainer_full_cpu.json
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_arm(arm: str, max_steps: int, work: Path) -> dict:
    out = work / arm.replace(" ", "_")
    shutil.rmtree(out, ignore_errors=True)
    timings = work / f"{arm.replace(' ', '_')}.json"
    zero = arm.endswith("attention dropout 0")
    if arm.startswith("recipe"):
        command = ["accelerate", "launch", "recipes/finetune.py", "--logging_steps", "1",
                   "--output_dir", str(out), "--progress_bar", "false", "--report_to", "none"]
        command += ["--max_steps", str(max_steps)] if max_steps else []
        command += ["--attention_dropout", "0"] if zero else []
    else:
        command = [sys.executable, "benchmarks/trainer_finetune_job.py", str(out), "--max_steps", str(max_steps),
                   "--timings", str(timings)] + (["--attention_dropout", "0"] if zero else [])
    launched = time.time()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    exited = time.time()
    stderr = process.stderr.read()
    if status != 0:
        raise RuntimeError(f"{arm} failed ({status}):\n{stderr[-3000:]}")
    if arm.startswith("recipe"):
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        ends = [r["time"] for r in records if "loss" in r and "time" in r]
        results = json.loads((out / "results.json").read_text())
        run = results["runs"][0] if "runs" in results else results
        accuracy = {"validation_accuracy": run["validation"].get("accuracy"), "test_accuracy": run["test"].get("accuracy")}
    else:
        recorded = json.loads(timings.read_text())
        ends = recorded["step_ends"]
        accuracy = {k: recorded[k] for k in ("validation_accuracy", "test_accuracy")}
    gaps = [b - a for a, b in zip(ends[1:], ends[2:])]
    steady = statistics.median(gaps)
    return {
        "arm": arm, "startup_s": ends[0] - launched - steady, "steady_step_s": steady,
        "end_of_run_s": exited - ends[-1], "wall_s": exited - launched, "steps": len(ends),
        # Between the first and last step, what steady steps do not account for: the periodic evaluations and
        # checkpoints of a whole job (and the steps' own spread).
        "between_steps_s": (ends[-1] - ends[0]) - (len(ends) - 1) * steady,
        "peak_rss_mib": usage.ru_maxrss / 1024, **accuracy,
    }


def launcher_overhead(runs: int = 3) -> list[float]:
    """Seconds `accelerate launch` takes to run a script that does nothing: the launcher's own process (it imports
    torch and accelerate, then starts the script's interpreter), which a plain `python script.py` does not pay."""
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "empty.py"
        script.write_text("pass\n")
        times = []
        for _ in range(runs):
            start = time.time()
            subprocess.run(["accelerate", "launch", str(script)], check=True, capture_output=True)
            times.append(time.time() - start)
    return times


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        summary[arm] = {key: {"median": statistics.median(r[key] for r in mine),
                              "min": min(r[key] for r in mine), "max": max(r[key] for r in mine)}
                        for key in ("startup_s", "steady_step_s", "between_steps_s", "end_of_run_s", "wall_s",
                                    "peak_rss_mib") if all(key in r for r in mine)}
    return summary


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = [("startup_s", "start-up"), ("between_steps_s", "between steps"), ("end_of_run_s", "end of run"),
              ("wall_s", "whole run")]
    arms = list(summary)
    phases = [phase for phase in phases if all(phase[0] in summary[arm] for arm in arms)]
    fig, axes = plt.subplots(1, len(phases) + 1, figsize=(3.5 * (len(phases) + 1), 3.6))
    for axis, (key, label) in zip(axes, phases + [("steady_step_s", "steady step")]):
        medians = [summary[a][key]["median"] for a in arms]
        errors = [[m - summary[a][key]["min"] for a, m in zip(arms, medians)],
                  [summary[a][key]["max"] - m for a, m in zip(arms, medians)]]
        axis.bar(range(len(arms)), medians, yerr=errors, capsize=4, color=["C0", "C1", "C2", "C3"][: len(arms)])
        axis.set_xticks(range(len(arms)), [a.replace(", attention dropout 0", "\nattn. drop. 0") for a in arms], fontsize=7)
        axis.set_title(f"{label} (s)")
    fig.suptitle("Fine-tuning recipe vs transformers Trainer, same job (median, min-max over pairs)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4, help="alternated pairs of runs per arm (default: %(default)s)")
    parser.add_argument("--max-steps", type=int, default=20,
                        help="optimiser steps per run; 0 = each job whole (the recipe's default length, periodic "
                             "evaluation and checkpoints, best-model reload) (default: %(default)s)")
    parser.add_argument("--attention-dropout-zero", action="store_true",
                        help="also run both jobs with attention dropout 0")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (a PNG is written beside it)")
    parser.add_argument("--launcher-only", action="store_true",
                        help="only time `accelerate launch` of an empty script (3 runs), added to an existing --output")
    parser.add_argument("--plot-only", action="store_true", help="only redraw the PNG of an existing --output")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.output.read_text())["summary"], args.output.with_suffix(".png"))
        return
    if args.launcher_only:
        record = json.loads(args.output.read_text())
        record["accelerate_launch_empty_script_s"] = launcher_overhead()
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        print(record["accelerate_launch_empty_script_s"])
        return
    arms = ["recipe", "trainer"]
    if args.attention_dropout_zero:
        arms += ["recipe, attention dropout 0", "trainer, attention dropout 0"]
    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for pair in range(args.pairs):
            for arm in arms if pair % 2 == 0 else list(reversed(arms)):
                result = run_arm(arm, args.max_steps, Path(work))
                runs.append(result)
                print(json.dumps(result), flush=True)
                if args.output:
                    write(args, runs, load_before)
    summary = summarise(runs)
    for arm, numbers in summary.items():
        print(f"{arm:>30}: " + ", ".join(f"{k} {v['median']:.2f}" for k, v in numbers.items()))
    if args.output:
        write(args, runs, load_before)
        plot(summary, args.output.with_suffix(".png"))


def write(args, runs, load_before):
    args.output.parent.mkdir(parents=True, exist_ok=True)
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "load_average_before": load_before,
              "load_average_after": os.getloadavg(), "runs": runs, "summary": summarise(runs)}
    args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
