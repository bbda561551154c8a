#!/usr/bin/env python
"""Is there a faster way to lay out the vocabulary projection's three products on this CPU?

The (tokens x hidden) by (hidden x vocabulary) product, forward, and its two gradients (hidden states and weight)
are about half of the compiled seq2seq training step's matrix arithmetic (README, "What is not met"). Each product
is timed here in several layouts, outputs preallocated (so no page faults): as BLAS is called now, with the output
transposed (column-major), and in chunks of rows, of the vocabulary or of the reduction. Best of --steps per
layout per round, the layouts alternating over --rounds; GFLOP/s beside each median.

    python benchmarks/vocabulary_product_layouts.py --threads 2 \\
        --output benchmarks/results/vocabulary_product_layouts_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_hf  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048, help="rows (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="reduction width (default: %(default)s)")
    parser.add_argument("--vocabulary", type=int, default=32000, help="columns (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=3, help="runs per layout per round; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file, and a plot beside it (.png)")
    return parser.parse_args(argv)


def layouts(tokens: int, hidden: int, vocabulary: int) -> dict[str, dict]:
    """{product: {layout: callable}} over the same random operands and preallocated outputs."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(tokens, hidden, generator=generator)
    weight = torch.randn(vocabulary, hidden, generator=generator)
    bias = torch.randn(vocabulary, generator=generator)
    grad = torch.randn(tokens, vocabulary, generator=generator)
    logits, logits_t = torch.empty(tokens, vocabulary), torch.empty(vocabulary, tokens)
    grad_rows, grad_rows_t = torch.empty(tokens, hidden), torch.empty(hidden, tokens)
    grad_weight, grad_weight_t = torch.empty(vocabulary, hidden), torch.empty(hidden, vocabulary)

    def chunked(count, step):
        return range(0, count, step)

    return {
        "forward": {
            "addmm (as the heads call it)": lambda: torch.addmm(bias, rows, weight.t(), out=logits),
            "mm, output transposed": lambda: torch.mm(weight, rows.t(), out=logits_t),
            "row chunks of 512": lambda: [torch.mm(rows[i:i + 512], weight.t(), out=logits[i:i + 512])
                                          for i in chunked(tokens, 512)],
            "vocabulary chunks of 4096": lambda: [torch.mm(rows, weight[j:j + 4096].t(), out=logits[:, j:j + 4096])
                                                  for j in chunked(vocabulary, 4096)],
        },
        "gradient of the hidden states": {
            "mm (as the heads call it)": lambda: torch.mm(grad, weight, out=grad_rows),
            "mm, output transposed": lambda: torch.mm(weight.t(), grad.t(), out=grad_rows_t),
            "reduction chunks of 4096": lambda: [grad_rows.zero_()] + [
                grad_rows.addmm_(grad[:, j:j + 4096], weight[j:j + 4096]) for j in chunked(vocabulary, 4096)],
            "row chunks of 512": lambda: [torch.mm(grad[i:i + 512], weight, out=grad_rows[i:i + 512])
                                          for i in chunked(tokens, 512)],
        },
        "gradient of the weight": {
            "mm (as the heads call it)": lambda: torch.mm(grad.t(), rows, out=grad_weight),
            "mm, output transposed": lambda: torch.mm(rows.t(), grad, out=grad_weight_t),
            "vocabulary chunks of 4096": lambda: [torch.mm(grad[:, j:j + 4096].t(), rows, out=grad_weight[j:j + 4096])
                                                  for j in chunked(vocabulary, 4096)],
            "reduction chunks of 256": lambda: [grad_weight.zero_()] + [
                grad_weight.addmm_(grad[i:i + 256].t(), rows[i:i + 256]) for i in chunked(tokens, 256)],
        },
    }


def summarise(rounds: dict[str, list[float]], flops: int) -> dict[str, dict]:
    """Per layout: the median, the rounds, GFLOP/s, and the median over rounds of the current layout's time (the
    first) over this one's in the same round; this machine's speed drifts within a run, and a ratio within a round
    is not moved by it."""
    current = next(iter(rounds.values()))
    return {name: {"median_ms": statistics.median(times) * 1e3, "rounds_ms": [t * 1e3 for t in times],
                   "gflops": flops / statistics.median(times) / 1e9,
                   "speedup_per_round_median": statistics.median(c / t for c, t in zip(current, times))}
            for name, times in rounds.items()}


def plot(record: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    products = list(record["products"])
    figure, axes = plt.subplots(1, len(products), figsize=(13, 3.6), sharex=True)
    for axis, product in zip(axes, products):
        rows = record["products"][product]
        names = list(rows)
        axis.barh(names, [rows[name]["median_ms"] for name in names])
        axis.errorbar([rows[name]["median_ms"] for name in names], names,
                      xerr=[[rows[n]["median_ms"] - min(rows[n]["rounds_ms"]) for n in names],
                            [max(rows[n]["rounds_ms"]) - rows[n]["median_ms"] for n in names]],
                      fmt="none", color="black", linewidth=0.8)
        axis.set_title(product, fontsize=10)
        axis.set_xlabel("ms (median; bars: rounds' range)")
        axis.tick_params(axis="y", labelsize=8)
    figure.suptitle(f"{record['args']['tokens']} x {record['args']['hidden']} x {record['args']['vocabulary']} "
                    "float32 products, outputs preallocated", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg(), "products": {}}
    flops = 2 * args.tokens * args.hidden * args.vocabulary
    for product, runs in layouts(args.tokens, args.hidden, args.vocabulary).items():
        for run in runs.values():
            run()
        rounds = compare_hf.alternating_rounds(runs, args.rounds, args.steps)
        record["products"][product] = summarise(rounds, flops)
        for name, row in record["products"][product].items():
            print(f"{product:30s} {name:30s} {row['median_ms']:7.1f} ms  {row['gflops']:5.0f} GFLOP/s  "
                  f"{row['speedup_per_round_median']:.2f}x the current layout (rounds' median)", flush=True)
    record["load_average_after"] = os.getloadavg()
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=1))
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
