"""The zoo's dropout (modeling_zoo_dropout.py): PyTorch's dropout mathematics with masks drawn by numpy's PCG64 on
CPU. Checked against the definition (kept elements scaled by 1 / (1 - p), the rest zero, gradients alike), against
PyTorch's own dropout given the same mask, for its statistics, its seeding (manual_seed, saved RNG states,
activation checkpointing), its fallbacks, and inside the models (the "sdpa" training path against eager)."""

import math

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from torch.utils.checkpoint import checkpoint

from transformer_zoo import (
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForSequenceClassification,
)
from test_optimised_paths import CASES, TOLERANCE, build, loss_and_gradients
from transformer_zoo import modeling_zoo_dropout as dropout_module
from transformer_zoo.modeling_zoo_dropout import (
    PCG64_MIN_ELEMENTS,
    ZooDropout,
    set_dropout_sampler,
    zoo_dropout,
)


def _nonzero_input(shape, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator) + 0.5).to(dtype)  # no zeros: a zero output means dropped


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drops_a_fraction_p_and_scales_the_rest(p):
    x = _nonzero_input((400, 500))
    out = zoo_dropout(x, p, training=True)
    dropped = (out == 0).double().mean().item()
    sigma = math.sqrt(p * (1 - p) / x.numel())
    assert abs(dropped - p) < 6 * sigma, (dropped, p)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * (1 / (1 - p)), rtol=1e-6, atol=0)


def test_equals_pytorch_dropout_given_the_same_mask_forward_and_backward():
    x = _nonzero_input((64, 32, 48)).requires_grad_()
    out = zoo_dropout(x, 0.2, training=True)
    keep = (out != 0).detach()
    out.backward(torch.arange(out.numel(), dtype=torch.float32).view_as(out))
    reference_x = x.detach().clone().requires_grad_()
    # PyTorch's CPU dropout: input * (bernoulli mask / (1 - p)); here with the zoo's mask.
    reference = reference_x * (keep.float() / (1 - 0.2))
    reference.backward(torch.arange(out.numel(), dtype=torch.float32).view_as(out))
    torch.testing.assert_close(out, reference, rtol=1e-6, atol=0)
    torch.testing.assert_close(x.grad, reference_x.grad, rtol=1e-6, atol=0)


def test_bf16_keeps_its_dtype_and_is_the_rounded_scaled_input():
    x = _nonzero_input((128, 128), torch.bfloat16).requires_grad_()
    out = zoo_dropout(x, 0.1, training=True)
    assert out.dtype == torch.bfloat16
    kept = out != 0
    # x / 0.9 within two bf16 roundings (2^-8 relative each): a kernel may round the scale, then the product.
    torch.testing.assert_close(out[kept].float(), x[kept].float() / 0.9, rtol=2**-7, atol=0)
    out.sum().backward()
    assert x.grad.dtype == torch.bfloat16
    assert torch.equal(x.grad != 0, kept)


def test_masks_are_uncorrelated_across_elements_and_calls():
    x = torch.ones(1 << 18)
    first = (zoo_dropout(x, 0.5, training=True) != 0).double()
    second = (zoo_dropout(x, 0.5, training=True) != 0).double()

    def correlation(a, b):
        a, b = a - a.mean(), b - b.mean()
        return (a * b).mean().item() / math.sqrt((a * a).mean().item() * (b * b).mean().item())

    bound = 6 / math.sqrt(x.numel() / 2)  # six standard errors of a correlation over these many pairs
    # Neighbours come from the two halves of one 64-bit draw; the next pair from the next draw.
    assert abs(correlation(first[0::2], first[1::2])) < bound
    assert abs(correlation(first[1:-1:2], first[2::2])) < bound
    assert abs(correlation(first, second)) < bound


