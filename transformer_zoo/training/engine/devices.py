"""Where a recipe runs: the Accelerator (CPU when no accelerator is present), torch.compile with its eager fallback,
and the CPU thread count."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger

from ..reports.records import tracker_names

if TYPE_CHECKING:
    from .config import TrainingConfig


logger = get_logger(__name__)


def accelerator_available() -> bool:
    if torch.cuda.is_available():
        return True
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return True
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def create_accelerator(config: TrainingConfig) -> Accelerator:
    """The Accelerator for a run. On a machine without GPUs it runs on the CPU, which also makes
    `accelerate launch --multi_gpu --num_processes N` start N CPU processes over gloo.
    """
    trackers = tracker_names(config.report_to)
    accelerator = Accelerator(
        cpu=config.cpu or not accelerator_available(),
        mixed_precision=config.mixed_precision,
        log_with=trackers or None,
        project_dir=config.output_dir,
    )
    set_cpu_threads(config.cpu_threads, accelerator)
    return accelerator


def use_compile(setting: bool | str, accelerator: Accelerator) -> bool:
    if setting == "auto":
        return accelerator.device.type == "cuda"
    return bool(setting)


def training_loss(model: torch.nn.Module, loss_fn, accelerator: Accelerator, compile_it: bool):
    """The training step's loss as a function of the batch: `loss_fn(model, batch)`, under torch.compile when
    `compile_it`, with dynamo's own guard on: a graph that fails to compile (no C++ compiler, an unsupported
    operation) runs eagerly after a warning instead of stopping the run.

    In one process the loss function is compiled, not the model: a compiled graph's backward takes a gradient for
    each of its outputs that requires one, and for the returned logits nobody has one, so AOTAutograd is handed a
    zero-filled (tokens x vocabulary) tensor at every step (83 ms of a 2 s GPT-2-shaped CPU step,
    benchmarks/results/profile_step_gpt2_compiled_cpu.txt) and adds it in. A graph that returns only the loss has no
    such output. A model wrapped for several processes (DDP, FSDP) is compiled itself, as torch documents for those
    wrappers.

    In one process the compiled loss runs with dynamo capturing data-dependent sizes: the zoo's masked-LM loss
    projects only the labelled rows (modeling_zoo_losses.loss_over_labelled_rows), a count known from the data,
    and would otherwise keep every row under compile, which made the compiled BERT-sized step slower than the eager
    one (benchmarks/results/compare_hf_compiled_loss_cpu.json).

    Both dynamo settings (the guard, `suppress_errors`, and the size capture) apply only while the step's compiled
    call runs, where compilation happens: the caller's process keeps its own dynamo configuration."""
    if not compile_it:
        return lambda batch: loss_fn(model, batch)
    import torch._dynamo

    wrapped = accelerator.num_processes > 1
    try:
        if wrapped:
            compiled_model = torch.compile(model)
            compiled = lambda batch: loss_fn(compiled_model, batch)  # noqa: E731
        else:
            compiled = torch.compile(lambda batch: loss_fn(model, batch))
    except RuntimeError as error:  # platforms where torch.compile is unavailable altogether
        logger.warning(f"--compile: torch.compile is not available here ({error}); training eagerly.")
        return lambda batch: loss_fn(model, batch)

    logger.info(f"--compile: the training {'forward' if wrapped else 'loss'} is compiled by torch.compile (the first "
                "steps include compilation; graphs that fail to compile fall back to eager with a warning).",
                main_process_only=True)
    settings = {"suppress_errors": True}
    if not wrapped:
        # A compiled model returns its logits, which the backward pays for anyway: selecting the labelled rows too
        # would add work, not save it; so only the compiled loss captures data-dependent sizes.
        settings["capture_dynamic_output_shape_ops"] = True

    def step(batch):
        with torch._dynamo.config.patch(**settings):
            return compiled(batch)

    return step


def set_cpu_threads(cpu_threads: int | str | None, accelerator: Accelerator) -> None:
    if cpu_threads in (None, "none"):
        return
    if cpu_threads == "auto":
        if accelerator.device.type != "cpu":
            return  # a GPU does the work; the CPU threads only feed it
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
        threads = max(1, cores // max(1, local_processes))
    else:
        threads = int(cpu_threads)
    if threads < 1:
        raise ValueError(f"cpu_threads must be 'auto' or a positive number, got {cpu_threads!r}.")
    torch.set_num_threads(threads)
