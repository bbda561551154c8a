"""The training loop of the recipes, on Accelerate: one code path for one CPU, GPUs and several processes.

`train(model, dataset, collate_fn, TrainingConfig(...))` runs AdamW with a warmup-then-decay schedule, gradient
accumulation, clipping and mixed precision; logs to a JSONL file, Accelerate trackers and a tqdm bar; evaluates,
keeps the best model and stops early on a chosen metric; and writes crash-safe checkpoints from which `resume=True`
continues on exactly the trajectory of an uninterrupted run (bit for bit on CPU).

Why the loop batches the data itself instead of preparing a DataLoader with Accelerate: a prepared DataLoader
collates one batch ahead of the step that uses it, so random collation (masked-LM masking draws from the global RNG)
happens before the previous step's dropout. A checkpoint taken between two steps then cannot restore the RNG to the
point the next batch was masked at. Here every micro-batch is drawn and collated at the start of the step that uses
it, from an order that depends only on (seed, epoch), and each process takes its slice of every global batch, so the
data position is two integers and the RNG state at a step boundary is all the randomness there is.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from safetensors import SafetensorError
from tqdm.auto import tqdm

from ..data.data_order import (
    batch_units,
    example_lengths,
    fetch_examples,
    micro_batch_stream,
    move_to_device,
    token_batch_plan,
    token_batch_stream,
)
from ..reports.records import METRICS_FILE, MetricsLog, flat_hyperparameters
from .checkpointing import (
    atomic_directory_commit,
    gather_model_state,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    model_state_from_file,
    model_state_to_file,
    read_json,
    save_checkpoint,
    write_json,
)
from .config import TrainingConfig
from .devices import create_accelerator, training_loss, use_compile
from .evaluation import LossFn, model_loss
from .optim import build_optimizer, build_scheduler, resolve_warmup_steps
from .output_dir import RunStopped

logger = get_logger(__name__)

CHECKPOINTS_DIR = "checkpoints"
BEST_MODEL_DIR = "best-model"


@dataclass
class TrainingProgress:
    """The loop's own state, saved in every checkpoint (trainer_state.json)."""

    step: int = 0  # optimiser steps done
    epoch: int = 0  # data position: the next micro-batch is number `micro_batch` of epoch `epoch`
    micro_batch: int = 0
    tokens_seen: int = 0
    examples_seen: int = 0
    # The partial logging window (losses of steps not yet written to the JSONL file).
    window_loss_sum: float = 0.0
    window_steps: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    evaluations_without_improvement: int = 0
    stopped_early: bool = False
    seed: int = 0
    global_micro_batch: int = 0  # examples per micro-batch over all processes: a resume must keep it
    global_batch_tokens: int = 0  # with token-count batches: the padded-token budget over all processes (likewise)
    train_seconds: float = 0.0

    @classmethod
    def from_dict(cls, values: dict) -> "TrainingProgress":
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})


@dataclass
class TrainResult:
    model: torch.nn.Module  # unwrapped (no DDP); the best model when load_best_at_end and one was kept
    progress: TrainingProgress
    total_steps: int
    final_metrics: dict = field(default_factory=dict)  # the last evaluation (before reloading the best model)
    best_metrics: dict | None = None
    accelerator: Accelerator | None = None


# ================================================================================================ resume, stop
def _load_newest_complete(accelerator, checkpoint: Path, checkpoints_dir: Path, resume, **state) -> tuple[dict, Path]:
    """Load `checkpoint`; with a plain --resume, a damaged newest checkpoint (a disk error, a partial copy) falls
    back to the newest one that loads, with a warning. A checkpoint the user named is never replaced silently."""
    candidates = [checkpoint]
    if not isinstance(resume, str):
        candidates += [path for path in reversed(list_checkpoints(checkpoints_dir)) if path != checkpoint]
    for index, candidate in enumerate(candidates):
        try:
            return load_checkpoint(accelerator, candidate, **state), candidate
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as error:  # JSONDecodeError: ValueError
            if index == len(candidates) - 1:
                raise ValueError(f"--resume: {candidate} cannot be loaded ({type(error).__name__}: {error}) and no "
                                 "older checkpoint loads either; start afresh with --overwrite_output_dir.") from None
            logger.warning(f"--resume: {candidate} is damaged ({type(error).__name__}: {error}); falling back to "
                           f"{candidates[index + 1].name}.", main_process_only=True)
    raise AssertionError("unreachable")


