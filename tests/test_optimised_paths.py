"""The paths that make a step cheaper give what the plain paths give: the fused q/k/v projection (one matrix product
for the three plain linear layers) and sparse masked-LM prediction (the vocabulary projection at labelled positions
only). Losses and gradients agree to float rounding, generated tokens exactly, in every family and position scheme.
"""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from peft import LoraConfig, get_peft_model

import transformer_zoo.modeling_zoo_layers as layers
import transformer_zoo.modeling_zoo_losses as losses
from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTForImageClassification,
)
from transformer_zoo.training.engine.evaluation import make_loss_fn


# float32 rounding of a reordered matrix product, accumulated through two layers and a backward pass.
TOLERANCE = dict(atol=2e-5, rtol=1e-4)


@pytest.fixture(autouse=True)
def fuse_even_small_batches(monkeypatch):
    # The test batches are small; production fuses from FUSED_PROJECTION_MIN_ROWS token rows on.
    monkeypatch.setattr(layers, "FUSED_PROJECTION_MIN_ROWS", 0)


def loss_and_gradients(model, batch):
    model.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def unfused(monkeypatch):
    monkeypatch.setattr(layers, "plain_linears", lambda modules: False)


def text_batch(vocab_size=1000, batch=2, length=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    return ids, mask


def family_cases():
    for scheme in ("learned", "sinusoidal", "rope", "alibi", "relative", "none"):
        for kv_heads in (4, 2):
            yield "decoder", dict(position_embedding_type=scheme, num_key_value_heads=kv_heads)
    for scheme in ("learned", "rope", "relative"):
        yield "encoder", dict(position_embedding_type=scheme)
    for scheme in ("sinusoidal", "learned", "rope", "alibi"):
        yield "seq2seq", dict(position_embedding_type=scheme)
    for scheme in ("learned", "sincos2d", "none"):
        yield "vit", dict(position_embedding_type=scheme)
    yield "decoder", dict(pruned_heads={0: [1], 1: [0, 3]})
    yield "decoder", dict(attention_variant="sliding_window", attention_window=4)


CASES = list(family_cases())


def build(family, overrides, attn="eager"):
    torch.manual_seed(0)
    if family == "decoder":
        config = ZooDecoderConfig.from_preset("tiny", **overrides)
        model = ZooDecoderForCausalLM(config)
        ids, mask = text_batch()
        batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    elif family == "encoder":
        model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", **overrides))
        ids, mask = text_batch()
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    elif family == "seq2seq":
        model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny", **overrides))
        ids, mask = text_batch()
        batch = {"input_ids": ids, "attention_mask": mask, "labels": text_batch(length=7, seed=1)[0]}
    else:
        model = ZooViTForImageClassification(ZooViTConfig.from_preset("tiny", num_labels=3, **overrides))
        pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        batch = {"pixel_values": pixels, "labels": torch.tensor([0, 2])}
    model.set_attn_implementation(attn)
    return model, batch


@pytest.mark.parametrize("family, overrides", CASES, ids=[f"{f}-{'-'.join(map(str, o.values()))}" for f, o in CASES])
def test_fused_qkv_gives_the_same_loss_and_gradients(family, overrides, monkeypatch):
    model, batch = build(family, overrides)
    model.train()
    torch.manual_seed(1)
    fused_loss, fused_grads = loss_and_gradients(model, batch)
    unfused(monkeypatch)
    torch.manual_seed(1)  # the same dropout masks
    plain_loss, plain_grads = loss_and_gradients(model, batch)
    torch.testing.assert_close(fused_loss, plain_loss, **TOLERANCE)
    assert fused_grads.keys() == plain_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(fused_grads[name], plain_grads[name], **TOLERANCE, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("family, scheme", [("decoder", "rope"), ("decoder", "alibi"), ("decoder", "learned"),
                                            ("seq2seq", "sinusoidal"), ("seq2seq", "rope")])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_fused_qkv_generates_the_same_tokens(family, scheme, attn, monkeypatch):
    model, batch = build(family, dict(position_embedding_type=scheme), attn)
    model.eval()
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        fused = model.generate(batch["input_ids"][:1], **settings)
        unfused(monkeypatch)
        plain = model.generate(batch["input_ids"][:1], **settings)
    torch.testing.assert_close(fused.sequences, plain.sequences, atol=0, rtol=0)
    # Every step's scores, not only the argmax (a tiny random model may repeat one token).
    torch.testing.assert_close(torch.stack(fused.scores), torch.stack(plain.scores), **TOLERANCE)


def test_fused_path_is_taken_only_for_plain_hook_free_linears():
    model, _ = build("decoder", {})
    attention = model.model.layers[0].self_attn
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    assert layers.plain_linears(projections)
    handle = attention.k_proj.register_forward_hook(lambda *args: None)
    assert not layers.plain_linears(projections)  # hooks must see their module called
    handle.remove()
    peft_model = get_peft_model(model, LoraConfig(target_modules=["q_proj"], r=2))
    attention = peft_model.base_model.model.model.layers[0].self_attn
    assert not layers.plain_linears((attention.q_proj, attention.k_proj, attention.v_proj))


def test_a_forward_hook_on_a_projection_still_fires():
    model, batch = build("decoder", {})
    seen = []
    model.model.layers[1].self_attn.v_proj.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    model(**batch)
    assert seen == [torch.Size([2, 12, 64])]


# ------------------------------------------------------------------------------------------------ sparse prediction
@pytest.mark.parametrize("scheme", ["learned", "rope"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sparse_masked_lm_prediction_gives_the_same_loss_and_gradients(scheme, smoothing):
    model, batch = build("encoder", dict(position_embedding_type=scheme))
    loss_fn = make_loss_fn("token", smoothing)
    model.train()

    def run():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        loss = loss_fn(model, batch)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    dense_loss, dense_grads = run()
    model.config.sparse_prediction = True
    sparse_loss, sparse_grads = run()
    torch.testing.assert_close(sparse_loss, dense_loss, **TOLERANCE)
    for name in dense_grads:
        torch.testing.assert_close(sparse_grads[name], dense_grads[name], **TOLERANCE, msg=lambda m: f"{name}: {m}")
    labelled = int((batch["labels"] != -100).sum())
    with torch.no_grad():
        out = model(**batch)
        assert out.logits.shape == (labelled, model.config.vocab_size)
        assert model(batch["input_ids"]).logits.shape == (2, 12, model.config.vocab_size)  # no labels: every position


def test_sparse_prediction_keeps_the_accumulated_batch_share():
    model, batch = build("encoder", {})
    model.eval()
    items = int((batch["labels"] != -100).sum())
    with torch.no_grad():
        dense = model(**batch, num_items_in_batch=torch.tensor(3 * items)).loss
        model.config.sparse_prediction = True
        sparse = model(**batch, num_items_in_batch=torch.tensor(3 * items)).loss
    torch.testing.assert_close(sparse, dense, **TOLERANCE)


# ------------------------------------------------------------------------------------------------ chunked loss
@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
@pytest.mark.parametrize("accumulated", [False, True])
def test_chunked_causal_lm_loss_gives_the_same_loss_and_gradients(chunk, accumulated):
    model, batch = build("decoder", {})
    model.train()
    extra = {"num_items_in_batch": torch.tensor(40)} if accumulated else {}

    def run():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        out = model(**batch, **extra)
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    dense, dense_grads = run()
    model.config.loss_chunk_size = chunk
    chunked, chunked_grads = run()
    assert chunked.logits is None and dense.logits is not None
    torch.testing.assert_close(chunked.loss, dense.loss, **TOLERANCE)
    assert chunked_grads.keys() == dense_grads.keys()  # the tied embedding / output weight included
    for name in dense_grads:
        torch.testing.assert_close(chunked_grads[name], dense_grads[name], **TOLERANCE, msg=lambda m: f"{name}: {m}")


def test_chunked_loss_leaves_generation_and_unlabelled_calls_alone():
    model, batch = build("decoder", dict(loss_chunk_size=5))
    model.eval()
    with torch.no_grad():
        assert model(batch["input_ids"]).logits.shape == (2, 12, 1000)
        model.generate(batch["input_ids"][:1], max_new_tokens=3, do_sample=False, pad_token_id=0)
    with pytest.raises((ValueError, StrictDataclassError), match="loss_chunk_size"):
        ZooDecoderConfig.from_preset("tiny", loss_chunk_size=0)


# ------------------------------------------------------------------------------------------------ cross-entropy
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_cross_entropy_equals_pytorchs(dtype):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(37, 101, generator=generator) * 3).to(dtype).requires_grad_()
    labels = torch.randint(0, 101, (37,), generator=generator)
    labels[::5] = -100
    expected = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
    (expected * 0.7).backward()
    expected_grad, logits.grad = logits.grad.clone(), None
    actual = losses.cross_entropy_sum(logits, labels)
    (actual * 0.7).backward()
    assert logits.grad.dtype == dtype
    torch.testing.assert_close(actual, expected, **TOLERANCE)
    torch.testing.assert_close(logits.grad.float(), expected_grad.float(),
                               **(TOLERANCE if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)))
    assert not logits.grad[::5].any()  # ignored rows get no gradient


def test_in_place_cross_entropy_refuses_a_second_backward():
    logits = torch.randn(4, 9, requires_grad=True)
    loss = losses.cross_entropy_sum(logits, torch.tensor([1, 2, 3, 4]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


def test_a_batch_without_label_tokens_has_a_nan_loss_and_zero_gradients_as_pytorchs_mean():
    logits = torch.randn(2, 5, 11, requires_grad=True)
    labels = torch.full((2, 5), -100)
    loss = losses.token_cross_entropy(logits, labels)
    assert torch.isnan(loss)
    (loss * 0).backward()  # what gradient accumulation does with an empty micro-batch's share
    assert torch.equal(logits.grad, torch.zeros_like(logits))
    expected = torch.nn.functional.cross_entropy(logits.detach().reshape(-1, 11), labels.reshape(-1))
    assert torch.isnan(expected)


def test_single_token_steps_are_not_fused(monkeypatch):
    monkeypatch.setattr(layers, "FUSED_PROJECTION_MIN_ROWS", 64)
    asked = []
    plain = layers.plain_linears
    monkeypatch.setattr(layers, "plain_linears", lambda modules: asked.append(1) or plain(modules))
    model, batch = build("decoder", {})
    with torch.no_grad():
        model(batch["input_ids"][:1, :1])  # one row: three small products, no weight copy
        assert not asked
        model(torch.randint(3, 1000, (4, 16)))  # 64 rows: one fused product per layer
        assert len(asked) == model.config.num_hidden_layers


@pytest.mark.parametrize("family", ["decoder", "encoder", "seq2seq"])
def test_model_losses_equal_transformers_loss_functions_with_gradients(family):
    """The LM heads' losses (in-place cross-entropy) against transformers' own ForCausalLMLoss / plain
    cross-entropy on the same logits, with and without num_items_in_batch."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    model, batch = build(family, {})
    model.eval()
    for extra in ({}, {"num_items_in_batch": torch.tensor(50)}):
        with torch.no_grad():
            out = model(**batch, **extra)
        logits = out.logits.detach().requires_grad_()
        labels = batch["labels"]
        if family == "decoder":
            expected = ForCausalLMLoss(logits, labels, vocab_size=logits.shape[-1], **extra)
        else:
            summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                       reduction="sum")
            expected = summed / (extra["num_items_in_batch"] if extra else (labels != -100).sum())
        actual = losses.token_cross_entropy(logits, labels, extra.get("num_items_in_batch"), shift=family == "decoder")
        torch.testing.assert_close(out.loss, expected, **TOLERANCE)
        torch.testing.assert_close(actual, expected, **TOLERANCE)
        (expected_grad,) = torch.autograd.grad(expected, logits)
        (actual_grad,) = torch.autograd.grad(losses.token_cross_entropy(
            logits, labels, extra.get("num_items_in_batch"), shift=family == "decoder"), logits)
        torch.testing.assert_close(actual_grad, expected_grad, **TOLERANCE)
