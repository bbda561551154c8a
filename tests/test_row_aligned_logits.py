"""Language-model logits in cache-line-aligned rows (modeling_zoo_vocabulary.py): the same logits, loss and gradients
as the plain `lm_head` output, in every head and position scheme, eagerly and under torch.compile; the layout only
where it was measured to pay."""

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

import transformer_zoo.modeling_zoo_vocabulary as vocabulary_module
from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
)
from transformer_zoo.modeling_zoo_vocabulary import aligned_width, project_vocabulary


VOCABULARY = 1001  # 1,001 float32 values: rows of 4,004 bytes, not a whole number of 64-byte lines
WIDTH = 1008

CASES = [
    ("decoder", dict(position_embedding_type="learned")),
    ("decoder", dict(position_embedding_type="rope", tie_word_embeddings=False)),
    ("decoder", dict(position_embedding_type="alibi", num_key_value_heads=2)),
    ("seq2seq", dict(position_embedding_type="sinusoidal")),
    ("seq2seq", dict(position_embedding_type="rope", tie_word_embeddings=False)),
    ("encoder", dict(position_embedding_type="learned")),
    ("encoder", dict(position_embedding_type="rope")),
]
CASE_IDS = [f"{family}-{'-'.join(map(str, overrides.values()))}" for family, overrides in CASES]


@pytest.fixture
def every_product(monkeypatch):
    """The tiny test products are far below the size from which the layout is used; use it for every one."""
    monkeypatch.setattr(vocabulary_module, "MIN_MULTIPLY_ADDS", 0)


def build(family: str, vocab_size: int = VOCABULARY, **overrides):
    torch.manual_seed(0)
    if family == "decoder":
        model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", vocab_size=vocab_size, **overrides))
    elif family == "seq2seq":
        model = ZooSeq2SeqForConditionalGeneration(
            ZooSeq2SeqConfig.from_preset("tiny", vocab_size=vocab_size, **overrides))
        # A bias that is not zero: the aligned product must add it (it folds it into the product).
        model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape) * 0.1)
    else:
        model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", vocab_size=vocab_size, **overrides))
    return model.eval()


