"""Efficient attention variants (transformer_zoo/modeling_zoo_attention_variants.py) against exact attention.

* sliding window: hand-computed outputs; equal to the dense softmax under transformers' masking_utils mask with the
  same window-or-global rule (causal, bidirectional, global tokens, padding); window >= n equals full attention in
  whole models (GQA included); the FlexAttention BlockMask path equals the blocked kernel;
* Linformer: k = n with identity projections equals full attention; refused for causal models;
* Performer: the chunked causal prefix sums equal the quadratic formula with the same features; the error against
  softmax attention falls as the feature count grows (measured); redraws are seeded and happen only in training;
* the causal variants leak nothing from the future; cached generation equals uncached generation;
* position schemes that cannot work are refused with a message; save / reload (in-process and with remote code in a
  fresh interpreter) reproduces the outputs; the pretraining recipe trains with the variants through
  --model_overrides.
"""

import copy
import math
import random

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from integration_helpers import NO_DROPOUT, run_fresh_python
from transformers import AutoConfig
from transformers.masking_utils import (
    and_masks,
    bidirectional_mask_function,
    causal_mask_function,
)

import transformer_zoo as tz
from transformer_zoo import configuration_zoo_common
from transformer_zoo.modeling_zoo_attention_variant_kernels import (
    draw_orthogonal_features,
    favor_features,
    performer_attention,
    sliding_window_attention,
    sliding_window_mask_function,
)
from transformer_zoo.modeling_zoo_attention_variants import ATTENTION_VARIANTS, LinformerAttention, PerformerAttention

# A config validator's ValueError reaches the caller wrapped in huggingface_hub's StrictDataclassClassValidationError.
CONFIG_ERRORS = (ValueError, StrictDataclassError)


def decoder(**overrides):
    config = tz.ZooDecoderConfig.from_preset("tiny", initializer_range=0.1, **NO_DROPOUT, **overrides)
    torch.manual_seed(0)
    return tz.ZooDecoderForCausalLM(config).eval()


def encoder(**overrides):
    config = tz.ZooEncoderConfig.from_preset("tiny", initializer_range=0.1, **NO_DROPOUT, **overrides)
    torch.manual_seed(0)
    return tz.ZooEncoderModel(config).eval()


def same_weights(model_class, source, **config_changes):
    """A model of another attention variant holding `source`'s weights (variant parameters excluded)."""
    config = copy.deepcopy(source.config)
    for key, value in config_changes.items():
        setattr(config, key, value)
    target = model_class(config).eval()
    missing, unexpected = target.load_state_dict(source.state_dict(), strict=False)
    assert not unexpected and all("attention_variant" in name for name in missing), (missing, unexpected)
    return target


def test_registry_matches_config_choices():
    assert tuple(ATTENTION_VARIANTS) == configuration_zoo_common.ATTENTION_VARIANTS


# ================================================================================================ sliding window
def test_sliding_window_hand_computed():
    # Zero queries give uniform weights over the visible keys, so each output is the mean of the visible values.
    values = torch.tensor([1.0, 2.0, 4.0, 8.0]).view(1, 1, 4, 1)
    query = key = torch.zeros(1, 1, 4, 1)

    def run(global_indices, causal):
        return sliding_window_attention(query, key, values, 1, global_indices, causal, None, 1.0).flatten().tolist()

    assert run((), False) == pytest.approx([1.5, 7 / 3, 14 / 3, 6.0])
    assert run((), True) == pytest.approx([1.0, 1.5, 3.0, 6.0])
    # Slot 3 global: everyone sees it, and it sees everyone.
    assert run((3,), False) == pytest.approx([11 / 3, 15 / 4, 14 / 3, 15 / 4])
    # Causal with slot 0 global: slot 3 sees 0, 2, 3.
    assert run((0,), True) == pytest.approx([1.0, 1.5, 7 / 3, 13 / 3])


