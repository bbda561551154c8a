"""The training set-up of Vaswani et al. (2017, section 5) at small scale, as one plain loop.

Adam with betas (0.9, 0.98) and eps 1e-9 (5.3), the inverse-square-root schedule after a linear warmup (5.3, with
the peak given as a learning rate rather than d_model ** -0.5), label smoothing (5.4), token-count batches (5.1),
and the average of the last checkpoints (6.1). Dropout is the model config's (5.4).

Why not `transformer_zoo.training.engine.loop.train` (the recipes' loop): that loop batches by a fixed number of examples
and keeps checkpoints on disk for resuming one long run; the reproduction trains many short runs in one process,
each needing its last N weights in memory to average and a budget of tokens per batch. This loop reuses the recipes'
optimiser and schedule builders and transformers' label-smoothed loss through the model's own `labels`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from transformers.utils import logging

from .averaging import average_state_dicts
from .batching import token_batches

logger = logging.get_logger(__name__)

IGNORE_INDEX = -100
PRECISIONS = ("fp32", "bf16")  # train_translation's `precision`


@dataclass
class PairFeatures:
    """Tokenized pairs: source ids and target ids (each ending in eos), with a pad id for batching."""

    sources: list[list[int]]
    targets: list[list[int]]
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.sources)

    def batch(self, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        width = max(len(self.sources[i]) for i in rows)
        target_width = max(len(self.targets[i]) for i in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), target_width), IGNORE_INDEX, dtype=torch.long)
        for row, index in enumerate(rows):
            source, target = self.sources[index], self.targets[index]
            input_ids[row, :len(source)] = torch.tensor(source)
            attention_mask[row, :len(source)] = 1
            labels[row, :len(target)] = torch.tensor(target)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def token_batches(self, max_tokens: int, seed: int | None) -> list[list[int]]:
        return token_batches([len(s) for s in self.sources], [len(t) for t in self.targets], max_tokens, seed=seed)


def encode_pairs(tokenizer, sources: Sequence[str], targets: Sequence[str], max_length: int) -> PairFeatures:
    """Token ids of both sides, each truncated to `max_length` tokens including a final eos (no bos: the model
    prepends its decoder start token when it shifts the labels)."""
    end = tokenizer.eos_token_id
    if end is None or tokenizer.pad_token_id is None:
        raise ValueError("Translation needs a tokenizer with eos and pad tokens.")

    def encode(texts):
        ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [row[: max_length - 1] + [end] for row in ids]

    return PairFeatures(encode(sources), encode(targets), tokenizer.pad_token_id)


@torch.no_grad()
def evaluate_loss(model, features: PairFeatures, max_tokens: int) -> dict[str, float]:
    """Cross-entropy per target token (no label smoothing) and its perplexity, over every pair."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for rows in features.token_batches(max_tokens, seed=None):
        batch = {key: value.to(device) for key, value in features.batch(rows).items()}
        logits = model(**batch).logits
        labels = batch["labels"]
        total += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                         ignore_index=IGNORE_INDEX, reduction="sum"))
        count += int((labels != IGNORE_INDEX).sum())
    loss = total / count
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


@dataclass
class TrainingResult:
    steps: int
    seconds: float
    target_tokens: int
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    evaluations: list[dict] = field(default_factory=list)
    averaged: int = 1  # how many checkpoints the returned weights average
    diverged: bool = False
    # This process's CPU time in the training loop over every attempt (a snapshot carries the earlier attempts'),
    # and of it the attempts before this one: None where an earlier attempt's snapshot was written without it.
    cpu_seconds: float | None = 0.0
    earlier_cpu_seconds: float | None = 0.0


