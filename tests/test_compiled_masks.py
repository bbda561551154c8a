"""The attention masks a compiled step passes to SDPA are the ones the eager step passes.

transformers' create_causal_mask searches position_ids for packed sequences. Under torch.compile that search cannot
be decided, so it returns a materialised [batch, 1, queries, keys] mask where eagerly it returns None and SDPA runs
is_causal. The stacks used to hand it their own default arange, so every compiled causal step (the seq2seq decoders
in training, the decoder without a cache) computed the whole attention square instead of the causal triangle. Only
positions the caller gives are passed on now; those still mark packed sequences, eagerly and compiled, and also where
use_cache is on (the default, training included), whose empty cache used to stop create_causal_mask looking."""

import pytest
import torch

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
)

# Packed rows against the same sequences run one by one: different shapes, so BLAS may group the float32 sums
# differently; the bound tests/test_optimised_paths.py uses for reordered products through two layers.
TOLERANCE = dict(atol=2e-5, rtol=1e-4)

SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "relative"]


def build(family: str, scheme: str):
    torch.manual_seed(0)
    # No dropout: the packed and separate runs must compute the same function, and attention dropout sends the
    # decoder's training step to the math path, whose masks are not the point here.
    common = dict(position_embedding_type=scheme, hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)
    if family == "decoder":
        model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", **common))
    else:
        model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny", **common))
    model.set_attn_implementation("sdpa")
    return model


def inputs_for(family: str, model, target_length: int = 16):
    generator = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (2, target_length), generator=generator)
    if family == "decoder":
        return {"input_ids": ids, "labels": ids, "use_cache": False}
    source = torch.randint(3, vocab, (2, 12), generator=generator)
    return {"input_ids": source, "decoder_input_ids": ids, "labels": ids, "use_cache": False}


def recorded_sdpa_calls(monkeypatch, run):
    """(mask shape or None, is_causal) of every SDPA call `run` makes eagerly, and of every SDPA node torch.compile
    puts in its graph for the same call."""
    eager_calls = []
    plain_sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(*args, attn_mask=None, is_causal=False, **kwargs):
        eager_calls.append((None if attn_mask is None else tuple(attn_mask.shape), is_causal))
        return plain_sdpa(*args, attn_mask=attn_mask, is_causal=is_causal, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
        run()

    compiled_calls = []

    def recording_backend(graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            if node.target is torch.nn.functional.scaled_dot_product_attention:
                mask = node.kwargs.get("attn_mask")
                shape = None if mask is None else tuple(mask.meta["example_value"].shape)
                compiled_calls.append((shape, node.kwargs.get("is_causal", False)))
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(run, backend=recording_backend, fullgraph=True)()
    torch._dynamo.reset()
    return eager_calls, compiled_calls


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_compiled_step_passes_the_eager_masks(monkeypatch, family, scheme):
    model = build(family, scheme).train()
    batch = inputs_for(family, model)
    eager_calls, compiled_calls = recorded_sdpa_calls(monkeypatch, lambda: model(**batch).loss)
    assert compiled_calls == eager_calls
    if scheme not in ("alibi", "relative"):
        # Without a score bias and without padding, the causal self-attention needs no mask at all.
        assert (None, True) in compiled_calls, compiled_calls


def packed_and_separate(family: str, model, compiled: bool, use_cache: bool):
    """Logits of two 8-token sequences packed in one 16-token row (their positions restarting at 0), and of the
    same sequences run one at a time."""
    batch = inputs_for(family, model)
    batch.pop("labels")
    batch["use_cache"] = use_cache
    ids = batch.pop("decoder_input_ids" if family == "seq2seq" else "input_ids")
    ids_key, positions_key = (("decoder_input_ids", "decoder_position_ids") if family == "seq2seq"
                              else ("input_ids", "position_ids"))
    positions = torch.cat([torch.arange(8), torch.arange(8)]).expand(ids.shape[0], -1)

    def packed():
        return model(**batch, **{ids_key: ids, positions_key: positions}).logits

    with torch.no_grad():
        packed_logits = torch.compile(packed, backend="aot_eager")() if compiled else packed()
        halves = [model(**batch, **{ids_key: ids[:, start:start + 8]}).logits for start in (0, 8)]
    torch._dynamo.reset()
    return packed_logits, torch.cat(halves, dim=1)


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
@pytest.mark.parametrize("scheme", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize(("compiled", "use_cache", "training"), [
    (False, False, False), (False, True, True), (True, False, False), (True, True, True),
], ids=["eager-no-cache-eval", "eager-cache-train", "compiled-no-cache-eval", "compiled-cache-train"])
def test_given_positions_still_mark_packed_sequences(family, scheme, compiled, use_cache, training):
    # Dropout is 0 (build), so training mode computes the same function; it is where the pretraining recipes pack.
    model = build(family, scheme).train(training)
    packed, separate = packed_and_separate(family, model, compiled, use_cache)
    torch.testing.assert_close(packed, separate, **TOLERANCE)


def test_generation_with_a_cache_is_unchanged():
    """The empty cache is left out of the mask only for a packed prefill: cached greedy decoding still gives the
    tokens of uncached decoding."""
    model = build("decoder", "rope").eval()
    prompt = inputs_for("decoder", model)["input_ids"][:, :6]
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    cached = model.generate(prompt, use_cache=True, **settings)
    uncached = model.generate(prompt, use_cache=False, **settings)
    assert torch.equal(cached, uncached)


def test_packed_rows_differ_from_one_long_sequence():
    """The check above can fail: the same packed row read as one 16-token sequence (no restarting positions) gives
    other logits for its second half."""
    model = build("decoder", "rope").eval()
    ids = inputs_for("decoder", model)["input_ids"]
    with torch.no_grad():
        whole = model(input_ids=ids, use_cache=False).logits
        second = model(input_ids=ids[:, 8:], use_cache=False).logits
    assert (whole[:, 8:] - second).abs().max() > 1e-2
