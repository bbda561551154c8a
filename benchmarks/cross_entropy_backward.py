#!/usr/bin/env python
"""The language-model head's cost per step, PyTorch's cross-entropy against the zoo's LogitsCrossEntropy (in-place
backward): logits = hidden @ W.T for --tokens rows and a --vocab vocabulary, the summed loss, its backward. Same
inputs, the two alternated over rounds (best of 2 per round, median over rounds); the loss and gradients are compared.

    python benchmarks/cross_entropy_backward.py --output benchmarks/results/cross_entropy_backward_cpu.json
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from transformer_zoo.modeling_zoo_losses import cross_entropy_sum


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048, help="rows: batch x sequence (default: %(default)s)")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="model width (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="JSON results")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    hidden = torch.randn(args.tokens, args.hidden, requires_grad=True)
    weight = (torch.randn(args.vocab, args.hidden) * 0.02).requires_grad_()
    labels = torch.randint(0, args.vocab, (args.tokens,))
    labels[::7] = -100

    def pytorch():
        loss = torch.nn.functional.cross_entropy(hidden @ weight.t(), labels, reduction="sum")
        loss.backward()
        return loss

    def zoo():
        loss = cross_entropy_sum(hidden @ weight.t(), labels)
        loss.backward()
        return loss

    results = {}
    for name, fn in (("pytorch", pytorch), ("zoo", zoo)):
        results[name] = (fn().item(), hidden.grad.clone(), weight.grad.clone())
        hidden.grad = weight.grad = None
    agreement = {
        "loss_relative_difference": abs(results["zoo"][0] - results["pytorch"][0]) / abs(results["pytorch"][0]),
        "max_grad_hidden_difference": (results["zoo"][1] - results["pytorch"][1]).abs().max().item(),
        "max_grad_weight_difference": (results["zoo"][2] - results["pytorch"][2]).abs().max().item(),
    }
    load_before = os.getloadavg()
    times = {"pytorch": [], "zoo": []}
    for round_index in range(args.rounds):
        order = [("pytorch", pytorch), ("zoo", zoo)]
        for name, fn in order if round_index % 2 == 0 else reversed(order):
            best = float("inf")
            for _ in range(2):
                start = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - start)
                hidden.grad = weight.grad = None
            times[name].append(best)
    medians = {name: statistics.median(values) for name, values in times.items()}
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "threads": torch.get_num_threads(),
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "agreement": agreement,
              "median_s": medians, "speedup": medians["pytorch"] / medians["zoo"], "rounds_s": times}
    print(json.dumps({k: record[k] for k in ("median_s", "speedup", "agreement")}, indent=2))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
