"""Work whose result a head never reads is skipped, and what the head returns is unchanged:

* the last layer of a [CLS]-pooled classifier (the encoder's sequence classifier, ViT with class pooling) computes
  only the leading rows it pools (`run_stack(leading_positions=...)`);
* the masked-LM loss backpropagates through the labelled rows only, while `logits` keeps every row; so do the causal-LM
  and encoder-decoder losses where at most half the positions have a target (a masked prompt, padding).

The reference is the full computation of the same model (the fallback a forward hook on the last layer selects, or
the masked-LM loss over every row of `logits`): logits, loss and every gradient agree to float rounding, in every
position scheme, norm placement and attention kernel, with padding, PEFT adapters and gradient checkpointing.
"""

import pytest
import torch
from peft import LoraConfig, get_peft_model

import transformer_zoo.modeling_zoo_attention_kernels as attention_kernels
import transformer_zoo.modeling_zoo_dropout as dropout_module
import transformer_zoo.modeling_zoo_layers as layers
import transformer_zoo.modeling_zoo_decoder as decoder_module
import transformer_zoo.modeling_zoo_encoder as encoder_module
import transformer_zoo.modeling_zoo_seq2seq as seq2seq_module
import transformer_zoo.modeling_zoo_vocabulary as vocabulary_module
from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForSequenceClassification,
    ZooEncoderModel,
    ZooViTConfig,
    ZooViTForImageClassification,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTModel,
)
from transformer_zoo.modeling_zoo_losses import token_cross_entropy


# float32 rounding of reordered sums (a product over fewer rows, a softmax over a shorter row set), through two
# layers and a backward pass: the bound test_optimised_paths.py uses for its fused projections.
TOLERANCE = dict(atol=2e-5, rtol=1e-4)


def classifier(family: str, attn: str = "eager", **overrides):
    torch.manual_seed(0)
    if family == "encoder":
        model = ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny", num_labels=3, **overrides))
        ids = torch.randint(3, 1000, (2, 12), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        mask[1, -4:] = 0  # padding: the kept row must still attend only to real tokens
        batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 2])}
    else:
        model = ZooViTForImageClassification(ZooViTConfig.from_preset("tiny", num_labels=3, **overrides))
        pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        batch = {"pixel_values": pixels, "labels": torch.tensor([0, 2])}
    model.set_attn_implementation(attn)
    model.eval()  # no dropout: both computations see the same function
    return model, batch


def last_layer_rows(model, batch) -> list[int]:
    """The rows the last layer's feed-forward saw on one forward (recorded by wrapping the class's forward, not by a
    hook: a hook on the last layer makes it compute every row)."""
    seen = []
    original = layers.ZooMLP.forward

    def recording(self, hidden_states):
        seen.append(hidden_states.shape[1])
        return original(self, hidden_states)

    layers.ZooMLP.forward = recording
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        layers.ZooMLP.forward = original
    return seen


def outputs_and_gradients(model, batch, full: bool):
    """Logits, loss and gradients; full=True forces every row of the last layer (a no-op hook on it)."""
    stack = model.get_base_model() if hasattr(model, "get_base_model") else model
    last = (stack.vit if hasattr(stack, "vit") else stack.model).layers[-1]
    handle = last.register_forward_hook(lambda *args: None) if full else None
    try:
        model.zero_grad(set_to_none=True)
        out = model(**batch)
        out.loss.backward()
    finally:
        if handle is not None:
            handle.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


def assert_same(kept, full):
    torch.testing.assert_close(kept[0], full[0], **TOLERANCE)
    torch.testing.assert_close(kept[1], full[1], **TOLERANCE)
    assert kept[2].keys() == full[2].keys() and kept[2]
    for name in full[2]:
        torch.testing.assert_close(kept[2][name], full[2][name], **TOLERANCE, msg=lambda m: f"{name}: {m}")


def leading_cases():
    for scheme in ("learned", "sinusoidal", "rope", "alibi", "relative", "none"):
        for norm in ("post", "pre"):
            yield "encoder", dict(position_embedding_type=scheme, norm_position=norm)
    yield "encoder", dict(num_key_value_heads=2, hidden_act="swiglu", norm_type="rmsnorm", norm_position="pre")
    yield "encoder", dict(pruned_heads={1: [0, 2]})
    for scheme in ("learned", "sincos2d", "none"):
        yield "vit", dict(position_embedding_type=scheme)
    yield "vit", dict(use_distillation_token=True)


