#!/usr/bin/env python
"""Time transformer-zoo against transformers' own models (and a nanoGPT-style GPT), side by side in one process,
with the same weights.

Per family a transformers reference (GPT-2, Llama, BERT masked LM, Marian, BART, ViT) is built at the requested shape
with random weights and converted to the zoo (`transformer_zoo.convert.convert_model`), so both hold identical
weights; the script checks that their logits agree before timing anything. Then, per attention implementation:

* train: one optimisation step (forward, backward, fused AdamW step, zero_grad) on a fixed batch, dropout on;
* generate: KV-cached greedy generation of --new-tokens tokens (decoders, encoder-decoders), the zoo timed twice: as
  it generates by default and with config.decoding_head_copy=False (a row-major output projection, as the peers);
* infer: a forward pass without gradients (BERT, ViT).

Timing: --rounds rounds; in each, each side runs --steps times and keeps its best (the least disturbed), and the
sides alternate which goes first from round to round, so drifts in machine load hit both alike. Reported: the median
over rounds of those best times, and the speed-up = peer time / zoo time (above 1: the zoo is faster; the target is
1.1 for training, 1.0 for generation). --compile adds rows with both sides under torch.compile (--compile-target:
the model, or the function batch -> loss as the recipes compile it). --memory measures each
side's peak resident memory over a training step in a fresh process. Extra rows: "bert+sparse" is the zoo encoder
with sparse_prediction (masked-LM logits at the masked positions only, as the pretraining recipe trains), and
"nanogpt" the zoo decoder (exact GELU) against a nanoGPT-style GPT (benchmarks/nanogpt_reference.py).

    python benchmarks/compare_hf.py --output benchmarks/results/compare_hf_cpu.json
    python benchmarks/compare_hf.py --families gpt2,llama --attn sdpa --rounds 3 --steps 2
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers as hf
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nanogpt_reference import from_zoo  # noqa: E402

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, free_reused_memory  # noqa: E402
from transformer_zoo.convert import convert_model  # noqa: E402


FAMILIES = ("gpt2", "llama", "bert", "bert+sparse", "marian", "bart", "vit", "nanogpt")
GENERATES = {"gpt2", "llama", "marian", "bart"}


def build_pair(family: str, args, attn: str):
    """(zoo model, peer model, training batch)."""
    d, layers, heads, seq, batch = args.hidden, args.layers, args.heads, args.seq_len, args.batch_size
    ffn, dropout = 4 * d, 0.1
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 1000, (batch, seq), generator=generator)
    context = seq + args.new_tokens + 16
    if family == "nanogpt":
        zoo = ZooDecoderForCausalLM(ZooDecoderConfig(
            vocab_size=args.vocab_size, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=ffn, max_position_embeddings=context, hidden_act="gelu", bos_token_id=0, eos_token_id=0,
        ))
        zoo.set_attn_implementation(attn)
        return zoo, from_zoo(zoo, dropout), {"input_ids": ids, "labels": ids}
    if family == "gpt2":
        peer = hf.GPT2LMHeadModel(hf.GPT2Config(
            n_embd=d, n_layer=layers, n_head=heads, n_positions=context, vocab_size=args.vocab_size,
            bos_token_id=0, eos_token_id=0))
        inputs = {"input_ids": ids, "labels": ids}
    elif family == "llama":
        peer = hf.LlamaForCausalLM(hf.LlamaConfig(
            hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
            intermediate_size=int(8 * d / 3) // 8 * 8, max_position_embeddings=context, vocab_size=32000,
            bos_token_id=0, eos_token_id=0, attention_dropout=dropout))
        inputs = {"input_ids": ids, "labels": ids}
    elif family.startswith("bert"):
        peer = hf.BertForMaskedLM(hf.BertConfig(
            hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
            max_position_embeddings=max(512, seq), vocab_size=30522))
        labels = torch.full_like(ids, -100)
        masked = torch.rand(ids.shape, generator=generator) < 0.15
        labels[masked] = ids[masked]
        inputs = {"input_ids": ids, "labels": labels}
    elif family in ("marian", "bart"):
        common = dict(
            d_model=d, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
            decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, dropout=dropout,
            max_position_embeddings=context, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
            forced_eos_token_id=None, vocab_size=32000)
        peer = (hf.MarianMTModel(hf.MarianConfig(**common)) if family == "marian"
                else hf.BartForConditionalGeneration(hf.BartConfig(**common)))
        inputs = {"input_ids": ids, "labels": ids}
    elif family == "vit":
        peer = hf.ViTForImageClassification(hf.ViTConfig(
            hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
            image_size=args.image_size, patch_size=args.patch_size, num_labels=10, hidden_dropout_prob=dropout))
        pixels = torch.randn(batch, 3, args.image_size, args.image_size, generator=generator)
        inputs = {"pixel_values": pixels, "labels": torch.randint(0, 10, (batch,), generator=generator)}
    else:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    peer.set_attn_implementation(attn)
    zoo = convert_model(peer)
    zoo.set_attn_implementation(attn)
    if family == "bert+sparse":
        zoo.config.sparse_prediction = True
    return zoo, peer, inputs


def logits_of(model, inputs):
    out = model(**inputs)
    return out[1] if isinstance(out, tuple) else out.logits


@torch.no_grad()
def max_logit_difference(zoo, peer, batch) -> float:
    zoo.eval(), peer.eval()
    inputs = {k: v[:, :32] if k == "input_ids" else v for k, v in batch.items() if k != "labels"}
    if getattr(peer, "config", None) is not None and getattr(peer.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = batch["labels"][:, :16]
    return (logits_of(zoo, inputs) - logits_of(peer, inputs)).abs().max().item()


def loss_of(model, batch):
    out = model(**batch)
    return out[0] if isinstance(out, tuple) else out.loss


def training_step(model, batch, compile_loss: bool = False):
    """One optimisation step on `batch`; compile_loss: torch.compile the function batch -> loss (the graph returns
    the loss only) instead of calling `model` as given."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    def loss(inputs):
        return loss_of(model, inputs)

    if compile_loss:
        compiled_loss = torch.compile(loss)

        def loss(inputs):
            # As the recipes' --compile does (training/engine/devices.py: training_loss), for both sides: sizes that depend
            # on the data are captured, so the zoo's masked-LM loss keeps to the labelled rows in the graph.
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                return compiled_loss(inputs)

    def step():
        loss(batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def generation_run(model, batch, new_tokens: int, head_copy: bool | None = None):
    """head_copy: set the zoo's config.decoding_head_copy for this run (None: leave the model as it is)."""
    prompt = batch["input_ids"][:1, :16]

    def run():
        if head_copy is not None:
            model.config.decoding_head_copy = head_copy
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                           num_beams=1, use_cache=True, pad_token_id=model.config.pad_token_id or 0)

    return run


