"""The language-model heads' vocabulary projection on CPU, written into rows that start on a cache line.

A (tokens x vocabulary) float32 product whose vocabulary is not a multiple of 16 (GPT-2's 50,257, BART's 50,265,
BERT's 30,522, Marian's 58,101) stores rows that start in the middle of a cache line, and MKL's kernel ran that
product slower than the same product written into rows padded to a whole number of cache lines: 1,024 x 256 x 50,257
took 339 against 247 ms, 2,048 rows 606 against 505 ms on this project's 2-core AMD EPYC. A head's training step
(product, cross-entropy, backward; 2,048 tokens, width 256) took 1.09-1.20x less time eagerly and 1.10-1.21x
compiled, over vocabularies of 30,522, 50,257, 50,265 and 58,101; at 32,000, whose rows are aligned already and
where both arms run the same code, 1.02 and 1.05, the noise of that run (the row_aligned_logits probe, docs/speed.md,
benchmarks/results/row_aligned_logits_cpu.json and .png). PyTorch allocates the output with exactly vocabulary
columns, and inductor pads strides only on GPUs (`torch._inductor.config.disable_padding_cpu`), so the heads lay the
rows out themselves.

The product is the custom operator `transformer_zoo::vocabulary_logits` (opaque to torch.compile, so eager and
compiled steps run the same code): it writes the product into a (rows, padded width) buffer, fills the padding
columns with -inf and returns the whole buffer; the model returns its first `vocabulary` columns as the logits (a
view: the same shape and values, a row stride of the padded width), and the loss reads the padded rows, where the
-inf columns have probability exactly 0, so the log-softmax, the loss and its gradient are those over the
vocabulary, and the cross-entropy's own buffers are aligned too. While training, the buffer is also the memory kept
from the last step where nothing holds it any more (modeling_zoo_memory.py): the product then writes into pages
that are already mapped, at any vocabulary, aligned already or not.

Only where it was measured: float32 on CPU outside autocast (under `torch.autocast` the plain call is kept, so the
product runs in the autocast dtype as the user asked; `mm(out=...)` would ignore it), a plain hook-free `nn.Linear`
(a PEFT-wrapped or hooked head is called as a module), products of at least MIN_MULTIPLY_ADDS (below that the two
layouts took the same time, or the padding's overhead was not repaid). `config.row_aligned_logits=False` turns the
padding off, `transformer_zoo.set_memory_reuse(False)` the kept memory.

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .modeling_zoo_layers import plain_linears
from .modeling_zoo_memory import LOGITS, reuse_applies, take


# Row starts are aligned to this many bytes: one cache line (64 bytes on x86 and most ARM cores).
ROW_ALIGNMENT_BYTES = 64
# Multiply-adds (rows x vocabulary x hidden) from which the product runs through vocabulary_logits: at 50,257 x 256
# the padded layout was faster from 64 rows (about 8e8 multiply-adds; 1.07x, 1.32x at 256 rows) and 0.96-0.99x at 1
# to 16 rows; in smaller products the operator's own overhead is not repaid (a 2,048 x 1,001 x 32 head step ran 0.75x
# in a two-round trial of the benchmark, not committed). Before the operator, a compiled graph padded the weight
# instead (a copy per step, repaid from 512 training rows); the operator has no such copy.
MIN_MULTIPLY_ADDS = 8 * 10**8


class VocabularyLogits(NamedTuple):
    """What a language-model head projected: `logits`, what the model returns, (..., vocabulary); `loss_logits`, the
    same values for the loss to read: `logits` itself, or rows padded to an aligned width with -inf columns."""

    logits: torch.Tensor
    loss_logits: torch.Tensor


def aligned_width(vocabulary: int, element_size: int) -> int:
    """The smallest row length >= vocabulary whose rows start on ROW_ALIGNMENT_BYTES boundaries."""
    per_line = max(1, ROW_ALIGNMENT_BYTES // element_size)
    return -(-vocabulary // per_line) * per_line


def padded_product(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, width: int,
                   reuse: bool) -> torch.Tensor:
    """rows @ weight.T + bias in (rows, width >= vocabulary) storage, the extra columns -inf; the memory kept from the
    last training step where `reuse` (modeling_zoo_memory.py)."""
    vocabulary = weight.shape[0]
    padded = take(LOGITS, (rows.shape[0], width), rows.dtype, rows.device, reuse)
    logits = padded[:, :vocabulary]
    # BLAS writes into the view directly: its leading dimension is the padded width.
    if bias is None:
        torch.mm(rows, weight.t(), out=logits)
    else:
        torch.addmm(bias, rows, weight.t(), out=logits)
    if width > vocabulary:
        padded[:, vocabulary:] = float("-inf")
    return padded


def _vocabulary_logits_op():
    """The custom operator `transformer_zoo::vocabulary_logits(rows, weight, bias, width, reuse)`: padded_product,
    with the linear layer's gradients (the padding has no parameters). An operator rather than an autograd function
    so that torch.compile calls it as it is: a function writing into a view breaks the graph, and inductor would
    allocate the buffer itself. Registered once per process (a second import of this file, as a checkpoint's remote
    code, reuses it)."""
    namespace = torch.ops.transformer_zoo
    if hasattr(namespace, "vocabulary_logits"):
        return namespace.vocabulary_logits

    @torch.library.custom_op("transformer_zoo::vocabulary_logits", mutates_args=())
    def vocabulary_logits(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, width: int,
                          reuse: bool) -> torch.Tensor:
        return padded_product(rows, weight, bias, width, reuse)

    @vocabulary_logits.register_fake
    def _(rows, weight, bias, width, reuse):
        return rows.new_empty((rows.shape[0], width))

    def save_inputs(ctx, inputs, output):
        rows, weight, bias = inputs[:3]
        ctx.save_for_backward(rows, weight)
        ctx.has_bias = bias is not None

    def backward(ctx, grad_padded):
        rows, weight = ctx.saved_tensors
        grad = grad_padded[:, : weight.shape[0]]
        grad_rows = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ rows if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_rows, grad_weight, grad_bias, None, None

    vocabulary_logits.register_autograd(backward, setup_context=save_inputs)
    return namespace.vocabulary_logits


_VOCABULARY_LOGITS_OP = _vocabulary_logits_op()


def vocabulary_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      width: int) -> torch.Tensor:
    """hidden @ weight.T + bias as (..., width) rows, the columns past the vocabulary -inf (the operator above),
    in the memory kept between training steps where that applies."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    padded = _VOCABULARY_LOGITS_OP(rows, weight, bias, width, keeps_memory(hidden, weight, width))
    return padded.view(*hidden.shape[:-1], width)


