"""The loss functions of the zoo's heads: transformers' token-level language-model losses computed with less work (an
in-place cross-entropy backward), the opt-in chunked linear + cross-entropy, and the share of an accumulated batch.

This file is copied into saved checkpoints for `trust_remote_code`, so it imports nothing from transformer_zoo by
absolute name.
"""

import torch
from torch import nn

from .modeling_zoo_memory import LOG_PROBS, reuse_applies, take


def share_of_accumulated_batch(loss: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """This micro-batch's share of the mean loss over `num_items_in_batch` label items, given its own mean `loss`.

    Under gradient accumulation transformers' Trainer passes num_items_in_batch (labels != -100 counted over all
    accumulated micro-batches) and, for a model whose forward takes **kwargs, no longer divides the loss by the
    accumulation steps: a head that returns its micro-batch mean would then be off by the item counts. Rescaling
    the mean by (this batch's items / all items) gives sum / all, so the accumulated gradient equals one large batch.
    Without num_items_in_batch the mean is returned unchanged.
    """
    if num_items_in_batch is None:
        return loss
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss * labels.ne(-100).sum().to(loss.device) / num_items_in_batch


class LogitsCrossEntropy(torch.autograd.Function):
    """sum over rows of -log_softmax(logits)[label], rows labelled `ignore_index` counting zero: F.cross_entropy's
    value (reduction="sum"), with a backward that turns the saved log-probabilities into the gradient in place.

    PyTorch's cross-entropy backward allocates two (rows x vocabulary) buffers, the nll_loss gradient (mostly zeros)
    and the log_softmax gradient, and glibc hands buffers that large back to the OS after every step, so each step
    also faults them in again. Here the gradient softmax - one_hot is written over the log-probabilities this function
    owns (nobody else holds them), which for a 50k vocabulary is most of a small model's loss cost. The saved tensor is
    consumed, so the graph can be walked backward once (retain_graph=True then raises, naming this function). With
    `reuse` (the caller's modeling_zoo_memory.reuse_applies), the log-probabilities are written into the memory kept
    from the last training step, whose pages are mapped already.
    """

    @staticmethod
    def forward(ctx, logits, labels, ignore_index: int, reuse: bool = False):
        logits = logits.float()
        log_probs = torch.log_softmax(logits, dim=-1, out=take(LOG_PROBS, logits.shape, logits.dtype, logits.device,
                                                               reuse))
        valid = labels != ignore_index
        targets = labels.masked_fill(~valid, 0)
        picked = log_probs.gather(1, targets[:, None]).squeeze(1)
        ctx.save_for_backward(log_probs, targets, valid)
        ctx.logits_dtype, ctx.consumed = logits.dtype, False
        return -(picked * valid).sum()

    @staticmethod
    def backward(ctx, grad_total):
        if ctx.consumed:
            raise RuntimeError("LogitsCrossEntropy's backward consumes its saved log-probabilities and cannot run "
                               "twice (retain_graph=True); compute the loss again for a second backward.")
        ctx.consumed = True
        log_probs, targets, valid = ctx.saved_tensors
        weights = valid * grad_total  # d loss / d row loss: 0 for ignored rows
        # softmax * w, in place: exp(log p + log w) (w = 0 gives exp(-inf) = 0).
        gradient = log_probs.add_(torch.log(weights)[:, None]).exp_()
        gradient[torch.arange(targets.shape[0], device=targets.device), targets] -= weights
        return gradient.to(ctx.logits_dtype), None, None, None


def dynamic_row_counts_traceable() -> bool:
    """Under torch.compile: whether dynamo captures sizes that depend on the data (a boolean mask's number of true
    entries) as symbols, so that selecting rows by a mask stays in the graph instead of breaking it."""
    return bool(torch._dynamo.config.capture_dynamic_output_shape_ops)


def loss_over_labelled_rows(hidden: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor, head: nn.Linear, *,
                            head_is_plain: bool, shift: bool = False, num_items_in_batch=None,
                            logits_bias: torch.Tensor | None = None, few_labelled: bool = False) -> torch.Tensor:
    """`token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)`, where `logits` is
    `head(hidden) + logits_bias`, with a backward over the labelled rows only.

    Rows labelled -100 (a masked LM's unmasked positions, a prompt or padding) have a zero loss gradient, yet
    backpropagating through the full (rows x vocabulary) logits multiplies those zeros through two vocabulary-sized
    matrix products. Projecting the labelled rows a second time for the loss, while `logits` keeps every row and its
    own gradient path (a caller's loss on the logits still reaches the model), costs a fraction f of one product and
    leaves 2f of them for the backward instead of 2. It applies where that pays: at most half the rows labelled, a
    backward to come, and a plain nn.Linear head that no hook observes (`head_is_plain`, checked by the caller);
    elsewhere the loss reads `logits` directly.

    Under torch.compile the number of labelled rows is a size known only from the data, and the at-most-half check
    would read the data while tracing. So a graph selects rows only for a loss whose labels are `few_labelled` by
    construction (the masked LM's, about 15 %), and only where dynamo captures data-dependent sizes
    (`torch._dynamo.config.capture_dynamic_output_shape_ops`, which the recipes' `--compile` turns on around the
    loss). A causal-LM or encoder-decoder graph keeps every row: its targets are usually dense, and selecting
    nearly all rows would only add a gather."""
    if not (torch.is_grad_enabled() and logits.requires_grad and head_is_plain):
        return token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)
    if not few_labelled and logits.device.type != "cpu":
        # Counting the labelled rows reads a device tensor: a synchronisation at every step on an accelerator, where
        # the masked LM pays one anyway (its selection) but usually dense causal-LM targets would not. Not measured
        # on a GPU here, so there the loss reads the logits, as it always did.
        return token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)
    labels = labels.to(logits.device)
    # Position t's target: labels[t + 1] when shifted (the last position predicts nothing), else labels[t].
    rows, targets = (hidden[:, :-1], labels[:, 1:]) if shift else (hidden, labels)
    labelled = targets != -100
    if not (few_labelled and dynamic_row_counts_traceable() if torch.compiler.is_compiling()
            else 2 * int(labelled.sum()) <= labelled.numel()):
        return token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)
    loss_logits = nn.functional.linear(rows[labelled], head.weight, head.bias)
    if logits_bias is not None:
        loss_logits = loss_logits + logits_bias.to(loss_logits.dtype).reshape(-1)
    return token_cross_entropy(loss_logits, targets[labelled], num_items_in_batch)


def cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="sum") over (rows, classes) logits,
    through LogitsCrossEntropy when gradients are needed (plain F.cross_entropy otherwise, and under torch.compile:
    AOTAutograd rewrites the in-place backward out of place, and inductor fuses PyTorch's own log-softmax and nll)."""
    if not (torch.is_grad_enabled() and logits.requires_grad) or torch.compiler.is_compiling():
        return nn.functional.cross_entropy(logits.float(), labels, ignore_index=ignore_index, reduction="sum")
    return LogitsCrossEntropy.apply(logits, labels, ignore_index,
                                    reuse_applies(logits.shape, torch.float32, logits.device))


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None, *,
                        shift: bool = False) -> torch.Tensor:
    """transformers' token-level LM loss (ForCausalLMLoss with shift=True, ForMaskedLM / seq2seq without): the mean
    over labelled tokens (-100 ignored), or under gradient accumulation the sum over `num_items_in_batch`; computed
    with cross_entropy_sum's in-place backward. shift: labels[t + 1] is position t's target (causal LM), done by
    padding the labels, not by slicing (and so copying) the logits, as transformers does."""
    labels = labels.to(logits.device)
    if shift:
        labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    labels = labels.reshape(-1)
    total = cross_entropy_sum(logits.reshape(-1, logits.shape[-1]), labels)
    return _token_mean(total, labels, num_items_in_batch)


def _token_mean(total: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """A summed token loss over the labelled tokens of this batch (num_items_in_batch=None; as PyTorch's mean, NaN
    for a batch without any, with a zero gradient) or over `num_items_in_batch` (gradient accumulation)."""
    if num_items_in_batch is None:
        count = (labels != -100).sum()
        return torch.where(count > 0, total / count.clamp_min(1), torch.full_like(total, float("nan")))
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """sum over rows of cross_entropy(hidden @ weight.T, labels), computed `chunk_size` rows at a time so the
    (rows x vocabulary) logits never exist at once: the backward recomputes each chunk's logits. A memory lever for
    long sequences and large vocabularies, not a speed one (on CPU it measured 1.1-1.8x slower than the dense path;
    docs/speed.md). Rows whose label is `ignore_index` count zero. PyTorch has no such kernel for CPU; written here.
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size: int, ignore_index: int):
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_size):
            logits = (hidden[start : start + chunk_size] @ weight.t()).float()
            rows = labels[start : start + chunk_size]
            valid = rows != ignore_index
            target = logits.gather(1, rows.clamp_min(0)[:, None]).squeeze(1)
            total += ((torch.logsumexp(logits, dim=-1) - target) * valid).sum()
        ctx.save_for_backward(hidden, weight, labels)
        ctx.chunk_size, ctx.ignore_index = chunk_size, ignore_index
        return total

    @staticmethod
    def backward(ctx, grad_total):
        hidden, weight, labels = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=torch.float32)
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            block = hidden[start : start + ctx.chunk_size]
            rows = labels[start : start + ctx.chunk_size]
            # d(logsumexp - target)/d logits = softmax - one_hot(target), zero for ignored rows.
            grad_logits = torch.softmax((block @ weight.t()).float(), dim=-1)
            grad_logits[torch.arange(rows.shape[0], device=rows.device), rows.clamp_min(0)] -= 1
            grad_logits *= ((rows != ctx.ignore_index) * grad_total)[:, None]
            grad_hidden[start : start + ctx.chunk_size] = (grad_logits @ weight.float()).to(hidden.dtype)
            grad_weight += grad_logits.t() @ block.float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def chunked_causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int,
                           num_items_in_batch=None, *, shift: bool = True) -> torch.Tensor:
    """transformers' causal-LM loss (labels shifted by one, -100 ignored, the mean over label tokens, or the sum over
    `num_items_in_batch` under gradient accumulation) without materialising the logits (ChunkedLinearCrossEntropy).
    shift=False: `labels` are aligned with the positions already (transformers' `shift_labels`)."""
    if shift:
        labels, hidden = labels[:, 1:], hidden[:, :-1]
    targets = labels.reshape(-1).to(hidden.device)
    rows = hidden.reshape(-1, hidden.shape[-1])
    total = ChunkedLinearCrossEntropy.apply(rows, weight, targets, chunk_size, -100)
    return _token_mean(total, targets, num_items_in_batch)
