#!/usr/bin/env python
"""The language-model heads' largest buffers kept between CPU training steps (transformer_zoo/modeling_zoo_memory.py)
against fresh memory at every step, on this machine's CPU, same inputs, side by side in one process.

Part 1, the training step of a head: logits = hidden @ W.T for --tokens rows through `project_vocabulary`, the zoo's
token cross-entropy, its backward; `set_memory_reuse(True)` against `(False)`, eagerly and under torch.compile (the
function hidden -> loss compiled), per vocabulary size. Part 2, a whole model's training step: the zoo decoder at
compare_hf.py's Llama shape (d=256, 4 layers, 4 heads, RoPE, SwiGLU, 8 x 256 tokens, a 32,000-token vocabulary,
dropout 0.1, sdpa, fused AdamW), eagerly and with the loss compiled as the recipes do.

The two settings alternate which goes first from round to round; each keeps its best of --steps per round; the
median over --rounds rounds is reported, with the speed-up fresh / kept, and each setting's minor page faults per
step (the kernel mapping and zero-filling pages, which the kept memory saves). The losses and gradients of the two
are compared first (the same kernels: they agree to the bit).

    python benchmarks/reused_logits_memory.py --threads 2 --output benchmarks/results/reused_logits_memory_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from row_aligned_logits import head_and_batch  # noqa: E402

from transformer_zoo import set_memory_reuse  # noqa: E402
from transformer_zoo.modeling_zoo_losses import token_cross_entropy  # noqa: E402
from transformer_zoo.modeling_zoo_vocabulary import project_vocabulary  # noqa: E402


SETTINGS = (("kept", True), ("fresh", False))


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def head_loss(head, labels):
    def loss(hidden):
        return token_cross_entropy(project_vocabulary(head, hidden).loss_logits, labels, shift=True)
    return loss


def setting_step(step, reuse: bool):
    """`step` with the memory reuse set as this arm asks (switching it off frees what is kept, so the kept arm's
    first step after the fresh arm's maps its memory again: each arm's best of --steps is timed)."""
    def run():
        set_memory_reuse(reuse)
        return step()
    return run


def alternate(runs: dict, rounds: int, steps: int) -> dict:
    for fn in runs.values():  # warm-up: compilation, allocator
        fn()
        fn()
    times = {name: [] for name in runs}
    faults = {name: [] for name in runs}
    names = list(runs)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            best = float("inf")
            for _ in range(steps):
                before, start = minor_faults(), time.perf_counter()
                runs[name]()
                best = min(best, time.perf_counter() - start)
                faults[name].append(minor_faults() - before)
            times[name].append(best)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"median_s": median, "speedup": median["fresh"] / median["kept"], "rounds_s": times,
            "minor_faults_per_step_median": {name: statistics.median(values) for name, values in faults.items()}}


def report(label: str, result: dict) -> None:
    faults = result["minor_faults_per_step_median"]
    print(f"{label}: fresh {result['median_s']['fresh'] * 1e3:7.1f} ms ({faults['fresh']:.0f} faults), kept "
          f"{result['median_s']['kept'] * 1e3:7.1f} ms ({faults['kept']:.0f} faults), {result['speedup']:.2f}x",
          flush=True)


def head_rows(args) -> list[dict]:
    rows = []
    for vocabulary in args.vocabularies:
        head, hidden, labels = head_and_batch(vocabulary, args.tokens, args.hidden)
        loss = head_loss(head, labels)

        def step(loss=loss):
            head.weight.grad = hidden.grad = None
            value = loss(hidden)
            value.backward()
            return value

        results = {}
        for name, reuse in SETTINGS:
            for _ in range(2):  # the second step runs in the memory the first one left
                value = setting_step(step, reuse)()
            results[name] = (value.detach(), hidden.grad.clone(), head.weight.grad.clone())
        agreement = {"bitwise_equal": all(torch.equal(a, b) for a, b in zip(results["kept"], results["fresh"]))}
        for mode in ("eager", "compiled"):
            compiled = torch.compile(loss) if mode == "compiled" else loss
            torch._dynamo.reset()

            def compiled_step(compiled=compiled):
                head.weight.grad = hidden.grad = None
                compiled(hidden).backward()

            runs = {name: setting_step(compiled_step, reuse) for name, reuse in SETTINGS}
            row = {"vocabulary": vocabulary, "mode": mode, "agreement": agreement,
                   **alternate(runs, args.rounds, args.steps)}
            rows.append(row)
            report(f"head, vocabulary {vocabulary:6d} {mode:8s}", row)
    return rows


def model_rows(args) -> list[dict]:
    from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM

    torch.manual_seed(0)
    config = ZooDecoderConfig(vocab_size=32000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=680, hidden_act="swiglu", norm_type="rmsnorm",
                              position_embedding_type="rope", tie_word_embeddings=False,
                              max_position_embeddings=512, bos_token_id=0, eos_token_id=0, attention_dropout=0.1)
    model = ZooDecoderForCausalLM(config).train()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(4, 1000, (8, 256), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "labels": ids}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rows = []
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()

        def loss(inputs):
            return model(**inputs).loss

        loss = torch.compile(loss) if mode == "compiled" else loss

        def step(loss=loss):
            loss(batch).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        runs = {name: setting_step(step, reuse) for name, reuse in SETTINGS}
        result = alternate(runs, args.rounds, args.steps)
        rows.append({"model": "zoo decoder, compare_hf Llama shape", "mode": mode, **result})
        report(f"model step {mode:8s}", result)
    return rows


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, offset in (("eager", -0.2), ("compiled", 0.2)):
        rows = [r for r in record.get("head", []) if r["mode"] == mode]
        left.bar([i + offset for i in range(len(rows))], [r["speedup"] for r in rows], width=0.4, label=mode)
        left.set_xticks(range(len(rows)), [str(r["vocabulary"]) for r in rows])
        model = [r for r in record.get("model", []) if r["mode"] == mode]
        right.bar([offset], [r["speedup"] for r in model], width=0.35, label=mode)
    for axis in (left, right):
        axis.axhline(1.0, color="grey", linewidth=0.8)
        axis.set_ylabel("speed-up, fresh / kept memory")
        axis.legend(loc="lower right")
    left.set_xlabel("vocabulary")
    left.set_title(f"head training step, {record['args']['tokens']} tokens")
    right.set_xticks([0], ["zoo decoder, Llama shape"])
    right.set_xlim(-1, 1)
    right.set_title("whole training step")
    figure.suptitle(f"logits memory kept between steps, {record['threads']} threads, load "
                    f"{record['load_average_before'][0]:.1f} -> {record['load_average_after'][0]:.1f}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabularies", type=lambda s: [int(v) for v in s.split(",")],
                        default=[32000, 50257, 50265, 58101],
                        help="comma-separated vocabulary sizes for part 1 (default: Llama, GPT-2, BART, Marian)")
    parser.add_argument("--tokens", type=int, default=2048, help="token rows in part 1 (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="model width in part 1 (default: %(default)s)")
    parser.add_argument("--parts", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2],
                        help="which parts to run, comma-separated (default: both)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=3, help="runs per setting per round; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (and a PNG beside it)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg()}

    def save():
        record["load_average_after"] = os.getloadavg()
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record, indent=1))

    # Written after each part, so a cut-off run keeps what it finished.
    parts = {1: ("head", head_rows), 2: ("model", model_rows)}
    try:
        for number in args.parts:
            key, run = parts[number]
            record[key] = run(args)
            save()
    finally:
        set_memory_reuse(True)
    if args.output:
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
