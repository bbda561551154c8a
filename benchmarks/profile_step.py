#!/usr/bin/env python
"""Where one training step's time goes, zoo against its transformers peer: torch.profiler over --steps steps of each
side of a `compare_hf.py` pair (same shapes, weights and batch), the operators sorted by their own CPU time.

    python benchmarks/profile_step.py --family vit --output benchmarks/results/profile_step_vit_cpu.txt
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_hf  # noqa: E402


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="vit", help="a compare_hf.py family (default: %(default)s)")
    parser.add_argument("--attn", default="sdpa", help="attention implementation (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per side (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=16, help="operators listed per side (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="also write the tables to this text file")
    args = parser.parse_args(argv)
    # compare_hf's defaults for everything that shapes the pair.
    shape = compare_hf_defaults()
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(args.family, shape, args.attn)
    lines = [f"{args.family} ({args.attn}), compare_hf.py shapes, {torch.get_num_threads()} threads, torch "
             f"{torch.__version__}, load average {os.getloadavg()[0]:.2f}; {args.steps} steps per side"]
    for name, model in (("zoo", zoo), ("peer", peer)):
        model.train()
        step = compare_hf.training_step(model, batch)
        for _ in range(2):  # the optimiser state and allocator warm-up are not profiled
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
        lines += [f"===== {name}", prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows,
                                                             max_name_column_width=44)]
    text = "\n".join(lines)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return text


def compare_hf_defaults() -> argparse.Namespace:
    return compare_hf.parse_args([])


if __name__ == "__main__":
    main()
