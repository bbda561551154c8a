#!/usr/bin/env python
"""Long-context benchmark of the attention variants: time, memory, the longest sequence that fits, and quality.

For every variant (exact eager and SDPA attention, the blocked sliding window, Linformer, Performer) and every
sequence length n in --lengths, one forward + backward pass of a tiny zoo model is timed on a random batch:

* time per token: the fastest of --repeats timed passes after one warm-up pass, / (batch * n); when the warm-up
  pass alone takes over 10 s it is the only pass (it follows a warm-up at a shorter length, so it is warm);
* peak memory of the step: on CPU the worker's peak resident set size during the timed passes (the kernel's VmHWM,
  reset before each length) minus its resident size just before them, i.e. activations, attention buffers, autograd
  state and gradients, not the model or the interpreter; on a GPU torch.cuda.max_memory_allocated minus the memory
  allocated before the passes;
* largest n that fits: each variant runs in its own worker process, lengths ascending. The parent polls the worker's
  resident memory and kills it when it passes --memory-cap-gb (on a GPU: CUDA out-of-memory); a length whose
  predicted time (from the growth so far) exceeds --time-cap-s is skipped and reported as such, not as "fits".

Quality proxy: each variant trains the same model (same initial weights, data order and masking) for
--quality-steps AdamW steps on the same real text (the built-in Shakespeare corpus, UTF-8 bytes as tokens) at
--quality-length, and reports the loss on fixed held-out batches: next-byte loss with --quality-family decoder (the
default; Linformer is skipped there since it cannot be causal), masked-byte loss with --quality-family encoder. The
timing sweeps use --family (encoder by default, so every variant is timed).

Outputs: a table on stdout, benchmarks/results/long_context_<device>.json and a log-log PNG of time per token and peak
memory against n (so the crossover points are visible).

GPU path (written, not measured on this project's CPU machine): --device cuda --dtype bfloat16 adds the variants
"sdpa_flash" (SDPA restricted to its FlashAttention kernel with torch.nn.attention.sdpa_kernel) and
"flash_attention_2" (when the flash-attn package is installed), to compare against "eager" in bf16; memory is
measured with torch.cuda.max_memory_allocated and the cap is the GPU's own memory.

Examples:
    python benchmarks/long_context.py                                  # CPU default, about 10 min on 2 cores
    python benchmarks/long_context.py --lengths 512,1024 --quality-steps 20   # a quick look
    python benchmarks/long_context.py --device cuda --dtype bfloat16 --lengths 1024,4096,16384,65536 \\
        --variants eager,sdpa,sdpa_flash,flash_attention_2,sliding_window,linformer,performer
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# Run from a checkout without installing the package (python benchmarks/long_context.py puts benchmarks/ first on
# sys.path, not the repository root).
if importlib.util.find_spec("transformer_zoo") is None:
    sys.path.insert(0, str(ROOT))
RESULTS_DIR = ROOT / "benchmarks" / "results"
CPU_VARIANTS = ("eager", "sdpa", "sliding_window", "linformer", "performer")
GPU_ONLY_VARIANTS = ("sdpa_flash", "flash_attention_2")
BYTE_VOCAB = 256  # token ids 0..255 are bytes; 256 = [MASK], 257 = [PAD]
MASK_ID, PAD_ID = 256, 257


# ================================================================================================ model
def variant_overrides(variant: str, args, max_length: int) -> dict:
    """Config fields (and attn_implementation) of one benchmark variant."""
    if variant == "eager":
        return dict(attn_implementation="eager")
    if variant in ("sdpa", "sdpa_flash"):
        return dict(attn_implementation="sdpa")
    if variant == "flash_attention_2":
        return dict(attn_implementation="flash_attention_2")
    if variant == "sliding_window":
        return dict(attention_variant="sliding_window", attention_window=args.window,
                    global_attention_indices=[0], attn_implementation="sdpa")
    if variant == "linformer":
        return dict(attention_variant="linformer", linformer_k=args.linformer_k, linformer_max_length=max_length,
                    linformer_sharing="layer", attn_implementation="sdpa")
    if variant == "performer":
        return dict(attention_variant="performer", performer_features=args.performer_features,
                    performer_redraw_interval=0, performer_seed=0, attn_implementation="sdpa")
    raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(CPU_VARIANTS + GPU_ONLY_VARIANTS)}")


def build_model(variant: str, args, max_length: int, device, dtype):
    from transformer_zoo import (
        ZooDecoderConfig,
        ZooDecoderForCausalLM,
        ZooEncoderConfig,
        ZooEncoderForMaskedLM,
    )

    config_class, model_class = (
        (ZooEncoderConfig, ZooEncoderForMaskedLM) if args.family == "encoder"
        else (ZooDecoderConfig, ZooDecoderForCausalLM)
    )
    # RoPE is not allowed with Linformer; learned, sinusoidal and no positions suit every variant.
    config = config_class.from_preset(
        "tiny", vocab_size=BYTE_VOCAB + 2, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size, max_position_embeddings=max_length,
        position_embedding_type=args.positions, norm_position="pre", embedding_dropout=0.0, attention_dropout=0.0,
        hidden_dropout=0.0, pad_token_id=PAD_ID, **({"type_vocab_size": 0} if args.family == "encoder" else {}),
        **({"bos_token_id": None, "eos_token_id": None} if args.family == "decoder" else {}),
        **variant_overrides(variant, args, max_length),
    )
    torch.manual_seed(0)
    return model_class(config).to(device=device, dtype=dtype)


def kernel_context(variant: str, device):
    if variant == "sdpa_flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    return contextlib.nullcontext()


def mlm_batch(tokens: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking with a fixed generator: 15 % of positions predicted; of those 80 % [MASK], 10 % random, 10 % kept."""
    labels = tokens.clone()
    chosen = torch.rand(tokens.shape, generator=generator) < 0.15
    labels[~chosen] = -100
    inputs = tokens.clone()
    roll = torch.rand(tokens.shape, generator=generator)
    inputs[chosen & (roll < 0.8)] = MASK_ID
    random_positions = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[random_positions] = torch.randint(0, BYTE_VOCAB, tokens.shape, generator=generator)[random_positions]
    return inputs, labels


