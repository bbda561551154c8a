"""Crash-safe training checkpoints: model, optimiser, scheduler, gradient scaler, every RNG and the data position.

A checkpoint is written into a hidden temporary folder (`.tmp-checkpoint-<step>`), its files are flushed to disk,
and only then is the folder renamed to `checkpoint-<step>`. A rename within one file system is atomic, so a run
killed at any moment (SIGKILL, power loss, a full disk) leaves every `checkpoint-*` folder complete: the worst case
is a stale temporary folder, which the next save removes. The last `keep_last` checkpoints are kept.

Nothing is pickled: tensors go to safetensors files, everything else (optimiser hyper-parameters, scheduler state,
Python's RNG, the data position) to JSON. Python floats round-trip exactly through JSON, so a resumed run continues
bit for bit.

Layout of one checkpoint folder:
    model.safetensors           the unwrapped model's state dict (tied tensors stored once)
    optimizer.safetensors       optimiser state tensors, keyed "<param index>.<name>"
    optimizer.json              the rest of the optimiser state dict (param groups, non-tensor state)
    scheduler.json              the LR scheduler's state dict
    scaler.json                 the fp16 gradient scaler's state (only with --mixed_precision fp16)
A model sharded with FSDP2 (`fully_shard`) is gathered first and stored in the same files; its optimiser state is then
keyed by parameter name instead of index (torch's full optimiser state dict).
    rng-rank<r>.safetensors     torch CPU (+ CUDA) and numpy RNG states of process r
    rng-rank<r>.json            Python's `random` state of process r
    trainer_state.json          step, data position, logging window, best metric: see `loop.TrainingProgress`
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from transformers.utils import logging

logger = logging.get_logger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TEMPORARY_PREFIX = ".tmp-"
TRASH_PREFIX = ".old-"
STATE_FILE = "trainer_state.json"


# ================================================================================================ file helpers
def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_directory(path: Path) -> None:
    # Makes the directory entries (new files, a rename) durable; not supported on every platform.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: Path, data) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def read_json(path: Path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _checkpoint_step(path: Path) -> int | None:
    match = CHECKPOINT_PATTERN.match(path.name)
    return int(match.group(1)) if match else None


def list_checkpoints(checkpoints_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints in `checkpoints_dir`, oldest first (temporary and half-deleted folders excluded)."""
    directory = Path(checkpoints_dir)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        step = _checkpoint_step(path)
        if step is not None and path.is_dir() and (path / STATE_FILE).is_file():
            found.append((step, path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(checkpoints_dir: str | os.PathLike) -> Path | None:
    checkpoints = list_checkpoints(checkpoints_dir)
    return checkpoints[-1] if checkpoints else None


def atomic_directory_commit(temporary: Path, final: Path) -> None:
    """Rename a fully written `temporary` folder to `final`, replacing an existing `final` without ever leaving a
    moment where neither a complete old nor a complete new folder exists under a name readers look for.
    """
    _fsync_directory(temporary)
    trash = None
    if final.exists():
        # rename() cannot replace a non-empty directory: move the old one aside first (a hidden name readers skip).
        trash = final.with_name(f"{TRASH_PREFIX}{final.name}")
        if trash.exists():
            shutil.rmtree(trash)
        os.rename(final, trash)
    os.rename(temporary, final)
    _fsync_directory(final.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


# ================================================================================================ state pieces
# Sharded models (FSDP2's fully_shard: parameters are DTensors, each process holds a slice) are gathered into a full
# state dict with torch's distributed-checkpoint helpers, the way torch documents for saving them in one file, and
# written in the same layout as an unsharded model: one safetensors file, tied tensors once, no pickle. Gathering is
# collective, so for a sharded model every process must call `gather_model_state` / `gather_optimizer_state`.
FULL_STATE = dict(full_state_dict=True, cpu_offload=True)


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(parameter, DTensor) for parameter in model.parameters())


def tied_parameter_groups(model: torch.nn.Module) -> list[list[str]]:
    """Names that share one parameter (tied weights), in groups of two or more."""
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [sorted(names) for names in groups.values() if len(names) > 1]


def gather_model_state(model: torch.nn.Module) -> dict | None:
    """The model's full state dict, for `model_state_to_file`: None for an unsharded model (the file is written
    from the model itself); for a sharded one the gathered tensors on CPU (collective; empty off the main process)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    return get_model_state_dict(model, options=StateDictOptions(**FULL_STATE))


def model_state_to_file(model: torch.nn.Module, path: Path, gathered: dict | None = None) -> None:
    if gathered is None:
        # save_model stores tensors shared by tied weights once and refuses nothing; load_model re-ties them.
        save_model(model, str(path))
    else:
        # The same file save_model writes for the unsharded model: of each tied group safetensors keeps the
        # alphabetically first name, and load_model accepts whichever name the file holds.
        dropped = {name for names in tied_parameter_groups(model) for name in names[1:]}
        save_file({name: tensor.contiguous() for name, tensor in gathered.items() if name not in dropped}, str(path))
    _fsync_file(path)


def model_state_from_file(model: torch.nn.Module, path: Path) -> None:
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        state = load_file(str(path))
        for names in tied_parameter_groups(model):
            stored = next((name for name in names if name in state), None)
            if stored is None:
                raise KeyError(f"{path} holds none of the tied parameters {names}.")
            state.update({name: state[stored] for name in names})
        # Every process reads the file and keeps its own shard (strict: every tensor must be there).
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
        return
    # strict: every model tensor must be in the file, except names tied to a stored tensor, and nothing else.
    load_model(model, str(path), strict=True)


def gather_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimiser state to save: `optimizer.state_dict()` (keyed by parameter index) for an unsharded model; for
    a sharded one the gathered full state keyed by parameter name (collective)."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(**FULL_STATE))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(state)


def _split_tensors(tree, prefix: str, tensors: dict):
    """Replace every tensor in a nested dict/list by a {"__tensor__": key} reference, moving it to `tensors`."""
    if isinstance(tree, torch.Tensor):
        tensors[prefix] = tree.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(tree, dict):
        return {str(key): _split_tensors(value, f"{prefix}.{key}" if prefix else str(key), tensors)
                for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return {"__sequence__": type(tree).__name__,
                "items": [_split_tensors(value, f"{prefix}.{i}", tensors) for i, value in enumerate(tree)]}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    raise TypeError(f"Cannot store a {type(tree).__name__} in a checkpoint ({prefix}): only tensors and JSON values.")


def _join_tensors(tree, tensors: dict):
    if isinstance(tree, dict):
        if set(tree) == {"__tensor__"}:
            return tensors[tree["__tensor__"]]
        if set(tree) == {"__sequence__", "items"}:
            items = [_join_tensors(value, tensors) for value in tree["items"]]
            return tuple(items) if tree["__sequence__"] == "tuple" else items
        return {key: _join_tensors(value, tensors) for key, value in tree.items()}
    return tree


def state_dict_to_files(state: dict, tensors_path: Path, json_path: Path) -> None:
    """A (nested) state dict as a safetensors file of its tensors plus a JSON file of its structure and values."""
    tensors: dict[str, torch.Tensor] = {}
    structure = _split_tensors(state, "", tensors)
    save_file(tensors, str(tensors_path))
    _fsync_file(tensors_path)
    write_json(json_path, structure)


def state_dict_from_files(tensors_path: Path, json_path: Path) -> dict:
    tensors = load_file(str(tensors_path)) if tensors_path.exists() else {}
    return _restore_int_keys(_join_tensors(read_json(json_path), tensors))


def _restore_int_keys(tree):
    # JSON object keys are strings; optimiser state is keyed by parameter index (int).
    if isinstance(tree, dict):
        return {(int(key) if key.isdigit() else key): _restore_int_keys(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_restore_int_keys(value) for value in tree]
    return tree


def rng_state() -> dict:
    """Every RNG a training step may draw from: Python's, numpy's, torch's CPU and CUDA generators."""
    numpy_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": numpy_state[0], "keys": torch.from_numpy(numpy_state[1].astype(np.int64)),
            "pos": int(numpy_state[2]), "has_gauss": int(numpy_state[3]), "cached_gaussian": float(numpy_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    numpy_state = state["numpy"]
    np.random.set_state((
        numpy_state["kind"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
        numpy_state["has_gauss"], numpy_state["cached_gaussian"],
    ))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))


# ================================================================================================ save / load
def save_checkpoint(
    accelerator,
    checkpoints_dir: str | os.PathLike,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    trainer_state: dict,
    keep_last: int | None = 2,
) -> Path:
    """Write checkpoint `step` atomically and keep only the newest `keep_last` (None or 0 keeps all).

    Collective: every process must call it (each writes its own RNG state). Returns the checkpoint folder.
    """
    directory = Path(checkpoints_dir)
    temporary = directory / f"{TEMPORARY_PREFIX}checkpoint-{step:08d}"
    final = directory / f"checkpoint-{step:08d}"
    if accelerator.is_main_process:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{TEMPORARY_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a crash mid-write
        temporary.mkdir()
    accelerator.wait_for_everyone()

    rank = accelerator.process_index
    state_dict_to_files(rng_state(), temporary / f"rng-rank{rank}.safetensors", temporary / f"rng-rank{rank}.json")
    unwrapped = accelerator.unwrap_model(model)
    gathered_model = gather_model_state(unwrapped)  # collective for sharded models
    optimizer_state = gather_optimizer_state(unwrapped, optimizer)
    if accelerator.is_main_process:
        model_state_to_file(unwrapped, temporary / "model.safetensors", gathered_model)
        state_dict_to_files(optimizer_state, temporary / "optimizer.safetensors", temporary / "optimizer.json")
        write_json(temporary / "scheduler.json", _json_safe_scheduler_state(scheduler.state_dict()))
        scaler = getattr(accelerator, "scaler", None)
        if scaler is not None:
            write_json(temporary / "scaler.json", scaler.state_dict())
        # Written last: a folder with trainer_state.json is complete (list_checkpoints relies on it too).
        write_json(temporary / STATE_FILE, {**trainer_state, "world_size": accelerator.num_processes})
    accelerator.wait_for_everyone()

    if accelerator.is_main_process:
        atomic_directory_commit(temporary, final)
        if keep_last:
            for old in list_checkpoints(directory)[:-keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        logger.info(f"Saved checkpoint {final}")
    accelerator.wait_for_everyone()
    return final


def _json_safe_scheduler_state(state: dict) -> dict:
    # LambdaLR stores each lambda's __dict__ (an empty dict for transformers' functools.partial schedules).
    safe = {}
    for key, value in state.items():
        try:
            json.dumps(value)
        except TypeError as error:
            raise TypeError(f"Scheduler state {key!r} is not JSON-serialisable ({error}).") from error
        safe[key] = value
    return safe


def load_checkpoint(
    accelerator,
    checkpoint: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
) -> dict:
    """Restore everything `save_checkpoint` wrote into live objects; returns the trainer state dict."""
    path = Path(checkpoint)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE}).")
    trainer_state = read_json(path / STATE_FILE)
    unwrapped = accelerator.unwrap_model(model)
    model_state_from_file(unwrapped, path / "model.safetensors")
    optimizer_state = state_dict_from_files(path / "optimizer.safetensors", path / "optimizer.json")
    load_optimizer_state(unwrapped, optimizer, optimizer_state)
    scheduler.load_state_dict(read_json(path / "scheduler.json"))
    scaler = getattr(accelerator, "scaler", None)
    if scaler is not None and (path / "scaler.json").is_file():
        scaler.load_state_dict(read_json(path / "scaler.json"))

    rank = accelerator.process_index
    rng_json = path / f"rng-rank{rank}.json"
    if trainer_state.get("world_size") != accelerator.num_processes or not rng_json.is_file():
        logger.warning(
            f"{path} was written by {trainer_state.get('world_size')} process(es), this run has "
            f"{accelerator.num_processes}: RNG streams are reseeded, so the run continues but not bit for bit."
        )
        torch.manual_seed(trainer_state.get("seed", 0) + 7919 * (rank + 1) + trainer_state["step"])
    else:
        set_rng_state(state_dict_from_files(path / f"rng-rank{rank}.safetensors", rng_json))
    logger.info(f"Resumed from {path} at step {trainer_state['step']}")
    return trainer_state
