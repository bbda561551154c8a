#!/usr/bin/env python
"""What the default fine-tuning job's truncation costs: `recipes/finetune.py` with its defaults (all-MiniLM-L6-v2 +
LoRA on hadith-en, where `--max_length 128` cuts about a quarter of the passages) at several `--max_length`, the same
seeds for every length (a seed also fixes the data split, so each seed's runs see the same examples), alternating
lengths within each seed. Each run is its own process.

Per run: the test and best-validation accuracy and macro-F1, the examples each split truncated, the training time and
the load average before and after. The JSON is rewritten after every run, so a run cut short keeps what finished;
the PNG shows test accuracy and training time per length, each seed a point, with the mean and standard deviation.

    python benchmarks/finetune_max_length.py --lengths 128,256 --seeds 1,2,3 \\
        --output benchmarks/results/finetune_max_length_cpu.json
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def comma_ints(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def run_job(max_length: int, seed: int, work: Path, extra: list[str]) -> dict:
    out = work / f"len{max_length}-seed{seed}"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "recipes/finetune.py", "--max_length", str(max_length), "--seed", str(seed),
               "--output_dir", str(out), "--progress_bar", "false", "--report_to", "none", *extra]
    load_before = os.getloadavg()
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"--max_length {max_length} --seed {seed} failed:\n{completed.stderr[-3000:]}")
    results = json.loads((out / "results.json").read_text())
    run = results["runs"][0] if "runs" in results else results
    shutil.rmtree(out, ignore_errors=True)
    return {"max_length": max_length, "seed": seed,
            "test_accuracy": run["test"]["accuracy"], "test_macro_f1": run["test"]["macro_f1"],
            "validation_accuracy": run["validation"]["accuracy"], "steps": run["steps"],
            "truncated_examples": run["truncated_examples"], "train_seconds": run["train_seconds"],
            "wall_seconds": run["wall_seconds"], "load_average_before": load_before,
            "load_average_after": os.getloadavg()}


def summarise(runs: list[dict], lengths: list[int]) -> dict:
    summary = {}
    for length in lengths:
        arm = [run for run in runs if run["max_length"] == length]
        if not arm:
            continue
        summary[str(length)] = {
            key: {"mean": statistics.fmean(run[key] for run in arm),
                  "std": statistics.stdev(run[key] for run in arm) if len(arm) > 1 else None}
            for key in ("test_accuracy", "test_macro_f1", "validation_accuracy", "train_seconds")}
        summary[str(length)]["seeds"] = [run["seed"] for run in arm]
    return summary


def plot(runs: list[dict], lengths: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, key, label in ((axes[0], "test_accuracy", "test accuracy"), (axes[1], "train_seconds",
                                                                           "training time (s)")):
        for position, length in enumerate(lengths):
            values = [run[key] for run in runs if run["max_length"] == length]
            if not values:
                continue
            axis.scatter([position] * len(values), values, color="tab:blue", alpha=0.7)
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            axis.errorbar(position + 0.15, statistics.fmean(values), yerr=spread, fmt="s", color="black", capsize=4)
        axis.set_xticks(range(len(lengths)), [f"--max_length {length}" for length in lengths])
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    figure.suptitle("Default fine-tuning job (MiniLM + LoRA, hadith-en): points are seeds, squares mean ± std")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=comma_ints, default=[128, 256],
                        help="--max_length values to compare (default: 128,256)")
    parser.add_argument("--seeds", type=comma_ints, default=[1, 2, 3], help="seeds, each run at every length "
                        "(default: 1,2,3)")
    parser.add_argument("--max-steps", type=int, default=0,
                        help="--max_steps for each job; 0 runs the default job whole (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/finetune_max_length_cpu.json",
                        help="results JSON; the PNG is written beside it (default: %(default)s)")
    args = parser.parse_args(argv)
    extra = ["--max_steps", str(args.max_steps)] if args.max_steps else []
    record = {"command": " ".join(sys.argv), "lengths": args.lengths, "seeds": args.seeds,
              "max_steps": args.max_steps, "runs": []}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for index, seed in enumerate(args.seeds):
            # Alternate the order of the lengths from seed to seed, so a drift in machine load hits them alike.
            for length in args.lengths if index % 2 == 0 else reversed(args.lengths):
                record["runs"].append(run_job(length, seed, Path(work), extra))
                record["summary"] = summarise(record["runs"], args.lengths)
                args.output.write_text(json.dumps(record, indent=2) + "\n")
                print(json.dumps(record["runs"][-1]), flush=True)
    plot(record["runs"], args.lengths, args.output.with_suffix(".png"))
    return record


if __name__ == "__main__":
    main()
