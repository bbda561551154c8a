#!/usr/bin/env python
"""What backpropagating the causal-LM loss through the labelled rows only is worth, by the share of positions that
have a target (an instruction-tuning prompt mask: the first part of every sequence labelled -100).

The zoo decoder of benchmarks/compare_hf.py's GPT-2-shaped pair (50,257-token vocabulary) trains one step per call,
sdpa attention, dropout as there. Two arms in the same alternating rounds, best of --steps each, median over
--rounds: the model as it is (`loss_over_labelled_rows` in transformer_zoo/modeling_zoo_losses.py: from a second
projection of the labelled rows where at most half the positions have a target) and the every-row reference (the
token loss over the whole logits, what the zoo did before). Above half, both arms take the same path; those rows
say what the at-most-half rule leaves alone.

    python benchmarks/labelled_rows_loss.py --output benchmarks/results/labelled_rows_loss_cpu.json
        (also writes labelled_rows_loss_cpu.png)
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
from compare_hf import alternating_rounds, build_pair, parse_args as compare_args, training_step  # noqa: E402

import transformer_zoo.modeling_zoo_decoder as decoder_module  # noqa: E402
from transformer_zoo.modeling_zoo_losses import loss_over_labelled_rows, token_cross_entropy  # noqa: E402


def every_row_loss(hidden, logits, labels, head, *, head_is_plain, shift=False, num_items_in_batch=None,
                   logits_bias=None, few_labelled=False):
    """The reference arm: the token loss over every row of the logits."""
    return token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)


def with_loss(loss_function, step):
    def run():
        decoder_module.loss_over_labelled_rows = loss_function
        try:
            step()
        finally:
            decoder_module.loss_over_labelled_rows = loss_over_labelled_rows

    return run


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fractions", default="0.1,0.25,0.5,0.75",
                        help="comma-separated shares of positions with a target (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds, median reported (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="steps per arm per round, best kept (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON (and a PNG beside it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = compare_args(["--families", "gpt2"])
    model, _, batch = build_pair("gpt2", shape, "sdpa")
    model.train()
    ids = batch["input_ids"]
    report = {"command": " ".join(argv if argv is not None else sys.argv[1:]), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "shape": {"batch": ids.shape[0], "seq_len": ids.shape[1],
                                                            "hidden": shape.hidden, "vocab": model.config.vocab_size},
              "load_average_start": os.getloadavg(), "rows": []}
    for fraction in [float(f) for f in args.fractions.split(",")]:
        labels = ids.clone()
        labels[:, : round(ids.shape[1] * (1 - fraction))] = -100  # the prompt
        step = training_step(model, {"input_ids": ids, "labels": labels})
        runs = {"labelled rows": with_loss(loss_over_labelled_rows, step), "every row": with_loss(every_row_loss, step)}
        for run in runs.values():
            run()  # warm-up
        times = alternating_rounds(runs, args.rounds, args.steps)
        medians = {name: statistics.median(values) for name, values in times.items()}
        row = {"fraction_labelled": fraction, "labelled_rows_s": medians["labelled rows"],
               "every_row_s": medians["every row"], "speedup": medians["every row"] / medians["labelled rows"],
               "rounds": times}
        report["rows"].append(row)
        print(f"{fraction:5.2f} labelled: {row['labelled_rows_s'] * 1e3:7.1f} ms against every row "
              f"{row['every_row_s'] * 1e3:7.1f} ms, speed-up {row['speedup']:.2f}", flush=True)
        if args.output:  # written after every row, so a cut-off run keeps what it finished
            report["load_average_end"] = os.getloadavg()
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(report, indent=2) + "\n")
    if args.output:
        plot(report, args.output.with_suffix(".png"))
    return report


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    figure, axis = plt.subplots(figsize=(6.5, 4))
    axis.plot([r["fraction_labelled"] for r in rows], [r["speedup"] for r in rows], marker="o")
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.axvline(0.5, color="grey", linewidth=0.8, linestyle=":")
    axis.set_xlabel("share of positions with a target (the rest: a masked prompt)")
    axis.set_ylabel("step speed-up over the every-row loss")
    shape = report["shape"]
    load = report["load_average_start"][0], report["load_average_end"][0]
    axis.set_title(f"Causal-LM training step, {shape['batch']} x {shape['seq_len']}, vocabulary {shape['vocab']:,}, "
                   f"{report['threads']} threads, load {load[0]:.1f} -> {load[1]:.1f}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
