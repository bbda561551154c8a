#!/usr/bin/env python
"""Resident memory of the zoo decoder's training steps with the head buffers kept between steps
(transformer_zoo/modeling_zoo_memory.py) and without, each in a fresh process: the peak over the steps (VmHWM) and
the resident memory after each step (VmRSS), at compare_hf.py's Llama shape (d=256, 4 layers, RoPE, SwiGLU,
8 x 256 tokens, a 32,000-token vocabulary, sdpa, fused AdamW).

    python benchmarks/kept_memory_peak.py --output benchmarks/results/kept_memory_peak_cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


PROBE = r"""
import json, sys, torch
from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, set_memory_reuse
set_memory_reuse(sys.argv[1] == "kept")
torch.set_num_threads(2)
torch.manual_seed(0)
config = ZooDecoderConfig(vocab_size=32000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                          intermediate_size=680, hidden_act="swiglu", norm_type="rmsnorm",
                          position_embedding_type="rope", tie_word_embeddings=False, max_position_embeddings=512,
                          bos_token_id=0, eos_token_id=0)
model = ZooDecoderForCausalLM(config).train()
model.set_attn_implementation("sdpa")
ids = torch.randint(4, 1000, (8, 256))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":")) / 1024


after = []
for _ in range(int(sys.argv[2])):
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    after.append(round(status("VmRSS"), 1))
print(json.dumps({"rss_after_each_step_mib": after, "peak_mib": round(status("VmHWM"), 1)}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="training steps per process (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    record = {"steps": args.steps}
    for setting in ("kept", "fresh"):
        done = subprocess.run([sys.executable, "-c", PROBE, setting, str(args.steps)], capture_output=True, text=True,
                              check=True)
        record[setting] = json.loads(done.stdout.strip().splitlines()[-1])
        print(setting, record[setting], flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
