#!/usr/bin/env python
"""One training step of the translation study's default model in fp32 against bf16 autocast (what
`train_translation(precision="bf16")` does: the forward under autocast, the loss from the logits cast up, fp32
weights and Adam), on one and two threads, on batches of the Urdu pairs' shape.

The model is the study's default shape (translation_setup.ModelShape), 8,000 tokens of vocabulary, random weights
(a step's work does not depend on them). Batches are random token ids, about 4,096 tokens a side as the study's
token-count batches hold. Per threads and batch: both precisions in alternating order for --rounds rounds, median
step time, the first round dropped (warm-up). bf16 pays off only on CPUs that multiply bf16 in hardware (AMX,
AVX512-BF16; `cpu_bf16` in the JSON); elsewhere autocast emulates it and is slower.

    python benchmarks/translation_step_precision.py --output benchmarks/results/translation_step_precision_cpu.json
        (also writes the .png beside it)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (default: %(default)s)")
    parser.add_argument("--batches", default="16x256,40x100",
                        help="comma-separated batch shapes, sentences x tokens a side (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="steps per precision, the first dropped (default: 4)")
    parser.add_argument("--output", default=None, help="JSON file to write (a .png beside it); default: print only")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the first step is a warm-up and is dropped)")
    return args


def build_model():
    from transformer_zoo import ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration
    from transformer_zoo.analysis.reproduce.translation_setup import ModelShape

    shape = ModelShape()
    config = ZooSeq2SeqConfig(vocab_size=8000, hidden_size=shape.hidden_size, encoder_layers=shape.layers,
                              decoder_layers=shape.layers, num_attention_heads=shape.heads,
                              intermediate_size=shape.intermediate_size, max_position_embeddings=600,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                              tie_word_embeddings=True)
    torch.manual_seed(0)
    return ZooSeq2SeqForConditionalGeneration(config).train()


def step_seconds(model, optimizer, sources, targets, bf16: bool) -> float:
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=sources, decoder_input_ids=targets).logits
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - started


def main(argv=None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    rows = []
    for threads in [int(value) for value in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for shape in args.batches.split(","):
            sentences, tokens = (int(value) for value in shape.split("x"))
            sources = torch.randint(3, 8000, (sentences, tokens))
            targets = torch.randint(3, 8000, (sentences, tokens))
            times = {"fp32": [], "bf16": []}
            for _ in range(args.rounds):
                for precision in times:
                    times[precision].append(step_seconds(model, optimizer, sources, targets, precision == "bf16"))
            row = {"threads": threads, "batch": [sentences, tokens],
                   **{f"{precision}_median_seconds": statistics.median(values[1:])
                      for precision, values in times.items()}}
            row["speedup"] = row["fp32_median_seconds"] / row["bf16_median_seconds"]
            rows.append(row)
            print(f"{threads} thread(s), {sentences} x {tokens}: fp32 {row['fp32_median_seconds']:.3f} s, bf16 "
                  f"{row['bf16_median_seconds']:.3f} s ({row['speedup']:.2f}x)")
    result = {"benchmark": "translation_step_precision", "rows": rows, "rounds": args.rounds,
              "load_average_start": load_start, "load_average_end": os.getloadavg(),
              "cpu_bf16": bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()),
              "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "cpu_count": os.cpu_count()}
    print(f"load average {load_start[0]:.2f} before, {result['load_average_end'][0]:.2f} after")
    if args.output:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        plot(result, path.with_suffix(".png"))
    return 0


def plot(result, path: Path) -> Path:
    from transformer_zoo.analysis.figures import pyplot, save_figure

    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    labels = [f"{row['threads']} thr, {row['batch'][0]}x{row['batch'][1]}" for row in result["rows"]]
    positions = range(len(labels))
    axes.bar([p - 0.2 for p in positions], [row["fp32_median_seconds"] for row in result["rows"]], 0.4, label="fp32")
    axes.bar([p + 0.2 for p in positions], [row["bf16_median_seconds"] for row in result["rows"]], 0.4,
             label="bf16 autocast")
    axes.set_xticks(list(positions))
    axes.set_xticklabels(labels, fontsize="small")
    axes.set(ylabel="seconds per training step (median)",
             title=f"translation step, fp32 vs bf16 (load {result['load_average_start'][0]:.1f} at start)")
    axes.legend()
    axes.grid(alpha=0.3, axis="y")
    return save_figure(figure, path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