class TrainingInterrupted(RunStopped):
    """Raised by `train` after SIGINT (Ctrl-C) or SIGTERM: a checkpoint was written at the step boundary."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path):
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint
        super().__init__(f"{signal_name} received: stopped after step {step} and saved {checkpoint}. Run the same "
                         "command with --resume to continue from it.")


class TrainingDiverged(ValueError):
    """Raised by `train` when a step's gradient norm is not finite and the optimizer applied it: the weights hold
    NaN or inf from then on, and every later step, evaluation and checkpoint would be of a broken model."""

    def __init__(self, step: int, loss: float, grad_norm: float, learning_rate: float, checkpoint: Path | None):
        self.step, self.checkpoint = step, checkpoint
        kept = (f"{checkpoint} (the last checkpoint) holds finite weights" if checkpoint is not None
                else "no checkpoint was written before it")
        super().__init__(
            f"Training diverged at step {step}: the gradient norm is {grad_norm} (mean loss {loss:.4g}) and the "
            f"update made the weights non-finite, so the run stops; {kept}. Lower --learning_rate (this step used "
            f"{learning_rate:.3g}), lengthen the warm-up, keep --max_grad_norm on, or train in bf16 or fp32 rather "
            "than fp16.")


class StopRequest:
    """SIGINT/SIGTERM handlers that ask the loop to stop at the next step boundary (a second Ctrl-C stops at once,
    as usual). Installed only in the main thread, restored on exit."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self):
        self.signal_name = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, number, frame):
        if self.signal_name is not None and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(number).name
        logger.warning(f"{self.signal_name} received: stopping after this step and saving a checkpoint (Ctrl-C again "
                       "to stop at once, without one).")

    def __exit__(self, *exc):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        return False


# ================================================================================================ best model
def save_best_model(accelerator: Accelerator, model: torch.nn.Module, directory: Path, info: dict) -> None:
    """The weights of the best evaluation so far, written atomically like a checkpoint."""
    unwrapped = accelerator.unwrap_model(model)
    gathered = gather_model_state(unwrapped)  # collective when the model is sharded (FSDP2)
    if accelerator.is_main_process:
        temporary = directory.with_name(f".tmp-{directory.name}")
        if temporary.exists():
            shutil.rmtree(temporary)
        temporary.mkdir(parents=True)
        model_state_to_file(unwrapped, temporary / "model.safetensors", gathered)
        write_json(temporary / "best.json", info)
        atomic_directory_commit(temporary, directory)
    accelerator.wait_for_everyone()


def load_best_model(accelerator: Accelerator, model: torch.nn.Module, directory: Path) -> dict:
    model_state_from_file(accelerator.unwrap_model(model), directory / "model.safetensors")
    return read_json(directory / "best.json")


# ================================================================================================ training
def _improved(value: float, best: float | None, greater_is_better: bool) -> bool:
    if best is None or math.isnan(best):
        return not math.isnan(value)
    return value > best if greater_is_better else value < best


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _say(accelerator: Accelerator, bar, message: str) -> None:
    # Printed above the progress bar, once (main process), whatever the logging configuration.
    if accelerator.is_main_process:
        bar.write(message)


