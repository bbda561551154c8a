"""Generation for the models with a language-model head (the decoder and the encoder-decoder): transformers'
`GenerationMixin`, plus a faster layout of the output projection while decoding on CPU.

Decoding multiplies a handful of rows (one per sequence) by the (vocabulary x hidden) output projection at every
token. On CPU that product is memory-bound, and PyTorch's kernel for a row-major weight, the layout `nn.Linear`
stores, reads it far below the machine's bandwidth: at 32,000 x 256, float32, one row took 4.6 ms against 1.4 ms for
the same product with the weight stored column-major (same values, same shape, transposed strides); 7.8 against
2.5 ms at 50,257 x 256 and 13.6 against 7.7 ms at GPT-2 small's 50,257 x 768. From 4 to 128 rows the copy was
1.05-1.5x faster at width 256 and 0.96-1.09x at 768 (this project's 2-core AMD EPYC, PyTorch with MKL;
`python benchmarks/decoding_head_layout.py`, benchmarks/results/decoding_head_layout_cpu.json). In the compare_hf
generation benchmark that product was over half of every generated token's time. transformers' models run it
row-major.

So `generate` gives the model a column-major copy of the output projection for the duration of the call: one extra
copy of that weight in memory while generating (vocabulary x hidden x 4 bytes), none afterwards. Making the copy
costs time too, mostly faulting in the new buffer: 7.5 ms at 32,000 x 256, 90 ms at 50,257 x 768, between two and
seven row-major products. So a call starts row-major and makes the copy once its row-major products have taken as
long as the copy is expected to take (the rule for renting skis until their price is spent): a short generation
(scoring, one or a few tokens) pays nothing or little, and no call pays more than about twice what the better choice
in hindsight would have cost. The expected time is the last copy of that shape in this process, or before any,
bytes / ASSUMED_COPY_BYTES_PER_SECOND. The first product through the copy is timed: if it is slower than the fastest
row-major one (a processor or BLAS where the layouts rank otherwise), the copy is dropped and the shape is not copied
again in this process. The product is the same, so the logits agree to float rounding and greedy tokens are the
same; `config.decoding_head_copy=False` turns it off.

Only where it was measured to pay: float32 weights on CPU, at most DECODING_COPY_MAX_ROWS rows, no gradient, a
plain hook-free `nn.Linear` head (a PEFT-wrapped or hooked head is called as a module), not under torch.compile
(inductor picks its own layout). In bfloat16 on the same CPU the copy was slower for one row (0.82x) and 0.97-1.34x
from 2 rows on, so bfloat16 keeps the row-major head.
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
from torch import nn
from transformers.generation import GenerationMixin

from .modeling_zoo_layers import plain_linears


# Rows (sequences x positions) in one projection up to which the column-major copy is used. At 32,000 x 256 it was
# faster at every row count from 1 to 256 (3.2x at 1 row, 1.25x at 128); at 50,257 x 768, 1.8x at 1 row, 0.96-1.09x
# from 4 to 128 and 0.92x at 256 (benchmarks/results/decoding_head_layout_cpu.json).
DECODING_COPY_MAX_ROWS = 128
# Bytes of weight per block of the transpose: a block and its transpose fit in one core's 2 MiB L2 cache. Blocked, the
# copy took 7.5 ms at 32,000 x 256 and 90 ms at 50,257 x 768, against 13 and 156 ms for `weight.t().contiguous()`.
TRANSPOSE_BLOCK_BYTES = 1 << 20


def column_major_copy(weight: torch.Tensor) -> torch.Tensor:
    """The same matrix with transposed strides: shape (out, in), each column contiguous."""
    rows, columns = weight.shape
    transposed = torch.empty((columns, rows), dtype=weight.dtype, device=weight.device)
    block = max(1, TRANSPOSE_BLOCK_BYTES // (columns * weight.element_size()))
    for start in range(0, rows, block):
        transposed[:, start:start + block].copy_(weight[start:start + block].t())
    return transposed.t()


# Seconds the last copy of each (shape, dtype) took in this process: what the next call expects a copy to cost.
_COPY_SECONDS: dict[tuple, float] = {}
# Before any copy of a shape was timed: its bytes at this rate. Measured here (fresh buffers): 4.4 GB/s at
# 32,000 x 256, 1.7 GB/s at 50,257 x 768.
ASSUMED_COPY_BYTES_PER_SECOND = 2e9


def expected_copy_seconds(weight: torch.Tensor) -> float:
    measured = _COPY_SECONDS.get((tuple(weight.shape), weight.dtype))
    return measured if measured is not None else weight.numel() * weight.element_size() / ASSUMED_COPY_BYTES_PER_SECOND


class DecodingHeadCopy:
    """The output projection for one `generate` call: row-major until the time its products took would have paid
    for a copy, then through the column-major copy, if its first product beats the fastest row-major one. The
    layouts were measured on one CPU; where the copy's product is slower (another BLAS or processor), it is dropped
    and that shape is not copied again in this process (its expected copy time becomes infinite)."""

    def __init__(self):
        self.row_major_seconds = 0.0
        self.fastest_row_major = math.inf
        self.checked = False
        self.source: torch.Tensor | None = None
        self.weight: torch.Tensor | None = None

    def project(self, head: nn.Linear, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = head.weight
        key = (tuple(weight.shape), weight.dtype)
        if self.source is not weight:
            if self.row_major_seconds < expected_copy_seconds(weight):
                start = perf_counter()
                logits = head(hidden_states)
                elapsed = perf_counter() - start
                self.row_major_seconds += elapsed
                self.fastest_row_major = min(self.fastest_row_major, elapsed)
                return logits
            start = perf_counter()
            self.source, self.weight, self.checked = weight, column_major_copy(weight.detach()), False
            _COPY_SECONDS[key] = perf_counter() - start
        if self.checked:
            return nn.functional.linear(hidden_states, self.weight, head.bias)
        start = perf_counter()
        logits = nn.functional.linear(hidden_states, self.weight, head.bias)
        self.checked = True
        if perf_counter() - start > self.fastest_row_major:
            _COPY_SECONDS[key] = math.inf
            self.source = self.weight = None
        return logits


class ZooGenerationMixin(GenerationMixin):
    """transformers' GenerationMixin; `generate` decodes with the column-major output projection (module docstring).
    The model's forward computes its logits with `vocabulary_logits`."""

    def generate(self, *args, **kwargs):
        if not self.config.decoding_head_copy or "_decoding_head_copy" in self.__dict__:
            # Off, or this model's generate called inside its own generate (a custom decoding loop or logits
            # processor): the outer call owns the copy.
            return super().generate(*args, **kwargs)
        self.__dict__["_decoding_head_copy"] = DecodingHeadCopy()
        try:
            return super().generate(*args, **kwargs)
        finally:
            del self.__dict__["_decoding_head_copy"]

    def vocabulary_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """`self.lm_head(hidden_states)`, through the column-major copy while `generate` decodes on CPU."""
        head = self.lm_head
        copy = self.__dict__.get("_decoding_head_copy")
        if (copy is None or torch.compiler.is_compiling() or hidden_states.shape[:-1].numel() > DECODING_COPY_MAX_ROWS
                or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32
                or (torch.is_grad_enabled() and (head.weight.requires_grad or hidden_states.requires_grad))
                or not plain_linears((head,))):
            return head(hidden_states)
        return copy.project(head, hidden_states)
