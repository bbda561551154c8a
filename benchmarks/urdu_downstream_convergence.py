#!/usr/bin/env python
"""Is the Urdu downstream check's budget enough? The study's protocol (benchmarks/urdu_adaptation.py's downstream
flags: at most 8 epochs, early stopping on validation loss, bf16 autocast where native) against, on the same saved
models and seed:

  long   twice the epochs with no early stopping (the validation curve shows whether it still improves), and
  fp32   the protocol in full fp32 (what bf16 autocast changes).

It reads the study's finished runs (benchmarks/urdu_adaptation.py --work-dir) and fine-tunes their saved
downstream-start models again with benchmarks/urdu_downstream_rerun.py, leaving their results.json alone. Writes
convergence.json, convergence.md and convergence.png (--name) under --output-dir.

    python benchmarks/urdu_downstream_convergence.py --work-dir /tmp/urdu-runs --arms unadapted,lora --seed 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _curve(metrics_file: Path) -> list[dict]:
    records = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return [{"step": r["step"], "eval_loss": r["eval_loss"], "accuracy": r["accuracy"]} for r in records
            if r.get("split") == "validation"]


def _entry(check: dict, name: str, folder: Path, seed: int) -> dict:
    run = check["urdu"][name]["runs"][0]
    return {**{key: run[key] for key in ("accuracy", "macro_f1", "steps", "best_step", "train_seconds")},
            "protocol": check["urdu"].get("protocol"),
            "curve": _curve(folder / "urdu" / name / f"seed-{seed}" / "metrics.jsonl")}


VARIANTS = ("long", "fp32")


def measure(run_dir: Path, seed: int, epochs: float, threads: int, budget: str,
            wanted: tuple[str, ...] = VARIANTS) -> dict:
    rerun = _module("urdu_downstream_rerun").rerun
    study = _module("urdu_adaptation")
    results = json.loads((run_dir / "results.json").read_text())
    name = next(n for n in ("adapted", "unadapted") if n in (results.get("downstream") or {}).get("urdu", {}))
    current = study.current_protocol(budget)
    if results["downstream"]["urdu"].get("protocol") != current:
        raise SystemExit(f"{run_dir}'s downstream check is not the study's current protocol ({current}): run "
                         "benchmarks/urdu_adaptation.py --redo-downstream first.")
    out = {"model": name, "protocol": _entry(results["downstream"], name, run_dir / "downstream", seed)}
    common = ["--downstream_seeds", str(seed), "--english_downstream", "false", "--cpu_threads", str(threads),
              *study.budget_downstream_flags(budget)]
    variants = {"long": ["--downstream_epochs", f"{epochs:g}", "--downstream_patience", "100000"],
                "fp32": ["--downstream_mixed_precision", "no"]}
    for variant, flags in ((v, variants[v]) for v in wanted):
        folder = f"downstream-{variant}"
        # The variant's flags last: the study's own --downstream_epochs/--downstream_patience are in common.
        check = rerun(run_dir, [*common, *flags], folder=folder, update_results=False)
        out[variant] = _entry(check, name, run_dir / folder, seed)
    return out


def markdown(report: dict, name: str = "convergence") -> str:
    from transformer_zoo.training.adaptation.report import fine_tuning_name

    mode = fine_tuning_name({"mode": report.get("mode", "lora")})
    fp32 = all("fp32" in entry for entry in report["arms"].values())
    lines = ["# Does the downstream check converge?", "",
             f"`python benchmarks/urdu_downstream_convergence.py {report['command']}` — {report['when']}; "
             f"{report['machine']}; load average {report['load_average_start'][0]:.2f} at the start."
             + (f" {report['note']}" if report.get("note") else ""), "",
             f"The study's protocol ({mode}, at most {report['protocol_epochs']:g} epochs, early stopping on validation "
             f"loss, {report['precision']} autocast) against {report['long_epochs']:g} epochs without early stopping"
             + (" and against the protocol in fp32" if fp32 else "") + ", on the same saved model, data and seed. "
             "Test accuracy on the same 600 test paragraphs.", "",
             "| arm | protocol: accuracy (best step / steps) | long: accuracy (best step / steps) | long − protocol | "
             "long: highest validation accuracy (step) |"
             + (" fp32: accuracy (best step / steps) | fp32 − protocol |" if fp32 else ""),
             "|---|---|---|---|---|" + ("---|---|" if fp32 else "")]
    for arm, entry in report["arms"].items():
        p, long = entry["protocol"], entry["long"]
        peak = max(long["curve"], key=lambda point: point["accuracy"]) if long["curve"] else None
        line = (f"| {arm} | {p['accuracy']:.3f} ({p['best_step']} / {p['steps']}) | {long['accuracy']:.3f} "
                f"({long['best_step']} / {long['steps']}) | {long['accuracy'] - p['accuracy']:+.3f} | "
                + (f"{peak['accuracy']:.3f} ({peak['step']})" if peak else "—") + " |")
        if fp32:
            line += (f" {entry['fp32']['accuracy']:.3f} ({entry['fp32']['best_step']} / {entry['fp32']['steps']}) | "
                     f"{entry['fp32']['accuracy'] - p['accuracy']:+.3f} |")
        lines.append(line)
    arms = list(report["arms"])
    if len(arms) == 2:
        first, second = (report["arms"][a] for a in arms)
        lines += ["", f"Gap {arms[1]} − {arms[0]}: {second['protocol']['accuracy'] - first['protocol']['accuracy']:+.3f}"
                  f" under the protocol, {second['long']['accuracy'] - first['long']['accuracy']:+.3f} with the long "
                  "budget" + (f", {second['fp32']['accuracy'] - first['fp32']['accuracy']:+.3f} in fp32" if fp32 else "")
                  + "."]
    lines += ["", "Test accuracy is that of the model with the lowest validation loss (the protocol's selection, also "
              "in the long run). One seed: study.md gives the seed spread to compare the differences with. "
              f"{name}.png shows the validation curves."]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for arm, entry in report["arms"].items():
        for variant, style in (("protocol", "o-"), ("long", "-"), ("fp32", ":")):
            if variant not in entry:
                continue
            curve = entry[variant]["curve"]
            steps = [point["step"] for point in curve]
            for axis, key in zip(axes, ("eval_loss", "accuracy")):
                axis.plot(steps, [point[key] for point in curve], style, markersize=3, label=f"{arm}, {variant}")
    axes[0].set_ylabel("validation loss")
    axes[1].set_ylabel("validation accuracy")
    for axis in axes:
        axis.set_xlabel("fine-tuning step")
    axes[1].legend(fontsize=7)
    figure.suptitle("Urdu downstream fine-tuning: the check's protocol against a longer budget"
                    + (" and fp32" if all("fp32" in e for e in report["arms"].values()) else ""))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, required=True,
                        help="the study's run folders (benchmarks/urdu_adaptation.py --work-dir)")
    parser.add_argument("--arms", default="unadapted,lora", help="comma-separated arms whose runs are measured")
    parser.add_argument("--seed", type=int, default=1, help="the run (and fine-tuning seed) of each arm")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated comparisons to run: long (twice the epochs, no early stopping) and/or "
                        "fp32 (the protocol without bf16 autocast)")
    parser.add_argument("--long-factor", type=float, default=2.0, help="the long budget, in multiples of the epochs")
    parser.add_argument("--quick", action="store_true", help="runs of a --quick study (its task sizes)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "docs" / "urdu",
                        help="where NAME.json/.md/.png go")
    parser.add_argument("--name", default="convergence", help="the output files' name (NAME.json, .md, .png)")
    args = parser.parse_args(argv)
    budget = "quick" if args.quick else "default"
    epochs = _module("urdu_adaptation").current_protocol(budget)["epochs"]  # the study's, not the recipe's default
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    if "long" not in variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants takes long (always) and optionally fp32, got {args.variants!r}")
    missing = [a for a in arms if not (args.work_dir / a / f"seed-{args.seed}" / "results.json").is_file()]
    if missing:
        parser.error(f"no finished run for {', '.join(missing)} seed {args.seed} under {args.work_dir}")
    report = {"command": " ".join(argv if argv is not None else sys.argv[1:]),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{os.cpu_count()} CPU cores, {args.threads} torch threads",
              "load_average_start": os.getloadavg(), "protocol_epochs": epochs,
              "long_epochs": epochs * args.long_factor, "arms": {}}
    for arm in arms:
        report["arms"][arm] = measure(args.work_dir / arm / f"seed-{args.seed}", args.seed, epochs * args.long_factor,
                                      args.threads, budget, variants)
        protocol = report["arms"][arm]["protocol"]["protocol"] or {}
        report["precision"] = protocol.get("precision", "unrecorded")
        report["mode"] = protocol.get("mode", "lora")  # checks recorded before --downstream_mode were LoRA
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")  # per arm: kept
    report["load_average_end"] = os.getloadavg()
    (args.output_dir / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output_dir / f"{args.name}.md").write_text(markdown(report, args.name))
    plot(report, args.output_dir / f"{args.name}.png")
    return report


if __name__ == "__main__":
    main()
