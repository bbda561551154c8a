"""`generate` decodes with a column-major copy of the output projection on CPU (modeling_zoo_generation.py). The copy
holds the same matrix, so every step's scores agree with the row-major projection to float rounding and the tokens
are the same: greedy, beam search, sampling, padded batches, assisted decoding, in both families that generate and
with tied and untied heads. The copy is used where it should be, nowhere else, and never outlives the call.
"""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import StoppingCriteria, StoppingCriteriaList

import transformer_zoo.modeling_zoo_generation as generation
from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
)


# A step's scores are dot products over 64 hidden units, summed in another order by the column-major product: on any
# CPU they differ by at most 2 x 64 unit roundoffs (7.6e-6) times sum |x_i w_i|, which is below 1 here (normed hidden
# states, weights of std 0.02), so atol 2e-5 is a bound, not what this machine happens to give; rtol covers the
# accumulated log-probabilities of beam search.
TOLERANCE = dict(atol=2e-5, rtol=1e-4)
SETTINGS = dict(do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)


def build(family, attn="sdpa", **overrides):
    torch.manual_seed(0)
    if family == "decoder":
        model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", **overrides))
    else:
        model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny", **overrides))
    model.set_attn_implementation(attn)
    return model.eval()


def prompts(batch=2, length=9, seed=0):
    ids = torch.randint(3, 1000, (batch, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1:, :3] = 0  # left padding, as decoder-only generation pads
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask


@pytest.fixture(autouse=True)
def copy_from_the_first_projection(monkeypatch):
    # In production a call starts row-major until a copy would have paid for itself (timed); here the copy is made at
    # once, so that every projection but none goes through it. test_the_copy_is_made_when_it_has_paid_for_itself
    # checks the timing rule with a fake clock.
    monkeypatch.setattr(generation, "expected_copy_seconds", lambda weight: 0.0)
    monkeypatch.setattr(generation, "_COPY_SECONDS", {})


class CopyUse:
    """Counts the copies made and the projections that went through one."""

    def __init__(self, monkeypatch):
        self.copies, self.products = 0, 0
        make, project = generation.column_major_copy, generation.DecodingHeadCopy.project

        def counting_copy(weight):
            self.copies += 1
            return make(weight)

        def counting_project(copy, head, hidden_states):
            logits = project(copy, head, hidden_states)
            self.products += copy.source is head.weight
            return logits

        monkeypatch.setattr(generation, "column_major_copy", counting_copy)
        monkeypatch.setattr(generation.DecodingHeadCopy, "project", counting_project)


def both_ways(model, *args, **kwargs):
    """generate() with the copy, then with the row-major projection, from the same random state."""
    torch.manual_seed(5)
    with_copy = model.generate(*args, **kwargs)
    model.config.decoding_head_copy = False
    torch.manual_seed(5)
    plain = model.generate(*args, **kwargs)
    model.config.decoding_head_copy = True
    return with_copy, plain


def assert_same_generation(with_copy, plain):
    torch.testing.assert_close(with_copy.sequences, plain.sequences, atol=0, rtol=0)
    # Every step's scores, not only the argmax (a tiny random model may repeat one token).
    assert len(with_copy.scores) == len(plain.scores)
    torch.testing.assert_close(torch.stack(with_copy.scores), torch.stack(plain.scores), **TOLERANCE)


CASES = [("decoder", dict(position_embedding_type="learned")),
         ("decoder", dict(position_embedding_type="rope", tie_word_embeddings=False)),
         ("decoder", dict(position_embedding_type="alibi", num_key_value_heads=2)),
         ("seq2seq", dict(position_embedding_type="sinusoidal")),
         ("seq2seq", dict(position_embedding_type="rope", tie_word_embeddings=False))]


@pytest.mark.parametrize("family, overrides", CASES, ids=[f"{f}-{'-'.join(map(str, o.values()))}" for f, o in CASES])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_greedy_generation_is_the_same_with_the_copy(family, overrides, attn, monkeypatch):
    model = build(family, attn, **overrides)
    ids, mask = prompts()
    use = CopyUse(monkeypatch)
    with_copy, plain = both_ways(model, ids, attention_mask=mask, max_new_tokens=12, **SETTINGS)
    assert_same_generation(with_copy, plain)
    # One copy; every step's projection went through it.
    assert (use.copies, use.products) == (1, 12)


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("mode", ["beams", "sampling"])
def test_beam_search_and_sampling_are_the_same_with_the_copy(family, mode, monkeypatch):
    model = build(family)
    ids, mask = prompts()
    use = CopyUse(monkeypatch)
    settings = dict(SETTINGS, max_new_tokens=8)
    settings.update(num_beams=3) if mode == "beams" else settings.update(do_sample=True, top_k=50)
    with_copy, plain = both_ways(model, ids, attention_mask=mask, **settings)
    torch.testing.assert_close(with_copy.sequences, plain.sequences, atol=0, rtol=0)
    torch.testing.assert_close(torch.stack(with_copy.scores), torch.stack(plain.scores), **TOLERANCE)
    assert use.copies == 1 and use.products == 8


def test_assisted_decoding_is_the_same_with_the_copy():
    model, assistant = build("decoder"), build("decoder", num_hidden_layers=1)
    ids, _ = prompts(batch=1)
    with_copy, plain = both_ways(model, ids, assistant_model=assistant, max_new_tokens=10, **SETTINGS)
    torch.testing.assert_close(with_copy.sequences, plain.sequences, atol=0, rtol=0)
    assert "_decoding_head_copy" not in model.__dict__ and "_decoding_head_copy" not in assistant.__dict__


def test_the_copy_is_the_same_matrix_column_major(monkeypatch):
    weight = torch.randn(1003, 24)
    monkeypatch.setattr(generation, "TRANSPOSE_BLOCK_BYTES", 24 * 4 * 100)  # 100 rows a block, the last one partial
    copy = generation.column_major_copy(weight)
    assert copy.shape == weight.shape and copy.stride() == (1, 1003)
    assert torch.equal(copy, weight)


class FakeClock:
    """perf_counter for modeling_zoo_generation: every reading is a second after the one before, or `steps[i]`
    seconds after it for the i-th reading."""

    def __init__(self, steps=()):
        self.now, self.steps = 0.0, list(steps)

    def __call__(self):
        self.now += self.steps.pop(0) if self.steps else 1.0
        return self.now


@pytest.mark.parametrize("tokens, copied_at", [(1, None), (3, None), (8, 4)])
def test_the_copy_is_made_when_it_has_paid_for_itself(tokens, copied_at, monkeypatch):
    model = build("decoder")
    monkeypatch.undo()  # the real rule, with a fake clock: each row-major product takes one second
    monkeypatch.setattr(generation, "perf_counter", FakeClock())
    monkeypatch.setattr(generation, "_COPY_SECONDS", {(tuple(model.lm_head.weight.shape), torch.float32): 2.5})
    use = CopyUse(monkeypatch)
    model.generate(prompts()[0], max_new_tokens=tokens, do_sample=False, pad_token_id=0)
    # Three row-major seconds pass the expected 2.5: the fourth projection makes the copy and uses it.
    assert (use.copies, use.products) == ((0, 0) if copied_at is None else (1, tokens - copied_at + 1))
    if copied_at is not None:
        assert generation._COPY_SECONDS[(tuple(model.lm_head.weight.shape), torch.float32)] == 1.0  # the fake copy


def timed_copy_generation(monkeypatch, second_product_seconds: float):
    """A model whose copy is made at the fourth projection (three row-major products of 1 s pass the expected 2.5 s;
    the copy takes 1 s) and whose first product through the copy takes 5 s, the second `second_product_seconds`."""
    model = build("decoder")
    monkeypatch.undo()
    key = (tuple(model.lm_head.weight.shape), torch.float32)
    monkeypatch.setattr(generation, "_COPY_SECONDS", {key: 2.5})
    monkeypatch.setattr(generation, "perf_counter", FakeClock([1.0] * 8 + [1.0, 5.0, 1.0, second_product_seconds]))
    return model, key, CopyUse(monkeypatch)


def test_a_copy_whose_product_is_slower_is_dropped_for_good(monkeypatch):
    model, key, use = timed_copy_generation(monkeypatch, second_product_seconds=5.0)
    ids, mask = prompts()
    with_copy = model.generate(ids, attention_mask=mask, max_new_tokens=8, **SETTINGS)
    assert use.copies == 1 and use.products == 0  # made, tried twice, dropped: the rest of the call is row-major
    assert generation._COPY_SECONDS[key] == float("inf")
    model.generate(ids, attention_mask=mask, max_new_tokens=8, **SETTINGS)
    assert use.copies == 1  # never copied again in this process
    model.config.decoding_head_copy = False
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=8, **SETTINGS)
    assert_same_generation(with_copy, plain)


