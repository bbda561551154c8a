#!/usr/bin/env python
"""The output projection of a decoding step, row-major (nn.Linear's layout, what transformers' models run) against
column-major (the copy the zoo's `generate` uses on CPU, modeling_zoo_generation.py): the same (rows x hidden) x
(hidden x vocabulary) product, timed per layout, per vocabulary shape and per row count (sequences decoded at once).
Also the cost of making the copy (blocked, as the zoo does, and PyTorch's plain `t().contiguous()`).

Timing: --rounds rounds, the layouts alternating which goes first; in each, each layout's best of --repeats calls; the
median over rounds is reported, and speed-up = row-major time / column-major time. Writes JSON and a PNG of the
speed-up against rows.

    python benchmarks/decoding_head_layout.py --output benchmarks/results/decoding_head_layout_cpu.json
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
from compare_hf import alternating_rounds, best_of  # noqa: E402

from transformer_zoo.modeling_zoo_generation import column_major_copy  # noqa: E402


def time_layouts(vocabulary: int, hidden: int, rows: int, dtype: torch.dtype, rounds: int, repeats: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(vocabulary, hidden, generator=generator).to(dtype)
    column_major = column_major_copy(weight)
    states = torch.randn(rows, hidden, generator=generator).to(dtype)
    runs = {"row_major": lambda: torch.nn.functional.linear(states, weight),
            "column_major": lambda: torch.nn.functional.linear(states, column_major)}
    difference = (runs["row_major"]() - runs["column_major"]()).abs().max().item()
    for fn in runs.values():
        fn()
    times = alternating_rounds(runs, rounds, repeats)
    row, column = statistics.median(times["row_major"]), statistics.median(times["column_major"])
    return {"vocabulary": vocabulary, "hidden": hidden, "rows": rows, "dtype": str(dtype).removeprefix("torch."),
            "row_major_ms": row * 1e3, "column_major_ms": column * 1e3, "speedup": row / column,
            "max_abs_difference": difference, "rounds_ms": {k: [t * 1e3 for t in v] for k, v in times.items()}}


def time_copy(vocabulary: int, hidden: int, repeats: int) -> dict:
    weight = torch.randn(vocabulary, hidden)
    column_major_copy(weight)
    blocked = statistics.median([best_of(lambda: column_major_copy(weight), 1) for _ in range(repeats)])
    plain = statistics.median([best_of(lambda: weight.t().contiguous(), 1) for _ in range(repeats)])
    return {"vocabulary": vocabulary, "hidden": hidden, "blocked_ms": blocked * 1e3, "plain_transpose_ms": plain * 1e3}


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2))
    shapes = sorted({(r["vocabulary"], r["hidden"], r["dtype"]) for r in record["products"]})
    for vocabulary, hidden, dtype in shapes:
        rows = [r for r in record["products"] if (r["vocabulary"], r["hidden"], r["dtype"]) == (vocabulary, hidden, dtype)]
        axis.plot([r["rows"] for r in rows], [r["speedup"] for r in rows], marker="o",
                  label=f"{vocabulary:,} x {hidden}, {dtype}")
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("rows in the product (sequences decoded at once)")
    axis.set_ylabel("speed-up of the column-major copy")
    axis.set_title(f"Output projection per decoding step, {record['threads']} CPU threads, torch {record['torch']}",
                   fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="32000x256,50257x256,50257x768",
                        help="comma-separated vocabulary x hidden shapes, float32 (default: %(default)s)")
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128,256",
                        help="comma-separated row counts (default: %(default)s)")
    parser.add_argument("--bfloat16-shape", default="32000x256",
                        help="one shape also timed in bfloat16 ('' to skip) (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is reported (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=10, help="calls per layout per round; the best counts (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="write JSON here, and a PNG beside it")
    args = parser.parse_args(argv)

    def parse_shape(text: str) -> tuple[int, int]:
        vocabulary, hidden = text.lower().split("x")
        return int(vocabulary), int(hidden)

    cases = [(parse_shape(s), torch.float32) for s in args.shapes.split(",")]
    if args.bfloat16_shape:
        cases.append((parse_shape(args.bfloat16_shape), torch.bfloat16))
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_before": os.getloadavg(), "products": [], "copies": []}
    for (vocabulary, hidden), dtype in cases:
        for rows in (int(r) for r in args.rows.split(",")):
            result = time_layouts(vocabulary, hidden, rows, dtype, args.rounds, args.repeats)
            record["products"].append(result)
            print(f"{vocabulary:>6} x {hidden:<4} {result['dtype']:>8} rows {rows:>4}: row-major "
                  f"{result['row_major_ms']:7.3f} ms, column-major {result['column_major_ms']:7.3f} ms, speed-up "
                  f"{result['speedup']:.2f}", flush=True)
        if dtype == torch.float32:
            copy = time_copy(vocabulary, hidden, args.repeats)
            record["copies"].append(copy)
            print(f"{vocabulary:>6} x {hidden:<4} copy: blocked {copy['blocked_ms']:.1f} ms, t().contiguous() "
                  f"{copy['plain_transpose_ms']:.1f} ms", flush=True)
        record["load_average_after"] = os.getloadavg()
        if args.output:  # incremental: a cut-off run keeps what it finished
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record, indent=2) + "\n")
    if args.output:
        plot(record, args.output.with_suffix(".png"))
    return record


if __name__ == "__main__":
    main()
