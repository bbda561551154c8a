"""What every reproduction experiment shares: statistics over seeds, verdicts by a stated criterion, the plain
training loop, run records and report helpers.

Why not the recipes' training loop (`transformer_zoo.training.engine.loop.train`): it is built for one long run (Accelerate
preparation, checkpoints, JSONL logs, trackers, an output folder per run). These experiments are dozens of runs of a
few hundred steps on tiny models, where that machinery would cost more than the training and would leave hundreds of
folders behind; a plain loop of forward, the model's own loss, backward, clip, step is easier to read and audit. It
uses the recipes' optimiser and schedule builders (`transformer_zoo.training.engine.optim`), i.e. transformers' schedulers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging


logger = logging.get_logger(__name__)

IGNORE_INDEX = -100  # transformers' losses skip this label


@dataclass(frozen=True)
class Experiment:
    """One experiment of the runner: its settings per preset and the functions that run and report it.

    `run(settings, seeds, progress=...)` returns a results dict with at least "experiment", "settings", "seeds",
    "runs" and "claims" (each a `verdict`); `markdown(results)` and `plot(results, path)` write its report page and
    figure. `seeds` overrides the runner's seeds for a preset (e.g. an experiment too long for three seeds).
    """

    name: str
    title: str
    summary: str
    settings: Mapping[str, Any]
    run: Callable[..., dict[str, Any]]
    markdown: Callable[[Mapping[str, Any]], str]
    plot: Callable[[Mapping[str, Any], Path], Path]
    seeds: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


# ================================================================================================ statistics & verdicts
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("mean_std needs at least one value.")
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else 0.0

def format_mean_std(values: Sequence[float], digits: int = 3) -> str:
    """"mean ± std" over seeds; a single value alone (one seed has no spread to show: "± 0.000" would claim one)."""
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"

def clearly_better(better: Sequence[float], worse: Sequence[float], *, lower_is_better: bool,
                   min_difference: float) -> tuple[bool, str]:
    """Is `better` better than `worse` by more than the seed spread? The criterion: the difference of the means, in
    the claimed direction, exceeds both `min_difference` and sqrt(std_a^2 + std_b^2) (the spread of a difference of
    two independent seeds). Returns (decision, the numbers it was decided on)."""
    mean_a, std_a = mean_std(better)
    mean_b, std_b = mean_std(worse)
    difference = (mean_b - mean_a) if lower_is_better else (mean_a - mean_b)
    spread = math.hypot(std_a, std_b)
    threshold = max(spread, min_difference)
    return difference > threshold, f"difference {difference:+.3f} vs threshold {threshold:.3f}"

def verdict(claim: str, criterion: str, held: bool, evidence: str) -> dict[str, Any]:
    return {"claim": claim, "criterion": criterion, "held": bool(held), "evidence": evidence}


# ================================================================================================ training
@dataclass
class RunResult:
    """One training run: its settings, loss curve, held-out numbers and whether it diverged."""

    experiment: str
    arm: str
    seed: int
    settings: dict[str, Any]
    steps_done: int = 0
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    diverged: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

def data_rng(seed: int, stream: int) -> np.random.Generator:
    """Independent reproducible streams per seed: 0 = training batches, 1 = evaluation data."""
    return np.random.default_rng([seed, stream])

def train_steps(model: torch.nn.Module, next_batch: Callable[[], dict[str, torch.Tensor]], *, steps: int,
                learning_rate: float, warmup_steps: int, description: str, max_grad_norm: float = 1.0,
                log_every: int = 10, progress: bool = True) -> tuple[list[tuple[int, float]], bool, int]:
    """Train with AdamW (betas 0.9/0.98 as Vaswani et al.), clipping the gradient norm, with a linear warmup over
    `warmup_steps` (none when 0: the first step already uses the peak `learning_rate`) and then a linear decay to 0
    at the last step (transformers' "linear" schedule). The decay makes the final evaluation a property of the run
    rather than of the last few noisy high-learning-rate steps.

    Returns the loss curve (step, mean loss over the last `log_every` steps), whether the run diverged (a
    non-finite loss; training stops there) and the number of steps done.
    """
    from tqdm.auto import tqdm

    from ...training.engine.optim import build_optimizer, build_scheduler

    optimizer = build_optimizer(model, learning_rate=learning_rate, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-9)
    scheduler = build_scheduler(optimizer, "linear", warmup_steps=warmup_steps, total_steps=steps)
    model.train()
    curve, window = [], []
    diverged = False
    bar = tqdm(range(1, steps + 1), desc=description, leave=False, disable=not progress, dynamic_ncols=True)
    step = 0
    for step in bar:
        loss = model(**next_batch()).loss
        if not torch.isfinite(loss):
            diverged = True
            logger.warning(f"{description}: loss became {loss.item()} at step {step}; stopping this run.")
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        window.append(loss.item())
        if step % log_every == 0 or step == steps:
            curve.append((step, float(np.mean(window))))
            bar.set_postfix(loss=f"{curve[-1][1]:.3f}")
            window = []
    bar.close()
    model.eval()
    return curve, diverged, step


# ================================================================================================ reports
def json_ready(value):
    """JSON with finite floats only: NaN/inf become strings so the file stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    return value

def verdict_table(claims: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| claim | criterion (computed from the numbers) | measured | held? |", "|---|---|---|---|"]
    for claim in claims:
        lines.append(f"| {claim['claim']} | {claim['criterion']} | {claim['evidence']} | "
                     f"{'**yes**' if claim['held'] else '**no**'} |")
    return "\n".join(lines)

def setup_line(results: Mapping[str, Any]) -> str:
    seeds = results["seeds"]
    spread = ("mean ± sample standard deviation over seeds" if len(seeds) > 1 else
              "**one seed: no spread, so every ± is 0 and the verdicts cannot account for noise**")
    minutes = results["seconds"] / 60
    env = results["environment"]
    cpu = (f"{results['cpu_seconds'] / 60:.1f} min of CPU" if results.get("cpu_seconds") is not None
           else results.get("cpu_note", "CPU time not recorded"))
    workers = results["settings"].get("jobs", 1)  # worker processes (translation's --jobs); 1 elsewhere
    threads = (f"{workers} worker processes of 1 torch thread each" if workers > 1
               else f"{env['threads']} torch thread(s)")
    return (f"Preset `{results['preset']}`, seeds {', '.join(map(str, seeds))} ({spread}). Took {minutes:.1f} min "
            f"wall, {cpu}, with {threads}, torch {env['torch']}.")

def mean_curve(runs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean training-loss curve over the runs, on the steps every run reached (a diverged run stops early)."""
    length = min(len(run["loss_curve"]) for run in runs)
    if length == 0:
        return np.array([]), np.array([])
    steps = np.array([point[0] for point in runs[0]["loss_curve"][:length]])
    return steps, np.mean([[point[1] for point in run["loss_curve"][:length]] for run in runs], axis=0)