def test_seeded_by_torch_manual_seed_and_saved_rng_states():
    x = _nonzero_input((64, 512))
    torch.manual_seed(3)
    first = zoo_dropout(x, 0.3, training=True)
    state = torch.get_rng_state()
    second = zoo_dropout(x, 0.3, training=True)
    assert not torch.equal(first, second)
    torch.manual_seed(3)
    assert torch.equal(zoo_dropout(x, 0.3, training=True), first)
    torch.set_rng_state(state)  # a resumed run restores torch's generator
    assert torch.equal(zoo_dropout(x, 0.3, training=True), second)


def test_activation_checkpointing_recomputes_the_same_mask():
    layer = nn.Sequential(nn.Linear(64, 64), ZooDropout(0.3), nn.Tanh(), nn.Linear(64, 64), ZooDropout(0.3))
    x = torch.randn(256, 64)
    grads = []
    for checkpointed in (False, True):
        layer.zero_grad()
        torch.manual_seed(0)
        out = checkpoint(layer, x, use_reentrant=False) if checkpointed else layer(x)
        out.square().sum().backward()
        grads.append([p.grad.clone() for p in layer.parameters()])
    for plain, recomputed in zip(*grads):
        torch.testing.assert_close(recomputed, plain, rtol=0, atol=0)


def test_falls_back_to_pytorch_dropout_where_the_sampler_does_not_apply():
    x = _nonzero_input((PCG64_MIN_ELEMENTS,))
    assert zoo_dropout(x, 0.0, training=True) is x
    assert zoo_dropout(x, 0.4, training=False) is x
    small = x[: PCG64_MIN_ELEMENTS - 1]
    for tensor, sampler in ((small, "pcg64"), (x, "torch")):
        torch.manual_seed(5)
        ours = zoo_dropout(tensor, 0.4, training=True, sampler=sampler)
        torch.manual_seed(5)
        assert torch.equal(ours, nn.functional.dropout(tensor, 0.4, training=True))


def test_compiles_without_a_graph_break():
    # Under torch.compile the mask comes from the custom operator transformer_zoo::pcg64_keep_mask, which dynamo
    # records as one node; fullgraph would raise on the numpy call if it were traced.
    compiled = torch.compile(ZooDropout(0.25), fullgraph=True, backend="eager")
    out = compiled(torch.ones(256, 256))
    dropped = (out == 0).double().mean().item()
    assert abs(dropped - 0.25) < 6 * math.sqrt(0.25 * 0.75 / out.numel())


def test_keep_mask_operator_is_the_seeded_pcg64_mask_and_passes_opcheck():
    seed = torch.tensor([123456789])
    mask = torch.ops.transformer_zoo.pcg64_keep_mask(seed, [16, 600], 0.3)
    assert mask.dtype == torch.bool and mask.shape == (16, 600)
    assert torch.equal(mask, dropout_module.seeded_keep_mask(123456789, torch.Size([16, 600]), 0.3))
    # Schema, fake (meta) implementation and AOTAutograd tracing with dynamic shapes.
    results = torch.library.opcheck(torch.ops.transformer_zoo.pcg64_keep_mask, (seed, [4, 8], 0.3))
    assert set(results.values()) == {"SUCCESS"}, results


@pytest.mark.compile
def test_inductor_draws_the_pcg64_masks_eager_draws():
    """Inductor calls the mask operator as it is: with its own random ops replaced by PyTorch's (fallback_random, so
    the in-graph seed comes from torch's generator as the eager seed does), a compiled dropout returns exactly the
    eager masks, forward and backward, call after call. Without fallback_random the seeds are inductor's, and
    torch.manual_seed still reproduces them."""
    x = _nonzero_input((64, 512)).requires_grad_()
    compiled = torch.compile(lambda t: zoo_dropout(t, 0.3, training=True), fullgraph=True)
    with torch._inductor.config.patch(fallback_random=True):
        torch.manual_seed(3)
        outputs = [compiled(x) for _ in range(2)]
        torch.manual_seed(3)
        expected = [zoo_dropout(x, 0.3, training=True) for _ in range(2)]
        for out, reference in zip(outputs, expected):
            assert torch.equal(out, reference)
            gradient, = torch.autograd.grad(out.sum(), x)
            assert torch.equal(gradient, torch.autograd.grad(reference.sum(), x)[0])
    torch._dynamo.reset()
    torch.manual_seed(4)
    first = [compiled(x) for _ in range(2)]
    torch.manual_seed(4)
    again = [compiled(x) for _ in range(2)]
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], first[1])
    dropped = (first[0] == 0).double().mean().item()
    assert abs(dropped - 0.3) < 6 * math.sqrt(0.3 * 0.7 / x.numel())


