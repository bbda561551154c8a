#!/usr/bin/env python
"""What a materialised causal mask cost the zoo's compiled seq2seq training step.

transformers' create_causal_mask looks for packed sequences in the position_ids it is given. Eagerly it finds none
in a plain arange and lets SDPA run is_causal; under torch.compile the search cannot be decided, so it returns a
[batch, 1, queries, keys] mask and SDPA computes every block of the square instead of the causal triangle (and on a
GPU, a mask rules out the flash kernel). The zoo's stacks used to pass their own default arange; now they pass only
positions the caller gave (modeling_zoo_stack.py, tests/test_compiled_masks.py).

Both arms run in one process on the same compare_hf.py model and batch, the loss compiled as the recipes compile it:

* is_causal: the batch as it is (what the zoo does now);
* materialised mask: the same batch with decoder_position_ids = arange(length) given explicitly, which sends the
  compiled graph down the old path (what the zoo did before, for every batch).

Per target length, the tokens per batch stay --tokens (batch size = tokens / length), so the matrix products stay
the same and the attention's share grows with the length. Best of --steps per arm per round, the arms alternating.
--kernel-only times just the decoder's self-attention call instead (SDPA forward + backward at the same shapes,
is_causal against the [batch, 1, length, length] mask): seconds rather than minutes, and free of the step's noise.

    python benchmarks/compiled_causal_mask.py --threads 2 --output benchmarks/results/compiled_causal_mask_cpu.json
    python benchmarks/compiled_causal_mask.py --threads 2 --kernel-only --lengths 256,512,1024,2048 \\
        --output benchmarks/results/compiled_causal_mask_kernel_cpu.json
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


ARMS = ("is_causal", "materialised mask")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="bart,marian",
                        help="comma-separated compare_hf.py encoder-decoder families (default: %(default)s)")
    parser.add_argument("--lengths", default="256,512,1024",
                        help="comma-separated source and target lengths (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=2048,
                        help="tokens per batch; batch size = tokens / length (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=3, help="steps per arm per round; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--kernel-only", action="store_true",
                        help="time only the self-attention call (SDPA forward + backward), not training steps")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file, and a plot beside it (.png)")
    return parser.parse_args(argv)


def measure(family: str, length: int, args) -> dict:
    shape = argparse.Namespace(hidden=256, layers=4, heads=4, seq_len=length, batch_size=args.tokens // length,
                               vocab_size=50257, image_size=224, patch_size=16, new_tokens=64)
    zoo, _, batch = compare_hf.build_pair(family, shape, "sdpa")
    zoo.train()
    old_path = dict(batch, decoder_position_ids=torch.arange(length).unsqueeze(0))
    runs = {"is_causal": compare_hf.training_step(zoo, batch, compile_loss=True),
            "materialised mask": compare_hf.training_step(zoo, old_path, compile_loss=True)}
    for run in runs.values():  # compile and warm up
        run()
        run()
    rounds = compare_hf.alternating_rounds(runs, args.rounds, args.steps)
    torch._dynamo.reset()
    medians = {arm: statistics.median(times) for arm, times in rounds.items()}
    return {"family": family, "length": length, "batch_size": shape.batch_size, "step_s": medians,
            "speedup": medians["materialised mask"] / medians["is_causal"], "rounds": rounds}


def measure_kernel(length: int, args) -> dict:
    """The decoder self-attention's SDPA call, forward and backward, at the step's shapes (4 heads of 64)."""
    import torch.nn.functional as F

    batch_size = args.tokens // length
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(batch_size, 4, length, 64, generator=generator).requires_grad_()
                         for _ in range(3))
    mask = torch.ones(length, length, dtype=torch.bool).tril().expand(batch_size, 1, length, length)

    def attention(**kwargs):
        return lambda: F.scaled_dot_product_attention(query, key, value, **kwargs).sum().backward()

    runs = {"is_causal": attention(is_causal=True), "materialised mask": attention(attn_mask=mask)}
    for run in runs.values():
        run()
    rounds = compare_hf.alternating_rounds(runs, args.rounds, args.steps)
    medians = {arm: statistics.median(times) for arm, times in rounds.items()}
    return {"family": "attention call", "length": length, "batch_size": batch_size, "step_s": medians,
            "speedup": medians["materialised mask"] / medians["is_causal"], "rounds": rounds}


def plot(record: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4))
    for family in dict.fromkeys(row["family"] for row in record["rows"]):
        rows = [row for row in record["rows"] if row["family"] == family]
        lengths = [row["length"] for row in rows]
        ratios = [[old / new for old, new in zip(row["rounds"]["materialised mask"], row["rounds"]["is_causal"])]
                  for row in rows]
        axis.plot(lengths, [row["speedup"] for row in rows], marker="o", label=f"{family} (median)")
        axis.vlines(lengths, [min(r) for r in ratios], [max(r) for r in ratios], alpha=0.4)
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xscale("log", base=2)
    all_lengths = sorted({row["length"] for row in record["rows"]})
    axis.set_xticks(all_lengths, [str(length) for length in all_lengths])
    axis.set_xlabel(f"sequence length ({record['args']['tokens']} tokens per batch)")
    axis.set_ylabel("time, materialised mask / is_causal")
    axis.set_title("SDPA forward + backward" if record["args"]["kernel_only"]
                   else "Zoo seq2seq training step, loss compiled", fontsize=11)
    axis.text(0.01, 0.01, "bars: the rounds' range", transform=axis.transAxes, fontsize=8)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg(), "rows": []}
    families = ["attention call"] if args.kernel_only else args.families.split(",")
    for family in families:
        for length in map(int, args.lengths.split(",")):
            row = measure_kernel(length, args) if args.kernel_only else measure(family, length, args)
            record["rows"].append(row)
            print(f"{family:14s} length {length:5d}: is_causal {row['step_s']['is_causal'] * 1e3:7.1f} ms, "
                  f"materialised mask {row['step_s']['materialised mask'] * 1e3:7.1f} ms, "
                  f"speed-up {row['speedup']:.2f}", flush=True)
            record["load_average_after"] = os.getloadavg()
            if args.output:  # written after every row, so a cut-off run keeps what it finished
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(json.dumps(record, indent=1))
    if args.output:
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