def make_batch(family: str, tokens: torch.Tensor, generator: torch.Generator):
    if family == "encoder":
        return mlm_batch(tokens, generator)
    return tokens, tokens  # the causal-LM loss shifts the labels itself


# ================================================================================================ worker
def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark (VmHWM; Linux >= 4.0) and return the current RSS, the step's baseline."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def peak_rss_bytes() -> int:
    return _status_bytes("VmHWM")


def run_worker(spec: dict) -> None:
    """Time forward + backward for each length, ascending; print one JSON line per length."""
    args = argparse.Namespace(**spec["args"])
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    variant, lengths = spec["variant"], spec["lengths"]
    model = build_model(variant, args, max(lengths), device, dtype)
    model.train()
    generator = torch.Generator().manual_seed(0)
    # Warm-up at a short length: first-call costs (allocator growth, lazy initialisation, kernel selection) would
    # otherwise land on the first measured length.
    warm = torch.randint(0, BYTE_VOCAB, (args.batch_size, min(lengths[0], 256)), generator=generator)
    warm_inputs, warm_labels = make_batch(args.family, warm, generator)
    for _ in range(2):
        with kernel_context(variant, device):
            model(input_ids=warm_inputs.to(device), labels=warm_labels.to(device)).loss.backward()
        model.zero_grad(set_to_none=True)
    previous: list[tuple[int, float]] = []  # (n, seconds) of the lengths run so far
    for n in lengths:
        if previous:
            # Predict this length's time by extrapolating the last growth rate (quadratic until two points exist).
            (last_n, last_s) = previous[-1]
            exponent = 2.0
            if len(previous) > 1:
                (prev_n, prev_s) = previous[-2]
                exponent = max(1.0, math.log(last_s / prev_s) / math.log(last_n / prev_n))
            predicted = last_s * (n / last_n) ** exponent
            if predicted > args.time_cap_s:
                print("RESULT " + json.dumps({"n": n, "status": "skipped", "predicted_s": round(predicted, 1)}),
                      flush=True)
                break
        tokens = torch.randint(0, BYTE_VOCAB, (args.batch_size, n), generator=generator)
        inputs, labels = make_batch(args.family, tokens, generator)
        inputs, labels = inputs.to(device), labels.to(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            baseline = torch.cuda.memory_allocated()
        else:
            baseline = reset_peak_rss()

        def step(inputs=inputs, labels=labels):
            with kernel_context(variant, device):
                loss = model(input_ids=inputs, labels=labels).loss
                loss.backward()
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()

        times = []
        try:
            repeats = args.repeats
            started = time.perf_counter()
            step()  # warm-up (and the only pass when one is already slow)
            first = time.perf_counter() - started
            if first > 10.0 or first * (repeats + 1) > args.time_cap_s:
                times = [first]
            else:
                for _ in range(repeats):
                    started = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - started)
        except torch.OutOfMemoryError:
            print("RESULT " + json.dumps({"n": n, "status": "out of memory"}), flush=True)
            break
        # The minimum: on a shared machine other jobs only ever add time, so the fastest pass is the best estimate
        # of the kernel's own cost.
        seconds = min(times)
        peak = (torch.cuda.max_memory_allocated() if device.type == "cuda" else peak_rss_bytes()) - baseline
        print("RESULT " + json.dumps({
            "n": n, "status": "ok", "seconds_per_step": seconds, "us_per_token": 1e6 * seconds / (args.batch_size * n),
            "peak_memory_mb": peak / 2**20, "timed_passes": len(times),
        }), flush=True)
        previous.append((n, seconds))


