"""The recipes' checkpoint and best-model writer on a model sharded with FSDP2 (issue 11, point 9).

Accelerate does not enable FSDP on CPU, so `fully_shard` is applied directly over gloo on 2 processes
(tests/fsdp_checkpoint_script.py). Before the fix, saving failed with "Attempted to access the data pointer on an
invalid python storage".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

import transformer_zoo as tz

SCRIPT = Path(__file__).with_name("fsdp_checkpoint_script.py")


def run(mode, out, port):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               str(SCRIPT), mode, str(out)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]


def test_sharded_run_saves_and_resumes_bit_exactly(tmp_path):
    run("full", tmp_path / "full", 29531)
    run("cut", tmp_path / "cut", 29532)
    full, cut = load_file(tmp_path / "full" / "final.safetensors"), load_file(tmp_path / "cut" / "final.safetensors")
    assert full.keys() == cut.keys()
    for name in full:
        assert torch.equal(full[name], cut[name]), name
    assert json.loads((tmp_path / "full" / "losses.json").read_text()) == json.loads(
        (tmp_path / "cut" / "losses.json").read_text())

    # The checkpoint is the ordinary layout: one safetensors file (tied weights once) that loads into an unsharded
    # model, no pickle anywhere, optimiser state keyed by parameter name.
    checkpoint = next((tmp_path / "cut" / "checkpoints").glob("checkpoint-*"))
    files = sorted(path.name for path in checkpoint.iterdir())
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pkl"))]
    assert "rng-rank1.safetensors" in files and "optimizer.safetensors" in files
    plain = tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny"))
    from safetensors.torch import load_model

    for folder in (checkpoint, tmp_path / "cut" / "best-model"):
        missing, unexpected = load_model(plain, folder / "model.safetensors", strict=True)
        assert not missing and not unexpected
    optimizer = json.loads((checkpoint / "optimizer.json").read_text())
    assert "model.layers.0.self_attn.q_proj.weight" in optimizer["state"]
