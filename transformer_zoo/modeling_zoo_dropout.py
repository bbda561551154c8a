"""Dropout whose random mask costs less on CPU; the mathematics is dropout's own.

Dropout keeps each element with probability 1 - p and scales the kept ones by 1 / (1 - p). What it costs on a CPU is
drawing the mask: PyTorch's CPU kernel draws one double-precision uniform per element from a single Mersenne-Twister
stream (two 32-bit draws, serially, on one thread). For a 16 x 64 x 384 activation that took 2.0 ms here, ten times
the multiply it gates, and a LoRA fine-tuning step of MiniLM (hidden and adapter dropout, 25 masks) spent about a
fifth of its time in it (profiled with py-spy; docs/speed.md).

The "pcg64" sampler draws the same Bernoulli(1 - p) mask from numpy's PCG64 generator (O'Neill 2014), 32 bits per
element, seeded for every call with 62 bits drawn from torch's default generator: `torch.manual_seed`, saved RNG
states (resumed runs) and activation checkpointing's recomputation (which restores torch's RNG state) reproduce it.
It took 0.4 ms for the same mask. An element is kept when its 32-bit draw is at least round(p * 2^32): the drop
probability is p to within 2^-33 (PyTorch's float-precision `rand` resolves 2^-24). Only the random stream differs
from PyTorch's, so the same seed gives other masks than `nn.Dropout`; set `dropout_sampler="torch"` in the config
for PyTorch's own masks (e.g. to replay a run made before this sampler existed).

Under torch.compile the mask is the custom operator `transformer_zoo::pcg64_keep_mask(seed, shape, p)`, which
inductor calls as it is, with the seed drawn inside the graph. Left to itself inductor draws dropout masks in its
generated C++ kernels, one Philox draw per element: a compiled dropout forward and backward took 19.9 ms on GPT-2-
shaped attention probabilities (8 x 4 x 256 x 256) against 6.9 ms through the operator (the
dropout_sampler probe, docs/speed.md). The seed is then drawn by inductor's own random number generator (itself seeded
from torch's), so a compiled step draws other masks than the eager step for the same `torch.manual_seed`, and
reproduces its own; under `aot_eager` or `torch._inductor.config.fallback_random` the graph draws the seeds from
torch's generator, and its masks are exactly the eager ones.

Written here because neither PyTorch nor transformers has a faster CPU mask: PyTorch's only parallel generator is
CUDA's Philox. Elsewhere (CUDA, MPS), for tensor subclasses (DTensor) and for small tensors (where the per-call
seeding costs more than it saves) `ZooDropout` is exactly `nn.Dropout`.
"""

import numpy as np
import torch
from torch import nn

from .configuration_zoo_common import DROPOUT_SAMPLERS


# Below this many elements the seeding of a generator per call (about 10 microseconds) costs more than the mask.
PCG64_MIN_ELEMENTS = 8192
_DRAWS = 2**32


def pcg64_applies(hidden_states: torch.Tensor, p: float, mask_elements: int | None = None) -> bool:
    """Whether the pcg64 sampler draws the mask of this call (`mask_elements` of them, default one per element of
    `hidden_states`); otherwise PyTorch's dropout does."""
    return (
        0.0 < p < 1.0
        and hidden_states.device.type == "cpu"
        and type(hidden_states) is torch.Tensor
        and hidden_states.is_floating_point()
        and (hidden_states.numel() if mask_elements is None else mask_elements) >= PCG64_MIN_ELEMENTS
        and not torch.jit.is_scripting()
        and not torch.jit.is_tracing()
    )


