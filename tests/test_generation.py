"""Generation through transformers' GenerationMixin: caches, greedy, sampling, beam search and left padding.

Every comparison of logits uses 1e-5 in fp32. eos_token_id=None keeps every generated sequence at full length, so
rows can be compared position by position; pad_token_id is always passed.
"""

import pytest
import torch
from torch.testing import assert_close
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, StaticCache


TOL = dict(rtol=1e-5, atol=1e-5)
TOKEN_POSITIONS = ["sinusoidal", "learned", "rope", "alibi", "relative", "none"]
NEW_TOKENS = 6
GEN = dict(max_new_tokens=NEW_TOKENS, pad_token_id=0, eos_token_id=None)

# (family, preset, overrides): the decoder presets ("tiny" is GPT-2-like with learned positions, "tiny-llama" has
# rope, RMSNorm, SwiGLU and GQA), every other position scheme, and GQA/MQA with the score-bias schemes (sdpa's
# single-query GQA path packs the bias too). The seq2seq "tiny" preset is the sinusoidal case.
DECODER_CASES = (
    [("decoder", "tiny", {}), ("decoder", "tiny-llama", {})]
    + [("decoder", "tiny", {"position_embedding_type": p}) for p in TOKEN_POSITIONS if p != "learned"]
    + [
        ("decoder", "tiny-llama", {"position_embedding_type": "alibi"}),
        ("decoder", "tiny", {"position_embedding_type": "relative", "num_key_value_heads": 1}),
    ]
)
SEQ2SEQ_CASES = [("seq2seq", "tiny", {})] + [
    ("seq2seq", "tiny", {"position_embedding_type": p}) for p in TOKEN_POSITIONS if p != "sinusoidal"
]
ALL_CASES = DECODER_CASES + SEQ2SEQ_CASES


def case_id(case):
    family, preset, overrides = case
    parts = [family, preset] + [f"{k}={v}" for k, v in overrides.items()]
    return "-".join(parts)


def prompts(random_ids, pad_batch, family):
    """Two prompts of different lengths, padded as generate expects: left for decoders, right for encoders."""
    ids = random_ids(2, 6, seed=11)
    sequences = [ids[0], ids[1, :3]]
    return sequences, pad_batch(sequences, "left" if family == "decoder" else "right")


def cache_class(family):
    return DynamicCache if family == "decoder" else EncoderDecoderCache


# ------------------------------------------------------------------------------------------------ greedy
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_greedy_with_cache_equals_without(case, implementation, make_config, make_model, random_ids, pad_batch):
    family, preset, overrides = case
    model = make_model(family, make_config(family, preset, **overrides), implementation)
    _, (input_ids, attention_mask) = prompts(random_ids, pad_batch, family)
    common = dict(GEN, do_sample=False, return_dict_in_generate=True, output_logits=True)
    cached = model.generate(input_ids, attention_mask=attention_mask, use_cache=True, **common)
    uncached = model.generate(input_ids, attention_mask=attention_mask, use_cache=False, **common)
    assert isinstance(cached.cache, Cache) and isinstance(cached.cache, cache_class(family))
    if family == "seq2seq":
        # Self-attention grows step by step; cross-attention keys/values were computed once for every layer.
        assert isinstance(cached.cache.self_attention_cache, DynamicCache)
        assert isinstance(cached.cache.cross_attention_cache, DynamicCache)
        assert all(cached.cache.is_updated.get(i) for i in range(model.config.decoder_layers))
    assert uncached.cache is None
    assert torch.equal(cached.sequences, uncached.sequences)
    assert len(cached.logits) == len(uncached.logits) == NEW_TOKENS
    for step_cached, step_uncached in zip(cached.logits, uncached.logits):
        assert_close(step_cached, step_uncached, **TOL)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_greedy_with_static_cache_equals_dynamic(
    case, implementation, make_config, make_model, random_ids, pad_batch
):
    # A StaticCache holds max_cache_len key slots from the start (the unused ones masked), so every per-step tensor
    # sized by the key length (masks, and the alibi/relative score biases) must follow the cache, not the tokens seen.
    family, preset, overrides = case
    model = make_model(family, make_config(family, preset, **overrides), implementation)
    _, (input_ids, attention_mask) = prompts(random_ids, pad_batch, family)
    common = dict(GEN, do_sample=False, return_dict_in_generate=True, output_logits=True)
    dynamic = model.generate(input_ids, attention_mask=attention_mask, **common)
    static = model.generate(input_ids, attention_mask=attention_mask, cache_implementation="static", **common)
    self_cache = static.cache.self_attention_cache if family == "seq2seq" else static.cache
    assert isinstance(self_cache, StaticCache)
    assert torch.equal(static.sequences, dynamic.sequences)
    for step_static, step_dynamic in zip(static.logits, dynamic.logits):
        assert_close(step_static, step_dynamic, **TOL)