@pytest.mark.parametrize("family, scheme", [("decoder", "rope"), ("decoder", "alibi"), ("encoder", "relative"),
                                            ("seq2seq", "sinusoidal"), ("vit", "learned")])
def test_compiled_training_step_with_dropout_matches_eager_under_the_same_seed(family, scheme, monkeypatch):
    """A whole training step under torch.compile(fullgraph=True) with hidden and attention dropout: its graph draws
    every mask with the zoo's sampler, in the eager order, so loss and gradients equal the eager step's to float
    rounding. (aot_eager runs the graph's random ops as PyTorch's, drawing the seeds from torch's generator as
    eager does; inductor's own seeds differ, test_inductor_draws_the_pcg64_masks_eager_draws.)"""
    monkeypatch.setattr(dropout_module, "PCG64_MIN_ELEMENTS", 0)  # the tiny test tensors take the PCG64 path too
    overrides = dict(position_embedding_type=scheme, attention_dropout=0.2, hidden_dropout=0.1)
    model, batch = build(family, overrides, "sdpa")
    model.train()
    sampled = []
    original = dropout_module.seeded_keep_mask
    monkeypatch.setattr(dropout_module, "seeded_keep_mask",
                        lambda *args: (sampled.append(args[1]), original(*args))[1])
    torch.manual_seed(11)
    eager_loss, eager_grads = loss_and_gradients(model, batch)
    eager_masks, sampled[:] = list(sampled), []
    torch.manual_seed(11)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    model.zero_grad(set_to_none=True)
    compiled_loss = compiled(**batch).loss
    compiled_loss.backward()
    compiled_grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    # The compiled step's masks: the same shapes in the same order (its first call traces with fake tensors, which
    # never reach the sampler).
    assert sampled == eager_masks and len(eager_masks) > 2
    torch.testing.assert_close(compiled_loss, eager_loss, **TOLERANCE)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, **TOLERANCE, msg=lambda m: f"{name}: {m}")
    torch.manual_seed(12)
    assert loss_and_gradients(model, batch)[0] != eager_loss  # other masks: the check above can fail


def test_module_and_config_reject_an_unknown_sampler():
    with pytest.raises(ValueError, match="dropout_sampler='philox'; choose one of pcg64, torch"):
        ZooDropout(0.1, "philox")
    # A config validator's ValueError arrives wrapped by huggingface_hub.
    with pytest.raises((ValueError, StrictDataclassError), match="dropout_sampler='philox'"):
        ZooEncoderConfig.from_preset("tiny", dropout_sampler="philox")


def test_set_dropout_sampler_replaces_peft_adapter_dropout_and_keeps_the_mode():
    peft = pytest.importorskip("peft", reason="PEFT is a recipes extra")
    config = ZooEncoderConfig.from_preset("tiny", num_labels=3)
    model = peft.get_peft_model(
        ZooEncoderForSequenceClassification(config),
        peft.LoraConfig(r=4, lora_dropout=0.1, target_modules=["q_proj", "v_proj"], task_type="SEQ_CLS"),
    )
    model.eval()
    plain = sum(type(m) is nn.Dropout for m in model.modules())
    assert plain == 2 * config.num_hidden_layers
    assert set_dropout_sampler(model, "pcg64") == plain
    assert not any(type(m) is nn.Dropout for m in model.modules())
    assert all(not m.training for m in model.modules() if isinstance(m, ZooDropout))


