#!/usr/bin/env python
"""One AdamW step over a model's parameters: PyTorch's default implementation against its fused kernel (what
transformer_zoo/training/optim.py now builds), side by side in one process, alternating rounds, best of --steps per
round, median over rounds. The model is the Urdu downstream check's full fine-tune: all-MiniLM-L6-v2's shape with the
default run's 8k-piece Urdu extension (38,522 x 384 embedding, 6 layers), random weights and gradients.

    python benchmarks/fused_adamw.py --output benchmarks/results/fused_adamw_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_hf import alternating_rounds  # noqa: E402

from transformer_zoo import ZooEncoderConfig, ZooEncoderForSequenceClassification  # noqa: E402
from transformer_zoo.training.optim import parameter_groups  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=38522, help="embedding rows (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="optimiser steps per side per round (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ZooEncoderConfig(vocab_size=args.vocab_size, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                              intermediate_size=1536, num_labels=6)
    model = ZooEncoderForSequenceClassification(config)
    generator = torch.Generator().manual_seed(0)
    for parameter in model.parameters():
        parameter.grad = torch.randn(parameter.shape, generator=generator) * 1e-3
    optimizers = {name: torch.optim.AdamW(parameter_groups(model, 0.01), lr=1e-4, fused=fused)
                  for name, fused in (("default", None), ("fused", True))}
    load_before = os.getloadavg()
    for optimizer in optimizers.values():  # state allocation is not timed
        optimizer.step()
    times = alternating_rounds({name: optimizer.step for name, optimizer in optimizers.items()}, args.rounds,
                               args.steps)
    median = {name: statistics.median(values) for name, values in times.items()}
    report = {"parameters": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "times_s": times, "median_s": median, "speed_up": median["default"] / median["fused"]}
    print(f"{report['parameters']:,} parameters, {report['threads']} threads: default {median['default'] * 1e3:.1f} ms, "
          f"fused {median['fused'] * 1e3:.1f} ms ({report['speed_up']:.1f}x); load {load_before[0]:.2f}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