def _dense_reference(query, key, value, window, global_indices, causal, padding):
    """Softmax attention under the n x n boolean mask that transformers' mask functions give for the same rule."""
    n = query.shape[-2]
    is_global = torch.zeros(n, dtype=torch.bool)
    is_global[list(global_indices)] = True
    rule = and_masks(causal_mask_function if causal else bidirectional_mask_function,
                     sliding_window_mask_function(window, is_global if global_indices else None))
    q_idx, kv_idx = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = rule(0, 0, q_idx, kv_idx)[None, None]
    if padding is not None:
        allowed = allowed & padding[:, None, None, :]
    scores = (query @ key.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1) @ value


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window, global_indices", [(1, ()), (3, ()), (3, (0,)), (2, (0, 5, 12)), (4, (16,))])
def test_sliding_window_equals_dense_masked_softmax(causal, window, global_indices):
    generator = torch.Generator().manual_seed(window)
    query, key, value = (torch.randn(2, 3, 17, 8, generator=generator) for _ in range(3))
    padding = torch.ones(2, 17, dtype=torch.bool)
    padding[1, 14:] = False  # right padding in the second row
    expected = _dense_reference(query, key, value, window, global_indices, causal, padding)
    actual = sliding_window_attention(query, key, value, window, global_indices, causal, padding, 1.0)
    # Padded query rows are never read; compare the real ones.
    torch.testing.assert_close(actual[0], expected[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(actual[1, :, :14], expected[1, :, :14], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["decoder", "encoder"])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_window_covering_the_sequence_equals_full_attention(family, implementation):
    # GQA (2 key/value heads for 4 query heads) and left/right padding included.
    build, model_class = (decoder, tz.ZooDecoderForCausalLM) if family == "decoder" else (encoder, tz.ZooEncoderModel)
    full = build(num_key_value_heads=2, attn_implementation=implementation)
    windowed = same_weights(model_class, full, attention_variant="sliding_window", attention_window=12)
    ids = torch.randint(5, 1000, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0 if family == "decoder" else 1
    mask[1, -3:] = 1 if family == "decoder" else 0
    with torch.no_grad():
        expected = full(ids, attention_mask=mask)
        actual = windowed(ids, attention_mask=mask)
    key = "logits" if family == "decoder" else "last_hidden_state"
    keep = mask.bool()
    torch.testing.assert_close(actual[key][keep], expected[key][keep], rtol=0, atol=1e-5)


def test_flex_block_mask_path_equals_blocked_kernel():
    # FlexAttention gets the window as a block-sparse BlockMask (forward only: torch 2.13 has no CPU backward).
    blocked = decoder(attention_variant="sliding_window", attention_window=3, global_attention_indices=[0],
                      attn_implementation="sdpa")
    flex = same_weights(tz.ZooDecoderForCausalLM, blocked)
    flex.set_attn_implementation("flex_attention")
    ids = torch.randint(5, 1000, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(flex(ids).logits, blocked(ids).logits, rtol=0, atol=1e-5)


# ================================================================================================ Linformer
@pytest.mark.parametrize("sharing", ["head", "layer", "key_value"])
def test_linformer_identity_projection_equals_full_attention(sharing):
    full = encoder(max_position_embeddings=16)
    linformer = same_weights(tz.ZooEncoderModel, full, attention_variant="linformer", linformer_k=16,
                             linformer_sharing=sharing)
    for module in linformer.modules():
        if isinstance(module, LinformerAttention):
            for parameter in (module.key_projection, module.value_projection):
                if parameter is not None:
                    parameter.data.copy_(torch.eye(16).expand_as(parameter))
    ids = torch.randint(5, 1000, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(linformer(ids).last_hidden_state, full(ids).last_hidden_state, rtol=0, atol=1e-5)
    attention = linformer.layers[0].self_attn.attention_variant
    assert tuple(attention.key_projection.shape) == (4 if sharing == "head" else 1, 16, 16)
    assert (attention.value_projection is None) == (sharing == "key_value")


def test_linformer_projects_to_k_and_checks_the_length():
    model = encoder(attention_variant="linformer", linformer_k=8, linformer_max_length=32)
    ids = torch.randint(5, 1000, (2, 20))
    out = model(ids, output_attentions=True)
    assert out.attentions[0].shape == (2, 4, 20, 8)  # n x k weights, not n x n
    with pytest.raises(ValueError, match="longer than linformer_max_length=32"):
        model(torch.randint(5, 1000, (1, 33)))


def test_linformer_refuses_causal_use():
    with pytest.raises(CONFIG_ERRORS, match="linformer.*causal"):
        tz.ZooDecoderConfig.from_preset("tiny", attention_variant="linformer", linformer_k=8)
    config = tz.ZooEncoderConfig.from_preset("tiny", attention_variant="linformer", linformer_k=8)
    with pytest.raises(ValueError, match="cannot be causal"):
        LinformerAttention(config, 0, 4, 4, 16, is_causal=True)


# ================================================================================================ Performer
def test_performer_features_are_orthogonal_and_positive():
    projection = draw_orthogonal_features(40, 16, torch.Generator().manual_seed(0))
    block = projection[:16] / projection[:16].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(16), rtol=0, atol=1e-5)
    assert (favor_features(torch.randn(3, 7, 16), projection, is_query=False, stabilise_keys=False) > 0).all()


def test_performer_chunked_prefix_sums_equal_the_quadratic_formula():
    generator = torch.Generator().manual_seed(4)
    query, key, value = (torch.randn(2, 2, 11, 8, generator=generator) * 0.5 for _ in range(3))
    projection = draw_orthogonal_features(32, 8, generator)
    phi_q = favor_features(query, projection, is_query=True, stabilise_keys=False)
    phi_k = favor_features(key, projection, is_query=False, stabilise_keys=False)
    kernel = (phi_q @ phi_k.transpose(-1, -2)).tril()
    expected = (kernel @ value) / kernel.sum(-1, keepdim=True)
    # chunk 4 does not divide 11: exercises the padded last chunk.
    actual = performer_attention(query, key, value, projection, True, None, 1.0, chunk_size=4)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    # Decoding: the first 7 slots as a cache state, the last 4 as new queries.
    cached = performer_attention(query[:, :, 7:], key, value, projection, True, None, 1.0, chunk_size=4)
    torch.testing.assert_close(cached, expected[:, :, 7:], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_performer_error_falls_as_features_grow(causal):
    head_dim, n = 16, 64
    generator = torch.Generator().manual_seed(5)
    # Half-unit queries and keys: FAVOR+'s variance grows like exp(|q|^2 + |k|^2) (times the scaling), so at unit
    # scale the 1/sqrt(m) regime needs far more features (README: 0.255 -> 0.148 over the same range).
    query, key, value = (torch.randn(4, 2, n, head_dim, generator=generator) for _ in range(3))
    query, key = query * 0.5, key * 0.5
    scaling = head_dim**-0.5
    scores = query @ key.transpose(-1, -2) * scaling
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    exact = torch.softmax(scores, -1) @ value
    errors = []
    for num_features in (8, 32, 128, 512, 2048):
        trials = [
            (performer_attention(query, key, value,
                                 draw_orthogonal_features(num_features, head_dim, torch.Generator().manual_seed(s)),
                                 causal, None, scaling) - exact).pow(2).mean().sqrt()
            for s in range(4)
        ]
        errors.append(float(torch.stack(trials).mean()))
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    # Monte-Carlo error ~ 1/sqrt(m): 256x more features cut it 16x in theory; measured 0.068 -> 0.0086
    # (bidirectional) and 0.110 -> 0.0145 (causal).
    assert errors[-1] < errors[0] / 5, errors


def test_performer_redraws_are_seeded_and_only_in_training():
    model = decoder(attention_variant="performer", performer_features=16, performer_redraw_interval=2)
    attention = model.model.layers[0].self_attn.attention_variant
    assert isinstance(attention, PerformerAttention)
    initial = attention.projection.clone()
    other_layer = model.model.layers[1].self_attn.attention_variant.projection
    assert not torch.equal(initial, other_layer)  # each layer its own features
    torch.testing.assert_close(decoder(attention_variant="performer", performer_features=16)
                               .model.layers[0].self_attn.attention_variant.projection, initial, rtol=0, atol=0)
    assert not torch.equal(decoder(attention_variant="performer", performer_features=16, performer_seed=1)
                           .model.layers[0].self_attn.attention_variant.projection, initial)
    ids = torch.randint(5, 1000, (1, 8))
    model(ids)
    model(ids)
    assert torch.equal(attention.projection, initial)  # eval mode: never redrawn
    model.train()
    model(ids)
    assert torch.equal(attention.projection, initial)
    model(ids)
    redrawn = attention.projection.clone()
    assert not torch.equal(redrawn, initial)
    expected = draw_orthogonal_features(16, 16, torch.Generator().manual_seed(0 * 1_000_003 + 0 * 10_007 + 1))
    torch.testing.assert_close(redrawn, expected, rtol=0, atol=0)


# ================================================================================================ causality, caches
CAUSAL_VARIANTS = [
    dict(attention_variant="sliding_window", attention_window=3, global_attention_indices=[0, 9]),
    dict(attention_variant="performer", performer_features=32),
    dict(attention_variant="performer", performer_features=32, position_embedding_type="rope"),
]


@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS, ids=["sliding_window", "performer", "performer_rope"])
def test_causal_variants_leak_nothing_from_the_future(overrides):
    model = decoder(**overrides)
    ids = torch.randint(5, 1000, (2, 16), generator=torch.Generator().manual_seed(6))
    changed = ids.clone()
    changed[:, 10:] = torch.randint(5, 1000, (2, 6), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(after[:, :10], before[:, :10], rtol=0, atol=1e-6)
    assert (after[:, 10:] - before[:, 10:]).abs().max() > 1e-3  # the test can see a change where one is allowed


@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS[:2], ids=["sliding_window", "performer"])
def test_cached_generation_equals_uncached(overrides):
    model = decoder(**overrides)
    prompt = torch.tensor([[11, 12, 13, 14, 15, 16], [0, 0, 21, 22, 23, 24]])
    kwargs = dict(attention_mask=(prompt != 0).long(), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    cached = model.generate(prompt, **kwargs)
    uncached = model.generate(prompt, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    # And the cached step's logits equal a full forward pass over the same tokens.
    with torch.no_grad():
        full = model(cached, attention_mask=(cached != 0).long()).logits[:, -2]
        out = model(cached[:, :-1], attention_mask=(cached[:, :-1] != 0).long(), use_cache=True)
        torch.testing.assert_close(out.logits[:, -1], full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS[:2], ids=["sliding_window", "performer"])
def test_seq2seq_uses_the_variant_for_self_attention_only(overrides):
    config = tz.ZooSeq2SeqConfig.from_preset("tiny", initializer_range=0.1, **NO_DROPOUT, **overrides)
    torch.manual_seed(0)
    model = tz.ZooSeq2SeqForConditionalGeneration(config).eval()
    decoder_layer = model.model.decoder.layers[0]
    assert decoder_layer.self_attn.attention_variant is not None and decoder_layer.cross_attn.attention_variant is None
    assert model.model.encoder.layers[0].self_attn.attention_variant.is_causal is False
    source = torch.tensor([[11, 12, 13, 14, 15, 16, 17], [21, 22, 23, 24, 25, 0, 0]])
    kwargs = dict(attention_mask=(source != 0).long(), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(model.generate(source, **kwargs), model.generate(source, use_cache=False, **kwargs))


# Two 8-token documents packed in one row: their positions restart, there is no attention_mask.
PACKED_POSITIONS = torch.cat([torch.arange(8), torch.arange(8)]).expand(2, -1)
PACKED_IDS = torch.randint(5, 1000, (2, 16), generator=torch.Generator().manual_seed(8))


@pytest.mark.parametrize("use_cache", [False, True], ids=["no-cache", "cache"])
def test_flex_sliding_window_keeps_packed_sequences_apart(use_cache):
    """transformers' mask separates packed documents on the flex path, with use_cache on too (its empty cache used to
    stop create_causal_mask looking for them): the packed row equals its documents run one at a time."""
    model = decoder(attention_variant="sliding_window", attention_window=3, attn_implementation="flex_attention")
    # The documents one at a time through the variant's own kernel (the same weights): under transformers 5.25 on
    # CPU, flex_attention itself returns NaN or wrong rows for sequences this short (8 tokens; transformers' own
    # Llama too, while 16 tokens are right), so it cannot be its own reference here.
    reference = decoder(attention_variant="sliding_window", attention_window=3, attn_implementation="eager")
    with torch.no_grad():
        packed = model(PACKED_IDS, position_ids=PACKED_POSITIONS, use_cache=use_cache).logits
        separate = torch.cat([reference(PACKED_IDS[:, start:start + 8]).logits for start in (0, 8)], dim=1)
        one_sequence = model(PACKED_IDS).logits
    # Same windows over the same keys; two kernels group their float32 sums differently, so rounding may differ (the
    # largest gap seen was 1.5e-6).
    torch.testing.assert_close(packed, separate, rtol=1e-4, atol=2e-5)
    assert (one_sequence[:, 8:] - separate[:, 8:]).abs().max() > 1e-3  # the check can fail


@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS[:2], ids=["sliding_window", "performer"])
@pytest.mark.parametrize(("implementation", "compiled"), [("sdpa", False), ("eager", False), ("sdpa", True)],
                         ids=["sdpa", "eager", "sdpa-compiled"])
def test_kernels_without_document_boundaries_refuse_packed_rows(overrides, implementation, compiled):
    """The blocked sliding-window kernel and Performer's prefix sums cannot keep packed documents apart; they are
    refused with the way out, not left to attend across documents. Under torch.compile the check is an assertion in
    the graph, with the same message."""
    model = decoder(**overrides, attn_implementation=implementation)

    def packed(positions):
        return model(PACKED_IDS, position_ids=positions, labels=PACKED_IDS).loss

    run = torch.compile(packed, backend="aot_eager") if compiled else packed
    suggestion = "flex_attention" if overrides["attention_variant"] == "sliding_window" else "attention_variant='full'"
    with pytest.raises((ValueError, RuntimeError), match=f"cannot keep packed sequences apart.*{suggestion}"):
        run(PACKED_POSITIONS)
    # Positions that do not restart (a continuation, here from 5) are one document per row, as without them.
    continuing = torch.arange(5, 21).expand(2, -1)
    torch.testing.assert_close(run(continuing), packed(continuing))
    # With an attention_mask the positions are the caller's (left padding restarts them) and are not read as packing.
    with torch.no_grad():
        model(PACKED_IDS, position_ids=PACKED_POSITIONS, attention_mask=torch.ones_like(PACKED_IDS))
    torch._dynamo.reset()


def test_vit_with_linformer_trains():
    base = tz.ZooViTConfig.from_preset("tiny")
    length = base.num_patches + base.num_prefix_tokens  # patches + [CLS]
    config = tz.ZooViTConfig.from_preset("tiny", attention_variant="linformer", linformer_k=8,
                                         linformer_max_length=length, num_labels=3)
    model = tz.ZooViTForImageClassification(config)
    pixels = torch.randn(2, base.num_channels, base.image_size, base.image_size)
    model(pixels, labels=torch.tensor([0, 2])).loss.backward()
    assert model.vit.layers[0].self_attn.attention_variant.key_projection.grad.abs().sum() > 0


def test_static_cache_is_refused_clearly():
    model = decoder(attention_variant="performer", performer_features=16)
    with pytest.raises(ValueError, match="static cache"):
        model.generate(torch.tensor([[11, 12, 13]]), max_new_tokens=2, cache_implementation="static")


# ================================================================================================ refusals
@pytest.mark.parametrize("variant", ["sliding_window", "linformer", "performer"])
@pytest.mark.parametrize("position", ["alibi", "relative"])
def test_score_bias_positions_are_refused(variant, position):
    with pytest.raises(CONFIG_ERRORS, match=f"{variant}.*{position}.*n x n score matrix"):
        tz.ZooEncoderConfig.from_preset("tiny", attention_variant=variant, position_embedding_type=position,
                                        linformer_k=8)


@pytest.mark.parametrize("overrides, message", [
    (dict(attention_variant="linformer", position_embedding_type="rope", linformer_k=8), "rope"),
    (dict(attention_variant="linformer"), "linformer_k=256 must be between 1 and"),
    (dict(attention_variant="linformer", linformer_k=8, linformer_sharing="all"), "linformer_sharing"),
    (dict(attention_variant="sliding_window", attention_window=0), "attention_window must be >= 1"),
    (dict(attention_variant="performer", global_attention_indices=[0]), "only applies to"),
    (dict(attention_variant="performer", performer_features=0), "performer_features must be positive"),
    (dict(attention_variant="performer", performer_redraw_interval=-1), "performer_redraw_interval"),
    (dict(attention_variant="longformer"), "attention_variant='longformer' is unknown"),
])
def test_bad_settings_name_the_field(overrides, message):
    with pytest.raises(CONFIG_ERRORS, match=message):
        tz.ZooEncoderConfig.from_preset("tiny", **overrides)


def test_flash_attention_cannot_take_global_tokens():
    model = decoder(attention_variant="sliding_window", attention_window=2, global_attention_indices=[0])
    attention = model.model.layers[0].self_attn
    model.config._attn_implementation = "flash_attention_2"
    q = torch.zeros(1, 4, 3, 16)
    with pytest.raises(ValueError, match="FlashAttention has a window but no global tokens"):
        attention.attention_variant(attention, q, q, q, None, scaling=1.0)


# ================================================================================================ save, load, train
VARIANT_MODELS = {
    "sliding_window": (tz.ZooDecoderForCausalLM, "tiny", dict(attention_variant="sliding_window", attention_window=2,
                                                              global_attention_indices=[0])),
    "performer": (tz.ZooDecoderForCausalLM, "tiny", dict(attention_variant="performer", performer_features=16)),
    "linformer": (tz.ZooEncoderForMaskedLM, "tiny", dict(attention_variant="linformer", linformer_k=8,
                                                          linformer_sharing="head")),
}

FRESH_SCRIPT = """
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
results = {}
for name, entry in ARGS.items():
    auto = AutoModelForCausalLM if entry["auto"] == "causal" else AutoModelForMaskedLM
    model = auto.from_pretrained(entry["path"], trust_remote_code=True).eval()
    ids = torch.tensor(entry["ids"])
    with torch.no_grad():
        logits = model(ids).logits
    results[name] = {"module": type(model).__module__, "logits": logits.flatten().tolist(),
                     "variant": type(model.base_model.layers[0].self_attn.attention_variant).__name__}
emit(results)
"""


def test_save_load_and_remote_code_reproduce_outputs(tmp_path):
    args, expected = {}, {}
    ids = [[5, 17, 33, 48, 96, 7, 250, 3, 61, 19]]
    for name, (model_class, preset, overrides) in VARIANT_MODELS.items():
        config = model_class.config_class.from_preset(preset, initializer_range=0.1, **NO_DROPOUT, **overrides)
        torch.manual_seed(0)
        model = model_class(config).eval()
        folder = tmp_path / name
        model.save_pretrained(folder)
        assert (folder / "modeling_zoo_attention_variants.py").is_file()
        assert (folder / "modeling_zoo_attention_variant_kernels.py").is_file()
        reloaded = model_class.from_pretrained(folder).eval()
        with torch.no_grad():
            logits = model(torch.tensor(ids)).logits
            torch.testing.assert_close(reloaded(torch.tensor(ids)).logits, logits, rtol=0, atol=0)
        args[name] = {"path": str(folder), "ids": ids, "auto": "causal" if "Causal" in model_class.__name__ else "mlm"}
        expected[name] = logits
    results = run_fresh_python(FRESH_SCRIPT, cwd=tmp_path, args=args)
    for name, logits in expected.items():
        assert results[name]["module"].startswith("transformers_modules."), results[name]
        assert results[name]["variant"] == {"sliding_window": "SlidingWindowAttention", "performer":
                                            "PerformerAttention", "linformer": "LinformerAttention"}[name]
        torch.testing.assert_close(torch.tensor(results[name]["logits"]), logits.flatten(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("family, overrides", [
    ("decoder", "attention_variant=performer,performer_features=16,performer_redraw_interval=2"),
    ("decoder", "attention_variant=sliding_window,attention_window=8,global_attention_indices=[0]"),
    ("encoder", "attention_variant=linformer,linformer_k=16,linformer_max_length=32"),
])
def test_pretraining_recipe_trains_with_the_variant(tmp_path, family, overrides):
    from accelerate.state import AcceleratorState

    from transformer_zoo.training.pretrain import recipe as pretraining

    text = tmp_path / "text.txt"
    words = "the king queen lord lady speak love night day sword crown heart death life sweet fair".split()
    rng = random.Random(0)
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(200)))
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        results = pretraining.main([
            "--family", family, "--dataset", str(text), "--output_dir", str(tmp_path / "out"), "--context_length",
            "32", "--model_overrides", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2," + overrides,
            "--max_steps", "3", "--eval_steps", "3", "--save_steps", "3", "--per_device_batch_size", "4",
            "--progress_bar", "false", "--report_to", "none", "--vocab_size", "300", "--cpu_threads", "none",
        ])
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert results["steps"] == 3
    assert all(math.isfinite(value) for key, value in results["test"].items() if key.endswith("loss")), results["test"]
    saved = AutoConfig.from_pretrained(tmp_path / "out")
    assert saved.attention_variant == overrides.split(",")[0].split("=")[1]