def _start_fresh(output_dir: Path, accelerator: Accelerator) -> None:
    # A new run in a folder that holds an older run's records: remove them so files never mix two runs.
    if accelerator.is_main_process:
        stale = [output_dir / METRICS_FILE, output_dir / CHECKPOINTS_DIR, output_dir / BEST_MODEL_DIR]
        if any(path.exists() for path in stale):
            logger.warning(
                f"{output_dir} holds an earlier run's metrics/checkpoints; starting afresh (pass --resume to continue it)."
            )
        for path in stale:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    accelerator.wait_for_everyone()


def training_forward_inputs(model: torch.nn.Module) -> dict:
    """Keywords every training forward gets besides the batch: `use_cache=False` for a model that takes it and
    whose config turns the cache on (every decoder's default, for generation). A training step reads no cache, and
    building and filling one is work thrown away at every step, which a small model's step notices (the time-to-
    quality benchmark at nanoGPT's shape, docs/time-to-quality.md). transformers' own causal LMs build one too when
    use_cache is left to the config; passing False is their documented way to skip it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT's wrapper
    if getattr(getattr(base, "config", None), "use_cache", False) is not True:
        return {}
    try:
        parameters = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):  # a forward without a signature: pass nothing it may not take
        return {}
    return {"use_cache": False} if "use_cache" in parameters else {}


def train(
    model: torch.nn.Module,
    train_dataset,
    collate_fn: Callable[[list[dict]], dict],
    config: TrainingConfig,
    *,
    eval_fn: Callable[[torch.nn.Module], dict] | None = None,
    loss_fn: LossFn | None = None,
    accelerator: Accelerator | None = None,
    tracker_config: dict | None = None,
) -> TrainResult:
    """Train `model` on `train_dataset` (any indexable of examples that `collate_fn` turns into a batch of tensors
    including `labels`) as `config` says.

    eval_fn(model) -> metrics dict is called every `eval_steps` and at the end (see `evaluate`); it must return
    `config.early_stopping_metric`. The model is built (and seeded) by the caller; it is prepared here.

    loss_fn(model, batch) gets the collated batch plus `use_cache=False` where the model takes that keyword and its
    config turns the cache on (see `training_forward_inputs`); a batch that sets use_cache itself keeps its value.
    """
    accelerator = accelerator or create_accelerator(config)
    output_dir = Path(config.output_dir)
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
    loss_fn = loss_fn or model_loss
    world = accelerator.num_processes
    global_micro_batch = config.per_device_batch_size * world
    token_batching = config.max_tokens_per_batch is not None
    global_batch_tokens = config.max_tokens_per_batch * world if token_batching else 0
    if token_batching:
        lengths = example_lengths(train_dataset)
        micro_batches_per_epoch = len(token_batch_plan(lengths, global_batch_tokens, world, seed=config.seed,
                                                       shuffle=config.shuffle, epoch=0))
    elif len(train_dataset) < global_micro_batch:
        raise ValueError(
            f"The training set has {len(train_dataset)} examples, fewer than one batch "
            f"({config.per_device_batch_size} per process x {world} processes): lower --per_device_batch_size "
            "or use more data."
        )
    if not token_batching:
        micro_batches_per_epoch = len(train_dataset) // global_micro_batch
    accumulation = config.gradient_accumulation_steps
    total_steps = config.max_steps or max(1, int(config.num_epochs * micro_batches_per_epoch) // accumulation)
    warmup_steps = resolve_warmup_steps(total_steps, config.warmup_steps, config.warmup_ratio)
    is_encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))

    optimizer = build_optimizer(
        model, learning_rate=config.learning_rate, weight_decay=config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
    )
    # The scheduler is not prepared: Accelerate would step it once per process per call.
    scheduler = build_scheduler(optimizer, config.lr_scheduler, warmup_steps=warmup_steps, total_steps=total_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    trainable = [p for p in model.parameters() if p.requires_grad]
    # The training loss may run compiled; evaluation, checkpoints and the returned model use `model` itself.
    step_loss_of = training_loss(model, loss_fn, accelerator, use_compile(config.compile, accelerator))
    forward_inputs = training_forward_inputs(accelerator.unwrap_model(model))

    metrics_log = MetricsLog(output_dir / METRICS_FILE, enabled=accelerator.is_main_process)
    checkpoints_dir = output_dir / CHECKPOINTS_DIR
    best_dir = output_dir / BEST_MODEL_DIR
    progress = TrainingProgress(seed=config.seed, global_micro_batch=global_micro_batch,
                                global_batch_tokens=global_batch_tokens)
    checkpoint = None
    if config.resume:
        checkpoint = Path(config.resume) if isinstance(config.resume, str) else latest_checkpoint(checkpoints_dir)
        if checkpoint is None:
            logger.warning(f"--resume: no checkpoint in {checkpoints_dir}; starting from scratch.")
    if checkpoint is not None:
        saved, checkpoint = _load_newest_complete(accelerator, checkpoint, checkpoints_dir, config.resume,
                                                  model=model, optimizer=optimizer, scheduler=scheduler)
        progress = TrainingProgress.from_dict(saved)
        if progress.global_batch_tokens != global_batch_tokens:
            raise ValueError(
                f"{checkpoint} was trained with {progress.global_batch_tokens or 'no'} token-count batches (tokens "
                f"over all processes); this run has {global_batch_tokens or 'none'}. Resume with the same "
                "max_tokens_per_batch x processes, or the data position would be wrong."
            )
        if progress.global_micro_batch != global_micro_batch and not token_batching:
            raise ValueError(
                f"{checkpoint} was trained with {progress.global_micro_batch} examples per micro-batch over all "
                f"processes; this run has {global_micro_batch}. Resume with the same per-device batch size x "
                "processes, or the data position would be wrong."
            )
        metrics_log.truncate_after(progress.step)
    else:
        _start_fresh(output_dir, accelerator)
        # Per-process seeds (device_specific) so dropout differs across processes as it would on one big batch.
        set_seed(config.seed, device_specific=True)

    accelerator.project_configuration.set_directories(str(output_dir))
    accelerator.init_trackers(
        "tensorboard", config=flat_hyperparameters({**asdict(config), **(tracker_config or {})})
    )
    unit = config.throughput_unit
    batch_size_text = (f"up to {config.max_tokens_per_batch} padded tokens" if token_batching
                       else f"{config.per_device_batch_size} examples")
    logger.info(
        f"Training {total_steps} steps: {batch_size_text} x {world} process(es) x "
        f"{accumulation} accumulation"
        + ("" if token_batching else f" = {global_micro_batch * accumulation} examples per step") + "; "
        f"{micro_batches_per_epoch // accumulation} steps per epoch; warmup {warmup_steps} steps.",
        main_process_only=True,
    )

    if token_batching:
        stream = token_batch_stream(lengths, global_batch_tokens, world, seed=config.seed, shuffle=config.shuffle,
                                    start_epoch=progress.epoch, start_micro_batch=progress.micro_batch)
    else:
        stream = micro_batch_stream(
            len(train_dataset), global_micro_batch, seed=config.seed, shuffle=config.shuffle,
            start_epoch=progress.epoch, start_micro_batch=progress.micro_batch,
        )
    rank_slice = slice(
        accelerator.process_index * config.per_device_batch_size,
        (accelerator.process_index + 1) * config.per_device_batch_size,
    )
    greater = config.metric_greater_is_better()
    final_metrics: dict = {}
    best_in_memory = None  # the best metrics when the best model is the final one (not written to best-model/)
    bar = tqdm(
        total=total_steps, initial=progress.step, desc="training", dynamic_ncols=True,
        disable=not (config.progress_bar and accelerator.is_local_main_process),
    )
    window_start, window_units = time.perf_counter(), 0
    run_start = time.perf_counter() - progress.train_seconds
    model.train()
    # Ctrl-C / SIGTERM: finish the step, checkpoint, stop (restored however the loop ends).
    with StopRequest() as stop:
        while progress.step < total_steps and not progress.stopped_early:
            step_loss = torch.zeros((), dtype=torch.float32, device=accelerator.device)
            units = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # tokens, examples on this process
            for micro_index in range(accumulation):
                epoch, position, indices = next(stream)
                mine = indices[accelerator.process_index::world] if token_batching else indices[rank_slice]
                examples = fetch_examples(train_dataset, mine)
                batch = move_to_device(collate_fn(examples), accelerator.device)
                batch = {**forward_inputs, **batch}
                tokens, count = batch_units(batch, is_encoder_decoder=is_encoder_decoder)
                units += torch.tensor([tokens, count], dtype=torch.float64, device=accelerator.device)
                last = micro_index == accumulation - 1
                # Gradients are all-reduced on the last micro-batch only.
                sync = contextlib.nullcontext() if last or world == 1 else accelerator.no_sync(model)
                with sync:
                    loss = step_loss_of(batch)
                    accelerator.backward(loss / accumulation)
                step_loss += loss.detach().float()
                progress.epoch, progress.micro_batch = epoch, position + 1
            grad_norm = accelerator.clip_grad_norm_(trainable, config.max_grad_norm or float("inf"))
            learning_rate = optimizer.param_groups[0]["lr"]  # the rate this step used
            optimizer.step()
            skipped = accelerator.optimizer_step_was_skipped
            if not skipped:  # an fp16 overflow skips the update; keep the schedule
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            progress.step += 1

            # The stop flag rides on the per-step reduction: every process stops after the same step, at no extra cost.
            stop_flag = torch.tensor([float(stop.signal_name is not None)], dtype=torch.float64, device=accelerator.device)
            # So does a gradient norm that is not finite where the update was applied (the weights are then NaN or
            # inf). Not the loss: a batch without a labelled token has a NaN mean loss and a zero gradient.
            diverged = (torch.zeros(1, dtype=torch.float64, device=accelerator.device) if grad_norm is None or skipped
                        else (~torch.isfinite(torch.as_tensor(grad_norm, device=accelerator.device))).double()
                        .reshape(1))
            totals = accelerator.reduce(
                torch.cat([(step_loss / accumulation).double().reshape(1), units, stop_flag, diverged]),
                reduction="sum",
            )
            step_mean_loss = float(totals[0]) / world
            if float(totals[4]) > 0:
                bar.close()
                raise TrainingDiverged(progress.step, step_mean_loss, float(grad_norm), learning_rate,
                                       latest_checkpoint(checkpoints_dir))
            progress.tokens_seen += int(totals[1])
            progress.examples_seen += int(totals[2])
            progress.window_loss_sum += step_mean_loss
            progress.window_steps += 1
            window_units += int(totals[1] if unit == "tokens" else totals[2])
            bar.update(1)

            if progress.step % config.logging_steps == 0 or progress.step == total_steps:
                elapsed = time.perf_counter() - window_start
                record = {
                    "step": progress.step,
                    "epoch": round(progress.epoch + progress.micro_batch / micro_batches_per_epoch, 4),
                    "loss": progress.window_loss_sum / progress.window_steps,
                    "lr": learning_rate,
                    "grad_norm": float(grad_norm) if grad_norm is not None else None,
                    "tokens_seen": progress.tokens_seen,
                    "examples_seen": progress.examples_seen,
                    f"{unit}_per_second": window_units / elapsed if elapsed > 0 else None,
                    "elapsed_seconds": time.perf_counter() - run_start,
                    "time": round(time.time(), 3),  # wall clock, for timelines across processes (benchmarks)
                }
                metrics_log.append(record)
                accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step" and v is not None},
                                step=progress.step)
                bar.set_postfix(
                    loss=f"{record['loss']:.4f}", lr=f"{learning_rate:.2e}",
                    **{f"{'tok' if unit == 'tokens' else 'img'}/s": f"{record[f'{unit}_per_second'] or 0:,.0f}"},
                )
                progress.window_loss_sum, progress.window_steps = 0.0, 0
                window_start, window_units = time.perf_counter(), 0

            evaluate_now = eval_fn is not None and (
                progress.step == total_steps or (config.eval_steps and progress.step % config.eval_steps == 0)
            )
            if evaluate_now:
                final_metrics = eval_fn(model)
                metrics_log.append({"step": progress.step, "split": "validation", **final_metrics})
                accelerator.log({f"validation/{k}": v for k, v in final_metrics.items() if _is_number(v)},
                                step=progress.step)
                _say(accelerator, bar, f"step {progress.step}: " + ", ".join(
                    f"{k} {v:.4g}" for k, v in final_metrics.items() if isinstance(v, (int, float))))
                if config.early_stopping_metric not in final_metrics:
                    raise ValueError(
                        f"early_stopping_metric {config.early_stopping_metric!r} is not among the evaluation metrics "
                        f"({', '.join(final_metrics)})."
                    )
                value = float(final_metrics[config.early_stopping_metric])
                if _improved(value, progress.best_metric, greater):
                    progress.best_metric, progress.best_step = value, progress.step
                    progress.evaluations_without_improvement = 0
                    if config.load_best_at_end and progress.step >= total_steps:
                        # The last step is the best: the model in memory is the one to return, so writing it out
                        # to read it straight back is skipped (an older best-model/ is stale now).
                        best_in_memory = {"step": progress.step, **final_metrics}
                        if accelerator.is_main_process:
                            shutil.rmtree(best_dir, ignore_errors=True)
                    else:
                        save_best_model(accelerator, model, best_dir, {"step": progress.step, **final_metrics})
                else:
                    progress.evaluations_without_improvement += 1
                    patience = config.early_stopping_patience
                    if patience is not None and progress.evaluations_without_improvement >= patience:
                        progress.stopped_early = True
                        _say(accelerator, bar, f"Early stopping at step {progress.step}: {config.early_stopping_metric} has not "
                                  f"improved for {patience} evaluations (best {progress.best_metric:.4g} at step "
                                  f"{progress.best_step}).")

            interrupted = float(totals[3]) > 0
            if interrupted or (config.save_steps and progress.step % config.save_steps == 0
                               and progress.step < total_steps):
                progress.train_seconds = time.perf_counter() - run_start
                saved_at = save_checkpoint(
                    accelerator, checkpoints_dir, progress.step, model=model, optimizer=optimizer, scheduler=scheduler,
                    trainer_state=asdict(progress), keep_last=config.save_total_limit,
                )
                if interrupted:
                    bar.close()
                    raise TrainingInterrupted(stop.signal_name or "a stop signal (on another process)", progress.step,
                                              saved_at)
    bar.close()
    progress.train_seconds = time.perf_counter() - run_start
    accelerator.wait_for_everyone()

    best_metrics = best_in_memory
    if best_metrics is None and config.load_best_at_end and progress.best_step is not None \
            and (best_dir / "best.json").is_file():
        best_metrics = load_best_model(accelerator, model, best_dir)
        logger.info(f"Loaded the best model (step {progress.best_step}, {config.early_stopping_metric} "
                    f"{progress.best_metric:.4g}).", main_process_only=True)
    # Close this run's trackers without destroying the process group (end_training would): a --seeds run goes on.
    if accelerator.is_main_process:
        for tracker in accelerator.trackers:
            tracker.finish()
    accelerator.trackers = []
    return TrainResult(
        model=accelerator.unwrap_model(model), progress=progress, total_steps=total_steps,
        final_metrics=final_metrics, best_metrics=best_metrics, accelerator=accelerator,
    )