@pytest.mark.parametrize("family, overrides", CASES, ids=[f"{f}-{'-'.join(map(str, o.values()))}" for f, o in CASES])
def test_sdpa_training_with_attention_dropout_matches_eager_under_the_same_seed(family, overrides, monkeypatch):
    """With attention dropout on CPU the "sdpa" kernel runs the math path with the zoo's masks; the eager kernel
    draws the same masks in the same order, so the two agree to float rounding: every family and position scheme,
    padding, GQA, pruned heads and cross-attention included."""
    monkeypatch.setattr(dropout_module, "PCG64_MIN_ELEMENTS", 0)  # the tiny test tensors take the PCG64 path too
    overrides = dict(overrides, attention_dropout=0.2)
    results = {}
    for implementation in ("eager", "sdpa"):
        model, batch = build(family, overrides, implementation)
        model.train()
        torch.manual_seed(11)
        results[implementation] = loss_and_gradients(model, batch)
    torch.testing.assert_close(results["sdpa"][0], results["eager"][0], **TOLERANCE)
    for name, grad in results["eager"][1].items():
        torch.testing.assert_close(results["sdpa"][1][name], grad, **TOLERANCE, msg=lambda m: f"{name}: {m}")
    # Against PyTorch's masks only the random stream differs: another loss of the same size.
    model, batch = build(family, dict(overrides, dropout_sampler="torch"), "sdpa")
    model.train()
    torch.manual_seed(11)
    torch_loss, _ = loss_and_gradients(model, batch)
    assert torch_loss != results["sdpa"][0] and abs(torch_loss - results["sdpa"][0]) < 0.5 * results["sdpa"][0]


def test_set_dropout_sampler_switches_a_model_back_to_pytorch_masks_exactly():
    torch.manual_seed(0)
    model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", attention_dropout=0.0)).train()
    reference = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", attention_dropout=0.0)).train()
    reference.load_state_dict(model.state_dict())
    # The reference: the same model with every ZooDropout swapped for PyTorch's nn.Dropout.
    for module in list(reference.modules()):
        for name, child in module.named_children():
            if isinstance(child, ZooDropout):
                setattr(module, name, nn.Dropout(child.p))
    assert set_dropout_sampler(model, "torch") == 0 and model.config.dropout_sampler == "torch"
    ids = torch.randint(5, 1000, (4, 64), generator=torch.Generator().manual_seed(2))
    outputs = []
    for candidate in (model, reference):
        torch.manual_seed(4)
        outputs.append(candidate(input_ids=ids).logits)
    assert torch.equal(outputs[0], outputs[1])
    with pytest.raises(ValueError, match="dropout_sampler='mt'"):
        set_dropout_sampler(model, "mt")


@pytest.mark.compile
def test_compiled_activation_checkpointing_recomputes_the_same_masks(monkeypatch):
    """With inductor's own seeds: a compiled training step with activation checkpointing (which recomputes each
    layer's forward, masks included, in the backward) gives the loss and gradients of the same compiled step without
    it. A mask drawn afresh in the recomputation would change the gradients."""
    monkeypatch.setattr(dropout_module, "PCG64_MIN_ELEMENTS", 0)
    results = {}
    for checkpointed in (False, True):
        torch._dynamo.reset()
        model, batch = build("decoder", dict(position_embedding_type="rope", attention_dropout=0.2,
                                             hidden_dropout=0.1, num_hidden_layers=1), "sdpa")
        if checkpointed:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        compiled = torch.compile(model)
        torch.manual_seed(11)
        loss = compiled(**batch).loss
        loss.backward()
        results[checkpointed] = loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    torch.testing.assert_close(results[True][0], results[False][0], **TOLERANCE)
    for name, grad in results[False][1].items():
        torch.testing.assert_close(results[True][1][name], grad, **TOLERANCE, msg=lambda m: f"{name}: {m}")