def keeps_memory(hidden: torch.Tensor, weight: torch.Tensor, width: int) -> bool:
    """Whether the (rows, width) logits of a product that gradients will flow through go into the memory kept between
    training steps (modeling_zoo_memory.reuse_applies)."""
    rows = hidden.shape[:-1].numel()
    return (weight.requires_grad or hidden.requires_grad) and reuse_applies((rows, width), hidden.dtype, hidden.device)


def own_product_applies(head: nn.Module, hidden: torch.Tensor, enabled: bool = True) -> bool:
    """Whether `project_vocabulary` takes the product itself (vocabulary_logits): for the padded rows (`enabled`
    and a vocabulary whose rows are not aligned) or for the memory kept between training steps (module docstring)."""
    if not plain_linears((head,)):
        return False
    weight = head.weight
    if (weight.device.type != "cpu" or weight.dtype != torch.float32 or hidden.dtype != torch.float32
            or torch.is_autocast_enabled("cpu")):
        return False
    rows = hidden.shape[:-1].numel()
    if rows * weight.numel() < MIN_MULTIPLY_ADDS:
        return False
    misaligned = weight.shape[0] * weight.element_size() % ROW_ALIGNMENT_BYTES != 0
    return (enabled and misaligned) or keeps_memory(hidden, weight, weight.shape[0])


def project_vocabulary(head: nn.Linear, hidden: torch.Tensor, extra_bias: torch.Tensor | None = None,
                       enabled: bool = True) -> VocabularyLogits:
    """`head(hidden) + extra_bias` (a (1, vocabulary) bias such as BART's final_logits_bias, or None), with the
    logits in cache-line-aligned rows (`enabled`) and in the memory kept between training steps where that was
    measured to pay (module docstring)."""
    if not own_product_applies(head, hidden, enabled):
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
    width = aligned_width(vocabulary, head.weight.element_size()) if enabled else vocabulary
    padded = vocabulary_logits(hidden, head.weight, bias, width)
    return VocabularyLogits(padded[..., :vocabulary], padded)