CASES = list(leading_cases())
IDS = [f"{family}-{'-'.join(map(str, overrides.values()))}" for family, overrides in CASES]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family, overrides", CASES, ids=IDS)
def test_pooled_classifier_computes_only_the_leading_rows_with_the_same_results(family, overrides, attn):
    model, batch = classifier(family, attn, **overrides)
    leading = model.config.num_prefix_tokens if family == "vit" else 1
    rows = last_layer_rows(model, batch)
    full_rows = rows[0]
    assert rows == [full_rows] * (len(rows) - 1) + [leading]  # the path is taken: the last layer saw `leading` rows
    assert_same(outputs_and_gradients(model, batch, full=False), outputs_and_gradients(model, batch, full=True))


def test_the_leading_rows_with_lora_and_gradient_checkpointing():
    """The fine-tuning recipe's case: LoRA on q/v (the kept rows' q_proj is a PEFT layer) and checkpointed layers."""
    model, batch = classifier("encoder", "sdpa")
    model = get_peft_model(model, LoraConfig(target_modules=["q_proj", "v_proj"], r=4, modules_to_save=["classifier"]))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # LoRA's B starts at zero; non-zero makes the adapters part of the function
            torch.nn.init.normal_(parameter, std=0.1)
    model.get_base_model().activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    for module in model.modules():  # train mode for checkpointing, no dropout so both runs see one function
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(module, layers.ZooAttention):
            module.attention_dropout = 0.0
    assert last_layer_rows(model, batch)[-1] == 1
    assert_same(outputs_and_gradients(model, batch, full=False), outputs_and_gradients(model, batch, full=True))