def train_translation(model, features: PairFeatures, *, steps: int, max_tokens: int, learning_rate: float,
                      warmup_steps: int, label_smoothing: float = 0.1, average_last: int = 1,
                      checkpoint_every: int = 0, seed: int = 0, eval_every: int = 0,
                      evaluate: Callable[[torch.nn.Module], dict] | None = None, max_grad_norm: float | None = None,
                      evaluate_before_average: bool = False,
                      final_evaluate: Callable[[torch.nn.Module], dict] | None = None,
                      log_every: int = 25, description: str = "training", progress: bool = True,
                      snapshot: str | os.PathLike | None = None, snapshot_every: int = 0,
                      snapshot_key: str = "", keep_final_state: bool = False,
                      precision: str = "fp32") -> TrainingResult:
    """Train `model` in place for `steps` optimizer steps of token-count batches; then load the average of the last
    `average_last` checkpoints, taken every `checkpoint_every` steps (the final step is always one).

    `evaluate(model)` runs every `eval_every` steps and at the end, on the averaged weights (and, with
    `evaluate_before_average`, on the last weights before averaging too); its dicts are kept with their step and the
    number of checkpoints averaged in `TrainingResult.evaluations`. `final_evaluate`, when given, replaces
    `evaluate` for those end-of-training evaluations (e.g. beam search at the end, greedy decoding on the way).

    `snapshot`: a file where the whole training state (weights, optimiser, schedule, the data order, the random
    state, the checkpoints kept for averaging, the curves so far) is written every `snapshot_every` steps; a run
    started again with the same file and `snapshot_key` continues from it and ends with the same weights as a run
    never stopped. The file is removed when training ends, unless `keep_final_state`: then it holds the state after
    the last step (before averaging), so that a longer budget continues from there. That is exact because nothing
    on the way depends on `steps`: the inverse-square-root schedule has no horizon, and the data order and dropout
    draw from the seed and epoch alone; only which checkpoints are averaged does, and those of the old ending are
    dropped. (An extended run's loss curve has one extra point where the shorter one ended, and its evaluations
    fall at both budgets' intervals.) A snapshot under another key (other settings), another warmup, or from a
    longer budget than `steps` is ignored with a warning and overwritten.

    `precision`: "fp32", or "bf16" for mixed precision: the forward pass under bf16 autocast, the weights, gradients,
    optimiser state and loss in fp32 (the loss from the bf16 logits cast up). Evaluations run outside it, in fp32. On
    CPUs that multiply bf16 in hardware (AMX, AVX512-BF16) it is faster: 1.4-1.75x on one thread, 1.02-1.17x on two
    (benchmarks/results/translation_step_precision_cpu.json); elsewhere autocast emulates bf16 and is slower.
    """
    from tqdm.auto import tqdm
    from transformers.models.bart.modeling_bart import shift_tokens_right

    from ..training.engine.optim import build_optimizer, build_scheduler

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if average_last > 1 and checkpoint_every < 1:
        raise ValueError("average_last > 1 needs checkpoint_every >= 1 (the steps between averaged checkpoints).")
    if average_last > 1 and (average_last - 1) * checkpoint_every >= steps:
        raise ValueError(f"average_last={average_last} checkpoints every {checkpoint_every} steps do not fit in "
                         f"{steps} steps; lower one of them.")
    # No weight decay: Vaswani et al. use plain Adam.
    optimizer = build_optimizer(model, learning_rate=learning_rate, weight_decay=0.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = build_scheduler(optimizer, "inverse_sqrt", warmup_steps=warmup_steps, total_steps=steps)
    vocab_size = model.config.vocab_size
    device = next(model.parameters()).device  # batches are built on the CPU and moved to the model
    result = TrainingResult(steps=0, seconds=0.0, target_tokens=0)
    keep_from = steps - (average_last - 1) * checkpoint_every if average_last > 1 else steps

    def averaged_here(step: int) -> bool:  # whether this budget averages the checkpoint taken after `step`
        return average_last > 1 and step >= keep_from and (steps - step) % checkpoint_every == 0

    kept: list[dict[str, torch.Tensor]] = []
    kept_steps: list[int] = []
    epoch, batches = 0, []
    window: list[float] = []
    first_step, seconds_before = 1, 0.0
    snapshot = Path(snapshot) if snapshot else None
    if snapshot is not None and snapshot.exists():
        state = torch.load(snapshot, map_location="cpu", weights_only=True)  # our own file, still never unpickled
        done = state["result"]["steps"]
        if (state["key"] != snapshot_key or done > steps
                or state.get("warmup_steps", warmup_steps) != warmup_steps):
            logger.warning(f"{snapshot}: a snapshot of other settings; training from the start and replacing it.")
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"])
            if state.get("cuda_rng") is not None and device.type == "cuda":  # dropout on a GPU draws from its own
                torch.cuda.set_rng_state(state["cuda_rng"], device)
            epoch, batches, window = state["epoch"], state["batches"], state["window"]
            # The checkpoints this budget averages (a state from a shorter budget kept those of its own ending).
            saved_steps = state["kept_steps"] if "kept_steps" in state else [  # (snapshots before kept_steps)
                k for k in range(max(1, state["steps"] - (average_last - 1) * checkpoint_every), done + 1)
                if (state["steps"] - k) % checkpoint_every == 0]
            for kept_step, weights in zip(saved_steps, state["kept"]):
                if averaged_here(kept_step):
                    kept_steps.append(kept_step)
                    kept.append(weights)
            result = TrainingResult(**state["result"])
            result.loss_curve = [tuple(point) for point in result.loss_curve]
            first_step, seconds_before = result.steps + 1, result.seconds
            # (a snapshot from before CPU time was carried: the earlier attempts' is unknown, not zero)
            result.earlier_cpu_seconds = result.cpu_seconds = state["result"].get("cpu_seconds")
            if state["steps"] == steps and not state.get("finished"):
                logger.warning(f"{description}: resuming from the snapshot at step {done} of {steps}.")
            else:
                logger.warning(f"{description}: continuing a run budgeted at {state['steps']} steps from its step "
                               f"{done}, to {steps} steps.")

    def training_state(finished: bool) -> dict:
        return {"key": snapshot_key, "steps": steps, "warmup_steps": warmup_steps, "finished": finished,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "kept": kept, "kept_steps": kept_steps, "epoch": epoch, "batches": batches, "window": window,
                "result": asdict(result)}

    started = time.perf_counter() - seconds_before
    cpu_started = time.process_time()

    def note_times() -> None:
        result.seconds = time.perf_counter() - started
        if result.earlier_cpu_seconds is not None:
            result.cpu_seconds = result.earlier_cpu_seconds + time.process_time() - cpu_started

    bar = tqdm(total=steps, initial=first_step - 1, desc=description, disable=not progress, leave=False,
               dynamic_ncols=True)
    model.train()
    for step in range(first_step, steps + 1):
        if not batches:
            batches = features.token_batches(max_tokens, seed=seed * 1000 + epoch)
            epoch += 1
        batch = {key: value.to(device) for key, value in features.batch(batches.pop()).items()}
        labels = batch["labels"]
        # Decoder inputs shifted from the labels here rather than by the model (which would also compute its own,
        # unsmoothed loss when given labels).
        decoder_input_ids = shift_tokens_right(labels, model.config.pad_token_id, model.config.decoder_start_token_id)
        # Autocast entered per step, so its cache of bf16 weight copies never outlives an optimizer step.
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           decoder_input_ids=decoder_input_ids).logits
        logits = logits.float()  # a no-op in fp32
        # The loss summed over target tokens / their count, with transformers' label smoothing convention
        # (torch's: eps spread uniformly over the whole vocabulary, padding ignored).
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab_size), labels.view(-1),
                                                 ignore_index=IGNORE_INDEX, label_smoothing=label_smoothing)
        if not torch.isfinite(loss):
            result.diverged = True
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        result.steps = step
        result.target_tokens += int((labels != IGNORE_INDEX).sum())
        window.append(loss.item())
        if step % log_every == 0 or step == steps:
            result.loss_curve.append((step, float(np.mean(window))))
            bar.set_postfix(loss=f"{result.loss_curve[-1][1]:.3f}")
            window = []
        if averaged_here(step):
            # Kept on the CPU whatever the device (a GPU's memory is for training; a snapshot reloads them there).
            kept.append({name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()})
            kept_steps.append(step)
        if evaluate is not None and eval_every and step % eval_every == 0 and step != steps:
            result.evaluations.append({"step": step, "averaged": 1, **evaluate(model)})
            model.train()
        if snapshot is not None and snapshot_every and step % snapshot_every == 0 and step != steps:
            note_times()
            _write_snapshot(snapshot, training_state(finished=False))
        bar.update(1)
    bar.close()
    note_times()
    if snapshot is not None:
        if keep_final_state and not result.diverged:
            _write_snapshot(snapshot, training_state(finished=True))  # before averaging: a longer budget goes on
        else:
            snapshot.unlink(missing_ok=True)
    at_end = final_evaluate or evaluate
    if len(kept) > 1 and not result.diverged:
        if at_end is not None and evaluate_before_average:
            model.eval()
            result.evaluations.append({"step": result.steps, "averaged": 1, **at_end(model)})
        model.load_state_dict(average_state_dicts(kept))
        result.averaged = len(kept)
    model.eval()
    if at_end is not None and not result.diverged:
        result.evaluations.append({"step": result.steps, "averaged": result.averaged, **at_end(model)})
    return result


def _write_snapshot(path: Path, state: dict) -> None:
    """Written beside and renamed over the old one, so a kill while writing leaves the previous snapshot whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".writing")
    torch.save(state, partial)
    os.replace(partial, path)
