"""Attention behaviour of the four families: eager == sdpa, masks, attention weights, kernels that must refuse,
causality and permutation (in)variance.

fp32 tolerance for eager vs sdpa is 1e-5 (the spec); with the tiny configs of conftest (initializer_range 0.1) the
largest observed difference is about a quarter of that budget.
"""

import importlib.util

import pytest
import torch
from torch.testing import assert_close
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask


TOL = dict(rtol=1e-5, atol=1e-5)
TOKEN_POSITIONS = ["sinusoidal", "learned", "rope", "alibi", "relative", "none"]
VIT_POSITIONS = ["learned", "sincos2d", "none"]
TOKEN_FAMILIES = ["encoder", "decoder", "seq2seq"]
FAMILIES = TOKEN_FAMILIES + ["vit"]
IMPLEMENTATIONS = ["eager", "sdpa"]

# Architecture variants tested in every family (on top of the family's tiny preset).
VARIANTS = {
    "mha": {},
    "gqa": dict(num_key_value_heads=2),
    "mqa": dict(num_key_value_heads=1),
    "gqa-rope": dict(num_key_value_heads=2, position_embedding_type="rope"),
    "gqa-alibi": dict(num_key_value_heads=2, position_embedding_type="alibi"),
    "mqa-relative": dict(num_key_value_heads=1, position_embedding_type="relative"),
    "pre-norm": dict(norm_position="pre"),
    "post-norm": dict(norm_position="post"),
    "layernorm": dict(norm_type="layernorm"),
    "rmsnorm": dict(norm_type="rmsnorm"),
    "relu": dict(hidden_act="relu"),
    "gelu": dict(hidden_act="gelu"),
    "swiglu": dict(hidden_act="swiglu"),
    "no-bias-head-dim-32": dict(attention_bias=False, mlp_bias=False, head_dim=32),
    # ViT-only options: DeiT's distillation token, the convolutional stem, mean pooling.
    "vit-distillation": dict(use_distillation_token=True),
    "vit-conv-stem": dict(conv_stem=True),
    "vit-mean-pool-sincos": dict(pooling="mean", position_embedding_type="sincos2d"),
}
TOKEN_ONLY = {"gqa-rope", "gqa-alibi", "mqa-relative"}  # ViT has no rope/alibi/relative scheme
VARIANT_CASES = [
    (family, variant)
    for family in FAMILIES
    for variant in VARIANTS
    if (variant.startswith("vit-") and family == "vit")
    or (not variant.startswith("vit-") and not (family == "vit" and variant in TOKEN_ONLY))
]

# Real lengths of the two rows of every padded batch (row 1 is padded).
LENGTHS = (7, 4)
TARGET_LENGTHS = (5, 3)


def family_configs():
    cases = [(family, pos) for family in TOKEN_FAMILIES for pos in TOKEN_POSITIONS]
    return cases + [("vit", pos) for pos in VIT_POSITIONS]


# ------------------------------------------------------------------------------------------------ helpers
def make_inputs(family, random_ids, pad_batch, padded=True):
    """A padded batch for `family` and, per output, a boolean [batch, seq] mask of the positions to compare.

    Encoders (and the seq2seq source) are right-padded, decoders left-padded; decoder position ids count real
    tokens only, as generate() builds them. With padded=False: full-length rows and no attention mask at all (the
    path where the mask helpers return None and sdpa relies on each module's is_causal flag).
    """
    if family == "vit":
        generator = torch.Generator().manual_seed(2)
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=generator)}, None
    if not padded:
        inputs = dict(input_ids=random_ids(2, max(LENGTHS)))
        if family == "seq2seq":
            inputs["decoder_input_ids"] = random_ids(2, max(TARGET_LENGTHS), seed=3)
        return inputs, None
    ids = random_ids(2, max(LENGTHS))
    sequences = [ids[row, :length] for row, length in enumerate(LENGTHS)]
    if family == "decoder":
        input_ids, attention_mask = pad_batch(sequences, "left")
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        return inputs, attention_mask.bool()
    input_ids, attention_mask = pad_batch(sequences, "right")
    if family == "encoder":
        return dict(input_ids=input_ids, attention_mask=attention_mask), attention_mask.bool()
    targets = random_ids(2, max(TARGET_LENGTHS), seed=3)
    decoder_input_ids, decoder_attention_mask = pad_batch(
        [targets[row, :length] for row, length in enumerate(TARGET_LENGTHS)], "right"
    )
    inputs = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
    )
    return inputs, decoder_attention_mask.bool()


