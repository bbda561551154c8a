#!/usr/bin/env python
"""What attention dropout buys on the fine-tuning recipe's default job, over seeds: the recipe with the model's own
attention dropout (all-MiniLM-L6-v2: 0.1) against --attention_dropout 0, everything else at its defaults, each with
--seeds (one process per setting, the recipe's own mean ± std). Accuracy and macro-F1 on the test split; training
time is recorded too, but step times belong to benchmarks/finetune_vs_trainer.py, measured on a quiet machine.

    python benchmarks/attention_dropout_study.py --seeds 1,2,3 --output benchmarks/results/attention_dropout_study.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"model's attention dropout (0.1)": [], "attention dropout 0": ["--attention_dropout", "0"]}


def run(setting: str, flags: list[str], seeds: str, work: Path) -> dict:
    out = work / setting.split()[0]
    command = [sys.executable, "recipes/finetune.py", "--seeds", seeds, "--output_dir", str(out),
               "--progress_bar", "false", "--report_to", "none", *flags]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    numbers = {}
    for metric in ("accuracy", "macro_f1"):
        values = [r["test"][metric] for r in runs]
        numbers[metric] = {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                           "runs": values}
    numbers["train_seconds"] = [r["train_seconds"] for r in runs]
    numbers["seeds"] = [r["seed"] for r in runs]
    return numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--output", type=Path, required=True, help="JSON results (a PNG is written beside it)")
    args = parser.parse_args(argv)
    record = {"seeds": args.seeds, "load_average_before": os.getloadavg(), "settings": {}}
    with tempfile.TemporaryDirectory() as work:
        for setting, flags in SETTINGS.items():
            record["settings"][setting] = run(setting, flags, args.seeds, Path(work))
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record, indent=2) + "\n")  # incremental
            print(setting, json.dumps(record["settings"][setting]), flush=True)
    plot(record, args.output.with_suffix(".png"))


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(record["settings"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for axis, metric in zip(axes, ("accuracy", "macro_f1")):
        for index, setting in enumerate(settings):
            numbers = record["settings"][setting][metric]
            axis.bar(index, numbers["mean"], yerr=numbers["std"], capsize=5, color=f"C{index}")
            axis.scatter([index] * len(numbers["runs"]), numbers["runs"], color="black", s=12, zorder=3)
        axis.set_xticks(range(len(settings)), settings, fontsize=8)
        axis.set_title(f"test {metric} (mean ± std, seeds {record['seeds']})")
        low = min(min(record["settings"][s][metric]["runs"]) for s in settings)
        axis.set_ylim(max(0.0, low - 0.1), 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
