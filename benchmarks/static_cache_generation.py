#!/usr/bin/env python
"""Greedy generation with a static KV cache under torch.compile: the zoo decoder against transformers' Llama with
the same weights (benchmarks/compare_hf.py's Llama-shaped pair). The zoo is timed twice: as it generates (its
compiled decoding steps read a column-major copy of the output projection, modeling_zoo_generation.py) and with that
copy off, the same arithmetic as Llama's in the same layout.

Both sides generate through transformers' own `generate(cache_implementation="static")`, which compiles the model's
forward itself when the cache is compileable (on CPU only if the compile config allows every device; this script
sets that). Per side, before any timing, torch._dynamo's counters after one generation say what was compiled: graph
breaks with their reasons, unique graphs, and recompilations (a guard that fails at every new position recompiles,
and a recompiling generation is slower than an eager one). Then --rounds alternating rounds, best of --steps each,
median over rounds, with the eager dynamic-cache generation of the same side beside it. First, the ATen operations
of each side's compiled decode step are counted (decode_graph_census), to say whether the two compute the same.

    python benchmarks/static_cache_generation.py --output benchmarks/results/static_cache_generation_cpu.json
        (also writes static_cache_generation_cpu.png: every round's time per run, and the medians)
    python benchmarks/static_cache_generation.py --backend eager --rounds 1   # the counters only, quickly
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_hf import alternating_rounds, build_pair, parse_args as compare_args  # noqa: E402


def generate_fn(model, prompt, new_tokens: int, static: bool, backend: str):
    from transformers import CompileConfig

    config = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1, use_cache=True,
                  pad_token_id=0)
    if static:
        compile_config = CompileConfig(backend=backend, fullgraph=False)
        # transformers compiles generation only on accelerators unless told that every device may compile.
        compile_config._compile_all_devices = True
        config.update(cache_implementation="static", compile_config=compile_config)

    def run():
        with torch.no_grad():
            return model.generate(prompt, **config)

    return run


def without_head_copy(model, run):
    def run_row_major():
        model.config.decoding_head_copy = False
        try:
            return run()
        finally:
            model.config.decoding_head_copy = True

    return run_row_major


def dynamo_counters(run) -> dict:
    """What torch._dynamo compiled during one call of `run`. The counters are cleared, not the compiled code: a
    torch._dynamo.reset() here would throw away the other side's compiled forward, and its timed generations would
    then compile again."""
    torch._dynamo.utils.counters.clear()
    started = time.perf_counter()
    tokens = run()
    seconds = time.perf_counter() - started
    counters = torch._dynamo.utils.counters
    breaks = collections.Counter({reason: count for reason, count in counters["graph_break"].items()})
    return {"first_call_s": round(seconds, 2), "graph_breaks": dict(breaks.most_common(10)),
            "graph_break_count": sum(breaks.values()), "unique_graphs": counters["stats"]["unique_graphs"],
            "calls_captured": counters["stats"]["calls_captured"],
            "recompilations": sum(v for k, v in counters["recompiles"].items()) if "recompiles" in counters else None,
            "frames": dict(counters["frames"]), "tokens": tokens[0].tolist()}


def decode_graph_census(model, prompt) -> collections.Counter:
    """The ATen operations of one side's compiled decode step: a short static-cache generation compiled with a backend
    that records the graph AOT autograd hands on (the same graph inductor would compile) and runs it uncompiled. Two
    sides doing the same arithmetic differ here only in views and copies; a missing fusion or an extra copy of the
    cache would show."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from transformers import CompileConfig

    graphs = []

    def recording_backend(graph_module, example_inputs, **_):
        def forward_compiler(graph, _inputs):
            graphs.append(graph)
            return graph.forward

        return aot_module_simplified(graph_module, example_inputs, fw_compiler=forward_compiler)

    config = CompileConfig(backend=recording_backend, fullgraph=False)
    config._compile_all_devices = True
    with torch.no_grad():  # the prompt's forward is eager; the two one-token steps run the compiled graph
        model.generate(prompt, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0,
                       cache_implementation="static", compile_config=config)
    if not graphs:
        raise RuntimeError(f"{type(model).__name__}: generate() compiled no decode graph")
    return collections.Counter(str(node.target).removeprefix("aten.") for node in graphs[-1].graph.nodes
                               if node.op == "call_function")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens per generation (default: %(default)s)")
    parser.add_argument("--prompt-tokens", type=int, default=16, help="prompt length (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds, median reported (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="generations per side per round, best kept (default: %(default)s)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (eager: counters only, fast)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = compare_args(["--families", "llama"])
    zoo, llama, batch = build_pair("llama", shape, "sdpa")
    zoo.eval(), llama.eval()
    prompt = batch["input_ids"][:1, :args.prompt_tokens]
    sides = {"zoo": zoo, "llama": llama}
    report = {"command": " ".join(argv if argv is not None else sys.argv[1:]), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_average_start": os.getloadavg(), "backend": args.backend,
              "compiled": {}}
    runs = {}
    for name, model in sides.items():
        runs[f"{name} static+compile"] = generate_fn(model, prompt, args.new_tokens, True, args.backend)
        runs[f"{name} dynamic eager"] = generate_fn(model, prompt, args.new_tokens, False, args.backend)
    # The zoo's compiled decoding reads a column-major copy of its output projection (modeling_zoo_generation.py);
    # the same generation with the copy off (row-major, as Llama) says what the copy is worth under compile.
    runs["zoo static+compile row-major"] = without_head_copy(zoo, runs["zoo static+compile"])
    census = {name: decode_graph_census(model, prompt) for name, model in sides.items()}
    operations = sorted(set(census["zoo"]) | set(census["llama"]))
    report["decode_graph_ops"] = {
        "total": {name: sum(counts.values()) for name, counts in census.items()},
        "differences (zoo, llama)": {op: [census["zoo"][op], census["llama"][op]] for op in operations
                                     if census["zoo"][op] != census["llama"][op]},
        "same": {op: census["zoo"][op] for op in operations if census["zoo"][op] == census["llama"][op]}}
    print("decode-step graph ops:", report["decode_graph_ops"]["total"], "differences (zoo, llama):",
          report["decode_graph_ops"]["differences (zoo, llama)"], flush=True)
    eager_tokens = {name: runs[f"{name} dynamic eager"]()[0].tolist() for name in sides}
    compiled_runs = {"zoo": "zoo static+compile", "llama": "llama static+compile",
                     "zoo row-major": "zoo static+compile row-major"}
    for name, run in compiled_runs.items():
        eager = eager_tokens[name.split()[0]]
        report["compiled"][name] = dynamo_counters(runs[run])
        report["compiled"][name]["same_tokens_as_eager"] = report["compiled"][name].pop("tokens") == eager
        # A second call compiles nothing: the zoo's new copy of the output projection is a graph input.
        second = dynamo_counters(runs[run])
        report["compiled"][name]["second_call_unique_graphs"] = second["unique_graphs"]
        report["compiled"][name]["second_call_s"] = second["first_call_s"]
        print(name, {k: v for k, v in report["compiled"][name].items() if k != "frames"}, flush=True)
    report["same_tokens_zoo_llama"] = eager_tokens["zoo"] == eager_tokens["llama"]
    report["timings_s"] = alternating_rounds(runs, args.rounds, args.steps)
    report["median_s"] = {label: statistics.median(values) for label, values in report["timings_s"].items()}
    report["load_average_end"] = os.getloadavg()
    for label, value in report["median_s"].items():
        print(f"{label:>24}: {value * 1e3:8.1f} ms", flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        plot(report, args.output.with_suffix(".png"), args.new_tokens)
    return report


def plot(report: dict, path: Path, new_tokens: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(report["timings_s"])
    figure, axis = plt.subplots(figsize=(7.5, 4))
    for index, label in enumerate(labels):
        times = [1e3 * t for t in report["timings_s"][label]]
        axis.scatter(times, [index] * len(times), color="tab:blue", alpha=0.5, s=18)
        axis.plot([1e3 * report["median_s"][label]] * 2, [index - 0.3, index + 0.3], color="black")
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlabel(f"ms per greedy generation of {new_tokens} tokens (dots: rounds; bar: median)")
    load = report["load_average_start"][0], report["load_average_end"][0]
    axis.set_title(f"Static cache + torch.compile ({report['backend']}) vs eager, {report['threads']} threads, "
                   f"load {load[0]:.1f} -> {load[1]:.1f}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
