"""Generation for the models with a language-model head (the decoder and the encoder-decoder): transformers'
`GenerationMixin`, plus a faster layout of the output projection while decoding on CPU.

Decoding multiplies a handful of rows (one per sequence) by the (vocabulary x hidden) output projection at every
token. On CPU that product is memory-bound, and PyTorch's kernel for a row-major weight, the layout `nn.Linear`
stores, reads it far below the machine's bandwidth: at 32,000 x 256, float32, one row took 4.6 ms against 1.4 ms for
the same product with the weight stored column-major (same values, same shape, transposed strides); 7.8 against
2.5 ms at 50,257 x 256 and 13.6 against 7.7 ms at GPT-2 small's 50,257 x 768. From 4 to 128 rows the copy was
1.05-1.5x faster at width 256 and 0.96-1.09x at 768 (this project's 2-core AMD EPYC, PyTorch with MKL;
the decoding_head_layout probe, docs/speed.md, benchmarks/results/decoding_head_layout_cpu.json). In the compare_hf
generation benchmark that product was over half of every generated token's time. transformers' models run it
row-major.

So `generate` gives the model a column-major copy of the output projection for the duration of the call: one extra
copy of that weight in memory while generating (vocabulary x hidden x 4 bytes), none afterwards. Making the copy
costs time too, mostly faulting in the new buffer: 7.5 ms at 32,000 x 256, 90 ms at 50,257 x 768, between two and
seven row-major products. So a call starts row-major and makes the copy once its row-major products have taken as
long as the copy is expected to take (the rule for renting skis until their price is spent): a short generation
(scoring, one or a few tokens) pays nothing or little, and no call pays more than about twice what the better choice
in hindsight would have cost. The expected time is the last copy of that shape in this process, or before any,
bytes / ASSUMED_COPY_BYTES_PER_SECOND. The first product through the copy is timed: if it and a second one are slower
than the fastest row-major one (a processor or BLAS where the layouts rank otherwise), the copy is dropped and the
shape is not copied again in this process. The product is the same, so the logits agree to float rounding and greedy
tokens are the same; `config.decoding_head_copy=False` turns it off.

When `generate` compiles its decoding steps (a static cache with a compile config), a compiled step can neither time
itself nor switch layouts midway, so the choice is made once, eagerly, at the prefill: one row-major product of a
decoding step's rows is timed, and the copy is made if the call's remaining tokens (`max_new_tokens` - 1, or an
unbounded number when only `max_length` is set) would spend at least the expected copy time in row-major products;
its first product is timed against the row-major one, as above. The compiled graph takes the copy as an input, so
every call with a new copy reuses the same graph. Inductor keeps a graph input's layout for the matrix product, so
the compiled step runs the faster product too.

Only where it was measured to pay: float32 weights on CPU, at most DECODING_COPY_MAX_ROWS rows, no gradient, a
plain hook-free `nn.Linear` head (a PEFT-wrapped or hooked head is called as a module). In bfloat16 on the same CPU
the copy was slower for one row (0.82x) and 0.97-1.34x from 2 rows on, so bfloat16 keeps the row-major head.
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
from torch import nn
from transformers.generation import GenerationMixin

from .modeling_zoo_checks import check_prompt_mask
from .modeling_zoo_layers import plain_linears
from .modeling_zoo_vocabulary import VocabularyLogits, project_vocabulary


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
        # Set when generate compiles its decoding steps: how many of them at most (None: no bound was given).
        self.compiled_steps: int | None = None
        self.compiled_decoding = False
        # The copy the compiled steps read, chosen once at the prefill (prepare_compiled_decoding); None: row-major.
        self.compiled_weight: torch.Tensor | None = None
        self.prepared = False

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
        if perf_counter() - start > self.fastest_row_major:
            # Slower once: a second product decides, since one noisy timing would drop the copy for the process.
            start = perf_counter()
            nn.functional.linear(hidden_states, self.weight, head.bias)
            if perf_counter() - start > self.fastest_row_major:
                _COPY_SECONDS[key] = math.inf
                self.source = self.weight = None
        self.checked = True
        return logits

    def prepare_compiled_decoding(self, head: nn.Linear, rows: int) -> None:
        """Before compiled decoding steps of `rows` rows each: make the copy they will read if those steps' row-major
        products are expected to take at least as long as making it, and keep it if its product is the faster one
        (best of two timings each way, since one check decides the whole call). Probes with a constant input: the
        products' time does not depend on the values, and no random state is drawn."""
        self.prepared = True
        weight = head.weight
        if rows > DECODING_COPY_MAX_ROWS:
            return
        probe = torch.ones(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
        row_major = min(product_seconds(probe, weight, head.bias) for _ in range(2))
        steps = math.inf if self.compiled_steps is None else self.compiled_steps
        if steps * row_major < expected_copy_seconds(weight):
            return
        start = perf_counter()
        copy = column_major_copy(weight.detach())
        key = (tuple(weight.shape), weight.dtype)
        _COPY_SECONDS[key] = perf_counter() - start
        if min(product_seconds(probe, copy, head.bias) for _ in range(2)) > row_major:
            _COPY_SECONDS[key] = math.inf
            return
        self.compiled_weight = copy


def product_seconds(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> float:
    """Seconds one `F.linear(rows, weight, bias)` takes."""
    start = perf_counter()
    nn.functional.linear(rows, weight, bias)
    return perf_counter() - start


class ZooGenerationMixin(GenerationMixin):
    """transformers' GenerationMixin; `generate` decodes with the column-major output projection (module docstring).
    The model's forward computes its logits with `vocabulary_projection`."""

    # The copy of the running `generate` call, in the instance's __dict__ for the call; None (this class attribute)
    # otherwise. Read as an attribute, not with `self.__dict__.get`: torch.compile guards an attribute that is None,
    # but not a key missing from a module's __dict__, so a decoding graph compiled without a copy would be reused
    # by later calls that have one.
    _decoding_head_copy: DecodingHeadCopy | None = None

    def generate(self, *args, **kwargs):
        check_prompt_mask(args[0] if args else kwargs.get("inputs"), kwargs)
        if not self.config.decoding_head_copy or "_decoding_head_copy" in self.__dict__:
            # Off, or this model's generate called inside its own generate (a custom decoding loop or logits
            # processor): the outer call owns the copy.
            return super().generate(*args, **kwargs)
        self.__dict__["_decoding_head_copy"] = DecodingHeadCopy()
        try:
            return super().generate(*args, **kwargs)
        finally:
            del self.__dict__["_decoding_head_copy"]

    def _valid_auto_compile_criteria(self, model_kwargs, generation_config) -> bool:
        # transformers asks this once per decoding loop, before the prefill, to choose compiled decoding steps.
        compiled = super()._valid_auto_compile_criteria(model_kwargs, generation_config)
        copy = self._decoding_head_copy
        if compiled and copy is not None:
            copy.compiled_decoding = True
            new_tokens = generation_config.max_new_tokens
            copy.compiled_steps = None if new_tokens is None else max(new_tokens - 1, 0)
        return compiled

    def vocabulary_projection(self, hidden_states: torch.Tensor,
                              extra_bias: torch.Tensor | None = None) -> VocabularyLogits:
        """`self.lm_head(hidden_states) + extra_bias`: through the column-major copy while `generate` decodes on CPU,
        else in cache-line-aligned rows where that pays (modeling_zoo_vocabulary.py)."""
        logits = self._decoding_copy_logits(hidden_states)
        if logits is None:
            return project_vocabulary(self.lm_head, hidden_states, extra_bias,
                                      enabled=self.config.row_aligned_logits)
        if extra_bias is not None:
            logits = logits.add_(extra_bias.to(logits.dtype))
        return VocabularyLogits(logits, logits)

    def _decoding_copy_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """The logits through the column-major copy of the running `generate` call, or None where it does not apply."""
        head = self.lm_head
        copy = self._decoding_head_copy
        if copy is None or (torch.is_grad_enabled() and (head.weight.requires_grad or hidden_states.requires_grad)):
            return None
        rows = hidden_states.shape[:-1].numel()
        if not torch.compiler.is_compiling():
            if head.weight.device.type != "cpu" or head.weight.dtype != torch.float32 or not plain_linears((head,)):
                return None
            if not copy.compiled_decoding:
                return None if rows > DECODING_COPY_MAX_ROWS else copy.project(head, hidden_states)
            if not copy.prepared:
                # The prefill, eager: each compiled decoding step will project one position per sequence.
                copy.prepare_compiled_decoding(head, rows=hidden_states.shape[0])
        # Compiled decoding steps and their prefill: the copy chosen at the prefill, where the rest was checked.
        if copy.compiled_weight is None or rows > DECODING_COPY_MAX_ROWS:
            return None
        return nn.functional.linear(hidden_states, copy.compiled_weight, head.bias)