# ------------------------------------------------------------------------------------------------ incremental
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_incremental_decoding_matches_full_forward(
    case, implementation, make_config, make_model, random_ids, pad_batch
):
    # Prefill 4 tokens, then a chunk of 2 (several queries against a non-empty cache), then one token at a time;
    # every step's logits must equal the full (uncached) forward pass at those positions. Decoders use a left-padded
    # batch with position ids counting real tokens; the seq2seq source is right-padded.
    family, preset, overrides = case
    model = make_model(family, make_config(family, preset, **overrides), implementation)
    prefill, total = 4, 8
    if family == "decoder":
        ids = random_ids(2, total, seed=12)
        input_ids, attention_mask = pad_batch([ids[0], ids[1, 3:]], "left")
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

        def run(sl, cache=None, use_cache=False):
            return model(
                input_ids=input_ids[:, sl],
                attention_mask=attention_mask[:, : sl.stop],
                position_ids=position_ids[:, sl],
                cache=cache,
                use_cache=use_cache,
            )

        valid = attention_mask.bool()
    else:
        source = random_ids(2, 6, seed=13)
        source_ids, source_mask = pad_batch([source[0], source[1, :4]], "right")
        input_ids = torch.cat([torch.ones(2, 1, dtype=torch.long), random_ids(2, total - 1, seed=14)], dim=1)
        encoder_outputs = model.get_encoder()(input_ids=source_ids, attention_mask=source_mask)

        def run(sl, cache=None, use_cache=False):
            return model(
                encoder_outputs=encoder_outputs,
                attention_mask=source_mask,
                decoder_input_ids=input_ids[:, sl],
                cache=cache,
                use_cache=use_cache,
            )

        valid = torch.ones(2, total, dtype=torch.bool)

    with torch.no_grad():
        full = run(slice(0, total)).logits
        out = run(slice(0, prefill), use_cache=True)
        assert isinstance(out.cache, cache_class(family))
        steps = [out.logits]
        for start, stop in [(prefill, prefill + 2)] + [(t, t + 1) for t in range(prefill + 2, total)]:
            out = run(slice(start, stop), cache=out.cache, use_cache=True)
            steps.append(out.logits)
        assert out.cache.get_seq_length() == total
    incremental = torch.cat(steps, dim=1)
    assert_close(incremental[valid], full[valid], **TOL)


# ------------------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize("case", [DECODER_CASES[0], DECODER_CASES[1], SEQ2SEQ_CASES[0]], ids=case_id)
def test_sampling_is_reproducible_and_in_vocab(case, make_config, make_model, random_ids, pad_batch):
    family, preset, overrides = case
    config = make_config(family, preset, **overrides)
    model = make_model(family, config, "sdpa")
    _, (input_ids, attention_mask) = prompts(random_ids, pad_batch, family)
    sampling = dict(GEN, do_sample=True, temperature=0.8, top_k=50, top_p=0.9, max_new_tokens=10)

    def sample(seed, **extra):
        torch.manual_seed(seed)
        return model.generate(input_ids, attention_mask=attention_mask, **{**sampling, **extra})

    first, again = sample(1234), sample(1234)
    assert torch.equal(first, again)
    new = first[:, -10:]
    assert new.shape == (2, 10)
    assert new.min() >= 0 and new.max() < config.vocab_size
    # top_k=1 keeps only the arg-max token, so sampling must reproduce greedy decoding whatever the seed.
    greedy = model.generate(input_ids, attention_mask=attention_mask, do_sample=False, **{**GEN, "max_new_tokens": 10})
    assert torch.equal(sample(99, top_k=1), greedy)


# ------------------------------------------------------------------------------------------------ beam search
BEAM_CASES = [
    ("decoder", "tiny", {}),
    ("decoder", "tiny-llama", {}),
    ("decoder", "tiny", {"position_embedding_type": "alibi"}),
    ("seq2seq", "tiny", {}),
    ("seq2seq", "tiny", {"position_embedding_type": "relative"}),
]


@pytest.mark.parametrize("case", BEAM_CASES, ids=case_id)
def test_beam_search_with_cache_equals_without(case, make_config, make_model, random_ids, pad_batch):
    family, preset, overrides = case
    config = make_config(family, preset, **overrides)
    model = make_model(family, config, "sdpa")
    _, (input_ids, attention_mask) = prompts(random_ids, pad_batch, family)
    beam = dict(
        GEN, num_beams=3, num_return_sequences=2, do_sample=False, return_dict_in_generate=True, output_scores=True
    )
    cached = model.generate(input_ids, attention_mask=attention_mask, use_cache=True, **beam)
    uncached = model.generate(input_ids, attention_mask=attention_mask, use_cache=False, **beam)
    assert cached.sequences.shape[0] == 2 * input_ids.shape[0]
    assert torch.equal(cached.sequences, uncached.sequences)
    assert_close(cached.sequences_scores, uncached.sequences_scores, **TOL)
    # Returned best-first per input, and the two returned beams of an input differ.
    scores = cached.sequences_scores.view(2, 2)
    assert torch.all(scores[:, 0] >= scores[:, 1])
    pairs = cached.sequences.view(2, 2, -1)
    assert all(not torch.equal(pairs[i, 0], pairs[i, 1]) for i in range(2))
    assert cached.sequences.min() >= 0 and cached.sequences.max() < config.vocab_size