def run_variant_sweep(variant: str, args, lengths: list[int]) -> list[dict]:
    """Run one variant's worker; kill it if it passes the memory cap. Returns one record per length."""
    spec = {"variant": variant, "lengths": lengths, "args": vars(args)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    # MALLOC_MMAP_THRESHOLD_: glibc serves blocks over 128 KiB with mmap and returns them to the system when freed,
    # so resident memory falls back between lengths and each length's peak is its own (by default glibc raises the
    # threshold after large frees and keeps the memory, which hid the smaller lengths' peaks behind the larger).
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MALLOC_MMAP_THRESHOLD_="131072",
               PYTHONPATH=f"{ROOT}{os.pathsep}" + os.environ.get("PYTHONPATH", ""))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    records: list[dict] = []
    stderr_tail: list[str] = []

    def read_stdout():
        for line in process.stdout:
            if line.startswith("RESULT "):
                records.append(json.loads(line[len("RESULT "):]))

    def read_stderr():
        for line in process.stderr:
            stderr_tail.append(line)
            del stderr_tail[:-40]

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    cap = args.memory_cap_gb * 2**30
    killed_rss = None
    import psutil

    watched = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            rss = watched.memory_info().rss
        except psutil.NoSuchProcess:
            break
        if args.device == "cpu" and rss > cap:
            killed_rss = rss
            process.kill()
            break
        time.sleep(0.02)
    process.wait()
    for reader in readers:
        reader.join(timeout=5)
    done = {record["n"] for record in records}
    pending = [n for n in lengths if n not in done]
    if killed_rss is not None and pending:
        records.append({"n": pending[0], "status": f"over memory cap (resident {killed_rss / 2**30:.2f} GiB > "
                                                   f"{args.memory_cap_gb} GiB)"})
    elif process.returncode not in (0, None) and pending:
        records.append({"n": pending[0], "status": "worker failed", "error": "".join(stderr_tail[-5:]).strip()})
    return records


# ================================================================================================ quality
def shakespeare_bytes() -> tuple[torch.Tensor, torch.Tensor]:
    from transformer_zoo.training.data.corpora import load_corpus

    corpus = load_corpus("shakespeare")

    def encode(split):
        data = "\n".join(corpus[split]["text"]).encode("utf-8")
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()

    return encode("train"), encode("validation")


