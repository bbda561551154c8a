#!/usr/bin/env python
"""The language-model head with its logits in cache-line-aligned rows against the plain layout
(transformer_zoo/modeling_zoo_vocabulary.py), on this machine's CPU, same inputs, side by side in one process.

Part 1, the training step of a head: logits = hidden @ W.T for --tokens rows, the zoo's token cross-entropy, its
backward; `project_vocabulary(..., enabled=True)` against `enabled=False`, eagerly and under torch.compile (inductor;
the function hidden -> loss compiled), per vocabulary size. The two layouts alternate which goes first from round to
round; each keeps its best of --steps per round; the median over --rounds rounds is reported, with the speed-up
plain / aligned. The loss and gradients of the two are compared first.

Part 2, the product alone (no gradient) at a growing number of rows, eagerly: where the aligned layout starts to pay
(modeling_zoo_vocabulary.MIN_MULTIPLY_ADDS). Part 3, the compiled training step at a growing number of rows, the
padded path forced below MIN_MULTIPLY_ADDS. (The committed results predate the vocabulary operator: the compiled
padded path then multiplied by a weight padded with zero rows, a copy per step, repaid from 512 rows.)
Part 4, a whole model's training step: the zoo decoder at compare_hf.py's GPT-2 shape (d=256, 4 layers, 4 heads,
8 x 256 tokens, 50,257-token vocabulary, dropout 0.1, sdpa, fused AdamW), config.row_aligned_logits True against
False, eagerly and with the loss compiled as the recipes do.

    python benchmarks/row_aligned_logits.py --output benchmarks/results/row_aligned_logits_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from unittest import mock

import torch
from torch import nn

import transformer_zoo.modeling_zoo_vocabulary as vocabulary_module
from transformer_zoo import set_memory_reuse
from transformer_zoo.modeling_zoo_losses import token_cross_entropy


def head_and_batch(vocabulary: int, tokens: int, hidden_size: int):
    generator = torch.Generator().manual_seed(0)
    head = nn.Linear(hidden_size, vocabulary, bias=False)
    nn.init.normal_(head.weight, std=0.02, generator=generator)
    hidden = torch.randn(1, tokens, hidden_size, generator=generator).requires_grad_()
    labels = torch.randint(0, vocabulary, (1, tokens), generator=generator)
    return head, hidden, labels


def loss_function(head, labels, aligned: bool):
    def loss(hidden):
        logits, loss_logits = vocabulary_module.project_vocabulary(head, hidden, enabled=aligned)
        return token_cross_entropy(loss_logits, labels, shift=True)
    return loss


def step_function(loss, head, hidden):
    def step():
        head.weight.grad = hidden.grad = None
        value = loss(hidden)
        value.backward()
        return value
    return step


def best_of(fn, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def alternate(runs: dict, rounds: int, steps: int) -> dict:
    for fn in runs.values():  # warm-up: compilation, allocator
        fn()
        fn()
    times = {name: [] for name in runs}
    names = list(runs)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            times[name].append(best_of(runs[name], steps))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"median_s": median, "speedup": median["plain"] / median["aligned"], "rounds_s": times}


def training_rows(args) -> list[dict]:
    rows = []
    for vocabulary in args.vocabularies:
        head, hidden, labels = head_and_batch(vocabulary, args.tokens, args.hidden)
        results = {}
        for aligned in (True, False):
            step = step_function(loss_function(head, labels, aligned), head, hidden)
            loss = step()
            results[aligned] = (loss.detach(), hidden.grad.clone(), head.weight.grad.clone())
        agreement = {
            "loss_difference": (results[True][0] - results[False][0]).abs().item(),
            "max_grad_hidden_difference": (results[True][1] - results[False][1]).abs().max().item(),
            "max_grad_weight_difference": (results[True][2] - results[False][2]).abs().max().item(),
        }
        for mode in ("eager", "compiled"):
            runs = {}
            for name, aligned in (("aligned", True), ("plain", False)):
                loss = loss_function(head, labels, aligned)
                if mode == "compiled":
                    torch._dynamo.reset()
                    loss = torch.compile(loss)
                runs[name] = step_function(loss, head, hidden)
            row = {"vocabulary": vocabulary, "mode": mode, "agreement": agreement,
                   **alternate(runs, args.rounds, args.steps)}
            rows.append(row)
            print(f"vocabulary {vocabulary:6d} {mode:8s}: plain {row['median_s']['plain'] * 1e3:7.1f} ms, aligned "
                  f"{row['median_s']['aligned'] * 1e3:7.1f} ms, {row['speedup']:.2f}x", flush=True)
    return rows


def product_rows(args) -> list[dict]:
    """The no-gradient product at each row count, eagerly, MIN_MULTIPLY_ADDS set aside so both layouts run everywhere."""
    rows = []
    vocabulary = args.product_vocabulary
    head, _, _ = head_and_batch(vocabulary, 1, args.hidden)
    with mock.patch.object(vocabulary_module, "MIN_MULTIPLY_ADDS", 0), torch.no_grad():
        for count in args.product_rows:
            states = torch.randn(1, count, args.hidden)
            repeats = max(1, 256 // count)  # small products are memory-bound: ~7 ms each at 50,257 x 256

            def run(aligned):
                def product():
                    for _ in range(repeats):
                        vocabulary_module.project_vocabulary(head, states, enabled=aligned)
                return product

            result = alternate({"aligned": run(True), "plain": run(False)}, args.rounds, args.steps)
            result["median_s"] = {k: v / repeats for k, v in result["median_s"].items()}
            rows.append({"rows": count, "vocabulary": vocabulary, **result})
            print(f"product, {count:5d} rows: plain {result['median_s']['plain'] * 1e3:8.2f} ms, aligned "
                  f"{result['median_s']['aligned'] * 1e3:8.2f} ms, {result['speedup']:.2f}x", flush=True)
    return rows


def compiled_threshold_rows(args) -> list[dict]:
    """The compiled training step at each row count, MIN_MULTIPLY_ADDS set aside."""
    rows = []
    with mock.patch.object(vocabulary_module, "MIN_MULTIPLY_ADDS", 0):
        for count in args.compiled_rows:
            head, hidden, labels = head_and_batch(args.product_vocabulary, count, args.hidden)
            runs = {}
            for name, aligned in (("aligned", True), ("plain", False)):
                torch._dynamo.reset()
                runs[name] = step_function(torch.compile(loss_function(head, labels, aligned)), head, hidden)
            result = alternate(runs, args.rounds, args.steps)
            rows.append({"rows": count, "vocabulary": args.product_vocabulary, **result})
            print(f"compiled step, {count:5d} rows: plain {result['median_s']['plain'] * 1e3:8.2f} ms, aligned "
                  f"{result['median_s']['aligned'] * 1e3:8.2f} ms, {result['speedup']:.2f}x", flush=True)
    return rows


def model_rows(args) -> list[dict]:
    """The zoo decoder's whole training step with and without the aligned rows, eagerly and with the loss compiled."""
    from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM

    torch.manual_seed(0)
    config = ZooDecoderConfig(vocab_size=args.product_vocabulary, hidden_size=256, num_hidden_layers=4,
                              num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512)
    model = ZooDecoderForCausalLM(config).train()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(4, 1000, (8, 256), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rows = []
    for mode in ("eager", "compiled"):
        runs = {}
        for name, aligned in (("aligned", True), ("plain", False)):
            def loss(inputs):
                return model(**inputs).loss

            if mode == "compiled":
                loss = torch.compile(loss)

            def step(loss=loss, aligned=aligned):
                # Read while tracing: a compiled loss keeps one graph per setting (dynamo guards the attribute).
                model.config.row_aligned_logits = aligned
                loss(batch).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            runs[name] = step
        result = alternate(runs, args.rounds, args.steps)
        rows.append({"model": "zoo decoder, compare_hf GPT-2 shape", "mode": mode, **result})
        print(f"model step {mode:8s}: plain {result['median_s']['plain'] * 1e3:7.1f} ms, aligned "
              f"{result['median_s']['aligned'] * 1e3:7.1f} ms, {result['speedup']:.2f}x", flush=True)
    return rows


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    for mode, offset in (("eager", -0.2), ("compiled", 0.2)):
        rows = [r for r in record["training"] if r["mode"] == mode]
        left.bar([i + offset for i in range(len(rows))], [r["speedup"] for r in rows], width=0.4, label=mode)
        left.set_xticks(range(len(rows)), [str(r["vocabulary"]) for r in rows])
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_xlabel("vocabulary")
    left.set_ylabel("speed-up, plain / aligned")
    left.set_title(f"head training step, {record['args']['tokens']} tokens")
    left.legend()
    for axis, key, title in ((middle, "product", "no-gradient product, eager"),
                             (right, "compiled_threshold", "compiled training step")):
        rows = record.get(key, [])
        if rows:
            axis.semilogx([r["rows"] for r in rows], [r["speedup"] for r in rows], "o-")
            axis.axhline(1.0, color="grey", linewidth=0.8)
            axis.set_xlabel("rows")
            axis.set_ylabel("speed-up, plain / aligned")
            axis.set_title(f"{title}, vocabulary {rows[0]['vocabulary']}")
    figure.suptitle(f"cache-line-aligned logits rows, {record['threads']} threads, load "
                    f"{record['load_average_before'][0]:.1f} -> {record['load_average_after'][0]:.1f}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabularies", type=lambda s: [int(v) for v in s.split(",")],
                        default=[30522, 32000, 50257, 50265, 58101],
                        help="comma-separated vocabulary sizes for part 1 (default: BERT, Llama/T5-like, GPT-2, "
                             "BART, Marian)")
    parser.add_argument("--tokens", type=int, default=2048, help="token rows in part 1 (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="model width (default: %(default)s)")
    parser.add_argument("--product-vocabulary", type=int, default=50257,
                        help="vocabulary of parts 2 and 3 (default: %(default)s)")
    parser.add_argument("--product-rows", type=lambda s: [int(v) for v in s.split(",")],
                        default=[1, 4, 16, 64, 256, 1024, 2048], help="row counts of part 2")
    parser.add_argument("--compiled-rows", type=lambda s: [int(v) for v in s.split(",")],
                        default=[256, 512, 1024, 2048], help="row counts of part 3 (empty: skip)")
    parser.add_argument("--parts", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 3, 4],
                        help="which parts to run, comma-separated (default: all four)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=2, help="runs per layout per round; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (and a PNG beside it)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # The layout alone: both arms allocate as before the kept memory, which benchmarks/reused_logits_memory.py times.
    set_memory_reuse(False)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg()}

    def save():
        record["load_average_after"] = os.getloadavg()
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record, indent=1))

    # Written after each part, so a cut-off run keeps what it finished.
    parts = {1: ("training", training_rows), 2: ("product", product_rows),
             3: ("compiled_threshold", compiled_threshold_rows), 4: ("model", model_rows)}
    for number in args.parts:
        key, run = parts[number]
        if number == 3 and not args.compiled_rows:
            continue
        record[key] = run(args)
        save()
    if args.output and "training" in record:
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