def seeded_keep_mask(seed: int, shape: torch.Size, p: float) -> torch.Tensor:
    """The boolean mask of `shape` PCG64 draws from `seed`: each element True with probability 1 - p (to within
    2^-33)."""
    count = shape.numel()
    draws = np.random.PCG64(seed).random_raw((count + 1) // 2).view(np.uint32)[:count]
    threshold = np.uint32(min(round(p * _DRAWS), _DRAWS - 1))
    return torch.from_numpy(draws >= threshold).view(shape)


def pcg64_keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """A boolean mask of `shape`, each element True with probability 1 - p (to within 2^-33), seeded from torch's
    default generator."""
    return seeded_keep_mask(int(torch.randint(0, 2**62, (1,)).item()), shape, p)


def _compiled_keep_mask_op():
    """The custom operator `transformer_zoo::pcg64_keep_mask(seed, shape, p)`: seeded_keep_mask(seed.item(), shape,
    p), opaque to torch.compile. Registered once per process at import (registering while dynamo traces is not
    allowed); a second import of this file, as a checkpoint's remote code, reuses the operator."""
    namespace = torch.ops.transformer_zoo
    if hasattr(namespace, "pcg64_keep_mask"):
        return namespace.pcg64_keep_mask

    @torch.library.custom_op("transformer_zoo::pcg64_keep_mask", mutates_args=())
    def keep_mask(seed: torch.Tensor, shape: list[int], p: float) -> torch.Tensor:
        return seeded_keep_mask(int(seed.item()), torch.Size(shape), p)

    @keep_mask.register_fake
    def _(seed, shape, p):
        return torch.empty(shape, dtype=torch.bool, device=seed.device)

    return namespace.pcg64_keep_mask


_KEEP_MASK_OP = _compiled_keep_mask_op()


def traced_keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """pcg64_keep_mask inside a torch.compile graph: the seed is drawn by a random operator of the graph (as eagerly,
    one int64 from torch.randint) and the mask by the custom operator; reading the seed with `.item()` here would
    break the graph."""
    seed = torch.randint(0, 2**62, (1,))
    return _KEEP_MASK_OP(seed, list(shape), p)


def zoo_dropout(hidden_states: torch.Tensor, p: float, training: bool, sampler: str = "pcg64") -> torch.Tensor:
    """`nn.functional.dropout(hidden_states, p, training)`, with the mask drawn by `sampler` where it applies."""
    if not training or p == 0.0:
        return hidden_states
    if sampler != "pcg64" or not pcg64_applies(hidden_states, p):
        return nn.functional.dropout(hidden_states, p=p, training=True)
    keep = (traced_keep_mask if torch.compiler.is_compiling() else pcg64_keep_mask)(hidden_states.shape, p)
    # x * keep * scale in one kernel, differentiable (its gradient is grad * keep * scale), saving a boolean mask
    # for the backward where PyTorch's CPU dropout saves a mask of the activation's own dtype.
    return torch.ops.aten.native_dropout_backward(hidden_states, keep, 1.0 / (1.0 - p))


class ZooDropout(nn.Dropout):
    """`nn.Dropout` (a subclass, so tools that look for dropout modules still find it) with the config's sampler."""

    def __init__(self, p: float = 0.5, sampler: str = "pcg64"):
        super().__init__(p)
        if sampler not in DROPOUT_SAMPLERS:
            raise ValueError(f"dropout_sampler={sampler!r}; choose one of {', '.join(DROPOUT_SAMPLERS)}.")
        self.sampler = sampler

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return zoo_dropout(hidden_states, self.p, self.training, self.sampler)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", sampler={self.sampler}" if self.sampler != "torch" else "")


def set_dropout_sampler(model: nn.Module, sampler: str) -> int:
    """Make every dropout inside `model` draw with `sampler`: the zoo's own `ZooDropout`s and attention (through
    `model.config`), and every plain `nn.Dropout` (e.g. the adapter dropout PEFT's LoRA adds), which becomes a
    `ZooDropout` of the same p and mode. Returns how many plain ones were replaced."""
    if sampler not in DROPOUT_SAMPLERS:
        raise ValueError(f"dropout_sampler={sampler!r}; choose one of {', '.join(DROPOUT_SAMPLERS)}.")
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "dropout_sampler"):
        config.dropout_sampler = sampler
    replaced = 0
    for module in model.modules():
        if isinstance(module, ZooDropout):
            module.sampler = sampler
        for name, child in module.named_children():
            if type(child) is nn.Dropout and not child.inplace:
                setattr(module, name, ZooDropout(child.p, sampler).train(child.training))
                replaced += 1
    return replaced