def test_one_slow_product_through_the_copy_does_not_drop_it(monkeypatch):
    model, key, use = timed_copy_generation(monkeypatch, second_product_seconds=0.5)  # a noisy first timing
    model.generate(prompts()[0], max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert use.copies == 1 and use.products == 5  # the fourth projection onward went through the copy
    assert generation._COPY_SECONDS[key] == 1.0


def test_a_shape_never_copied_expects_its_bytes_at_the_assumed_rate(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setattr(generation, "_COPY_SECONDS", {})
    weight = torch.zeros(1000, 64)
    assert generation.expected_copy_seconds(weight) == 1000 * 64 * 4 / generation.ASSUMED_COPY_BYTES_PER_SECOND
    generation._COPY_SECONDS[((1000, 64), torch.float32)] = 0.25
    assert generation.expected_copy_seconds(weight) == 0.25


def test_the_copy_does_not_outlive_the_call_even_when_generation_fails():
    model = build("decoder")

    class Failing(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            assert "_decoding_head_copy" in model.__dict__  # held during the call
            raise RuntimeError("stopped by the test")

    with pytest.raises(RuntimeError, match="stopped by the test"):
        model.generate(prompts()[0], max_new_tokens=4, stopping_criteria=StoppingCriteriaList([Failing()]),
                       pad_token_id=0)
    assert "_decoding_head_copy" not in model.__dict__
    model.generate(prompts()[0], max_new_tokens=3, pad_token_id=0)
    assert "_decoding_head_copy" not in model.__dict__


def test_a_plain_forward_never_uses_the_copy(monkeypatch):
    model = build("decoder")
    use = CopyUse(monkeypatch)
    for _ in range(3):
        model(prompts()[0])
    assert (use.copies, use.products) == (0, 0)


@pytest.mark.parametrize("reason", ["config off", "hooked head", "bfloat16", "too many rows"])
def test_the_row_major_projection_is_kept_where_the_copy_does_not_apply(reason, monkeypatch):
    model = build("decoder")
    calls = []
    if reason == "config off":
        model.config.decoding_head_copy = False
    elif reason == "hooked head":
        model.lm_head.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    elif reason == "bfloat16":
        model = model.to(torch.bfloat16)
    else:
        monkeypatch.setattr(generation, "DECODING_COPY_MAX_ROWS", 1)  # the batch below has 2 rows
    use = CopyUse(monkeypatch)
    model.generate(prompts()[0], max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert use.products == 0
    if reason == "hooked head":
        assert len(calls) == 5  # the hook saw every step


def test_a_peft_wrapped_head_is_called_as_a_module(monkeypatch):
    model = build("decoder", tie_word_embeddings=False)
    ids, mask = prompts()
    peft_model = get_peft_model(model, LoraConfig(target_modules=["lm_head"], r=2, init_lora_weights=False))
    use = CopyUse(monkeypatch)
    with_copy, plain = both_ways(peft_model, input_ids=ids, attention_mask=mask, max_new_tokens=6, **SETTINGS)
    assert_same_generation(with_copy, plain)
    assert use.products == 0  # LoRA's update must reach the logits: the wrapped head is called


def test_the_option_is_checked_and_saved(tmp_path):
    with pytest.raises(Exception, match="decoding_head_copy"):
        ZooDecoderConfig(decoding_head_copy="yes")
    config = ZooSeq2SeqConfig.from_preset("tiny", decoding_head_copy=False)
    config.save_pretrained(tmp_path)
    assert ZooSeq2SeqConfig.from_pretrained(tmp_path).decoding_head_copy is False


# Compiled decoding: `generate` with a static cache compiles its decoding steps; the copy is chosen at the prefill
# and handed to the compiled graph as an input. The backend below records each graph's inputs and runs the graph
# dynamo captured uncompiled, which keeps these tests fast; what it is given is what inductor would be given.


class GraphInputs:
    """Per graph compiled, whether it reads the output projection column-major (an input of shape (vocabulary,
    hidden) with strides (1, vocabulary)). `backend` is the torch.compile backend that records it, a function:
    transformers deep-copies the compile config, and a function survives that as itself."""

    def __init__(self, vocabulary: int, hidden: int):
        self.graphs = []

        def backend(graph_module, example_inputs, **compile_options):
            self.graphs.append(any(tuple(t.shape) == (vocabulary, hidden) and t.stride() == (1, vocabulary)
                                   for t in example_inputs if isinstance(t, torch.Tensor)))
            return graph_module.forward

        self.backend = backend


def compiled_settings(graphs: GraphInputs, **overrides):
    from transformers import CompileConfig

    config = CompileConfig(backend=graphs.backend, fullgraph=True)
    config._compile_all_devices = True  # transformers compiles generation on CPU only when told to
    return dict(SETTINGS, cache_implementation="static", compile_config=config, **overrides)


@pytest.fixture
def fresh_dynamo():
    # Compiled code is cached per code object across models of one shape; each test compiles its own.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def copy_faster(monkeypatch):
    """The products timed before compiled decoding: 1 s row-major, 0.5 s through a copy (the tiny model's real
    timings are noise)."""
    monkeypatch.setattr(generation, "product_seconds",
                        lambda rows, weight, bias: 0.5 if weight.stride()[0] == 1 else 1.0)


@pytest.mark.parametrize("family, overrides", [("decoder", dict(position_embedding_type="rope")),
                                               ("decoder", dict(position_embedding_type="learned",
                                                                tie_word_embeddings=False)),
                                               ("seq2seq", dict(position_embedding_type="sinusoidal"))])
def test_compiled_decoding_reads_the_copy_and_generates_the_same(family, overrides, fresh_dynamo, copy_faster):
    model = build(family, **overrides)
    ids, mask = prompts()
    graphs = GraphInputs(*model.lm_head.weight.shape)
    with_copy, plain = both_ways(model, ids, attention_mask=mask, **compiled_settings(graphs, max_new_tokens=8))
    assert_same_generation(with_copy, plain)
    # One decoding graph with the copy as an input, then, with the copy off, one without: the first graph's guards
    # reject a call that has no copy.
    assert graphs.graphs == [True, False]


def test_a_graph_compiled_without_a_copy_is_not_reused_by_a_call_with_one(fresh_dynamo, copy_faster):
    model = build("decoder")
    ids, mask = prompts()
    graphs = GraphInputs(*model.lm_head.weight.shape)
    settings = compiled_settings(graphs, max_new_tokens=6)
    model.config.decoding_head_copy = False
    plain = model.generate(ids, attention_mask=mask, **settings)
    model.config.decoding_head_copy = True
    with_copy = model.generate(ids, attention_mask=mask, **settings)
    assert graphs.graphs == [False, True]
    assert_same_generation(with_copy, plain)
    # A later call's new copy is read by the same graph: nothing recompiles.
    model.generate(ids, attention_mask=mask, **settings)
    assert graphs.graphs == [False, True]
    assert "_decoding_head_copy" not in model.__dict__


@pytest.mark.parametrize("limit, copied", [(dict(max_new_tokens=3), False), (dict(max_new_tokens=4), True),
                                           (dict(max_length=12), True)])
def test_compiled_decoding_copies_when_its_steps_would_pay_for_it(limit, copied, fresh_dynamo, copy_faster,
                                                                   monkeypatch):
    # A copy is expected to take 2.5 s and a row-major product 1 s: 2 decoding steps (3 new tokens) would not pay,
    # 3 would; with only max_length set the number of steps is not bounded in advance, so the copy is made.
    monkeypatch.setattr(generation, "expected_copy_seconds", lambda weight: 2.5)
    model = build("decoder")
    graphs = GraphInputs(*model.lm_head.weight.shape)
    model.generate(prompts()[0], **compiled_settings(graphs, **limit))
    assert graphs.graphs == [copied]


def test_compiled_decoding_drops_a_copy_whose_product_is_slower(fresh_dynamo, monkeypatch):
    monkeypatch.setattr(generation, "product_seconds",
                        lambda rows, weight, bias: 2.0 if weight.stride()[0] == 1 else 1.0)
    model = build("decoder")
    graphs = GraphInputs(*model.lm_head.weight.shape)
    model.generate(prompts()[0], **compiled_settings(graphs, max_new_tokens=5))
    assert graphs.graphs == [False]
    assert generation._COPY_SECONDS[(tuple(model.lm_head.weight.shape), torch.float32)] == float("inf")