def inference_run(model, batch):
    inputs = {k: v for k, v in batch.items() if k != "labels"}

    def run():
        with torch.no_grad():
            logits_of(model, inputs)

    return run


def best_of(fn, steps: int) -> float:
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def alternating_rounds(runs: dict, rounds: int, steps: int) -> dict[str, list[float]]:
    """Per run, its best-of-`steps` time in each of `rounds` rounds; the order of the runs reverses every round, so
    a drift in machine load hits them alike. Before each run (untimed) the zoo returns the head buffers it keeps
    between steps (modeling_zoo_memory.py): held while the peer runs, they made the peer's steps slower on this
    machine (GPT-2-shaped, 3190 against 2440 ms with the same page faults; docs/speed.md, "The memory allocator"), a cost a
    peer in its own process would not pay. So each side runs with only its own memory, and the zoo's first step of a
    round takes its buffers afresh."""
    times = {name: [] for name in runs}
    for round_index in range(rounds):
        order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for name in order:
            free_reused_memory()
            times[name].append(best_of(runs[name], steps))
    free_reused_memory()
    return times


def compare(runs: dict, rounds: int, steps: int, warmup: int) -> dict:
    for fn in runs.values():
        for _ in range(warmup):
            free_reused_memory()
            fn()
    times = alternating_rounds(runs, rounds, steps)
    zoo, peer = statistics.median(times["zoo"]), statistics.median(times["peer"])
    result = {"zoo_s": zoo, "peer_s": peer, "speedup": peer / zoo, "rounds": times}
    for name in set(runs) - {"zoo", "peer"}:  # further zoo variants, against the same peer
        result[f"{name}_s"] = statistics.median(times[name])
        result[f"{name}_speedup"] = peer / result[f"{name}_s"]
    return result


MEMORY_PROBE = r"""
import argparse, gc, json, sys, torch
sys.path.insert(0, sys.argv[3])
import compare_hf
args = argparse.Namespace(**json.loads(sys.argv[4]))
zoo, peer, batch = compare_hf.build_pair(sys.argv[1], args, sys.argv[2])
model = zoo if sys.argv[5] == "zoo" else peer
del zoo, peer
gc.collect()
model.train()
step = compare_hf.training_step(model, batch)
step()  # the optimiser state exists from here on, as in every later step
# The zoo keeps its largest head buffers between steps (modeling_zoo_memory.py): return them, so that what the step
# allocates counts in its step memory as on the peer's side.
import transformer_zoo
transformer_zoo.free_reused_memory()


def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))


with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # resets the peak resident set size (VmHWM) to the current one
before = status("VmRSS")
step()
print(json.dumps({"before_kb": before, "peak_kb": status("VmHWM")}))
"""