def main_output(family, outputs):
    return outputs.logits if family in ("decoder", "seq2seq") else outputs.last_hidden_state


# ------------------------------------------------------------------------------------------------ eager vs sdpa
def _assert_eager_matches_sdpa(family, config, make_pair, random_ids, pad_batch, padded=True):
    eager, sdpa = make_pair(family, config)
    inputs, valid = make_inputs(family, random_ids, pad_batch, padded)
    with torch.no_grad():
        eager_out, sdpa_out = eager(**inputs), sdpa(**inputs)
    a, b = main_output(family, eager_out), main_output(family, sdpa_out)
    if valid is not None:
        a, b = a[valid], b[valid]
    assert torch.isfinite(a).all()
    assert_close(b, a, **TOL)
    if family == "seq2seq":
        # The encoder output too, on real source tokens only.
        source_valid = inputs["attention_mask"].bool() if padded else torch.ones_like(inputs["input_ids"]).bool()
        assert_close(
            sdpa_out.encoder_last_hidden_state[source_valid],
            eager_out.encoder_last_hidden_state[source_valid],
            **TOL,
        )


@pytest.mark.parametrize(
    "family,position,padded",
    # ViT inputs are never padded (they always take the no-mask path), so ViT runs once.
    [(f, p, padded) for f, p in family_configs() for padded in ([True, False] if f != "vit" else [False])],
)
def test_eager_matches_sdpa_per_position_scheme(
    family, position, padded, make_config, make_pair, random_ids, pad_batch
):
    config = make_config(family, position_embedding_type=position)
    _assert_eager_matches_sdpa(family, config, make_pair, random_ids, pad_batch, padded)


@pytest.mark.parametrize("family,variant", VARIANT_CASES)
def test_eager_matches_sdpa_per_variant(family, variant, make_config, make_pair, random_ids, pad_batch):
    config = make_config(family, **VARIANTS[variant])
    if variant == "gqa":
        assert config.num_key_value_heads == 2 and config.num_attention_heads == 4
    _assert_eager_matches_sdpa(family, config, make_pair, random_ids, pad_batch)


@pytest.mark.parametrize(
    "family,preset", [("decoder", "tiny-llama"), ("encoder", "tiny-modern")], ids=["tiny-llama", "tiny-modern"]
)
def test_eager_matches_sdpa_modern_presets(family, preset, make_config, make_pair, random_ids, pad_batch):
    _assert_eager_matches_sdpa(family, make_config(family, preset), make_pair, random_ids, pad_batch)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("family,position", [c for c in family_configs() if c[0] != "vit"])
def test_padding_does_not_change_real_tokens(
    family, position, implementation, make_config, make_model, random_ids, pad_batch
):
    # Row 1 of the padded batch must give, on its real tokens, what the same sequence gives alone: padding is
    # masked out of attention and (for decoders) does not shift positions.
    model = make_model(family, make_config(family, position_embedding_type=position), implementation)
    inputs, valid = make_inputs(family, random_ids, pad_batch)
    alone = {}
    for name, value in inputs.items():
        row = value[1:]
        keep = (inputs["decoder_attention_mask"] if name.startswith("decoder") else inputs["attention_mask"])[1].bool()
        alone[name] = row[:, keep]
    if family == "decoder":
        alone["position_ids"] = torch.arange(LENGTHS[1])[None]
    with torch.no_grad():
        batched = main_output(family, model(**inputs))[1][valid[1]]
        single = main_output(family, model(**alone))[0]
    assert_close(batched, single, **TOL)


