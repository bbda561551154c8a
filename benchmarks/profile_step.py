#!/usr/bin/env python
"""Where one training step's time goes, zoo against its transformers peer: torch.profiler over --steps steps of each
side of a `compare_hf.py` pair (same shapes, weights and batch), the operators sorted by their own CPU time.

--compile profiles both sides under torch.compile (inductor; compiled and warmed up before profiling): the table then
lists inductor's generated kernels (graph_*_cpp_fused_*, recorded through inductor's cpp.enable_kernel_profile), the
library calls it makes (aten::mm, addmm, bmm) and the zoo's custom operators. --compile-target says what is compiled,
as in compare_hf.py: the model, or the function batch -> loss, as the recipes compile it.

--generate profiles compare_hf's generation instead (64 greedy tokens after a 16-token prompt, batch 1). There the
arithmetic per token is small and the time goes to Python (generate's loop, the model's forward), so the profile is
Python's own (cProfile): the functions sorted by their own time, and the operator count per token from
torch.profiler.

    python benchmarks/profile_step.py --family vit --output benchmarks/results/profile_step_vit_cpu.txt
    python benchmarks/profile_step.py --family marian --generate --output benchmarks/results/profile_generate_marian_cpu.txt
    python benchmarks/profile_step.py --family llama --compile --compile-target loss --rows 24 \
        --output benchmarks/results/profile_step_llama_compiled_loss_cpu.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_hf  # noqa: E402


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="vit", help="a compare_hf.py family (default: %(default)s)")
    parser.add_argument("--attn", default="sdpa", help="attention implementation (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per side (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=16, help="operators listed per side (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="also write the tables to this text file")
    parser.add_argument("--compile", action="store_true",
                        help="profile the training step with both sides under torch.compile (inductor)")
    parser.add_argument("--compile-target", choices=("model", "loss"), default="model",
                        help="with --compile: compile the model, or the function batch -> loss as the recipes do "
                             "(default: %(default)s)")
    parser.add_argument("--generate", action="store_true",
                        help="profile compare_hf's generation (Python-level, cProfile) instead of a training step")
    args = parser.parse_args(argv)
    if args.generate:
        return profile_generation(args)
    # compare_hf's defaults for everything that shapes the pair.
    shape = compare_hf_defaults()
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(args.family, shape, args.attn)
    compiled = f", compiled ({args.compile_target})" if args.compile else ""
    lines = [f"{args.family} ({args.attn}{compiled}), compare_hf.py shapes, "
             f"{torch.get_num_threads()} threads, torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}; "
             f"{args.steps} steps per side"]
    if args.compile:
        torch._dynamo.reset()  # once, before both sides: a reset between them would discard the first one's code
        torch._inductor.config.cpp.enable_kernel_profile = True  # each generated kernel is a profiler event
    compile_loss = args.compile and args.compile_target == "loss"
    for name, model in (("zoo", zoo), ("peer", peer)):
        model.train()
        step = compare_hf.training_step(torch.compile(model) if args.compile and not compile_loss else model, batch,
                                        compile_loss)
        for _ in range(4 if args.compile else 2):  # compilation, the optimiser state and allocator warm-up
            step()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        unprofiled = (time.perf_counter() - start) / args.steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
        lines += [f"===== {name}: {unprofiled * 1000:.0f} ms per step unprofiled", prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows,
                                                             max_name_column_width=96 if args.compile else 44)]
    return report(lines, args.output)


def report(lines: list[str], output: Path | None) -> str:
    text = "\n".join(lines)
    print(text)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n")
    return text


def profile_generation(args) -> str:
    import cProfile
    import io
    import pstats

    shape = compare_hf_defaults()
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(args.family, shape, args.attn)
    lines = [f"{args.family} ({args.attn}) generation of {shape.new_tokens} tokens, compare_hf.py shapes, "
             f"{torch.get_num_threads()} threads, torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}; "
             f"{args.steps} generations per side"]
    for name, model in (("zoo", zoo), ("peer", peer)):
        model.eval()
        run = compare_hf.generation_run(model, batch, shape.new_tokens)
        run()  # warm-up
        start = time.perf_counter()
        for _ in range(args.steps):
            run()
        plain = (time.perf_counter() - start) / args.steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        operators = sum(event.count for event in prof.key_averages())
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.steps):
            run()
        profiler.disable()
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        # Python function calls per generation: deterministic, unlike the times, so two sides compare exactly.
        calls = sum(entry[1] for entry in stats.stats.values()) // args.steps
        stats.sort_stats("tottime").print_stats(args.rows)
        lines += [f"===== {name}: {plain * 1000:.0f} ms per generation unprofiled; {calls} Python function calls "
                  f"and {operators} profiler events per generation ({operators / shape.new_tokens:.0f} per token)",
                  stream.getvalue()]
    return report(lines, args.output)


def compare_hf_defaults() -> argparse.Namespace:
    return compare_hf.parse_args([])


if __name__ == "__main__":
    main()
