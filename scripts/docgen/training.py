"""The training pages' tables: the default pretraining run, time to quality against nanoGPT and the sweep that
chose the defaults, the fine-tuning recipe's --max_length study."""

from __future__ import annotations

import json
import re
import statistics

from . import DOCS, ROOT


def max_length_study() -> str:
    """The fine-tuning recipe's --max_length 128 against 256 over seeds (the retired probe finetune_max_length.py)."""
    result_file = "benchmarks/results/finetune_max_length_cpu.json"
    record = json.loads((ROOT / result_file).read_text())
    by_length = {n: [run for run in record["runs"] if run["max_length"] == n] for n in record["lengths"]}
    short, long = record["lengths"][0], record["lengths"][-1]
    total = {n: sum(run["truncated_examples"]["test"]["truncated"] for run in runs) / len(runs)
             for n, runs in by_length.items()}

    def accuracy(n):
        mean, std = statistics.mean(r["test_accuracy"] for r in by_length[n]), statistics.stdev(
            r["test_accuracy"] for r in by_length[n])
        return f"{mean:.3f} ± {std:.3f}"

    ratio = (statistics.mean(r["train_seconds"] for r in by_length[long])
             / statistics.mean(r["train_seconds"] for r in by_length[short]))
    return (f"Over seeds {', '.join(map(str, record['seeds']))}, test accuracy was {accuracy(short)} at {short} tokens "
            f"({total[short]:.0f} test passages cut, mean over seeds) and {accuracy(long)} at {long} "
            f"({total[long]:.0f} cut), for "
            f"{ratio:.1f} times the training time (`{result_file}`).\n")


def pretrain_default() -> str:
    """One line on the committed default pretraining run, read from its log (docs/runs/pretrain-default-*.txt)."""
    log_path = sorted((DOCS / "runs").glob("pretrain-default-*.txt"))[-1]
    log = log_path.read_text()
    test = log.split("Test:", 1)[1]
    number = lambda name, text: float(re.search(rf"{name}\s+([\d.,]+)", text).group(1).replace(",", ""))  # noqa: E731
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)", log)
    sample = log.split("temperature 0.8):\n", 1)[1].split("\nSaved to", 1)[0]
    return (f"The default run here ([its log](runs/{log_path.name})): test **{number('bits_per_byte', test):.3f} bits "
            f"per byte** ({number('perplexity', test):.1f} perplexity per BPE token) after "
            f"{int(wall.group(1))} min {float(wall.group(2)):.0f} s, and its sample keeps the plays' layout:\n\n"
            "```text\n" + "\n".join(sample.splitlines()[:8]) + "\n```\n")


