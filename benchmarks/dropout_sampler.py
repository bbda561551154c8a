#!/usr/bin/env python
"""Dropout masks on CPU: PyTorch's sampler against the zoo's PCG64 sampler (transformer_zoo/modeling_zoo_dropout.py),
side by side in one process, alternating rounds, best of --steps per round, median over rounds.

Two levels:
* one dropout, forward and backward, at the shapes the benchmarks and recipes meet: a MiniLM fine-tuning activation
  (16 x 64 x 384), a ViT-shaped hidden state (8 x 197 x 256) and its attention probabilities (8 x 4 x 197 x 197);
  and the same under torch.compile (inductor), where PyTorch's side is inductor's own generated masks and the zoo's
  the mask operator transformer_zoo::pcg64_keep_mask, at a GPT-2-shaped hidden state (8 x 256 x 256) and its
  attention probabilities (8 x 4 x 256 x 256), compare_hf.py's training shapes;
* one LoRA training step (r 8 on q/v, adapter dropout 0.1, fused AdamW) of an all-MiniLM-L6-v2-shaped classifier
  (random weights, 16 x 64 tokens): as the Urdu recipe's downstream check runs it (attention dropout 0, bf16 autocast
  where the CPU multiplies bf16 natively), and as the fine-tuning recipe's default runs it (the model's attention
  dropout 0.1, fp32). The two sides hold the same weights and differ only in `dropout_sampler`.

    python benchmarks/dropout_sampler.py --output benchmarks/results/dropout_sampler_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_hf import alternating_rounds  # noqa: E402

from transformer_zoo import ZooEncoderConfig, ZooEncoderForSequenceClassification  # noqa: E402
from transformer_zoo.modeling_zoo_dropout import set_dropout_sampler, zoo_dropout  # noqa: E402
from transformer_zoo.training.adaptation_downstream import native_bf16  # noqa: E402

SAMPLERS = ("torch", "pcg64")
MASK_SHAPES = {"MiniLM activation 16x64x384": (16, 64, 384), "ViT hidden 8x197x256": (8, 197, 256),
               "ViT attention 8x4x197x197": (8, 4, 197, 197)}
COMPILED_MASK_SHAPES = {"GPT-2 hidden 8x256x256": (8, 256, 256), "GPT-2 attention 8x4x256x256": (8, 4, 256, 256)}


def one_dropout(shape, sampler: str, compiled: bool = False):
    x = torch.randn(shape, requires_grad=True)
    grad = torch.randn(shape)

    def dropout(tensor):
        return zoo_dropout(tensor, 0.1, training=True, sampler=sampler)

    if compiled:
        dropout = torch.compile(dropout, fullgraph=True)

    def run():
        dropout(x).backward(grad)
    return run


def lora_step(sampler: str, attention_dropout: float, bf16: bool):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)  # the same weights on both sides
    config = ZooEncoderConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                              intermediate_size=1536, num_labels=6, attention_dropout=attention_dropout,
                              dropout_sampler=sampler)
    model = get_peft_model(ZooEncoderForSequenceClassification(config),
                           LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, target_modules=["q_proj", "v_proj"],
                                      task_type="SEQ_CLS"))
    set_dropout_sampler(model, sampler)  # what the recipes do after get_peft_model
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=True)
    generator = torch.Generator().manual_seed(1)
    batch = {"input_ids": torch.randint(1000, 30000, (16, 64), generator=generator),
             "attention_mask": torch.ones(16, 64, dtype=torch.long),
             "labels": torch.randint(0, 6, (16,), generator=generator)}

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return run


def timed(runs: dict, rounds: int, steps: int) -> dict:
    for run in runs.values():
        run()  # warm-up, not timed
    times = alternating_rounds(runs, rounds, steps)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"times_s": times, "median_s": median, "speed_up": median["torch"] / median["pcg64"]}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["cases"])
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4))
    for axis, name in zip(axes, names):
        case = report["cases"][name]
        values = [case["median_s"][s] * 1e3 for s in SAMPLERS]
        axis.bar(SAMPLERS, values, color=["#999999", "#1f77b4"])
        axis.set_title(f"{textwrap.fill(name, 30)}\n{case['speed_up']:.2f}x", fontsize=8)
        axis.set_ylabel("ms (median of best-of rounds)", fontsize=8)
        axis.tick_params(labelsize=8)
    fig.suptitle(f"dropout masks on CPU ({report['threads']} threads, load {report['load_average_before'][0]:.1f})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=5, help="runs per side per round; the best counts "
                                                             "(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file, and a PNG beside it")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    cases = {}
    for name, shape in MASK_SHAPES.items():
        cases[f"one dropout, {name}"] = timed({s: one_dropout(shape, s) for s in SAMPLERS}, args.rounds, args.steps)
    for name, shape in COMPILED_MASK_SHAPES.items():
        cases[f"one dropout, compiled, {name}"] = timed({s: one_dropout(shape, s, compiled=True) for s in SAMPLERS},
                                                        args.rounds, args.steps)
    bf16 = native_bf16(torch.device("cpu"))
    cases["LoRA step, Urdu downstream check (attention dropout 0" + (", bf16)" if bf16 else ")")] = timed(
        {s: lora_step(s, 0.0, bf16) for s in SAMPLERS}, args.rounds, args.steps)
    cases["LoRA step, finetune default (attention dropout 0.1)"] = timed(
        {s: lora_step(s, 0.1, False) for s in SAMPLERS}, args.rounds, args.steps)
    report = {"threads": torch.get_num_threads(), "torch": torch.__version__, "load_average_before": load_before,
              "load_average_after": os.getloadavg(), "cases": cases}
    for name, case in cases.items():
        print(f"{name}: torch {case['median_s']['torch'] * 1e3:.2f} ms, pcg64 {case['median_s']['pcg64'] * 1e3:.2f} "
              f"ms ({case['speed_up']:.2f}x)")
    print(f"load average {load_before[0]:.2f} before, {report['load_average_after'][0]:.2f} after")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        plot(report, args.output.with_suffix(".png"))
    return report


if __name__ == "__main__":
    main()
