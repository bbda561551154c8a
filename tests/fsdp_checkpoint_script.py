"""Run under `torchrun --nproc_per_node 2` (gloo, CPU) by tests/test_fsdp_checkpoint.py.

Shards a tiny zoo decoder with FSDP2's `fully_shard`, trains it, and exercises the recipes' checkpoint writer:
mode "full" trains STEPS steps straight through; mode "cut" saves a checkpoint at CUT, rebuilds everything from
scratch, resumes from that checkpoint and trains to STEPS. Each writes the final full state dict (gathered) and the
losses, so the test can compare them bit for bit. Also writes the best-model file once.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import transformer_zoo as tz
from transformer_zoo.training.engine.checkpointing import (
    gather_model_state,
    is_sharded,
    load_checkpoint,
    model_state_to_file,
    save_checkpoint,
)
from transformer_zoo.training.engine.loop import save_best_model

STEPS, CUT = 6, 3


def build(accelerator):
    torch.manual_seed(0)
    model = tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny"))  # dropout 0.1: RNG state matters
    mesh = init_device_mesh("cpu", (accelerator.num_processes,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert is_sharded(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    return model, optimizer, scheduler


def step(model, optimizer, scheduler, index, rank):
    generator = torch.Generator().manual_seed(100 * index + rank)  # each rank its own data shard
    ids = torch.randint(3, 1000, (2, 8), generator=generator)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.item()


def main(mode: str, out: Path):
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    model, optimizer, scheduler = build(accelerator)
    losses, start = [], 0
    if mode == "cut":
        for index in range(CUT):
            losses.append(step(model, optimizer, scheduler, index, rank))
        state = {"step": CUT, "seed": 0}
        checkpoint = save_checkpoint(accelerator, out / "checkpoints", CUT, model=model, optimizer=optimizer,
                                     scheduler=scheduler, trainer_state=state)
        save_best_model(accelerator, model, out / "best-model", {"step": CUT})
        del model, optimizer, scheduler
        model, optimizer, scheduler = build(accelerator)  # fresh weights, fresh optimiser: all comes from the files
        torch.manual_seed(12345)  # scramble the RNG: the checkpoint must restore it
        start = load_checkpoint(accelerator, checkpoint, model=model, optimizer=optimizer, scheduler=scheduler)["step"]
    for index in range(start, STEPS):
        losses.append(step(model, optimizer, scheduler, index, rank))
    gathered = gather_model_state(model)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        model_state_to_file(model, out / "final.safetensors", gathered)
        (out / "losses.json").write_text(json.dumps(losses))
    accelerator.wait_for_everyone()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