def time_to_quality() -> str:
    """The time-to-quality benchmark's arms side by side (benchmarks/time_to_quality.py's JSON)."""
    record = json.loads((ROOT / "benchmarks" / "results" / "time_to_quality_cpu.json").read_text())
    lines = ["| arm | wall time (s) | validation bits per byte (whole text) | parameters | steps |",
             "|---|---|---|---|---|"]
    repeats = len({run.get("repeat", 0) for run in record["runs"]})
    if repeats > 1:
        lines = ["| arm | repeat | wall time (s) | validation bits per byte (whole text) | parameters | steps |"
                 " training step (ms) |", "|---|---|---|---|---|---|---|"]
    for run in record["runs"]:
        parameters = f"{run['parameters'] / 1e6:.2f} M" if "parameters" in run else "0.80 M (nanoGPT's count)"
        repeat = f" {run.get('repeat', 0) + 1} |" if repeats > 1 else ""
        step = run.get("training_step_seconds")
        step = (f" {step * 1000:.1f} |" if step else " |") if repeats > 1 else ""
        lines.append(f"| {run['arm']} |{repeat} {run['wall_seconds']:.0f} | {run['validation_bits_per_byte']:.3f} | "
                     f"{parameters} | {run.get('steps', '2,000 (its max_iters)')} |{step}")
    before, after = record["load_average_before"][0], record["runs"][-1]["load_average_after"][0]
    lines.append("")
    lines.append(f"Text: {record['text']['characters']:,} characters, the last "
                 f"{record['text']['validation_characters']:,} for validation; load average {before:.2f} before the "
                 f"first arm and {after:.2f} after the last; torch {record['torch']}, {record['cpu_count']} cores.")
    goals = record.get("targets")
    if goals:
        verdict = {True: "**met**", False: "**not met**"}
        reach, within = goals["reach"], goals["within_nanogpt_wall"]
        first = "; reach and within-wall from the first repeat, each repeat's below" if repeats > 1 else ""
        lines += ["", f"The targets (computed by the benchmark's `targets()`{first}):", ""]
        if reach["seconds"] is None:
            lines.append(f"- Reach nanoGPT's {goals['nanogpt_bits_per_byte']:.3f} bits per byte in at most half its "
                         f"{goals['nanogpt_wall_seconds']:.0f} s: {verdict[False]}; the default run never got there.")
        else:
            lines.append(f"- Reach nanoGPT's {goals['nanogpt_bits_per_byte']:.3f} bits per byte in at most half its "
                         f"{goals['nanogpt_wall_seconds']:.0f} s ({goals['nanogpt_wall_seconds'] / 2:.1f} s): "
                         f"{verdict[reach['met']]}; the default run got there after {reach['seconds']:.0f} s "
                         f"({reach['share_of_nanogpt_wall']:.0%} of nanoGPT's time; {reach['measured_as']}).")
        if within:
            lines.append(f"- Within nanoGPT's wall time, at least {goals['clearly_lower']} bits per byte lower: "
                         f"{verdict[within['met']]}; {within['bits_per_byte']:.3f} after {within['seconds']:.0f} s "
                         f"({within['below_nanogpt_by']:+.3f} below nanoGPT; {within['measured_as']}).")
        step = goals.get("step_at_nanogpt_shape")
        if step:
            over = f", the median over {repeats} repeats of each tool's median" if "per_repeat" in step else ""
            lines.append(f"- At nanoGPT's exact shape, a step at least as fast: {verdict[step['met']]}; "
                         f"{step['zoo_seconds'] * 1000:.1f} ms against nanoGPT's {step['nanogpt_seconds'] * 1000:.1f}"
                         f" ms ({step['speedup']:.2f}x), evaluation included in both{over}.")
            alone = step.get("training_only")
            if alone:
                lines.append(f"  The training step alone (each tool's own step clock, evaluation left out): "
                             f"{alone['zoo_seconds'] * 1000:.1f} ms against {alone['nanogpt_seconds'] * 1000:.1f} ms "
                             f"({alone['speedup']:.2f}x, {verdict[alone['met']]}).")
            for index, pair in enumerate(step.get("per_repeat", [])):
                alone = pair.get("training_only")
                alone = (f"; alone {alone['zoo_seconds'] * 1000:.1f} against {alone['nanogpt_seconds'] * 1000:.1f}"
                         if alone else "")
                lines.append(f"  - repeat {index + 1}: {pair['zoo_seconds'] * 1000:.1f} ms against "
                             f"{pair['nanogpt_seconds'] * 1000:.1f} ms ({pair['speedup']:.2f}x){alone}")
        for index, each in enumerate(goals.get("repeats", [])):
            reach, within = each["reach"], each["within_nanogpt_wall"]
            reached = (f"reached {each['nanogpt_bits_per_byte']:.3f} after {reach['seconds']:.0f} s "
                       f"({reach['share_of_nanogpt_wall']:.0%} of nanoGPT's {each['nanogpt_wall_seconds']:.0f} s, "
                       f"{verdict[reach['met']]})" if reach["seconds"] is not None else "never reached nanoGPT")
            inside = (f"; {within['bits_per_byte']:.3f} within its wall time ({within['below_nanogpt_by']:+.3f}, "
                      f"{verdict[within['met']]})" if within else "")
            lines.append(f"- Repeat {index + 1}: {reached}{inside}.")
    return "\n".join(lines) + "\n"


def time_to_quality_sweep() -> str:
    """The sweep that chose the decoder's defaults (benchmarks/results/time_to_quality_sweep_cpu.json)."""
    record = json.loads((ROOT / "benchmarks" / "results" / "time_to_quality_sweep_cpu.json").read_text())
    peer = json.loads((ROOT / "benchmarks" / "results" / "time_to_quality_cpu.json").read_text())
    goal = next(run for run in peer["runs"] if run["arm"] == "nanogpt")["validation_bits_per_byte"]
    lines = ["| run | flags over the old defaults | parameters | steps | wall (s) | bits per byte at exit | "
             f"first evaluation at or below {goal:.3f} |", "|---|---|---|---|---|---|---|"]
    for run in record["runs"]:
        flags = run["command"].split("recipes/pretrain.py", 1)[1].replace("--eval_steps 50 --save_steps none", "")
        reached = next((p for p in run["curve"] if p["estimated_bits_per_byte"] <= goal), None)
        lines.append(f"| {run['arm']} | `{' '.join(flags.split())}` | {run['parameters'] / 1e6:.2f} M | {run['steps']} | "
                     f"{run['wall_seconds']:.0f} | {run['validation_bits_per_byte']:.3f} | "
                     + (f"{reached['seconds']:.0f} s (step {reached['step']})" if reached else "never") + " |")
    return "\n".join(lines) + "\n"
