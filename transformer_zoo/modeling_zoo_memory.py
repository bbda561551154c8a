"""Memory kept between CPU training steps for the two largest buffers of a language-model head: its (tokens x
vocabulary) logits and the cross-entropy's log-probabilities.

PyTorch's CPU allocator hands every request to the C library, and glibc serves a request above its mmap threshold
(at most 32 MiB on 64-bit systems, DEFAULT_MMAP_THRESHOLD_MAX) with fresh pages from the kernel and unmaps them again
at free. So a step that allocates a 262 MB logits buffer (8 x 256 tokens x 32,000) has the kernel zero-fill and map
64,000 pages in again at every step, on top of the product that writes them. Keeping those two buffers and handing
them out again at the next step removes that work. A head's training step (product, cross-entropy, backward; 2,048
tokens, width 256) took 1.19x less time eagerly and 1.14x compiled at a 32,000 vocabulary (128,020 minor page faults
a step against 1), 1.07-1.19x and 1.06-1.14x at 50,257, 50,265 and 58,101; the zoo decoder's whole training step
at compare_hf.py's Llama shape 1.16x and 1.11x, with the same bits (the reused_logits_memory probe, docs/speed.md,
benchmarks/results/reused_logits_memory_cpu.json and .png). The CUDA caching allocator already does this on GPUs;
PyTorch has no caching allocator for CPU tensors, and a process-wide allocator setting (docs/speed.md, "The memory
allocator") is the user's to choose, so the heads keep their own two buffers.

A buffer is handed out again only when nothing else holds its memory: not a view the caller kept (`outputs.logits`
of an earlier step), not autograd (a graph kept with retain_graph=True), not NumPy, not the storage object itself.
Its storage's reference count and the Python references to its storage object, read at the request, say so;
otherwise a fresh buffer is taken and becomes the kept one. Only on CPU, while gradients
are recorded, and for buffers of at least MIN_REUSED_BYTES (smaller ones glibc keeps in its heap anyway).
The kept memory lives until the process ends or `free_reused_memory()`; `set_memory_reuse(False)` turns the reuse
off (and frees it).

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name.
"""

from __future__ import annotations

import math
import sys
import threading

import torch


# glibc's largest mmap threshold on 64-bit systems: every allocation at least this large is a fresh mapping.
MIN_REUSED_BYTES = 32 * 2**20

_REUSE = {"enabled": True}


def set_memory_reuse(enabled: bool) -> None:
    """Turn the reuse of the language-model heads' largest CPU training buffers on (the default) or off; off also
    frees what is kept."""
    _REUSE["enabled"] = bool(enabled)
    if not enabled:
        free_reused_memory()


def _storage_holders(tensor: torch.Tensor) -> tuple[int, int] | None:
    """Who holds `tensor`'s memory: its storage's reference count (tensors and views over it, and the storage's Python
    object while that lives) and the Python references to that storage object (a caller may keep the storage
    alone); None where this PyTorch does not say."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        return None
    storage = tensor.untyped_storage()
    return use_count(storage._cdata), sys.getrefcount(storage)


class ReusableBuffer:
    """One flat buffer, handed out again (its first elements, in the shape asked for) once nothing else holds it."""

    def __init__(self):
        self._flat: torch.Tensor | None = None
        self._holders_when_free: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor of `shape`: the kept memory where it is free and large enough, else a new one,
        which is kept from then on."""
        numel = math.prod(shape)
        with self._lock:
            flat = self._flat
            if (flat is None or flat.dtype != dtype or flat.device != torch.device(device) or flat.numel() < numel
                    or self._holders_when_free is None or _storage_holders(flat) != self._holders_when_free):
                flat = torch.empty(numel, dtype=dtype, device=device)
                self._flat, self._holders_when_free = flat, _storage_holders(flat)
            # The view is made under the lock: from here on it counts as a holder.
            return flat[:numel].view(shape)

    def free(self) -> None:
        with self._lock:
            self._flat = self._holders_when_free = None

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` lies in the kept memory (for tests)."""
        flat = self._flat
        return flat is not None and tensor.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()


LOGITS = ReusableBuffer()
LOG_PROBS = ReusableBuffer()


def free_reused_memory() -> None:
    """Return the kept buffers to the system (they are taken again at the next large training step)."""
    LOGITS.free()
    LOG_PROBS.free()


def reuse_applies(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a buffer of `shape` is taken from the kept memory: reuse on, CPU, gradients recorded, large enough.
    Asked by the caller of an autograd function or custom operator, inside which gradients are never recorded."""
    if not (_REUSE["enabled"] and torch.device(device).type == "cpu" and torch.is_grad_enabled()):
        return False
    return math.prod(shape) * dtype.itemsize >= MIN_REUSED_BYTES


def take(buffer: ReusableBuffer, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
         reuse: bool) -> torch.Tensor:
    """`buffer.take(...)` when `reuse` (the caller's reuse_applies), else a fresh torch.empty."""
    if reuse:
        return buffer.take(shape, dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)