def test_beam_search_leaves_the_cross_attention_cache_in_place(make_config, make_model, random_ids, monkeypatch):
    """The seq2seq model reorders only the decoder's self-attention cache between beam-search steps (its
    `_reorder_cache`): three sources of different lengths, so the cross-attention rows of different sources differ
    and a beam taking a parent from another source would change the output. Tokens and scores must equal those of
    transformers' own reordering of both caches, with ends of sequence on, so beams finish at different steps."""
    from transformers.cache_utils import DynamicLayer

    from transformer_zoo import ZooSeq2SeqForConditionalGeneration

    model = make_model("seq2seq", make_config("seq2seq", "tiny"), "sdpa")
    ids = random_ids(3, 16, seed=5)  # longer than any output, so a cross-attention layer is told by its length
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 9:] = attention_mask[2, 4:] = 0
    beam = dict(max_new_tokens=12, num_beams=4, num_return_sequences=2, pad_token_id=0, eos_token_id=3,
                do_sample=False, return_dict_in_generate=True, output_scores=True)
    reordered = []  # the length (positions) of each layer the reorder copies
    original = DynamicLayer.reorder_cache

    def counting(layer, beam_idx):
        reordered.append(layer.keys.shape[-2] if layer.is_initialized else 0)
        return original(layer, beam_idx)

    monkeypatch.setattr(DynamicLayer, "reorder_cache", counting)
    ours = model.generate(ids, attention_mask=attention_mask, **beam)
    ours_reorders = list(reordered)
    reordered.clear()
    monkeypatch.setattr(ZooSeq2SeqForConditionalGeneration, "_reorder_cache",
                        staticmethod(lambda cache, beam_idx: cache.reorder_cache(beam_idx) or cache))
    both = model.generate(ids, attention_mask=attention_mask, **beam)
    assert torch.equal(ours.sequences, both.sequences)
    assert_close(ours.sequences_scores, both.sequences_scores, **TOL)
    # Ours reorders only self-attention layers (shorter than the source); transformers' own copies the
    # cross-attention layers (keys over the 16 source positions) as often again.
    assert ours_reorders and all(length < ids.shape[1] for length in ours_reorders)
    assert len(reordered) == 2 * len(ours_reorders)
    assert sum(length == ids.shape[1] for length in reordered) == len(ours_reorders)


def test_the_beam_search_cache_benchmark_times_both_reorderings_and_writes_its_report(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    from transformer_zoo import ZooSeq2SeqForConditionalGeneration

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "beam_search_cache.py"
    spec = importlib.util.spec_from_file_location("beam_search_cache", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ours = ZooSeq2SeqForConditionalGeneration.__dict__["_reorder_cache"]
    assert module.main(["--source-lengths", "6,12", "--batch-size", "2", "--new-tokens", "3", "--rounds", "2",
                        "--steps", "1", "--output", str(tmp_path / "r.json")]) == 0
    assert ZooSeq2SeqForConditionalGeneration.__dict__["_reorder_cache"] is ours  # the stand-in was taken out again
    record = json.loads((tmp_path / "r.json").read_text())
    assert [row["source_length"] for row in record["rows"]] == [6, 12]
    assert all(row["identical_tokens_and_scores"] and len(row["rounds"]["both_caches"]) == 2 for row in record["rows"])
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit):
        module.parse_args(["--source-lengths", "32,x"])


# ------------------------------------------------------------------------------------------------ padding
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_padded_batch_generates_as_each_prompt_alone(
    case, implementation, make_config, make_model, random_ids, pad_batch
):
    # Decoders: left padding (generate builds position ids from the mask; relative schemes measure distances in
    # cache slots, which padding shifts uniformly). Seq2seq: right-padded sources, masked in the encoder and in
    # cross-attention. Tokens must match exactly and every step's logits to 1e-5.
    family, preset, overrides = case
    model = make_model(family, make_config(family, preset, **overrides), implementation)
    sequences, (input_ids, attention_mask) = prompts(random_ids, pad_batch, family)
    assert bool((attention_mask == 0).any())
    common = dict(GEN, do_sample=False, return_dict_in_generate=True, output_logits=True)
    batched = model.generate(input_ids, attention_mask=attention_mask, **common)
    for row, sequence in enumerate(sequences):
        alone = model.generate(sequence[None], attention_mask=torch.ones(1, len(sequence), dtype=torch.long), **common)
        assert torch.equal(batched.sequences[row, -NEW_TOKENS:], alone.sequences[0, -NEW_TOKENS:])
        for step_batched, step_alone in zip(batched.logits, alone.logits):
            assert_close(step_batched[row], step_alone[0], **TOL)
        assert_close(batched.logits[-1][row], alone.logits[-1][0], **TOL)
