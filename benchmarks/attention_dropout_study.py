#!/usr/bin/env python
"""What attention dropout buys on the fine-tuning recipe's default job, over seeds: the recipe with the model's own
attention dropout (all-MiniLM-L6-v2: 0.1) against --attention_dropout 0, everything else at its defaults, each with
one recipe process per seed and setting. Accuracy and macro-F1 on the test split; training
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


def run(flags: list[str], seed: int, out: Path) -> dict:
    """One recipe run (one seed, one setting); its test metrics and training time."""
    command = [sys.executable, "recipes/finetune.py", "--seed", str(seed), "--output_dir", str(out),
               "--overwrite_output_dir", "--progress_bar", "false", "--report_to", "none", *flags]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_results = json.loads((out / "summary.json").read_text())["runs"][0]
    return {"seed": seed, **{m: run_results["test"][m] for m in ("accuracy", "macro_f1")},
            "train_seconds": run_results["train_seconds"]}


def summarise(runs: list[dict]) -> dict:
    numbers = {}
    for metric in ("accuracy", "macro_f1"):
        values = [r[metric] for r in runs]
        numbers[metric] = {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                           "runs": values}
    numbers["seeds"] = [r["seed"] for r in runs]
    numbers["train_seconds"] = [r["train_seconds"] for r in runs]
    return numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--output", type=Path, required=True, help="JSON results (a PNG is written beside it)")
    args = parser.parse_args(argv)
    record = {"seeds": args.seeds, "load_average_before": os.getloadavg(), "runs": {name: [] for name in SETTINGS},
              "settings": {}}
    # Seed by seed, both settings each time, written after every run: a cut-off study keeps matched pairs.
    with tempfile.TemporaryDirectory() as work:
        for seed in (int(s) for s in args.seeds.split(",")):
            for setting, flags in SETTINGS.items():
                record["runs"][setting].append(run(flags, seed, Path(work) / "run"))
                record["settings"][setting] = summarise(record["runs"][setting])
                record["load_average_after"] = os.getloadavg()
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(json.dumps(record, indent=2) + "\n")
                print(setting, json.dumps(record["runs"][setting][-1]), flush=True)
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
        axis.set_title(f"test {metric} (mean ± std, seeds {', '.join(map(str, record['settings'][settings[0]]['seeds']))})", fontsize=9)
        low = min(min(record["settings"][s][metric]["runs"]) for s in settings)
        axis.set_ylim(max(0.0, low - 0.1), 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
