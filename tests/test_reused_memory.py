"""The memory kept between CPU training steps for the language-model heads' logits and log-probabilities
(modeling_zoo_memory.py): handed out again only when nothing else holds it, and the same logits, losses and gradients
as fresh memory, eagerly and compiled, in every language-model head."""

import copy

import numpy as np
import pytest
import torch

import transformer_zoo.modeling_zoo_memory as memory_module
import transformer_zoo.modeling_zoo_vocabulary as vocabulary_module
from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    free_reused_memory,
    set_memory_reuse,
)
from transformer_zoo.modeling_zoo_memory import LOG_PROBS, LOGITS, ReusableBuffer


@pytest.fixture
def reuse_every_size(monkeypatch):
    """The tiny test buffers are far below the size from which memory is kept (and the products below the size from
    which the head takes its product itself): keep it for every one. Reuse on, nothing kept, before and after."""
    monkeypatch.setattr(memory_module, "MIN_REUSED_BYTES", 0)
    monkeypatch.setattr(vocabulary_module, "MIN_MULTIPLY_ADDS", 0)
    set_memory_reuse(True)
    free_reused_memory()
    yield
    set_memory_reuse(True)
    free_reused_memory()


def address(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


# ------------------------------------------------------------------------------------------ the buffer itself
def test_a_free_buffer_is_handed_out_again():
    buffer = ReusableBuffer()
    first = buffer.take((4, 8), torch.float32, "cpu")
    kept = address(first)
    del first
    second = buffer.take((4, 8), torch.float32, "cpu")
    assert address(second) == kept and second.shape == (4, 8)
    del second
    # A smaller request takes the first elements of the same memory.
    assert address(buffer.take((3, 5), torch.float32, "cpu")) == kept


@pytest.mark.parametrize("holder", ["tensor", "view", "detached", "numpy", "storage", "autograd"])
def test_a_buffer_that_anything_still_holds_is_not_handed_out(holder):
    buffer = ReusableBuffer()
    first = buffer.take((4, 8), torch.float32, "cpu")
    first.fill_(1.0)
    if holder == "tensor":
        kept = first
    elif holder == "view":
        kept = first[:, :3]
    elif holder == "detached":
        kept = first.detach()
    elif holder == "numpy":
        kept = first.numpy()
    elif holder == "storage":
        kept = first.untyped_storage()
    else:  # saved by an autograd graph that is still alive
        weight = torch.ones(8, requires_grad=True)
        kept = (first * weight).sum()
    if holder != "tensor":
        del first
    second = buffer.take((4, 8), torch.float32, "cpu")
    second.fill_(2.0)
    if holder in ("tensor", "view", "detached"):
        assert torch.all(kept == 1.0)
    elif holder == "numpy":
        assert np.all(kept == 1.0)
    elif holder == "storage":
        assert torch.all(torch.empty(0).set_(kept) == 1.0)
    else:
        kept.backward()
        torch.testing.assert_close(weight.grad, torch.full((8,), 4.0))


@pytest.mark.parametrize("request_", ["larger", "other dtype"])
def test_a_request_the_kept_memory_cannot_serve_gets_new_memory_which_is_kept(request_):
    buffer = ReusableBuffer()
    old = address(buffer.take((4, 8), torch.float32, "cpu"))
    shape, dtype = ((5, 8), torch.float32) if request_ == "larger" else ((4, 8), torch.float64)
    new = buffer.take(shape, dtype, "cpu")
    assert new.dtype == dtype and new.shape == shape
    new_address = address(new)
    del new
    assert address(buffer.take(shape, dtype, "cpu")) == new_address != old


def test_reuse_only_on_cpu_with_gradients_and_from_the_measured_size(monkeypatch):
    large = (1024, 8192)  # 32 MiB of float32: the smallest size kept
    assert memory_module.reuse_applies(large, torch.float32, torch.device("cpu"))
    assert not memory_module.reuse_applies((1023, 8192), torch.float32, torch.device("cpu"))
    assert not memory_module.reuse_applies(large, torch.float32, torch.device("meta"))
    with torch.no_grad():
        assert not memory_module.reuse_applies(large, torch.float32, torch.device("cpu"))
    set_memory_reuse(False)
    try:
        assert not memory_module.reuse_applies(large, torch.float32, torch.device("cpu"))
    finally:
        set_memory_reuse(True)


# ------------------------------------------------------------------------------------------ in the models
VOCABULARY = 1001  # not a whole number of cache lines: the padded rows and the kept memory together
FAMILIES = ["decoder", "seq2seq", "encoder"]


def build(family: str, vocab_size: int = VOCABULARY):
    torch.manual_seed(0)
    if family == "decoder":
        model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", vocab_size=vocab_size))
    elif family == "seq2seq":
        model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny", vocab_size=vocab_size))
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.1)
    else:
        model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", vocab_size=vocab_size))
    return model.eval()  # no dropout: two calls see the same inputs


def batch(seed: int, vocab_size: int = VOCABULARY):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (2, 20), generator=generator)
    # Dense labels: the masked LM's loss reads every row (the labelled-rows path needs at most half labelled).
    return {"input_ids": ids, "labels": ids.clone()}


def steps(model, batches, keep_logits: bool = False):
    """A training step per batch; each step's logits (cloned unless `keep_logits`, which keeps the model's own
    tensors alive across the later steps), loss and gradients."""
    results = []
    for inputs in batches:
        model.zero_grad(set_to_none=True)
        out = model(**inputs)
        out.loss.backward()
        logits = out.logits if keep_logits else out.logits.detach().clone()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((logits, out.loss.detach(), grads))
        del out
    return results