# ------------------------------------------------------------------------------------------------ attention weights
@pytest.mark.parametrize("family,position", family_configs())
def test_output_attentions_eager(family, position, make_config, make_model, random_ids, pad_batch):
    config = make_config(family, position_embedding_type=position)
    model = make_model(family, config, "eager")
    inputs, _ = make_inputs(family, random_ids, pad_batch)
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    heads = config.num_attention_heads
    layers = config.encoder_layers if family == "seq2seq" else config.num_hidden_layers

    def check(attentions, query_mask, key_mask, q_len, k_len, causal, num_layers):
        # query_mask / key_mask: [batch, len] bool of real tokens, or None (no padding). Fully padded query rows
        # (left padding) attend to nothing real, so only real query rows are checked.
        assert isinstance(attentions, tuple) and len(attentions) == num_layers
        queries = query_mask if query_mask is not None else torch.ones(2, q_len, dtype=torch.bool)
        keys = key_mask if key_mask is not None else torch.ones(2, k_len, dtype=torch.bool)
        future = torch.triu(torch.ones(q_len, k_len, dtype=torch.bool), diagonal=1)
        for weights in attentions:
            assert weights.shape == (2, heads, q_len, k_len)
            for b in range(2):
                real = weights[b][:, queries[b]]  # [heads, real queries, k_len]
                assert_close(real.sum(-1), torch.ones(real.shape[:-1]), **TOL)
                assert torch.all(real[..., ~keys[b]] == 0), "attention on padded keys"
                assert torch.all(real[..., keys[b]] >= 0)
                if causal:
                    assert torch.all(real[:, future[queries[b]]] == 0), "attention on future keys"

    if family == "seq2seq":
        source = inputs["attention_mask"].bool()
        target = inputs["decoder_attention_mask"].bool()
        src_len, tgt_len = source.shape[1], target.shape[1]
        check(outputs.encoder_attentions, source, source, src_len, src_len, False, config.encoder_layers)
        check(outputs.decoder_attentions, target, target, tgt_len, tgt_len, True, config.decoder_layers)
        check(outputs.cross_attentions, target, source, tgt_len, src_len, False, config.decoder_layers)
    elif family == "vit":
        seq = config.num_patches + config.num_prefix_tokens
        check(outputs.attentions, None, None, seq, seq, False, layers)
    else:
        mask = inputs["attention_mask"].bool()
        check(outputs.attentions, mask, mask, mask.shape[1], mask.shape[1], family == "decoder", layers)


# ------------------------------------------------------------------------------------------------ kernels that refuse
FLASH_INSTALLED = importlib.util.find_spec("flash_attn") is not None


@pytest.mark.skipif(FLASH_INSTALLED, reason="flash-attn is installed: the missing-package error cannot be tested")
@pytest.mark.parametrize("family", FAMILIES)
def test_flash_attention_2_without_flash_attn_raises(family, make_config, make_model):
    with pytest.raises(ImportError, match="(?i)flash"):
        make_model(family, make_config(family), "flash_attention_2")


@pytest.mark.parametrize("position", ["alibi", "relative"])
@pytest.mark.parametrize("family", TOKEN_FAMILIES)
def test_score_bias_positions_refuse_flash(family, position, make_config, make_model, random_ids, pad_batch):
    model = make_model(family, make_config(family, position_embedding_type=position), "eager")
    # flash_attention_2 cannot be selected on this machine through transformers (ImportError above), so set it on
    # the config directly to reach the model's own check. Every submodule shares the one config object.
    assert all(m.config is model.config for m in model.modules() if hasattr(m, "config"))
    model.config._attn_implementation = "flash_attention_2"
    inputs, _ = make_inputs(family, random_ids, pad_batch)
    with pytest.raises(ValueError, match=f"(?s)flash_attention_2.*{position}"):
        model(**inputs)


