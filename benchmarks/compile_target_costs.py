#!/usr/bin/env python
"""What compiling the whole model costs against compiling the loss, at compare_hf.py's GPT-2 shape.

With `torch.compile(model)` the graph returns the logits, so AOTAutograd zero-fills a gradient for them at every
backward, and the backward adds it in. The zoo's logits are the first 50,257 columns of rows padded to 50,272
(modeling_zoo_vocabulary.py); AOTAutograd expects that gradient with the padded strides and `zeros_like` gives
contiguous ones, so it copies it once more. This script measures, in one process:

* the step time (best of --steps per round, arms alternating over --rounds) and the minor page faults per step of
  the zoo eagerly, with the loss compiled, with the model compiled, and with the model compiled and the padding off
  (`row_aligned_logits=False`), and of transformers' GPT-2 eagerly and with the model compiled;
* a torch.profiler pass (--profile-steps steps) per zoo arm: the time in inductor's generated code (the
  `## Call CompiledFxGraph` entries' own time), the vocabulary projection's forward product, and the copy_ and fill_
  of (batch, positions, vocabulary) tensors.

    python benchmarks/compile_target_costs.py --threads 2 --output benchmarks/results/compile_target_costs_cpu.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_hf  # noqa: E402

from transformer_zoo import free_reused_memory  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=3, help="steps per arm per round; the best counts")
    parser.add_argument("--profile-steps", type=int, default=2, help="profiled steps per zoo arm")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file, and a plot beside it (.png)")
    return parser.parse_args(argv)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_step(step, steps: int) -> float:
    """The median minor page faults of `steps` steps, after the first step of the arm's round."""
    counts = []
    for _ in range(steps):
        before = minor_faults()
        step()
        counts.append(minor_faults() - before)
    return statistics.median(counts)


def profiled_costs(step, steps: int, vocabulary: int) -> dict:
    """Per step (ms): inductor's generated code, the vocabulary projection's forward product, and the copy_ / fill_
    of logits-shaped tensors."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    costs = {"generated_code_ms": 0.0, "projection_forward_ms": 0.0, "logits_copy_ms": 0.0, "logits_fill_ms": 0.0,
             "all_operators_ms": 0.0}
    for event in prof.key_averages(group_by_input_shape=True):
        own = event.self_cpu_time_total / 1e3 / steps
        costs["all_operators_ms"] += own
        shapes = event.input_shapes or []
        if event.key.startswith("## Call CompiledFxGraph"):
            costs["generated_code_ms"] += own
        elif event.key in ("aten::mm", "aten::addmm") and shapes and shapes[-1][-1:] == [vocabulary]:
            costs["projection_forward_ms"] += own
        elif event.key == "aten::copy_" and shapes and shapes[0][-1:] == [vocabulary] and len(shapes[0]) == 3:
            costs["logits_copy_ms"] += own
        elif event.key == "aten::fill_" and shapes and shapes[0][-1:] == [vocabulary] and len(shapes[0]) == 3:
            costs["logits_fill_ms"] += own
    return costs


def plot(record: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(record["step_s"])
    figure, (times, faults) = plt.subplots(1, 2, figsize=(10, 4))
    colors = ["tab:blue" if arm.startswith("zoo") else "tab:orange" for arm in arms]
    times.barh(arms, [record["step_s"][arm] * 1e3 for arm in arms], color=colors)
    times.set_xlabel("training step (ms), median of the rounds' best")
    faults.barh(arms, [record["minor_faults_per_step"][arm] / 1e3 for arm in arms], color=colors)
    faults.set_xlabel("minor page faults per step (thousands)")
    faults.set_yticks([])
    figure.suptitle("GPT-2 shape: compiling the model against compiling the loss", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = argparse.Namespace(hidden=256, layers=4, heads=4, seq_len=256, batch_size=8, vocab_size=50257,
                               image_size=224, patch_size=16, new_tokens=64)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg()}
    zoo, peer, batch = compare_hf.build_pair("gpt2", shape, "sdpa")
    unpadded = copy.deepcopy(zoo)
    unpadded.config.row_aligned_logits = False
    for model in (zoo, unpadded, peer):
        model.train()
    runs = {
        "zoo eager": compare_hf.training_step(zoo, batch),
        "zoo, loss compiled": compare_hf.training_step(zoo, batch, compile_loss=True),
        "zoo, model compiled": compare_hf.training_step(torch.compile(zoo), batch),
        "zoo, model compiled, padding off": compare_hf.training_step(torch.compile(unpadded), batch),
        "transformers eager": compare_hf.training_step(peer, batch),
        "transformers, model compiled": compare_hf.training_step(torch.compile(peer), batch),
    }
    for run in runs.values():  # compile and warm up
        run()
        run()
    rounds = compare_hf.alternating_rounds(runs, args.rounds, args.steps)
    record["step_s"] = {arm: statistics.median(times) for arm, times in rounds.items()}
    record["rounds"] = rounds
    record["minor_faults_per_step"] = {}
    record["profile"] = {}
    for arm, run in runs.items():
        free_reused_memory()
        run()
        record["minor_faults_per_step"][arm] = faults_per_step(run, args.steps)
        if arm.startswith("zoo"):
            record["profile"][arm] = profiled_costs(run, args.profile_steps, shape.vocab_size)
    free_reused_memory()
    record["load_average_after"] = os.getloadavg()
    for arm in runs:
        costs = record["profile"].get(arm)
        detail = "" if costs is None else (
            f"; profile: generated code {costs['generated_code_ms']:.0f} ms, projection forward "
            f"{costs['projection_forward_ms']:.0f} ms, logits copy {costs['logits_copy_ms']:.0f} ms, "
            f"fill {costs['logits_fill_ms']:.0f} ms")
        print(f"{arm:34s}: {record['step_s'][arm] * 1e3:7.1f} ms, "
              f"{record['minor_faults_per_step'][arm]:8.0f} faults{detail}", flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=1))
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
