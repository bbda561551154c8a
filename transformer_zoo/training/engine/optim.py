"""Optimiser and learning-rate schedule of the training recipes: AdamW with decoupled weight decay applied to
weight matrices only, and a warmup followed by a decay, built with transformers' schedulers.

Biases and normalisation weights are excluded from weight decay (Loshchilov & Hutter 2019; BERT and GPT-2 did the
same): pulling a LayerNorm gain towards zero, or a bias towards zero, regularises nothing useful and hurts.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import get_scheduler
from transformers.utils import logging

logger = logging.get_logger(__name__)

# The schedules the recipes offer; each is a transformers SchedulerType name (see transformers.get_scheduler).
#   linear:        warmup, then linear decay to 0 at the last step (BERT).
#   cosine:        warmup, then half a cosine to 0 (GPT-3, most modern LMs).
#   inverse_sqrt:  warmup, then lr * sqrt(warmup / step) (Vaswani et al. 2017, section 5.3, with the peak set by
#                  --learning_rate instead of d_model ** -0.5).
#   constant:      warmup, then constant (transformers' "constant_with_warmup").
SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "inverse_sqrt": "inverse_sqrt",
    "constant": "constant_with_warmup",
}


def _is_norm(module: nn.Module) -> bool:
    # Matched by class name so the zoo's RMSNorm, torch's LayerNorm/GroupNorm and any model's *Norm are all caught.
    return isinstance(module, (nn.LayerNorm, nn.GroupNorm)) or "norm" in type(module).__name__.lower()


def no_decay_parameter_names(model: nn.Module) -> set[str]:
    """Names of the parameters that get no weight decay: every bias and every parameter of a normalisation layer.

    Names are those of `model.named_parameters()` (tied parameters appear once, under their first name).
    """
    names = set()
    for module_name, module in model.named_modules():
        norm = _is_norm(module)
        for parameter_name, _ in module.named_parameters(recurse=False):
            if norm or parameter_name == "bias" or parameter_name.endswith("_bias"):
                names.add(f"{module_name}.{parameter_name}" if module_name else parameter_name)
    return names


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups over the *trainable* parameters: with `weight_decay`, and without it (biases and
    norms). Frozen parameters (a LoRA base model, a frozen backbone) are left out of the optimiser altogether.
    """
    excluded = no_decay_parameter_names(model)
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if name in excluded else decay).append(parameter)
    if not decay and not no_decay:
        raise ValueError("The model has no trainable parameters: nothing for the optimiser to update.")
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def build_optimizer(
    model: nn.Module,
    *,
    learning_rate: float,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW over `parameter_groups(model, weight_decay)`, with PyTorch's fused kernel where it applies."""
    groups = parameter_groups(model, weight_decay)
    parameters = [p for group in groups for p in group["params"]]
    trainable = sum(p.numel() for p in parameters)
    fused = fused_adamw_applies(parameters)
    logger.info(f"AdamW{' (fused)' if fused else ''} over {trainable:,} trainable parameters (lr {learning_rate}, "
                f"betas {betas}, eps {eps}, weight decay {weight_decay} except biases and norms)")
    return torch.optim.AdamW(groups, lr=learning_rate, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                             fused=fused or None)


# Devices with a fused AdamW kernel in PyTorch.
FUSED_ADAMW_DEVICES = ("cpu", "cuda", "xpu", "mps")


def fused_adamw_applies(parameters: list[torch.Tensor]) -> bool:
    """Whether PyTorch's fused AdamW can update `parameters`: plain floating-point tensors on one device type that has
    the kernel. The same update as the default implementation to float rounding (tests/test_optim.py), in one pass
    per tensor instead of about ten: on CPU, where the default is a loop of separate element-wise operations per
    parameter, a step over a 25.8M-parameter encoder took 9.2 ms against 79.5 ms (the fused_adamw probe, docs/speed.md, 2
    threads). Sharded (DTensor) or sparse parameters keep the default."""
    if not parameters:
        return False
    devices = {p.device.type for p in parameters}
    return (len(devices) == 1 and devices.pop() in FUSED_ADAMW_DEVICES
            and all(type(p.data) is torch.Tensor and not p.is_sparse and p.dtype in (torch.float32, torch.float16,
                                                                                     torch.bfloat16, torch.float64)
                    for p in parameters))


def build_scheduler(
    optimizer: torch.optim.Optimizer, name: str, *, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """A warmup-then-decay schedule over `total_steps` optimiser steps; `name` is one of `SCHEDULES`."""
    if name not in SCHEDULES:
        raise ValueError(f"Unknown learning-rate schedule {name!r}; choose one of {', '.join(SCHEDULES)}.")
    if warmup_steps < 0 or total_steps < 1:
        raise ValueError(f"warmup_steps must be >= 0 and total_steps >= 1, got {warmup_steps} and {total_steps}.")
    if name == "inverse_sqrt" and warmup_steps == 0:
        raise ValueError("The inverse_sqrt schedule decays as sqrt(warmup / step): it needs warmup_steps > 0.")
    return get_scheduler(
        SCHEDULES[name], optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps
    )


def resolve_warmup_steps(total_steps: int, warmup_steps: int | None, warmup_ratio: float | None) -> int:
    """Warmup length in steps: `warmup_steps` when given, else `warmup_ratio` of the run (rounded up)."""
    if warmup_steps is not None:
        return warmup_steps
    ratio = warmup_ratio or 0.0
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {ratio}.")
    return int(-(-total_steps * ratio // 1))
