#!/usr/bin/env python
"""How much of a CPU training step is the memory allocator's: benchmarks/compare_hf.py (GPT-2- and ViT-shaped, sdpa)
run under glibc's default malloc, glibc tuned to keep freed memory (no mmap for large blocks, no trimming) either by
its environment tunables or by mallopt(3) called from Python at start-up, PyTorch's transparent-huge-page switch,
jemalloc with purging off and tcmalloc. Each variant is a fresh process; within one, zoo and transformers alternate
as usual. The minor page faults of each variant's whole process are recorded beside its times. The preloaded
libraries are Debian's (apt-get install libjemalloc2 libtcmalloc-minimal4); a missing one is skipped.

    python benchmarks/allocators.py --output benchmarks/results/allocators_cpu.json
    python benchmarks/allocators.py --variants glibc,glibc-mallopt --output benchmarks/results/allocators_mallopt_cpu.json
    python benchmarks/allocators.py --variants glibc,thp,glibc,thp --families gpt2,llama,vit \
        --output benchmarks/results/allocators_thp_cpu.json
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = Path("/usr/lib/x86_64-linux-gnu")
# key: (name in the results, environment, Python run before compare_hf in its process or None).
VARIANTS = {
    "glibc": ("glibc malloc (default)", {}, None),
    "glibc-tunables": ("glibc, GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
                       {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}, None),
    # The same two settings through mallopt(3) once the process runs (M_MMAP_MAX = -4, M_TRIM_THRESHOLD = -1; an int
    # argument, so the trim threshold is 2 GiB rather than the tunable's 64 GiB).
    "glibc-mallopt": ("glibc, mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) at start-up", {},
                      "import ctypes; libc = ctypes.CDLL('libc.so.6'); "
                      "assert libc.mallopt(-4, 0) == 1 and libc.mallopt(-1, 2**31 - 1) == 1"),
    # PyTorch's own switch (c10/core/alloc_cpu.cpp): its CPU allocator madvise(MADV_HUGEPAGE)s every block of 2 MiB
    # or more, so the kernel maps it in 2 MiB pages (512x fewer faults) where transparent huge pages are enabled
    # ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled). Freed blocks still go back to the OS.
    # Read once, at the first allocation: it must be in the environment before torch allocates anything.
    "thp": ("PyTorch, THP_MEM_ALLOC_ENABLE=1 (2 MiB pages for blocks of 2 MiB or more)", {"THP_MEM_ALLOC_ENABLE": "1"},
            None),
    "jemalloc": ("jemalloc, purging off", {"LD_PRELOAD": str(LIB / "libjemalloc.so.2"),
                                           "MALLOC_CONF": "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1"},
                 None),
    "tcmalloc": ("tcmalloc", {"LD_PRELOAD": str(LIB / "libtcmalloc_minimal.so.4")}, None),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="gpt2,vit", help="compare_hf families (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="compare_hf rounds (default: %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated allocator variants, in this order: %(default)s")
    parser.add_argument("--output", type=Path, required=True, help="JSON results")
    args = parser.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown --variants {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    record = {"load_average_before": os.getloadavg(), "variants": {}, "minor_page_faults": {}}
    runs = Counter()
    for key in args.variants.split(","):
        name, env, prelude = VARIANTS[key]
        if "LD_PRELOAD" in env and not Path(env["LD_PRELOAD"]).exists():
            print(f"skipped {name}: {env['LD_PRELOAD']} is not installed")
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            compare = ["benchmarks/compare_hf.py", "--families", args.families, "--attn", "sdpa",
                       "--rounds", str(args.rounds), "--steps", "3", "--output", out.name]
            if prelude is not None:
                compare = ["-c", f"{prelude}; import runpy, sys; sys.argv = {compare!r}; "
                                 "runpy.run_path(sys.argv[0], run_name='__main__')"]
            # Minor page faults of the whole compare_hf process (import, warm-up and every timed step of both sides):
            # the children's counter grows by exactly this child's once it has been waited for.
            faults_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
            subprocess.run([sys.executable, *compare], cwd=ROOT, env={**os.environ, **env}, check=True,
                           capture_output=True)
            faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults_before
            rows = json.loads(Path(out.name).read_text())["rows"]
        # A variant listed again (alternating variants against the machine's drift) is recorded as its n-th run.
        runs[key] += 1
        label = name if runs[key] == 1 else f"{name} (run {runs[key]})"
        record["variants"][label] = {row["family"]: {"train_zoo_s": row["train"]["zoo_s"],
                                                     "train_peer_s": row["train"]["peer_s"]} for row in rows}
        record["minor_page_faults"][label] = faults
        print(label, json.dumps(record["variants"][label]), f"{faults:,} minor page faults", flush=True)
        # Written after every variant, so a run cut short keeps what it finished.
        record["load_average_after"] = os.getloadavg()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