def batch_for(family: str, fraction_labelled: float = 1.0, vocab_size: int = VOCABULARY):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab_size, (2, 20), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    if fraction_labelled < 1:
        chosen = torch.rand(ids.shape, generator=generator) < fraction_labelled
        labels = labels.masked_fill(~chosen, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def results(model, batch, extra_loss_on_logits: bool):
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    total = out.loss + (out.logits.square().mean() if extra_loss_on_logits else 0)
    total.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.logits, out.loss.detach(), grads


# The same products, and a softmax whose sum has exact zeros (exp(-inf)) appended: on this machine the results came
# out bit-identical, but a BLAS may block a product differently for another row stride, and a vectorised sum groups a
# longer row differently, so float32 rounding of reordered sums, carried through two layers and a backward pass, is
# allowed: the bound test_skipped_work.py and test_optimised_paths.py use for the same kind of difference.
TOLERANCE = dict(atol=2e-5, rtol=1e-4)


def assert_same_results(aligned, plain):
    torch.testing.assert_close(aligned[0].detach(), plain[0].detach(), **TOLERANCE)
    torch.testing.assert_close(aligned[1], plain[1], **TOLERANCE)
    assert aligned[2].keys() == plain[2].keys() and aligned[2]
    for name in plain[2]:
        torch.testing.assert_close(aligned[2][name], plain[2][name], **TOLERANCE, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("vocabulary, element_size, width", [
    (50257, 4, 50272), (32000, 4, 32000), (30522, 4, 30528), (1001, 4, 1008), (50257, 2, 50272), (1, 4, 16)])
def test_aligned_width_is_the_next_whole_number_of_cache_lines(vocabulary, element_size, width):
    assert aligned_width(vocabulary, element_size) == width
    assert width * element_size % 64 == 0 and width - vocabulary < 64 // element_size


@pytest.mark.parametrize("accumulated", [False, True], ids=["mean", "num_items_in_batch"])
@pytest.mark.parametrize("extra_loss_on_logits", [False, True], ids=["loss", "loss-and-logits"])
@pytest.mark.parametrize("fraction_labelled", [1.0, 0.3], ids=["dense-labels", "few-labels"])
@pytest.mark.parametrize("family, overrides", CASES, ids=CASE_IDS)
def test_aligned_rows_give_the_same_logits_loss_and_gradients(
        family, overrides, fraction_labelled, extra_loss_on_logits, accumulated, every_product):
    model = build(family, **overrides)
    batch = batch_for(family, fraction_labelled)
    if accumulated:
        batch["num_items_in_batch"] = torch.tensor(31)
    aligned = results(model, batch, extra_loss_on_logits)
    # The layout was used: the logits are a view whose rows are the padded width apart.
    assert aligned[0].shape == (2, 20, VOCABULARY) and aligned[0].stride() == (20 * WIDTH, WIDTH, 1)
    plain_model = copy.deepcopy(model)
    plain_model.config.row_aligned_logits = False
    plain = results(plain_model, batch, extra_loss_on_logits)
    assert plain[0].stride() == (20 * VOCABULARY, VOCABULARY, 1)
    assert_same_results(aligned, plain)


@pytest.mark.parametrize("family", ["decoder", "seq2seq", "encoder"])
def test_the_loss_reads_padded_rows_whose_padding_has_zero_probability(family, every_product):
    model = build(family)
    hidden = torch.randn(2, 20, model.config.hidden_size)
    head = model.lm_head.decoder if family == "encoder" else model.lm_head
    extra = model.final_logits_bias if family == "seq2seq" else None
    logits, loss_logits = project_vocabulary(head, hidden, extra)
    assert loss_logits.shape == (2, 20, WIDTH)
    assert torch.equal(loss_logits[..., :VOCABULARY], logits)
    assert torch.all(loss_logits[..., VOCABULARY:] == float("-inf"))
    expected = head(hidden) + (0 if extra is None else extra)
    torch.testing.assert_close(logits, expected, **TOLERANCE)
    # Usual ways of reading logits still work on the strided view.
    assert logits.view(-1, VOCABULARY).shape == (40, VOCABULARY)
    torch.testing.assert_close(torch.log_softmax(loss_logits, -1)[..., :VOCABULARY], torch.log_softmax(expected, -1),
                               **TOLERANCE)


def test_products_below_the_measured_size_keep_the_plain_layout():
    model = build("decoder")
    batch = batch_for("decoder")
    # 40 rows x 1,001 x 64: far below MIN_MULTIPLY_ADDS, where the padding's overhead was not repaid.
    assert model(**batch).logits.stride(-2) == VOCABULARY
    hidden = torch.randn(1, vocabulary_module.MIN_MULTIPLY_ADDS // model.lm_head.weight.numel() + 1, 64)
    assert project_vocabulary(model.lm_head, hidden).logits.stride(-2) == WIDTH


@pytest.mark.parametrize("case", ["aligned vocabulary", "switched off", "float64", "bfloat16", "hooked head", "lora"])
def test_the_plain_layout_where_the_aligned_one_does_not_apply(case, every_product):
    vocab_size = 1024 if case == "aligned vocabulary" else VOCABULARY
    model = build("decoder", vocab_size=vocab_size)
    batch = batch_for("decoder", vocab_size=vocab_size)
    if case == "switched off":
        model.config.row_aligned_logits = False
    elif case in ("float64", "bfloat16"):
        model = model.to(getattr(torch, case))
    elif case == "hooked head":
        seen = []
        model.lm_head.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    elif case == "lora":
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["lm_head"]))
    out = model(**batch)
    assert out.logits.stride(-2) == vocab_size
    if case == "hooked head":
        assert seen == [(2, 20, vocab_size)]  # the hook saw the head's own call


@pytest.mark.parametrize("family", ["decoder", "seq2seq", "encoder"])
def test_autocast_keeps_the_plain_product_in_the_autocast_dtype(family, every_product):
    """Under torch.autocast(bfloat16) the head must compute what autocast asks for, as `lm_head(hidden)` does: a
    bfloat16 product. A product written with mm(out=float32 buffer) would silently run in float32 instead."""
    model = build(family)  # eval: no dropout, so the two calls below see the same inputs
    batch = batch_for(family)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        aligned = results(model, batch, extra_loss_on_logits=False)
        model.config.row_aligned_logits = False
        plain = results(model, batch, extra_loss_on_logits=False)
    assert aligned[0].dtype == torch.bfloat16 and aligned[0].stride(-2) == VOCABULARY
    # Both run the head's plain call: the same bits here. Another BLAS may block the bf16 products differently for
    # another buffer alignment, which can round a bfloat16 logit one unit (2**-8 relative) the other way: PyTorch's
    # default bfloat16 tolerance (rtol 1.6e-2) allows that and no more; the float32 loss gets the project's bound.
    torch.testing.assert_close(aligned[0], plain[0])
    torch.testing.assert_close(aligned[1], plain[1], **TOLERANCE)


def test_greedy_generation_is_the_same_with_aligned_rows(every_product):
    model = build("decoder")
    model.config.decoding_head_copy = False  # every step's projection through the layout under test
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    aligned = model.generate(prompt, **kwargs)
    model.config.row_aligned_logits = False
    plain = model.generate(prompt, **kwargs)
    assert torch.equal(aligned.sequences, plain.sequences)
    for a, b in zip(aligned.scores, plain.scores):
        torch.testing.assert_close(a, b, **TOLERANCE)


@pytest.fixture
def compile_errors_raise():
    """A graph that fails to compile must fail the test, not run eagerly (dynamo's suppress_errors off). Set with
    torch's own patch, not monkeypatch: pytest >= 9.1 restores an attribute missing from a module's __dict__ by
    deleting it, which hides a torch config entry for the rest of the run."""
    import torch._dynamo

    with torch._dynamo.config.patch(suppress_errors=False):
        yield


class GraphShapes:
    """A torch.compile backend that records the shapes of the traced forward graph's matrix products: F.linear's and
    the zoo's vocabulary operator's (transformer_zoo::vocabulary_logits), separately."""

    def __init__(self):
        self.products, self.vocabulary_products = [], []

    def __call__(self, graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target is torch._C._nn.linear:
                self.products.append(tuple(node.meta["example_value"].shape))
            elif node.target in (torch.ops.transformer_zoo.vocabulary_logits,
                                 torch.ops.transformer_zoo.vocabulary_logits.default):
                self.vocabulary_products.append(tuple(node.meta["example_value"].shape))
        return graph_module.forward


@pytest.mark.parametrize("family", ["decoder", "seq2seq", "encoder"])
def test_compiled_loss_uses_padded_rows_with_the_same_loss_and_gradients(family, every_product, compile_errors_raise):
    model = build(family)
    batch = batch_for(family, 0.3 if family == "encoder" else 1.0)
    eager = results(model, batch, extra_loss_on_logits=False)
    recorder = GraphShapes()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=recorder, fullgraph=True)
    model.zero_grad(set_to_none=True)
    out = compiled(**batch)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    torch._dynamo.reset()
    # The graph calls the zoo's operator for the vocabulary product, in padded rows, as eagerly; the logits it
    # returns have the vocabulary's width.
    assert recorder.vocabulary_products == [(40, WIDTH)]
    assert (2, 20, VOCABULARY) not in recorder.products
    assert out.logits.shape == (2, 20, VOCABULARY)
    assert_same_results((out.logits, out.loss.detach(), grads), eager)


def test_compiled_graphs_keep_the_plain_layout_below_the_measured_size(compile_errors_raise):
    model = build("decoder")
    recorder = GraphShapes()
    torch._dynamo.reset()
    torch.compile(model, backend=recorder, fullgraph=True)(**batch_for("decoder")).loss.backward()
    torch._dynamo.reset()
    assert (2, 20, VOCABULARY) in recorder.products and not recorder.vocabulary_products
