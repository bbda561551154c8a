#!/usr/bin/env python
"""What would running the language-model head outside a compiled model's graph buy? (An approach measured and not
taken; README, "With the model compiled instead".)

With the model compiled, its graph returns the logits; AOTAutograd then zero-fills their unused gradient at every
step and adds it in the backward (benchmarks/compile_target_costs.py). A graph break before the vocabulary projection
and the loss (here: the zoo decoder's forward with those two under torch.compiler.disable, patched in this benchmark
only) keeps the logits out of the graph's outputs. The zoo does not do it, because a graph break fails
torch.compile(fullgraph=True) and torch.export. This measures what it would have bought: the zoo decoder's training
step at compare_hf.py's shapes, as shipped ("in graph") and patched ("outside graph"), with the model compiled and
with the loss compiled (the recipes' way). Each measurement is its own process (a compiled model is not shared),
the processes alternate, and each reports the median over --rounds of its best-of-3 steps and its minor page faults
per step.

    python benchmarks/compiled_head_outside_graph.py --threads 2 \\
        --output benchmarks/results/compiled_head_outside_graph_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_hf  # noqa: E402

VARIANTS = ("in graph", "outside graph")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="gpt2", choices=("gpt2", "llama"),
                        help="compare_hf.py decoder family whose shapes are used (default: %(default)s)")
    parser.add_argument("--targets", default="model,loss",
                        help="what torch.compile compiles, comma-separated: model, loss (default: %(default)s)")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes per variant and target, alternating (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of best-of-3 steps per process; the median counts (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file, and a plot beside it (.png)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "TARGET"), default=None,
                        help=argparse.SUPPRESS)  # internal: one measurement, printed as JSON
    return parser.parse_args(argv)


def head_outside_graph() -> None:
    """Patch the zoo decoder's forward (this process only): the vocabulary projection and the loss under
    torch.compiler.disable, so a compiled model's graph ends at the last hidden states."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from transformer_zoo import modeling_zoo_decoder
    from transformer_zoo.modeling_zoo_layers import plain_linears
    from transformer_zoo.modeling_zoo_losses import loss_over_labelled_rows

    @torch.compiler.disable
    def head_and_loss(model, hidden, labels):
        logits, loss_logits = model.vocabulary_projection(hidden)
        loss = None
        if labels is not None:
            loss = loss_over_labelled_rows(hidden, loss_logits, labels, model.lm_head,
                                           head_is_plain=plain_linears([model.lm_head]), shift=True)
        return logits, loss

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        logits, loss = head_and_loss(self, outputs.last_hidden_state, labels)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    modeling_zoo_decoder.ZooDecoderForCausalLM.forward = forward


def measure(args) -> dict:
    variant, target = args.child
    if args.threads:
        torch.set_num_threads(args.threads)
    if variant == "outside graph":
        head_outside_graph()
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(args.family, compare_hf.parse_args([]), "sdpa")
    del peer
    zoo.train()
    step = compare_hf.training_step(torch.compile(zoo) if target == "model" else zoo, batch, target == "loss")
    for _ in range(4):  # compilation, the optimiser state, the allocator
        step()
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = [compare_hf.best_of(step, 3) for _ in range(args.rounds)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    return {"variant": variant, "target": target, "median_ms": statistics.median(times) * 1000,
            "rounds_ms": [t * 1000 for t in times], "faults_per_step": faults / (3 * args.rounds)}


def run_child(args, variant: str, target: str) -> dict:
    command = [sys.executable, __file__, "--child", variant, target, "--family", args.family,
               "--rounds", str(args.rounds)] + (["--threads", str(args.threads)] if args.threads else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {variant!r} / {target!r} measurement failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(record["summary"])
    figure, (time_axis, fault_axis) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.38
    for index, variant in enumerate(VARIANTS):
        xs = [t + (index - 0.5) * width for t in range(len(targets))]
        time_axis.bar(xs, [record["summary"][t][variant]["median_ms"] for t in targets], width, label=variant)
        fault_axis.bar(xs, [record["summary"][t][variant]["faults_per_step"] for t in targets], width, label=variant)
        for t, target in enumerate(targets):
            runs = [r["median_ms"] for r in record["runs"] if r["variant"] == variant and r["target"] == target]
            time_axis.plot([xs[t]] * len(runs), runs, "k.", markersize=4)
    for axis, label in ((time_axis, "training step (ms), median over processes"),
                        (fault_axis, "minor page faults per step")):
        axis.set_xticks(range(len(targets)), [f"{t} compiled" for t in targets])
        axis.set_ylabel(label)
        axis.legend(fontsize=8)
    figure.suptitle(f"zoo decoder ({record['args']['family']} shapes): vocabulary head and loss in or outside the graph")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return None
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - {"model", "loss"})
    if unknown:
        raise SystemExit(f"--targets takes model and/or loss, not {', '.join(unknown)}.")
    record = {"args": {k: str(v) for k, v in vars(args).items() if k != "child"}, "torch": torch.__version__,
              "load_average_before": os.getloadavg(), "runs": []}
    for target in targets:
        for repeat in range(args.processes):
            for variant in (VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]):
                run = run_child(args, variant, target)
                record["runs"].append(run)
                print(f"{target} compiled, {variant}: {run['median_ms']:.0f} ms, "
                      f"{run['faults_per_step']:,.0f} faults a step", flush=True)
    record["load_average_after"] = os.getloadavg()
    record["summary"] = {
        target: {variant: {
            "median_ms": statistics.median(r["median_ms"] for r in record["runs"]
                                           if r["target"] == target and r["variant"] == variant),
            "faults_per_step": statistics.median(r["faults_per_step"] for r in record["runs"]
                                                 if r["target"] == target and r["variant"] == variant),
        } for variant in VARIANTS} for target in targets}
    print(json.dumps(record["summary"], indent=2))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        plot(record, args.output.with_suffix(".png"))
    return record


if __name__ == "__main__":
    main()