@pytest.mark.parametrize("asked", ["output_hidden_states", "output_attentions"])
@pytest.mark.parametrize("family", ["encoder", "vit"])
def test_every_row_is_computed_when_per_layer_outputs_are_returned(family, asked):
    model, batch = classifier(family)
    out = model(**batch, **{asked: True})
    length = batch["input_ids"].shape[1] if family == "encoder" else 1 + (32 // model.config.patch_size) ** 2
    states = out.hidden_states if asked == "output_hidden_states" else out.attentions
    assert all(state.shape[-2] == length for state in states)
    # The same switch set in the config.
    setattr(model.config, asked, True)
    assert set(last_layer_rows(model, batch)) == {length}


def test_a_hook_on_the_last_layer_sees_every_row():
    model, batch = classifier("encoder")
    seen = []
    handle = model.model.layers[-1].register_forward_hook(lambda module, args, output: seen.append(output.shape))
    with torch.no_grad():
        model(**batch)
    handle.remove()
    assert seen == [torch.Size([2, 12, model.config.hidden_size])]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_base_models_return_the_leading_positions_of_the_full_result(attn):
    torch.manual_seed(0)
    encoder = ZooEncoderModel(ZooEncoderConfig.from_preset("tiny", position_embedding_type="rope")).eval()
    encoder.set_attn_implementation(attn)
    ids = torch.randint(3, 1000, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0
    with torch.no_grad():
        full = encoder(ids, mask)
        kept = encoder(ids, mask, leading_positions=2)
    assert kept.last_hidden_state.shape == (2, 2, encoder.config.hidden_size)
    torch.testing.assert_close(kept.last_hidden_state, full.last_hidden_state[:, :2], **TOLERANCE)
    torch.testing.assert_close(kept.pooler_output, full.pooler_output, **TOLERANCE)
    # As many positions as the sequence: nothing to skip, the full result.
    with torch.no_grad():
        torch.testing.assert_close(encoder(ids, mask, leading_positions=9).last_hidden_state, full.last_hidden_state)

    vit = ZooViTModel(ZooViTConfig.from_preset("tiny")).eval()
    pixels = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(vit(pixels, leading_positions=1).last_hidden_state,
                                   vit(pixels).last_hidden_state[:, :1], **TOLERANCE)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_leading_positions_must_be_a_positive_int(bad):
    encoder = ZooEncoderModel(ZooEncoderConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="leading_positions must be a positive int"):
        encoder(torch.tensor([[5, 6, 7]]), leading_positions=bad)


def test_mean_pooled_vit_refuses_leading_positions_and_computes_every_row():
    model, batch = classifier("vit", pooling="mean")
    assert set(last_layer_rows(model, batch)) == {1 + (32 // model.config.patch_size) ** 2}
    with pytest.raises(ValueError, match="pooling='mean'"):
        model.vit(batch["pixel_values"], leading_positions=1)


# ------------------------------------------------------------------------------------------ masked-LM loss rows
def projected_row_counts(monkeypatch, weight) -> list:
    """Records the leading dimension of every product by `weight` (the vocabulary projection), through F.linear or
    the cache-line-aligned logits (vocabulary_logits): the batch for the logits of every row, the number of rows for a
    projection of selected rows."""
    projected = []
    original_linear = torch.nn.functional.linear
    original_aligned = vocabulary_module.vocabulary_logits

    def recording_linear(states, weight_, bias=None):
        if weight_ is weight:
            projected.append(states.shape[0])
        return original_linear(states, weight_, bias)

    def recording_aligned(states, weight_, *args):
        if weight_ is weight:
            projected.append(states.shape[0])
        return original_aligned(states, weight_, *args)

    monkeypatch.setattr(torch.nn.functional, "linear", recording_linear)
    monkeypatch.setattr(vocabulary_module, "vocabulary_logits", recording_aligned)
    return projected


def masked_lm(fraction_labelled: float, sparse_prediction: bool = False, **overrides):
    torch.manual_seed(0)
    model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", sparse_prediction=sparse_prediction,
                                                               **overrides)).eval()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1000, (2, 20), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -5:] = 0
    chosen = (torch.rand(ids.shape, generator=generator) < fraction_labelled) & (mask == 1)
    labels = ids.masked_fill(~chosen, -100)
    return model, {"input_ids": ids, "attention_mask": mask, "labels": labels}


def every_row_lm_loss(hidden, logits, labels, head, *, head_is_plain, shift=False, num_items_in_batch=None,
                      logits_bias=None, few_labelled=False):
    """The reference for `loss_over_labelled_rows` in every language-model head: the token loss over every row of
    the logits."""
    return token_cross_entropy(logits, labels, num_items_in_batch, shift=shift)


def mlm_results(model, batch, extra_loss_on_logits: bool = False):
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    total = out.loss + (out.logits.square().mean() if extra_loss_on_logits else 0)
    total.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


@pytest.mark.parametrize("extra_loss_on_logits", [False, True], ids=["loss", "loss-and-logits"])
@pytest.mark.parametrize("scheme", ["learned", "rope", "alibi"])
def test_masked_lm_loss_backpropagates_through_labelled_rows_with_the_same_results(
        scheme, extra_loss_on_logits, monkeypatch):
    """`logits` keeps every row and its own gradient path: a caller's loss on the logits still gets its gradient."""
    model, batch = masked_lm(0.15, position_embedding_type=scheme)
    projected_rows = projected_row_counts(monkeypatch, model.lm_head.decoder.weight)
    kept = mlm_results(model, batch, extra_loss_on_logits)
    labelled = int((batch["labels"] != -100).sum())
    assert labelled < batch["labels"].numel() / 2
    # The logits' projection of every row (through nn.Linear), then the loss's own of the labelled rows.
    assert projected_rows == [2, labelled]
    assert kept[0].shape == (*batch["input_ids"].shape, model.config.vocab_size)
    monkeypatch.setattr(encoder_module, "loss_over_labelled_rows", every_row_lm_loss)
    assert_same(kept, mlm_results(model, batch, extra_loss_on_logits))


@pytest.mark.parametrize("case", ["most rows labelled", "no gradient", "hooked projection"])
def test_masked_lm_loss_reads_the_logits_where_a_second_projection_does_not_pay(case, monkeypatch):
    model, batch = masked_lm(0.9 if case == "most rows labelled" else 0.15)
    if case == "hooked projection":
        model.lm_head.decoder.register_forward_hook(lambda *args: None)
    projected = projected_row_counts(monkeypatch, model.lm_head.decoder.weight)
    with torch.set_grad_enabled(case != "no gradient"):
        out = model(**batch)
    assert projected == [2]  # the logits' projection only
    monkeypatch.setattr(encoder_module, "loss_over_labelled_rows", every_row_lm_loss)
    with torch.set_grad_enabled(case != "no gradient"):
        torch.testing.assert_close(out.loss, model(**batch).loss, atol=0, rtol=0)


def test_masked_lm_with_gradient_accumulation_counts_the_same_items():
    model, batch = masked_lm(0.15)
    items = torch.tensor(40)
    kept = model(**batch, num_items_in_batch=items).loss
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_module, "loss_over_labelled_rows", every_row_lm_loss)
        torch.testing.assert_close(kept, model(**batch, num_items_in_batch=items).loss, **TOLERANCE)


# ------------------------------------------------------------------ causal-LM and encoder-decoder loss rows


