#!/usr/bin/env python
"""Training throughput and model FLOPs utilisation (MFU), transformer-zoo against transformers, side by side in one
process on any device: the GPU run of issue 16 (bf16, SDPA's flash kernel), which also runs, smaller, on a CPU.

Per family the pair of compare_hf.py (a transformers model with random weights and the zoo model converted from it,
same weights, logits checked to agree) is moved to --device in --precision:

* fp32: float32 weights and arithmetic;
* bf16-mixed: float32 weights under torch.autocast(bfloat16), as `accelerate launch --mixed_precision bf16` trains;
* bf16: bfloat16 weights and arithmetic.

Then, for each side:

* FLOPs of one eager training step (forward and backward), counted with torch.utils.flop_counter's formulas for every
  matrix product, convolution and attention kernel that runs (the CPU flash kernel, which it does not list, with its
  SDPA formula). The peer's count is the
  model FLOPs of the step, the arithmetic the standard dense model needs; both sides' MFU use it, so the zoo's skipped
  work (the masked LM's unlabelled rows, the classifiers' unread rows) shows as time saved, not as extra FLOPs. Each
  side's own count gives its hardware FLOPs utilisation (HFU) too. Causal attention is counted over the full square,
  as FlopCounterMode does.
* The attention kernels the step ran: every aten operation whose name has "attention" in it, with its query's dtype
  ("-": none, SDPA's math path, which runs as matrix products and a softmax; on a CPU attention dropout takes it). With --sdpa-backend flash both sides run under torch.nn.attention.sdpa_kernel(FLASH_ATTENTION),
  so any SDPA call the flash kernel cannot take raises instead of falling back; a side that raises is reported as
  such, and the recorded kernels show which ran.
* The time of a training step (forward, backward, fused AdamW, zero_grad; dropout on), as compare_hf.py times it:
  --rounds rounds, the sides alternating which goes first, each keeping its best of --steps per round; the median
  over rounds. On a GPU every timed call ends with torch.cuda.synchronize().

Reported per side: tokens/s (positions the model reads per step: input tokens, plus target tokens for the
encoder-decoders, patches plus the class token for the ViT), MFU = model FLOPs / step time / peak, and HFU. The peak
is this device's measured dense matmul throughput in the step's compute dtype (the best of --peak-repeats products of
two --peak-size square matrices, measured before and after the families; the higher counts), not a data-sheet
figure. A peak measured too low would inflate every MFU, so the best of both is taken. MFU above 100 % means the zoo
skipped more of the standard model's arithmetic than its kernels lose to the peak (the sparse masked LM does).

    python benchmarks/throughput_mfu.py --output benchmarks/results/throughput_mfu_cpu.json
    python benchmarks/throughput_mfu.py --device cuda --precision bf16-mixed --sdpa-backend flash --hidden 768 \\
        --layers 12 --heads 12 --seq-len 1024 --batch-size 8 --output benchmarks/results/throughput_mfu_gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import transformers as hf
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count, shape_wrapper
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_hf  # noqa: E402


TRAINING_FAMILIES = ("gpt2", "llama", "bert", "bert+sparse", "marian", "bart", "vit", "nanogpt")
PRECISIONS = ("fp32", "bf16-mixed", "bf16")
aten = torch.ops.aten

# FlopCounterMode has formulas for the GPU attention kernels only; PyTorch's CPU flash kernel takes the same shapes
# (query, key, value first; the gradient of the output first in the backward), so the same counts apply.
def _cpu_flash_forward_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                              **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


CPU_FLASH_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}


class StepCounter(TorchDispatchMode):
    """FLOPs by FlopCounterMode's formulas (torch.utils.flop_counter.flop_registry, the CPU flash kernel's added), and
    the aten operations with "attention" in their name (the kernel SDPA dispatched to, forward and backward), of what
    runs under it. Not FlopCounterMode itself: it tracks modules with global forward hooks, and a module hook makes
    the zoo call its layers as modules, so it would count the zoo's unoptimised path (modeling_zoo_layers.
    plain_linears)."""

    REGISTRY = {**flop_registry, **{op: shape_wrapper(formula) for op, formula in CPU_FLASH_FORMULAS.items()}}

    def __init__(self):
        super().__init__()
        self.flops = 0
        self.attention_kernels: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if packet in self.REGISTRY:
            self.flops += self.REGISTRY[packet](*args, **kwargs, out_val=out)
        if "attention" in packet.__name__:
            # The name and the query's dtype: the flash kernels take only half-precision inputs on a GPU.
            query = next((a for a in args if isinstance(a, torch.Tensor)), None)
            dtype = str(query.dtype).removeprefix("torch.") if query is not None else "?"
            self.attention_kernels.add(f"{packet.__name__.removeprefix('_scaled_dot_product_')}[{dtype}]")
        return out


def compute_dtype(precision: str) -> torch.dtype:
    return torch.float32 if precision == "fp32" else torch.bfloat16


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """FLOP/s of this device's best dense (size x size) @ (size x size) product in `dtype`."""
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    torch.mm(a, b)  # warm-up: the library's kernel selection and the first-touch of the output
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def tokens_per_step(family: str, batch: dict, args) -> int:
    if family == "vit":
        return batch["pixel_values"].shape[0] * ((args.image_size // args.patch_size) ** 2 + 1)
    if family in ("marian", "bart"):
        return batch["input_ids"].numel() + batch["labels"].numel()
    return batch["input_ids"].numel()


def precision_context(device: torch.device, precision: str):
    if precision == "bf16-mixed":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sdpa_context(backend: str):
    if backend == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    return contextlib.nullcontext()


def in_contexts(fn, device: torch.device, args):
    """`fn` under the run's precision and SDPA restriction, ending with a device synchronisation."""
    def run():
        with precision_context(device, args.precision), sdpa_context(args.sdpa_backend):
            fn()
        synchronize(device)
    return run


def counted_step(step, device: torch.device, args) -> dict:
    """One training step under StepCounter: its FLOPs and the attention kernels it ran."""
    counter = StepCounter()
    with counter:
        in_contexts(step, device, args)()
    return {"flops": int(counter.flops), "attention_kernels": sorted(counter.attention_kernels)}


def measure_family(family: str, args, device: torch.device, peak: float) -> dict:
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(family, args, "sdpa")
    row = {"family": family, "max_logit_diff_fp32": compare_hf.max_logit_difference(zoo, peer, batch)}
    weights_dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    zoo.to(device=device, dtype=weights_dtype).train()
    peer.to(device=device, dtype=weights_dtype).train()
    batch = {key: value.to(device=device, dtype=weights_dtype if value.is_floating_point() else value.dtype)
             for key, value in batch.items()}
    if args.compile:
        torch._dynamo.reset()  # a fresh dynamo per family, never between the sides (compare_hf.py says why)
    models = {"zoo": zoo, "peer": peer}
    steps = {side: compare_hf.training_step(model, batch, compile_loss=args.compile) for side, model in models.items()}
    for side, model in models.items():
        try:
            # Counted on an eager step (a fresh one under --compile: not through a dispatch mode around the compiled
            # function's compiling call); eagerly it is the timed step's first, which also creates its optimiser state.
            eager = compare_hf.training_step(model, batch) if args.compile else steps[side]
            row[side] = counted_step(eager, device, args)
        except RuntimeError as error:  # e.g. a call the flash kernel cannot take under --sdpa-backend flash
            row[side] = {"error": str(error).splitlines()[0]}
    if any("error" in row[side] for side in steps):
        return row
    timed = compare_hf.compare({side: in_contexts(step, device, args) for side, step in steps.items()},
                               args.rounds, args.steps, args.warmup + (2 if args.compile else 0))
    tokens = tokens_per_step(family, batch, args)
    model_flops = row["peer"]["flops"]
    row.update(tokens_per_step=tokens, model_flops_per_step=model_flops, speedup=timed["speedup"],
               rounds={side: timed["rounds"][side] for side in steps})
    for side in steps:
        seconds = timed[f"{side}_s"]
        row[side].update(step_s=seconds, tokens_per_s=tokens / seconds)
    set_utilisation(row, peak)
    return row


def set_utilisation(row: dict, peak: float) -> None:
    """MFU (the model FLOPs of a step, the peer's count) and HFU (each side's own count) against `peak` FLOP/s."""
    for side in ("zoo", "peer"):
        if "step_s" in row[side]:
            row[side]["mfu"] = row["model_flops_per_step"] / row[side]["step_s"] / peak
            row[side]["hfu"] = row[side]["flops"] / row[side]["step_s"] / peak


def kernel_names(side: dict) -> str:
    """The forward kernels a side ran, "+ backward" where their backward ran too; "-" for none (the math path)."""
    kernels = side["attention_kernels"]
    forward = [k for k in kernels if "_backward[" not in k]
    return ", ".join(k + (" + backward" if k.replace("[", "_backward[", 1) in kernels else "") for k in forward) or "-"


def format_row(row: dict) -> str:
    if any("error" in row[side] for side in ("zoo", "peer")):
        return f"{row['family']:>11} | " + " | ".join(
            f"{side}: {row[side].get('error', 'ran')}" for side in ("zoo", "peer"))
    zoo, peer = row["zoo"], row["peer"]
    return (f"{row['family']:>11} | tokens/s zoo {zoo['tokens_per_s']:,.0f}, peer {peer['tokens_per_s']:,.0f} "
            f"(speed-up {row['speedup']:.2f}) | MFU zoo {zoo['mfu']:.1%}, peer {peer['mfu']:.1%} | "
            f"attention zoo {kernel_names(zoo)}, peer {kernel_names(peer)}")


def format_table(record: dict) -> str:
    a = argparse.Namespace(**record["args"])
    lines = [f"{record['device_name']}, {a.precision}, SDPA backend {a.sdpa_backend}"
             f"{', loss compiled' if a.compile else ''}; d={a.hidden}, {a.layers} layers, {a.heads} heads, "
             f"seq {a.seq_len}, batch {a.batch_size}; measured matmul peak {record['peak_flops'] / 1e12:.3g} TFLOP/s "
             f"(the higher of before and after the run); "
             f"median over {a.rounds} rounds of the best of {a.steps}\n",
             "| family | tokens/s zoo / peer | speed-up | MFU zoo / peer | HFU zoo / peer | attention kernel zoo / peer |",
             "|---|---|---|---|---|---|"]
    for row in record["rows"]:
        zoo, peer = row["zoo"], row["peer"]
        if "error" in zoo or "error" in peer:
            lines.append(f"| {compare_hf.PEERS[row['family']]} | — | — | — | — | zoo: {zoo.get('error', 'ran')}; "
                         f"peer: {peer.get('error', 'ran')} |")
            continue
        kernels = " / ".join(kernel_names(side) for side in (zoo, peer))
        lines.append(f"| {compare_hf.PEERS[row['family']]} | {zoo['tokens_per_s']:,.0f} / {peer['tokens_per_s']:,.0f}"
                     f" | {row['speedup']:.2f} | {zoo['mfu']:.1%} / {peer['mfu']:.1%} | {zoo['hfu']:.1%} / "
                     f"{peer['hfu']:.1%} | {kernels} |")
    return "\n".join(lines)


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in record["rows"] if "mfu" in row["zoo"] and "mfu" in row["peer"]]
    if not rows:
        return
    names = [compare_hf.PEERS[row["family"]] for row in rows]
    positions = range(len(rows))
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, key, label in ((axes[0], "tokens_per_s", "tokens / s"), (axes[1], "mfu", "MFU (model FLOPs / peak)")):
        for offset, side, colour in ((-0.2, "zoo", "tab:blue"), (0.2, "peer", "tab:orange")):
            axis.bar([p + offset for p in positions], [row[side][key] for row in rows], width=0.4, color=colour,
                     label="transformer-zoo" if side == "zoo" else "transformers / nanoGPT-style")
        axis.set_xticks(list(positions), names, rotation=30, ha="right")
        axis.set_ylabel(label)
        axis.legend()
    a = record["args"]
    figure.suptitle(f"Training step, {record['device_name']}, {a['precision']}, SDPA {a['sdpa_backend']} "
                    f"(d={a['hidden']}, {a['layers']} layers, seq {a['seq_len']}, batch {a['batch_size']})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(TRAINING_FAMILIES),
                        help="comma-separated subset of: %(default)s")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="fp32; bf16-mixed (float32 weights under bf16 autocast); bf16 (bf16 weights) "
                             "(default: %(default)s)")
    parser.add_argument("--sdpa-backend", choices=("auto", "flash"), default="auto",
                        help="auto: SDPA picks its kernel; flash: only the flash kernel (a call it cannot take "
                             "raises) (default: %(default)s)")
    parser.add_argument("--compile", action="store_true",
                        help="time the function batch -> loss under torch.compile on both sides, as the recipes do")
    compare_hf.add_shape_and_timing_arguments(parser)
    parser.add_argument("--peak-size", type=int, default=None,
                        help="side of the square matrices of the peak measurement (default: 8192 on a GPU, 2048 "
                             "on a CPU)")
    parser.add_argument("--peak-repeats", type=int, default=20, help="products timed for the peak; the best counts "
                                                                     "(default: %(default)s)")
    parser.add_argument("--table", type=Path, default=None, help="print the Markdown table of an existing results file")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON (and a PNG beside it)")
    args = parser.parse_args(argv)
    unknown = set(args.families.split(",")) - set(TRAINING_FAMILIES)
    if unknown:
        parser.error(f"--families: unknown {', '.join(sorted(unknown))}; choose from {', '.join(TRAINING_FAMILIES)}")
    args.new_tokens = 0  # compare_hf.build_pair sizes position tables for generation too; none here
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        print(format_table(json.loads(args.table.read_text())))
        return
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to PyTorch here; run on a GPU machine or use "
                         "--device cpu.")
    if args.sdpa_backend == "flash" and device.type != "cuda":
        raise SystemExit("--sdpa-backend flash: the flash kernel this restricts to is the GPU's; use --sdpa-backend "
                         "auto on a CPU (the attention kernels each side ran are recorded either way).")
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    peak_size = args.peak_size or (8192 if device.type == "cuda" else 2048)
    load_before = os.getloadavg()
    peak = measured_matmul_peak(device, compute_dtype(args.precision), peak_size, args.peak_repeats)
    record = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("output", "table")},
        "torch": torch.__version__, "transformers": hf.__version__, "threads": torch.get_num_threads(),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "peak_flops": peak, "peak_size": peak_size, "load_average_before": load_before, "rows": [],
    }
    print(f"measured {compute_dtype(args.precision)} matmul peak: {peak / 1e12:.3g} TFLOP/s (measured again at the end; "
          "the higher counts)", flush=True)
    for family in args.families.split(","):
        row = measure_family(family, args, device, peak)
        record["rows"].append(row)
        print(format_row(row), flush=True)
        if args.output:  # incremental: a cut-off run keeps what it finished
            record["load_average_after"] = os.getloadavg()
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(record, indent=2) + "\n")
    # The peak again, after the families, and MFU against the higher of the two measurements.
    record["peak_flops_before_after"] = [peak, measured_matmul_peak(device, compute_dtype(args.precision), peak_size,
                                                                    args.peak_repeats)]
    record["peak_flops"] = max(record["peak_flops_before_after"])
    for row in record["rows"]:
        set_utilisation(row, record["peak_flops"])
    print("\n" + format_table(record))
    if args.output:
        record["load_average_after"] = os.getloadavg()
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        plot(record, args.output.with_suffix(".png"))


if __name__ == "__main__":
    main()