@pytest.fixture
def probe_attention():
    """Registers an attention implementation "zoo_probe" (sdpa plus a record of each call's batch size and
    position_bias shape) for the duration of one test."""
    calls = []

    def probe(module, query, key, value, attention_mask, position_bias=None, **kwargs):
        calls.append((query.shape[0], None if position_bias is None else tuple(position_bias.shape)))
        return sdpa_attention_forward(module, query, key, value, attention_mask, position_bias=position_bias, **kwargs)

    AttentionInterface.register("zoo_probe", probe)
    AttentionMaskInterface.register("zoo_probe", sdpa_mask)
    try:
        yield calls
    finally:
        del AttentionInterface._global_mapping["zoo_probe"]
        del AttentionMaskInterface._global_mapping["zoo_probe"]


@pytest.mark.parametrize("position", ["alibi", "relative"])
@pytest.mark.parametrize("family", TOKEN_FAMILIES)
def test_score_bias_is_batched_for_flex_attention(
    family, position, probe_attention, make_config, make_model, random_ids, pad_batch
):
    # The error for flash kernels recommends flex_attention for alibi/relative; transformers' flex score_mod reads
    # position_bias[batch_idx, head_idx, q_idx, kv_idx], so the bias handed to every attention call must have the
    # batch dimension (a batch-1 bias crashed flex with "index out of bounds" for any batch > 1). Checked through a
    # recording sdpa backend, which needs no compilation; test_flex_attention_with_score_bias runs flex itself.
    config = make_config(family, position_embedding_type=position)
    probe = make_model(family, config, "zoo_probe")
    eager = make_model(family, config, "eager")
    inputs, valid = make_inputs(family, random_ids, pad_batch)
    with torch.no_grad():
        assert_close(main_output(family, probe(**inputs))[valid], main_output(family, eager(**inputs))[valid], **TOL)
    biased = [(batch, shape) for batch, shape in probe_attention if shape is not None]
    assert biased, "the score bias never reached attention"
    heads = config.num_attention_heads
    assert all(shape[:2] == (batch, heads) for batch, shape in biased)


@pytest.mark.compile  # compiles flex_attention: 20-30 s cold on CPU
@pytest.mark.parametrize("position", ["alibi", "relative"])
def test_flex_attention_with_score_bias(position, make_config, make_pair, random_ids, pad_batch):
    eager, flex = make_pair("decoder", make_config("decoder", position_embedding_type=position), ("eager", "flex_attention"))
    inputs, valid = make_inputs("decoder", random_ids, pad_batch)
    with torch.no_grad():
        assert_close(flex(**inputs).logits[valid], eager(**inputs).logits[valid], **TOL)


# ------------------------------------------------------------------------------------------------ causality
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("position", TOKEN_POSITIONS)
@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_decoder_is_causal(family, position, implementation, make_config, make_model, random_ids):
    # Changing token 5 of 8 must leave the logits of positions 0..4 unchanged and change those of 5..7.
    model = make_model(family, make_config(family, position_embedding_type=position), implementation)
    tokens = random_ids(1, 8)
    changed = tokens.clone()
    changed[0, 5] = 3 if tokens[0, 5] != 3 else 4

    def logits(target):
        if family == "decoder":
            return model(input_ids=target).logits[0]
        return model(input_ids=random_ids(1, 6, seed=5), decoder_input_ids=target).logits[0]

    with torch.no_grad():
        before, after = logits(tokens), logits(changed)
    assert_close(after[:5], before[:5], **TOL)
    assert (after[5:] - before[5:]).abs().amax(-1).min() > 1e-3


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("position", TOKEN_POSITIONS)
@pytest.mark.parametrize("family", ["encoder", "seq2seq"])
def test_encoder_is_bidirectional(family, position, implementation, make_config, make_model, random_ids):
    # The opposite of causality: changing the last source token changes the first output (an encoder that silently
    # became causal, e.g. a missing is_causal=False under sdpa, fails here). For seq2seq this goes through the
    # encoder and cross-attention into the first decoder position.
    model = make_model(family, make_config(family, position_embedding_type=position), implementation)
    source = random_ids(1, 6)
    changed = source.clone()
    changed[0, -1] = 3 if source[0, -1] != 3 else 4

    def first_output(ids):
        if family == "encoder":
            return model(input_ids=ids).last_hidden_state[0, 0]
        return model(input_ids=ids, decoder_input_ids=torch.tensor([[1]])).logits[0, 0]

    with torch.no_grad():
        assert (first_output(changed) - first_output(source)).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------------ permutations