def prompt_masked(family: str, fraction_labelled: float, **overrides):
    """A batch whose labels are -100 except on the last `fraction_labelled` of each sequence (an instruction-tuning
    prompt mask), with padding in the second row."""
    torch.manual_seed(0)
    if family == "decoder":
        model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", **overrides))
    else:
        model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny", **overrides))
        # A bias that is not zero, so that the loss's own projection must add it too.
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.1)
    model.eval()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 1000, (2, 20), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, : round(20 * (1 - fraction_labelled))] = -100
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    return model, batch


LM_CASES = [("decoder", dict(position_embedding_type="learned")),
            ("decoder", dict(position_embedding_type="rope", tie_word_embeddings=False)),
            ("decoder", dict(position_embedding_type="alibi", num_key_value_heads=2)),
            ("seq2seq", dict(position_embedding_type="sinusoidal")),
            ("seq2seq", dict(position_embedding_type="rope", tie_word_embeddings=False))]


@pytest.mark.parametrize("accumulated", [False, True], ids=["mean", "num_items_in_batch"])
@pytest.mark.parametrize("extra_loss_on_logits", [False, True], ids=["loss", "loss-and-logits"])
@pytest.mark.parametrize("family, overrides", LM_CASES,
                         ids=[f"{f}-{'-'.join(map(str, o.values()))}" for f, o in LM_CASES])
def test_a_prompt_masked_lm_loss_backpropagates_through_labelled_rows_with_the_same_results(
        family, overrides, extra_loss_on_logits, accumulated, monkeypatch):
    model, batch = prompt_masked(family, 0.3, **overrides)
    if accumulated:
        batch["num_items_in_batch"] = torch.tensor(25)
    projected_rows = projected_row_counts(monkeypatch, model.lm_head.weight)
    kept = mlm_results(model, batch, extra_loss_on_logits)
    # Targets: the decoder's are the labels shifted by one position.
    targets = batch["labels"][:, 1:] if family == "decoder" else batch["labels"]
    labelled = int((targets != -100).sum())
    assert 0 < labelled < targets.numel() / 2
    assert projected_rows == [2, labelled]  # every row for the logits, then the labelled rows for the loss
    module = decoder_module if family == "decoder" else seq2seq_module
    monkeypatch.setattr(module, "loss_over_labelled_rows", every_row_lm_loss)
    assert_same(kept, mlm_results(model, batch, extra_loss_on_logits))


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_a_mostly_labelled_lm_loss_reads_the_logits(family, monkeypatch):
    model, batch = prompt_masked(family, 0.9)
    projected = projected_row_counts(monkeypatch, model.lm_head.weight)
    kept = mlm_results(model, batch)
    assert projected == [2]  # the logits' projection only
    module = decoder_module if family == "decoder" else seq2seq_module
    monkeypatch.setattr(module, "loss_over_labelled_rows", every_row_lm_loss)
    assert_same(kept, mlm_results(model, batch))


@pytest.mark.parametrize("sampler", ["pcg64", "torch"])
@pytest.mark.parametrize("family", ["encoder", "vit"])
def test_the_leading_rows_train_with_dropout(family, sampler, monkeypatch):
    """With dropout on, the two paths draw different masks, so only the kernels' acceptance of the cut rows is
    checked: sdpa training with attention dropout routes the kept rows through the zoo's math path (pcg64) or
    PyTorch's SDPA (torch), and every parameter the full path trains gets a finite gradient."""
    monkeypatch.setattr(dropout_module, "PCG64_MIN_ELEMENTS", 0)  # the tiny test tensors take the PCG64 path too
    kernels = []
    original = attention_kernels.sdpa_math_attention

    def recording(module, query, *args, **kwargs):
        kernels.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(layers, "sdpa_math_attention", recording)
    model, batch = classifier(family, "sdpa", attention_dropout=0.5, dropout_sampler=sampler)
    model.train()
    _, loss, grads = outputs_and_gradients(model, batch, full=False)
    _, _, full_grads = outputs_and_gradients(model, batch, full=True)
    assert torch.isfinite(loss) and grads.keys() == full_grads.keys()
    assert all(torch.isfinite(grad).all() for grad in grads.values())
    leading = model.config.num_prefix_tokens if family == "vit" else 1
    # pcg64: the zoo's math path ran every layer, the last one on the kept rows only (first forward).
    layers_count = model.config.num_hidden_layers
    expected = [kernels[0]] * (layers_count - 1) + [leading] if sampler == "pcg64" else []
    assert kernels[:layers_count] == expected, kernels