def peak_memory(family: str, attn: str, args) -> dict:
    """Each side's memory over one training step (its second: optimiser state already allocated), each in a fresh
    process holding only that side's model: the step's peak resident memory above the resident memory before it
    (step_mib), and that peak itself (peak_mib)."""
    result = {}
    for side in ("zoo", "peer"):
        done = subprocess.run(
            [sys.executable, "-c", MEMORY_PROBE, family, attn, str(Path(__file__).resolve().parent),
             json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}), side], capture_output=True, text=True, check=True)
        numbers = json.loads(done.stdout.strip().splitlines()[-1])
        result[f"{side}_step_mib"] = round((numbers["peak_kb"] - numbers["before_kb"]) / 1024, 1)
        result[f"{side}_peak_mib"] = round(numbers["peak_kb"] / 1024, 1)
    return result


def add_shape_and_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """The model shape build_pair reads and the timing of compare(); benchmarks/throughput_mfu.py shares them."""
    parser.add_argument("--hidden", type=int, default=256, help="model width d (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=4, help="layers (each of encoder and decoder) (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=256, help="training sequence length (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch size (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=50257,
                        help="GPT-2 / nanoGPT vocabulary (Llama and the encoder-decoders use 32,000, BERT 30,522) "
                             "(default: %(default)s)")
    parser.add_argument("--image-size", type=int, default=224, help="ViT image size (default: %(default)s)")
    parser.add_argument("--patch-size", type=int, default=16, help="ViT patch size (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds; the median is reported (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="runs per side per round; the best counts (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per side first (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of: %(default)s")
    parser.add_argument("--attn", default="eager,sdpa", help="attention implementations to time (default: %(default)s)")
    add_shape_and_timing_arguments(parser)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens per timed generation (default: %(default)s)")
    parser.add_argument("--compile", action="store_true", help="also time both sides under torch.compile (sdpa only)")
    parser.add_argument("--compile-target", choices=("model", "loss"), default="model",
                        help="what --compile compiles: the model (its graph returns logits and loss) or the function "
                             "batch -> loss, as the recipes do (default: %(default)s)")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory of a step per side (fresh processes)")
    parser.add_argument("--no-train", action="store_true",
                        help="time only generation / inference, not the training step (no compiled rows)")
    parser.add_argument("--table", type=Path, default=None, help="print the Markdown table of an existing results file")
    parser.add_argument("--memory-only", action="store_true",
                        help="only measure memory (sdpa), adding it to the rows of an existing --output file")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON to this file")
    return parser.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.table:
        record = json.loads(args.table.read_text())
        print(format_table(record["rows"], argparse.Namespace(**record["args"]), record["threads"]))
        return
    if args.memory_only:
        record = json.loads(args.output.read_text())
        for row in record["rows"]:
            if row["attn"] == "sdpa" and not row["compile"]:
                row["memory"] = peak_memory(row["family"], "sdpa", args)
                print(format_row(row), flush=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        return
    load_before = os.getloadavg()
    rows = []
    variants = [(attn, False) for attn in args.attn.split(",")]
    variants += [("sdpa", True)] if args.compile and not args.no_train else []
    for family in args.families.split(","):
        for attn, compiled in variants:
            torch.manual_seed(0)
            zoo, peer, batch = build_pair(family, args, attn)
            row = {"family": family, "attn": attn, "compile": compiled,
                   "max_logit_diff": max_logit_difference(zoo, peer, batch)}
            zoo.train(), peer.train()
            if compiled:
                # A fresh dynamo per family: transformers' output wrappers are one code object for every model, and
                # after eight families dynamo's recompile limit made it run them eagerly. Never between the sides:
                # that would throw away the first side's compiled code.
                torch._dynamo.reset()
            compile_loss = compiled and args.compile_target == "loss"
            if compiled:
                row["compile_target"] = args.compile_target
            zoo_step, peer_step = (torch.compile(zoo), torch.compile(peer)) if compiled and not compile_loss else (zoo, peer)
            if not args.no_train:
                row["train"] = compare({"zoo": training_step(zoo_step, batch, compile_loss),
                                        "peer": training_step(peer_step, batch, compile_loss)},
                                       args.rounds, args.steps, args.warmup + (2 if compiled else 0))
            zoo.eval(), peer.eval()
            if family in GENERATES and not compiled:
                # zoo_row_major: the zoo without its column-major decoding copy of the output projection
                # (modeling_zoo_generation.py), to show what that copy is worth.
                runs = {"zoo": generation_run(zoo, batch, args.new_tokens, head_copy=True),
                        "peer": generation_run(peer, batch, args.new_tokens),
                        "zoo_row_major": generation_run(zoo, batch, args.new_tokens, head_copy=False)}
                row["generate"] = compare(runs, args.rounds, args.steps, args.warmup)
            elif family in ("bert", "bert+sparse", "vit") and not compiled:
                row["infer"] = compare({"zoo": inference_run(zoo, batch), "peer": inference_run(peer, batch)},
                                       args.rounds, args.steps, args.warmup)
            if args.memory and not compiled and attn == "sdpa":
                row["memory"] = peak_memory(family, attn, args)
            rows.append(row)
            print(format_row(row), flush=True)
            if args.output:  # incremental: a cut-off run keeps what it finished
                write(args, rows, load_before)
    print("\n" + format_table(rows, args, torch.get_num_threads()))
    if args.output:
        write(args, rows, load_before)


def write(args, rows, load_before):
    args.output.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "output"},
        "torch": torch.__version__, "transformers": hf.__version__, "threads": torch.get_num_threads(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "rows": rows,
    }
    args.output.write_text(json.dumps(record, indent=2) + "\n")


def format_row(row) -> str:
    compiled = f" compiled ({row.get('compile_target', 'model')})" if row["compile"] else ""
    parts = [f"{row['family']:>11} {row['attn']:>5}{compiled} |logit diff| "
             f"{row['max_logit_diff']:.1e}"]
    for kind in ("train", "generate", "infer"):
        if kind in row:
            r = row[kind]
            parts.append(f"{kind}: zoo {r['zoo_s'] * 1e3:.0f} ms, peer {r['peer_s'] * 1e3:.0f} ms, "
                         f"speed-up {r['speedup']:.2f}")
            if "zoo_row_major_s" in r:
                parts.append(f"zoo with a row-major head {r['zoo_row_major_s'] * 1e3:.0f} ms, speed-up "
                             f"{r['zoo_row_major_speedup']:.2f}")
    if "memory" in row:
        m = row["memory"]
        parts.append(f"step memory zoo {m['zoo_step_mib']:.0f} MiB, peer {m['peer_step_mib']:.0f} MiB")
    return " | ".join(parts)


PEERS = {"gpt2": "GPT-2", "llama": "Llama", "bert": "BERT MLM", "bert+sparse": "BERT MLM (zoo: sparse_prediction)",
         "marian": "Marian", "bart": "BART", "vit": "ViT", "nanogpt": "nanoGPT-style"}


def format_table(rows, args, threads: int) -> str:
    lines = [
        f"d={args.hidden}, {args.layers} layers, {args.heads} heads, seq {args.seq_len}, batch {args.batch_size}, "
        f"{threads} threads; median over {args.rounds} rounds of the best of {args.steps}; "
        "speed-up = peer time / zoo time (>1: zoo faster)\n",
        "| peer | attention | train zoo / peer (ms) | train speed-up | generate or infer zoo / peer (ms) | speed-up | "
        "step memory zoo / peer (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        kind = "generate" if "generate" in row else "infer" if "infer" in row else None
        t = row.get("train")
        first = f"{t['zoo_s'] * 1e3:.0f} / {t['peer_s'] * 1e3:.0f} | {t['speedup']:.2f}" if t else "— | —"
        second = (f"{row[kind]['zoo_s'] * 1e3:.0f} / {row[kind]['peer_s'] * 1e3:.0f} ({kind}) | "
                  f"{row[kind]['speedup']:.2f}") if kind else "— | —"
        memory = f"{row['memory']['zoo_step_mib']:.0f} / {row['memory']['peer_step_mib']:.0f}" if "memory" in row else "—"
        attention = row["attn"] + (" + compile" if row["compile"] else "")
        attention += " (loss)" if row.get("compile_target") == "loss" else ""
        lines.append(f"| {PEERS[row['family']]} | {attention} | {first} | {second} | {memory} |")
    generation = [row for row in rows if "zoo_row_major_s" in row.get("generate", {})]
    if generation:
        lines += ["", "| peer | attention | generate: zoo / zoo with row-major head / peer (ms) | speed-up | "
                  "speed-up with row-major head |", "|---|---|---|---|---|"]
        for row in generation:
            g = row["generate"]
            lines.append(f"| {PEERS[row['family']]} | {row['attn']} | {g['zoo_s'] * 1e3:.0f} / "
                         f"{g['zoo_row_major_s'] * 1e3:.0f} / {g['peer_s'] * 1e3:.0f} | {g['speedup']:.2f} | "
                         f"{g['zoo_row_major_speedup']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