PERMUTATION = torch.tensor([3, 0, 6, 1, 5, 2, 4])


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("type_vocab_size", [0, 2], ids=["no-token-types", "zero-token-types"])
def test_encoder_without_positions_is_permutation_equivariant(
    type_vocab_size, implementation, make_config, make_model, random_ids
):
    config = make_config("encoder", position_embedding_type="none", type_vocab_size=type_vocab_size)
    model = make_model("encoder", config, implementation)
    ids = random_ids(2, 7)
    extra = {} if type_vocab_size == 0 else {"token_type_ids": torch.zeros_like(ids)}
    with torch.no_grad():
        hidden = model(input_ids=ids, **extra).last_hidden_state
        permuted = model(input_ids=ids[:, PERMUTATION], **extra).last_hidden_state
    assert_close(permuted, hidden[:, PERMUTATION], **TOL)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("position", [p for p in TOKEN_POSITIONS if p != "none"])
def test_encoder_with_positions_is_not_permutation_equivariant(
    position, implementation, make_config, make_model, random_ids
):
    config = make_config("encoder", position_embedding_type=position, type_vocab_size=0)
    model = make_model("encoder", config, implementation)
    ids = random_ids(2, 7)
    with torch.no_grad():
        hidden = model(input_ids=ids).last_hidden_state
        permuted = model(input_ids=ids[:, PERMUTATION]).last_hidden_state
    assert (permuted - hidden[:, PERMUTATION]).abs().max() > 1e-3


def _permute_patches(pixel_values, patch, order):
    """Move the patch blocks of an image to new grid slots: patch k of the result is patch order[k] of the input."""
    b, c, h, w = pixel_values.shape
    rows, cols = h // patch, w // patch
    blocks = pixel_values.reshape(b, c, rows, patch, cols, patch).permute(0, 2, 4, 1, 3, 5)
    blocks = blocks.reshape(b, rows * cols, c, patch, patch)[:, order]
    return blocks.reshape(b, rows, cols, c, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


@pytest.mark.parametrize("position", VIT_POSITIONS)
def test_vit_patch_permutation(position, make_config, make_model):
    # Without positions and with mean pooling, ViT is equivariant in its patch tokens and its pooled output is
    # invariant to the order of the patches; with learned or sincos2d positions it is not.
    config = make_config("vit", position_embedding_type=position, pooling="mean")
    model = make_model("vit", config, "sdpa")
    generator = torch.Generator().manual_seed(4)
    pixels = torch.randn(2, 3, 32, 32, generator=generator)
    order = torch.randperm(config.num_patches, generator=generator)
    with torch.no_grad():
        out = model(pixel_values=pixels)
        permuted = model(pixel_values=_permute_patches(pixels, config.patch_size, order))
    prefix = config.num_prefix_tokens
    if position == "none":
        assert_close(permuted.pooler_output, out.pooler_output, **TOL)
        assert_close(permuted.last_hidden_state[:, prefix:], out.last_hidden_state[:, prefix:][:, order], **TOL)
    else:
        assert (permuted.pooler_output - out.pooler_output).abs().max() > 1e-3