def quality_run(variant: str, args, train_bytes: torch.Tensor, valid_bytes: torch.Tensor) -> dict:
    """Train `variant` for --quality-steps on the same batches; the held-out loss afterwards."""
    from tqdm.auto import tqdm

    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    n, batch = args.quality_length, args.quality_batch_size
    args = argparse.Namespace(**{**vars(args), "family": args.quality_family})
    model = build_model(variant, args, n, device, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.quality_lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(1)  # same data order and masking for every variant
    model.train()
    started = time.perf_counter()
    losses = []
    for _ in tqdm(range(args.quality_steps), desc=f"quality {variant}", leave=False, disable=not args.progress):
        starts = torch.randint(0, len(train_bytes) - n, (batch,), generator=generator)
        tokens = torch.stack([train_bytes[s : s + n] for s in starts.tolist()])
        inputs, labels = make_batch(args.family, tokens, generator)
        with kernel_context(variant, device):
            loss = model(input_ids=inputs.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    train_seconds = time.perf_counter() - started
    model.eval()
    evaluation = torch.Generator().manual_seed(2)
    total, count = 0.0, 0
    with torch.no_grad():
        for index in range(args.quality_eval_batches):
            starts = torch.linspace(0, len(valid_bytes) - n - 1, args.quality_eval_batches * batch).long()
            chunk = starts[index * batch : (index + 1) * batch]
            tokens = torch.stack([valid_bytes[s : s + n] for s in chunk.tolist()])
            inputs, labels = make_batch(args.family, tokens, evaluation)
            with kernel_context(variant, device):
                total += float(model(input_ids=inputs.to(device), labels=labels.to(device)).loss)
            count += 1
    return {"eval_loss": total / count, "final_train_loss": statistics.mean(losses[-10:]),
            "train_seconds": train_seconds}


# ================================================================================================ report
def _cell(point: dict | None, results: dict) -> str:
    if point is None:
        return "–"
    if point["status"] == "ok":
        return f"{point['us_per_token']:.0f} µs, {point['peak_memory_mb']:.0f} MB"
    if point["status"] == "skipped":
        return f"skipped (> {results['time_cap_s']:g} s)"
    if point["status"].startswith("over memory cap"):
        return f"over {results['memory_cap_gb']:g} GiB"
    return point["status"]  # out of memory, worker failed


def format_table(results: dict) -> str:
    """Per variant and length: time per token and the step's peak memory; the largest length that ran; the quality
    proxy. Printed after a run and rendered into docs/efficient-attention.md by scripts/render_docs.py."""
    labels = {"eager": "eager (exact)", "sdpa": "sdpa (exact)",
              "sliding_window": f"sliding_window w={results['window']}",
              "linformer": f"linformer k={results['linformer_k']}",
              "performer": f"performer m={results['performer_features']}"}
    lengths = results["lengths"]
    objective = "next-byte" if results["quality_family"] == "decoder" else "masked-byte"
    rows = ["| variant | " + " | ".join(f"n={n:,}" for n in lengths)
            + f" | largest n run (≤ {results['memory_cap_gb']:g} GiB) | {objective} loss, "
            f"{results['quality_steps']} steps, n={results['quality_length']} |",
            "|---|" + "---|" * (len(lengths) + 2)]
    for name, variant in results["variants"].items():
        by_length = {point["n"]: point for point in variant["sweep"]}
        fitted = [point["n"] for point in variant["sweep"] if point["status"] == "ok"]
        capped = any(point["status"] == "skipped" for point in variant["sweep"])
        quality = variant.get("quality") or {}
        loss = f"{quality['eval_loss']:.3f}" if "eval_loss" in quality else "n/a (not causal)"
        largest = f"{max(fitted):,}" if fitted else "none"
        rows.append(f"| {labels.get(name, name)} | " + " | ".join(_cell(by_length.get(n), results) for n in lengths)
                    + f" | {largest}" + (" (time-capped)" if capped else "") + f" | {loss} |")
    return "\n".join(rows)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(12, 4.8))
    for variant, entry in results["variants"].items():
        ok = [r for r in entry["sweep"] if r["status"] == "ok"]
        if not ok:
            continue
        ns = [r["n"] for r in ok]
        time_axis.plot(ns, [r["us_per_token"] for r in ok], marker="o", label=variant)
        memory_axis.plot(ns, [max(r["peak_memory_mb"], 1e-1) for r in ok], marker="o", label=variant)
    for axis, label in ((time_axis, "forward + backward time per token (µs)"), (memory_axis, "peak memory (MB)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sequence length n")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    memory_axis.axhline(results["memory_cap_gb"] * 1024, color="grey", linestyle="--", linewidth=1)
    figure.suptitle(f"{results['family']} d={results['hidden_size']}, {results['layers']} layers, {results['heads']} "
                    f"heads, batch {results['batch_size']}, {results['device']} {results['dtype']}, "
                    f"threads={results['threads']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ================================================================================================ main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(CPU_VARIANTS),
                        help="Comma-separated variants: eager, sdpa (exact), sliding_window, linformer, performer; "
                             "GPU only: sdpa_flash, flash_attention_2. Default: %(default)s.")
    parser.add_argument("--lengths", default="512,1024,2048,4096,8192,16384,32768,65536",
                        help="Comma-separated sequence lengths, ascending. Default: %(default)s.")
    parser.add_argument("--family", choices=("encoder", "decoder"), default="encoder",
                        help="encoder: bidirectional, masked-LM loss (every variant); decoder: causal, next-byte loss "
                             "(Linformer is refused there). Default: %(default)s.")
    parser.add_argument("--hidden-size", type=int, default=64, help="Model width. Default: %(default)s.")
    parser.add_argument("--layers", type=int, default=2, help="Number of blocks. Default: %(default)s.")
    parser.add_argument("--heads", type=int, default=4, help="Attention heads. Default: %(default)s.")
    parser.add_argument("--batch-size", type=int, default=1, help="Sequences per timed pass. Default: %(default)s.")
    parser.add_argument("--positions", default="learned", choices=("learned", "sinusoidal", "none"),
                        help="Position scheme (every variant accepts these three; RoPE is refused by Linformer). "
                             "learned by default: with sinusoidal positions (magnitude 1) added to embeddings of "
                             "std 0.02 the tiny model stayed at the unigram loss for 400 steps. Default: %(default)s.")
    parser.add_argument("--window", type=int, default=128,
                        help="sliding_window: keys visible on each side (one global token, slot 0). "
                             "Default: %(default)s.")
    parser.add_argument("--linformer-k", type=int, default=128, help="Linformer projected length. Default: %(default)s.")
    parser.add_argument("--performer-features", type=int, default=64,
                        help="Performer random features per layer. Default: %(default)s.")
    parser.add_argument("--repeats", type=int, default=2,
                        help="Timed passes per length after one warm-up (the fastest is reported; a single pass when one "
                             "already takes long). Default: %(default)s.")
    parser.add_argument("--memory-cap-gb", type=float, default=4.0,
                        help="CPU: a worker whose resident memory passes this is killed and the length reported as "
                             "not fitting. Default: %(default)s.")
    parser.add_argument("--time-cap-s", type=float, default=60.0,
                        help="Skip a length whose predicted forward+backward time exceeds this. Default: %(default)s.")
    parser.add_argument("--quality-family", choices=("decoder", "encoder"), default="decoder",
                        help="Model family of the quality runs: decoder = next-byte loss (every variant but Linformer, "
                             "which cannot be causal), encoder = masked-LM loss (every variant). decoder by default: "
                             "on bytes the masked-LM loss stayed at the unigram level (3.1-3.3 nats) for 250 steps, "
                             "so it could not tell variants apart. Default: %(default)s.")
    parser.add_argument("--quality-steps", type=int, default=200,
                        help="Training steps of the quality proxy (0 skips it). Default: %(default)s.")
    parser.add_argument("--quality-length", type=int, default=512,
                        help="Sequence length of the quality runs. Default: %(default)s.")
    parser.add_argument("--quality-batch-size", type=int, default=4, help="Default: %(default)s.")
    parser.add_argument("--quality-lr", type=float, default=3e-3, help="AdamW learning rate. Default: %(default)s.")
    parser.add_argument("--quality-eval-batches", type=int, default=4,
                        help="Held-out batches for the reported loss. Default: %(default)s.")
    parser.add_argument("--device", default="cpu", help="cpu or cuda. Default: %(default)s.")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="Parameter and activation dtype (bfloat16 for the GPU comparison). Default: %(default)s.")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads. 1 by default: on a machine shared with other jobs, two threads "
                             "spent most of their time waiting for each other. Default: %(default)s.")
    parser.add_argument("--output", default=None,
                        help="Results JSON path (PNG next to it). Default: benchmarks/results/long_context_<device>.json")
    parser.add_argument("--progress", type=lambda v: v.lower() in ("1", "true", "yes"), default=True,
                        help="Show tqdm progress bars (true/false). Default: %(default)s.")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one variant's timing sweep
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    if args.worker:
        run_worker(json.loads(args.worker))
        return {}
    from tqdm.auto import tqdm

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    lengths = sorted(int(n) for n in args.lengths.split(","))
    for variant in variants:
        variant_overrides(variant, args, max(lengths))  # unknown names fail here, before any work
        if variant in GPU_ONLY_VARIANTS and not args.device.startswith("cuda"):
            raise SystemExit(f"--variants {variant} needs --device cuda (SDPA's flash kernel and flash-attn are GPU "
                             "kernels).")
        if variant == "linformer" and args.family == "decoder":
            raise SystemExit("linformer is encoder-only (it cannot be causal); drop it or use --family encoder.")
    if "flash_attention_2" in variants and importlib.util.find_spec("flash_attn") is None:
        print("flash_attention_2: the flash-attn package is not installed; skipping it.")
        variants.remove("flash_attention_2")
    if args.device == "cuda":
        args.memory_cap_gb = torch.cuda.get_device_properties(0).total_memory / 2**30

    started = time.perf_counter()
    results = {
        "device": args.device, "dtype": args.dtype, "threads": args.threads, "family": args.family,
        "hidden_size": args.hidden_size, "layers": args.layers, "heads": args.heads, "batch_size": args.batch_size,
        "window": args.window, "linformer_k": args.linformer_k, "performer_features": args.performer_features,
        "memory_cap_gb": args.memory_cap_gb, "time_cap_s": args.time_cap_s, "lengths": lengths,
        "quality_length": args.quality_length, "quality_steps": args.quality_steps,
        "quality_family": args.quality_family, "quality_batch_size": args.quality_batch_size,
        "quality_lr": args.quality_lr, "positions": args.positions,
        "torch": torch.__version__, "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(), "variants": {},
    }
    output = Path(args.output) if args.output else RESULTS_DIR / f"long_context_{args.device}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    for variant in tqdm(variants, desc="timing sweeps", disable=not args.progress):
        results["variants"][variant] = {"sweep": run_variant_sweep(variant, args, lengths)}
        output.write_text(json.dumps(results, indent=2))  # partial results survive an interrupted run
    if args.quality_steps > 0:
        train_bytes, valid_bytes = shakespeare_bytes()
        for variant in tqdm(variants, desc="quality runs", disable=not args.progress):
            if variant == "linformer" and args.quality_family == "decoder":
                results["variants"][variant]["quality"] = {
                    "skipped": "Linformer cannot be causal; use --quality-family encoder to compare it"}
                continue
            results["variants"][variant]["quality"] = quality_run(variant, args, train_bytes, valid_bytes)
    results["load_average_at_end"] = os.getloadavg()
    results["wall_seconds"] = round(time.perf_counter() - started, 1)

    output.write_text(json.dumps(results, indent=2))
    plot(results, output.with_suffix(".png"))
    print(format_table(results))
    print(f"\n{results['wall_seconds']:.0f} s; results in {output}, plot in {output.with_suffix('.png')}; load "
          f"average {results['load_average_at_start'][0]:.1f} -> {results['load_average_at_end'][0]:.1f} on "
          f"{results['cpu_count']} cores.")
    return results


if __name__ == "__main__":
    main()
