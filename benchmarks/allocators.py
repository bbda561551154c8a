#!/usr/bin/env python
"""How much of a CPU training step is the memory allocator's: benchmarks/compare_hf.py (GPT-2- and ViT-shaped, sdpa)
run under glibc's default malloc, glibc tuned to keep freed memory (no mmap for large blocks, no trimming), jemalloc
with purging off and tcmalloc. Each variant is a fresh process; within one, zoo and transformers alternate as usual.
The preloaded libraries are Debian's (apt-get install libjemalloc2 libtcmalloc-minimal4); a missing one is skipped.

    python benchmarks/allocators.py --output benchmarks/results/allocators_cpu.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = Path("/usr/lib/x86_64-linux-gnu")
VARIANTS = {
    "glibc malloc (default)": {},
    "glibc, GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736": {
        "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"},
    "jemalloc, purging off": {"LD_PRELOAD": str(LIB / "libjemalloc.so.2"),
                              "MALLOC_CONF": "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1"},
    "tcmalloc": {"LD_PRELOAD": str(LIB / "libtcmalloc_minimal.so.4")},
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="gpt2,vit", help="compare_hf families (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="compare_hf rounds (default: %(default)s)")
    parser.add_argument("--output", type=Path, required=True, help="JSON results")
    args = parser.parse_args(argv)
    record = {"load_average_before": os.getloadavg(), "variants": {}}
    for name, env in VARIANTS.items():
        if "LD_PRELOAD" in env and not Path(env["LD_PRELOAD"]).exists():
            print(f"skipped {name}: {env['LD_PRELOAD']} is not installed")
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, "benchmarks/compare_hf.py", "--families", args.families, "--attn", "sdpa",
                            "--rounds", str(args.rounds), "--steps", "3", "--output", out.name],
                           cwd=ROOT, env={**os.environ, **env}, check=True, capture_output=True)
            rows = json.loads(Path(out.name).read_text())["rows"]
        record["variants"][name] = {row["family"]: {"train_zoo_s": row["train"]["zoo_s"],
                                                    "train_peer_s": row["train"]["peer_s"]} for row in rows}
        print(name, json.dumps(record["variants"][name]), flush=True)
    record["load_average_after"] = os.getloadavg()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