def assert_bitwise_equal(results, expected):
    for (logits, loss, grads), (logits_, loss_, grads_) in zip(results, expected, strict=True):
        assert torch.equal(logits, logits_) and torch.equal(loss, loss_)
        assert grads.keys() == grads_.keys() and grads
        for name in grads:
            assert torch.equal(grads[name], grads_[name]), name


@pytest.mark.parametrize("family", FAMILIES)
def test_steps_in_kept_memory_give_the_same_bits_as_fresh_memory(family, reuse_every_size):
    model = build(family)
    batches = [batch(seed) for seed in (1, 2, 3)]
    reused = steps(model, batches)
    assert LOGITS.holds(model(**batches[0]).logits) and LOG_PROBS._flat is not None
    set_memory_reuse(False)
    fresh = steps(copy.deepcopy(model), batches)
    # Both run the same operator and kernels; only where the memory comes from differs.
    assert_bitwise_equal(reused, fresh)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_second_step_takes_the_first_steps_memory_once_it_is_free(family, reuse_every_size):
    model = build(family)
    first = model(**batch(1))
    first.loss.backward()
    first_address, first_log_probs = address(first.logits), address(LOG_PROBS._flat)
    del first
    second = model(**batch(2))
    assert address(second.logits) == first_address
    second.loss.backward()
    del second
    assert address(LOG_PROBS._flat) == first_log_probs


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_a_caller_keeps_are_not_overwritten_by_later_steps(family, reuse_every_size):
    model = build(family)
    batches = [batch(seed) for seed in (1, 2, 3)]
    kept = steps(model, batches, keep_logits=True)
    addresses = {address(logits) for logits, _, _ in kept}
    assert len(addresses) == 3
    set_memory_reuse(False)
    fresh = steps(copy.deepcopy(model), batches)
    assert_bitwise_equal([(logits.detach(), loss, grads) for logits, loss, grads in kept], fresh)


@pytest.mark.parametrize("family", FAMILIES)
def test_two_forwards_before_one_backward_keep_their_own_memory(family, reuse_every_size):
    """A graph still alive (the first forward's saved log-probabilities) holds its memory: the second forward must
    not write over it before the shared backward."""
    model = build(family)
    first, second = batch(1), batch(2)

    def both(model_):
        model_.zero_grad(set_to_none=True)
        loss = model_(**first).loss + model_(**second).loss
        loss.backward()
        return {name: p.grad.clone() for name, p in model_.named_parameters() if p.grad is not None}, loss.detach()

    reused = both(model)
    set_memory_reuse(False)
    fresh = both(copy.deepcopy(model))
    assert torch.equal(reused[1], fresh[1])
    for name in fresh[0]:
        assert torch.equal(reused[0][name], fresh[0][name]), name


def test_an_aligned_vocabulary_takes_the_product_into_kept_memory_too(reuse_every_size):
    """At a vocabulary whose rows are aligned already (32,000 in Llama) the head takes its product itself only for
    the kept memory; the results match the plain head's call to float rounding (mm into a buffer against F.linear)."""
    model = build("decoder", vocab_size=1024)
    batches = [batch(seed, 1024) for seed in (1, 2)]
    reused = steps(model, batches)
    assert LOGITS._flat is not None
    set_memory_reuse(False)
    plain = steps(copy.deepcopy(model), batches)
    assert LOGITS._flat is None
    for (logits, loss, grads), (logits_, loss_, grads_) in zip(reused, plain):
        # The same products through another BLAS entry point may block their sums differently: float32 rounding
        # carried through two layers and a backward pass, the bound test_row_aligned_logits.py uses.
        torch.testing.assert_close(logits, logits_, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(loss, loss_, atol=2e-5, rtol=1e-4)
        for name in grads_:
            torch.testing.assert_close(grads[name], grads_[name], atol=2e-5, rtol=1e-4)


def test_nothing_is_kept_without_gradients_or_when_switched_off(reuse_every_size):
    model = build("decoder")
    with torch.no_grad():
        model(**batch(1))
    assert LOGITS._flat is None and LOG_PROBS._flat is None
    set_memory_reuse(False)
    model(**batch(1)).loss.backward()
    assert LOGITS._flat is None and LOG_PROBS._flat is None
    set_memory_reuse(True)
    model(**batch(1)).loss.backward()
    assert LOGITS._flat is not None and LOG_PROBS._flat is not None
    set_memory_reuse(False)  # switching off frees what is kept
    assert LOGITS._flat is None and LOG_PROBS._flat is None


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_loss_steps_use_kept_memory_with_the_same_results(family, reuse_every_size):
    """The recipes compile the function batch -> loss: the graph calls the vocabulary operator, which takes the kept
    logits memory at every step, with the eager step's loss and gradients."""
    import torch._dynamo

    model = build(family)
    batches = [batch(seed) for seed in (1, 2)]
    eager = steps(model, batches)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(suppress_errors=False):
        compiled_loss = torch.compile(lambda inputs: model(**inputs).loss, fullgraph=True)
        addresses, results = [], []
        for inputs in batches:
            model.zero_grad(set_to_none=True)
            loss = compiled_loss(inputs)
            addresses.append(address(LOGITS._flat))
            loss.backward()
            results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                            if p.grad is not None}))
    torch._dynamo.reset()
    assert addresses[0] == addresses[1]
    for (loss, grads), (_, loss_, grads_) in zip(results, eager):
        # Inductor's fused cross-entropy sums in another order than the eager loss: float32 rounding.
        torch.testing.assert_close(loss, loss_, atol=2e-5, rtol=1e-4)
        for name in grads_:
            torch.testing.assert_close(grads[name], grads_[name], atol=2e-5, rtol=1e-4)
