"""The language-model heads' vocabulary projection on CPU, written into rows that start on a cache line.

A (tokens x vocabulary) float32 product whose vocabulary is not a multiple of 16 (GPT-2's 50,257, BART's 50,265,
BERT's 30,522, Marian's 58,101) stores rows that start in the middle of a cache line, and MKL's kernel ran that
product slower than the same product written into rows padded to a whole number of cache lines: 1,024 x 256 x 50,257
took 339 against 247 ms, 2,048 rows 606 against 505 ms on this project's 2-core AMD EPYC. A head's training step
(product, cross-entropy, backward; 2,048 tokens, width 256) took 1.09-1.20x less time eagerly and 1.10-1.21x
compiled, over vocabularies of 30,522, 50,257, 50,265 and 58,101; at 32,000, whose rows are aligned already and
where both arms run the same code, 1.02 and 1.05, the noise of that run (`python benchmarks/row_aligned_logits.py`,
benchmarks/results/row_aligned_logits_cpu.json and .png). PyTorch allocates the output with exactly vocabulary
columns, and inductor pads strides only on GPUs (`torch._inductor.config.disable_padding_cpu`), so the heads lay the
rows out themselves.

Eagerly, `RowAlignedLinear` writes the product into a (rows, padded width) buffer, fills the padding columns with
-inf and returns the whole buffer; the model returns its first `vocabulary` columns as the logits (a view: the same
shape and values, a row stride of the padded width), and the loss reads the padded rows, where the -inf columns have
probability exactly 0, so the log-softmax, the loss and its gradient are those over the vocabulary, and the
cross-entropy's own buffers are aligned too. Under torch.compile, where a custom autograd function writing into a
view breaks the graph, the product is taken with the weight padded by zero rows (a copy of the weight per step) and
the loss reads the logits view; that copy only pays for many rows, so a graph pads only while training on at least
COMPILED_MIN_ROWS rows.

Only where it was measured: float32 on CPU outside autocast (under `torch.autocast` the plain call is kept, so the
product runs in the autocast dtype as the user asked; `mm(out=...)` would ignore it), a plain hook-free `nn.Linear`
(a PEFT-wrapped or hooked head is called as a module), products of at least MIN_MULTIPLY_ADDS (below that the two
layouts took the same time, or the padding's overhead was not repaid). `config.row_aligned_logits=False` turns it
off.

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .modeling_zoo_layers import plain_linears


# Row starts are aligned to this many bytes: one cache line (64 bytes on x86 and most ARM cores).
ROW_ALIGNMENT_BYTES = 64
# Multiply-adds (rows x vocabulary x hidden) from which the padded layout is used eagerly: at 50,257 x 256 it was
# faster from 64 rows (about 8e8 multiply-adds; 1.07x, 1.32x at 256 rows) and 0.96-0.99x at 1 to 16 rows; in smaller
# products the autograd function's own overhead is not repaid (a 2,048 x 1,001 x 32 head step ran 0.75x in a
# two-round trial of the benchmark, not committed).
MIN_MULTIPLY_ADDS = 8 * 10**8
# Under torch.compile the padded product copies the weight once per call (and slices its gradient), which a product
# of few rows does not repay: a compiled training step at 50,257 x 256 took 0.96x at 256 rows, 1.08x at 512, 1.05x at
# 1,024 and 1.16x at 2,048 (benchmarks/results/row_aligned_logits_cpu.json).
COMPILED_MIN_ROWS = 512


class VocabularyLogits(NamedTuple):
    """What a language-model head projected: `logits`, what the model returns, (..., vocabulary); `loss_logits`, the
    same values for the loss to read: `logits` itself, or rows padded to an aligned width with -inf columns."""

    logits: torch.Tensor
    loss_logits: torch.Tensor


def aligned_width(vocabulary: int, element_size: int) -> int:
    """The smallest row length >= vocabulary whose rows start on ROW_ALIGNMENT_BYTES boundaries."""
    per_line = max(1, ROW_ALIGNMENT_BYTES // element_size)
    return -(-vocabulary // per_line) * per_line


class RowAlignedLinear(torch.autograd.Function):
    """hidden @ weight.T + bias into rows of `width` >= vocabulary columns, the extra columns -inf: the logits over the
    vocabulary are its first vocabulary columns, and a softmax over the whole row is the softmax over them. The
    backward reads the gradient's first vocabulary columns (the padding has no parameters)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, width: int):
        rows = hidden.reshape(-1, hidden.shape[-1])
        vocabulary = weight.shape[0]
        padded = torch.empty((rows.shape[0], width), dtype=hidden.dtype, device=hidden.device)
        logits = padded[:, :vocabulary]
        # BLAS writes into the view directly: its leading dimension is the padded width.
        if bias is None:
            torch.mm(rows, weight.t(), out=logits)
        else:
            torch.addmm(bias, rows, weight.t(), out=logits)
        padded[:, vocabulary:] = float("-inf")
        ctx.save_for_backward(rows, weight)
        ctx.hidden_shape, ctx.has_bias = hidden.shape, bias is not None
        return padded.view(*hidden.shape[:-1], width)

    @staticmethod
    def backward(ctx, grad_padded):
        rows, weight = ctx.saved_tensors
        grad = grad_padded.reshape(-1, grad_padded.shape[-1])[:, : weight.shape[0]]
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad @ weight).view(ctx.hidden_shape)
        if ctx.needs_input_grad[1]:
            grad_weight = grad.t() @ rows
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_hidden, grad_weight, grad_bias, None


