#!/usr/bin/env python
"""Does the memory the zoo keeps between training steps (transformer_zoo/modeling_zoo_memory.py) change the speed of
another model's steps in the same process? The check behind compare_hf.py returning the zoo's kept buffers before
each timed run.

compare_hf.py's pair for --family (the transformers model and the zoo model converted from it, sdpa), in one process.
The peer's training step (best of --steps) is timed in four settings, alternated from round to round:

* kept: reuse on, the zoo has just run two steps, so its buffers are held while the peer runs;
* fresh: reuse off, the zoo has just run two steps, which freed their buffers;
* kept, then freed: as "kept", then `free_reused_memory()` before the peer's steps (what compare_hf.py does);
* zoo idle: reuse on, no zoo step since the last free (the peer as if alone).

Minor page faults per peer step are reported beside the times.

    python benchmarks/kept_memory_interaction.py --family gpt2 --threads 2 \\
        --output benchmarks/results/kept_memory_interaction_cpu.json
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
import compare_hf  # noqa: E402

from transformer_zoo import free_reused_memory, set_memory_reuse  # noqa: E402


SETTINGS = ("kept", "fresh", "kept, then freed", "zoo idle")


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def best_of(fn, steps: int) -> tuple[float, float]:
    """The best time of `steps` runs and the median of their minor page faults."""
    best, faults = float("inf"), []
    for _ in range(steps):
        before, start = minor_faults(), time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        faults.append(minor_faults() - before)
    return best, statistics.median(faults)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="gpt2", choices=("gpt2", "llama", "marian", "bart"),
                        help="compare_hf.py family (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds; the median is reported")
    parser.add_argument("--steps", type=int, default=3, help="peer steps per setting per round; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON to this file")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = argparse.Namespace(hidden=256, layers=4, heads=4, seq_len=256, batch_size=8, vocab_size=50257,
                               image_size=224, patch_size=16, new_tokens=64)
    record = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_average_before": os.getloadavg()}
    zoo, peer, batch = compare_hf.build_pair(args.family, shape, "sdpa")
    zoo.train()
    peer.train()
    zoo_step, peer_step = compare_hf.training_step(zoo, batch), compare_hf.training_step(peer, batch)
    zoo_step()
    peer_step()
    results = {name: [] for name in SETTINGS}
    try:
        for index in range(args.rounds):
            for name in SETTINGS if index % 2 == 0 else SETTINGS[::-1]:
                set_memory_reuse(name != "fresh")
                if name != "zoo idle":
                    zoo_step()
                    zoo_step()
                if name in ("kept, then freed", "zoo idle"):
                    free_reused_memory()
                results[name].append(best_of(peer_step, args.steps))
    finally:
        set_memory_reuse(True)
    record["peer_step_s"] = {name: statistics.median(t for t, _ in runs) for name, runs in results.items()}
    record["peer_minor_faults_per_step"] = {name: statistics.median(f for _, f in runs)
                                            for name, runs in results.items()}
    record["rounds"] = results
    record["load_average_after"] = os.getloadavg()
    for name in SETTINGS:
        print(f"{name:17s}: peer step {record['peer_step_s'][name] * 1e3:7.1f} ms, "
              f"{record['peer_minor_faults_per_step'][name]:.0f} minor faults", flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