def row_alignment_applies(head: nn.Module, hidden: torch.Tensor, enabled: bool = True) -> bool:
    """Whether `project_vocabulary` lays the logits out in padded rows (module docstring)."""
    if not enabled or not plain_linears((head,)):
        return False
    weight = head.weight
    if (weight.device.type != "cpu" or weight.dtype != torch.float32 or hidden.dtype != torch.float32
            or torch.is_autocast_enabled("cpu") or weight.shape[0] * weight.element_size() % ROW_ALIGNMENT_BYTES == 0):
        return False
    rows = hidden.shape[:-1].numel()
    if torch.compiler.is_compiling():
        return torch.is_grad_enabled() and weight.requires_grad and rows >= COMPILED_MIN_ROWS
    return rows * weight.numel() >= MIN_MULTIPLY_ADDS


def project_vocabulary(head: nn.Linear, hidden: torch.Tensor, extra_bias: torch.Tensor | None = None,
                       enabled: bool = True) -> VocabularyLogits:
    """`head(hidden) + extra_bias` (a (1, vocabulary) bias such as BART's final_logits_bias, or None), with the
    logits in cache-line-aligned rows where that was measured to pay (module docstring)."""
    if not row_alignment_applies(head, hidden, enabled):
        logits = head(hidden)
        if extra_bias is not None:
            # In place: the matrix product's backward does not need its output, and a second (tokens x vocabulary)
            # buffer for the sum is work transformers' Marian and BART do.
            logits = logits.add_(extra_bias.to(logits.dtype))
        return VocabularyLogits(logits, logits)
    vocabulary = head.weight.shape[0]
    bias = head.bias
    if extra_bias is not None:
        extra = extra_bias.to(hidden.dtype).reshape(vocabulary)
        bias = extra if bias is None else bias + extra
    width = aligned_width(vocabulary, head.weight.element_size())
    if torch.compiler.is_compiling():
        pad = width - vocabulary
        padded_bias = None if bias is None else nn.functional.pad(bias, (0, pad))
        logits = nn.functional.linear(hidden, nn.functional.pad(head.weight, (0, 0, 0, pad)), padded_bias)
        logits = logits[..., :vocabulary]
        return VocabularyLogits(logits, logits)
    padded = RowAlignedLinear.apply(hidden, head.weight, bias, width)
    return VocabularyLogits(padded[..., :vocabulary], padded)
