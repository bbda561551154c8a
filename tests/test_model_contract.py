"""transformers' model contract, as its own common tests and client libraries rely on it (issue 11, points 1-6).

Each test here failed on the code before the fix it guards:
* a folder that save_pretrained wrote loads, whatever attributes were set on the config;
* config.head_dim is resolved, never None, and round-trips;
* forward(past_key_values=...) is the deprecated name of `cache` (warned, used), and an unknown keyword is refused;
* inputs_embeds=get_input_embeddings()(ids) equals input_ids=ids in every family (also with scaled embeddings);
* the encoder-decoder's decoder runs without encoder states;
* encoder and decoder may have different head counts and feed-forward widths.
"""

import warnings

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoConfig, AutoModel

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
)


CONFIGS = {"encoder": ZooEncoderConfig, "decoder": ZooDecoderConfig, "seq2seq": ZooSeq2SeqConfig, "vit": ZooViTConfig}
TEXT_MODELS = {
    "encoder": ZooEncoderForMaskedLM,
    "decoder": ZooDecoderForCausalLM,
    "seq2seq": ZooSeq2SeqForConditionalGeneration,
}


# ------------------------------------------------------------------------------------------------ 1. config loads
@pytest.mark.parametrize("family", list(CONFIGS))
def test_saved_config_with_extra_attributes_always_loads(family, tmp_path):
    config = CONFIGS[family].from_preset("tiny")
    # As libraries and transformers' own test helpers do: attributes set after construction, one of them a near
    # miss of a real field (layer_norm_eps), which the constructor's typo guard refuses when a user passes it.
    config.layer_norm_epsilon = 1.0
    config.my_library_flag = {"nested": [1, 2]}
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert reloaded.layer_norm_epsilon == 1.0
    assert reloaded.my_library_flag == {"nested": [1, 2]}
    assert reloaded.layer_norm_eps == config.layer_norm_eps
    # from_dict / to_dict round trip too (what copy helpers use).
    assert type(config).from_dict(config.to_dict()).layer_norm_epsilon == 1.0


def test_typo_guard_still_refuses_what_a_user_passes():
    with pytest.raises(ValueError, match="unknown field 'layer_norm_epsilon': use layer_norm_eps instead"):
        ZooDecoderConfig.from_preset("tiny", layer_norm_epsilon=1.0)


# ------------------------------------------------------------------------------------------------ 2. head_dim
@pytest.mark.parametrize("family", list(CONFIGS))
def test_head_dim_is_resolved_and_round_trips(family, tmp_path):
    config = CONFIGS[family].from_preset("tiny")
    assert config.head_dim == config.hidden_size // config.num_attention_heads == 16
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).head_dim == 16
    explicit = CONFIGS[family].from_preset("tiny", head_dim=8)
    assert explicit.head_dim == 8
    with pytest.raises(ValueError, match="not divisible by num_attention_heads"):
        CONFIGS[family].from_preset("tiny", num_attention_heads=5)


def test_explicit_head_dim_builds_those_projections():
    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", head_dim=8))
    assert model.model.layers[0].self_attn.q_proj.out_features == 4 * 8


# ------------------------------------------------------------------------------------------------ 3. kwargs
def _text_inputs(family, batch=2, length=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, length), generator=generator)
    inputs = {"input_ids": ids}
    if family == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(3, 1000, (batch, 4), generator=generator)
    return inputs


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_past_key_values_is_the_deprecated_name_of_cache(family):
    torch.manual_seed(0)
    model = TEXT_MODELS[family](CONFIGS[family].from_preset("tiny")).eval()
    inputs = _text_inputs(family)
    key = "decoder_input_ids" if family == "seq2seq" else "input_ids"
    full = model(**inputs).logits
    prefix = dict(inputs, **{key: inputs[key][:, :-1]})
    with torch.no_grad():
        cache = model(**prefix, use_cache=True).cache
        with pytest.warns(FutureWarning, match="past_key_values.*deprecated.*cache"):
            step = model(**dict(inputs, **{key: inputs[key][:, -1:]}), past_key_values=cache, use_cache=True)
    # The cache was used: the one-token step reproduces the last position of the full forward.
    torch.testing.assert_close(step.logits[:, -1], full[:, -1], atol=1e-5, rtol=0)
    assert cache.get_seq_length() == inputs[key].shape[1]


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("keyword", ["past_key_value", "head_mask", "foo"])
def test_unknown_keywords_are_refused_by_name(family, keyword):
    config = CONFIGS[family].from_preset("tiny")
    if family == "vit":
        from transformer_zoo import ZooViTForImageClassification

        model = ZooViTForImageClassification(config).eval()
        inputs = {"pixel_values": torch.randn(1, config.num_channels, config.image_size, config.image_size)}
    else:
        model = TEXT_MODELS[family](config).eval()
        inputs = _text_inputs(family)
    if family in ("encoder", "vit") and keyword == "foo":
        keyword = "past_key_values"  # models without a cache must not swallow it either
    with pytest.raises(TypeError, match=f"unexpected keyword argument\\(s\\) '{keyword}'"):
        model(**inputs, **{keyword: None})


def test_transformers_keywords_still_pass():
    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny")).eval()
    out = model(**_text_inputs("decoder"), output_hidden_states=True, num_items_in_batch=None, return_dict=True)
    assert len(out.hidden_states) == 3


# ------------------------------------------------------------------------------------------------ 4. inputs_embeds
@pytest.mark.parametrize("family", list(TEXT_MODELS))
@pytest.mark.parametrize("scale_embedding", [False, True])
def test_inputs_embeds_equal_input_ids(family, scale_embedding):
    torch.manual_seed(0)
    model = TEXT_MODELS[family](CONFIGS[family].from_preset("tiny", scale_embedding=scale_embedding)).eval()
    inputs = _text_inputs(family)
    with torch.no_grad():
        expected = model(**inputs).logits
        embeds = dict(inputs)
        embeds["inputs_embeds"] = model.get_input_embeddings()(embeds.pop("input_ids"))
        if family == "seq2seq":
            embeds["decoder_inputs_embeds"] = model.get_input_embeddings()(embeds.pop("decoder_input_ids"))
        actual = model(**embeds).logits
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


def test_scaled_embedding_is_the_input_embedding_module():
    config = ZooSeq2SeqConfig.from_preset("tiny")  # scale_embedding=True (Vaswani et al. 3.4)
    model = ZooSeq2SeqForConditionalGeneration(config)
    embedding = model.get_input_embeddings()
    ids = torch.tensor([[5, 6]])
    torch.testing.assert_close(embedding(ids), embedding.weight[ids] * config.hidden_size**0.5)
    assert model.model.encoder.embed_tokens.weight is embedding.weight


# ------------------------------------------------------------------------------------------------ 5. decoder alone
def test_seq2seq_decoder_runs_on_its_own():
    torch.manual_seed(0)
    model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny")).eval()
    decoder = model.get_decoder()
    assert decoder is model.model.decoder
    ids = torch.randint(3, 1000, (2, 5))
    with torch.no_grad():
        out = decoder(input_ids=ids, output_attentions=True)
        # Equal to the same stack with its cross-attention sublayers removed.
        for layer in decoder.layers:
            layer.cross_attn_saved, layer.cross_attn = layer.cross_attn, None
        reference = decoder(input_ids=ids)
        for layer in decoder.layers:
            layer.cross_attn = layer.cross_attn_saved
    assert out.last_hidden_state.shape == (2, 5, 64)
    assert out.cross_attentions == ()
    torch.testing.assert_close(out.last_hidden_state, reference.last_hidden_state, atol=0, rtol=0)
    # Cached decoding on its own equals the uncached pass.
    with torch.no_grad():
        cache = decoder(input_ids=ids[:, :-1], use_cache=True).cache
        step = decoder(input_ids=ids[:, -1:], cache=cache, use_cache=True).last_hidden_state
    torch.testing.assert_close(step[:, -1], out.last_hidden_state[:, -1], atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------ 6. asymmetric
ASYMMETRIC = dict(encoder_attention_heads=2, decoder_attention_heads=8, encoder_ffn_dim=48, decoder_ffn_dim=96)


def test_asymmetric_encoder_decoder_builds_each_stack_its_shape(tmp_path):
    config = ZooSeq2SeqConfig.from_preset("tiny", **ASYMMETRIC)
    assert (config.encoder_head_dim, config.decoder_head_dim) == (32, 8)
    model = ZooSeq2SeqForConditionalGeneration(config)
    encoder_layer, decoder_layer = model.model.encoder.layers[0], model.model.decoder.layers[0]
    assert (encoder_layer.self_attn.num_heads, encoder_layer.self_attn.head_dim) == (2, 32)
    assert (decoder_layer.self_attn.num_heads, decoder_layer.cross_attn.num_heads) == (8, 8)
    assert encoder_layer.mlp.up_proj.out_features == 48 and decoder_layer.mlp.up_proj.out_features == 96
    model.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert reloaded.encoder.layers[0].self_attn.num_heads == 2
    ids = torch.randint(3, 1000, (1, 6))
    with torch.no_grad():
        generated = model.eval().generate(ids, max_new_tokens=4, do_sample=False)
        uncached = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(generated, uncached)


def test_symmetric_defaults_are_unchanged():
    config = ZooSeq2SeqConfig()
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (8, 8)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim) == (2048, 2048)
    assert config.encoder_head_dim == config.decoder_head_dim == 64


def test_asymmetric_grouped_query_attention_needs_a_common_divisor():
    with pytest.raises(StrictDataclassClassValidationError, match="encoder_attention_heads \\(3\\) must be a multiple of num_key_value_heads"):
        ZooSeq2SeqConfig.from_preset("tiny", num_key_value_heads=2, encoder_attention_heads=3, encoder_head_dim=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = ZooSeq2SeqConfig.from_preset("tiny", num_key_value_heads=2, decoder_attention_heads=8)
    assert config.attention_shape("decoder.0") == (8, 2, 8)


def test_a_shared_shape_set_after_construction_reaches_the_stacks_that_follow_it():
    """transformers' common tests raise config.head_dim (and hidden_size) on a built config before a flex-attention
    model; the encoder-decoder's per-stack shapes, resolved at construction, kept the old 8 (found on a GPU run).
    A stack given its own shape keeps it."""
    import copy

    config = ZooSeq2SeqConfig.from_preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=37)
    raised = copy.deepcopy(config)
    raised.head_dim, raised.hidden_size, raised.intermediate_size = 16, 64, 50
    assert (raised.encoder_head_dim, raised.decoder_head_dim) == (16, 16)
    assert (raised.encoder_ffn_dim, raised.decoder_ffn_dim) == (50, 50)
    model = ZooSeq2SeqForConditionalGeneration(raised)
    assert model.model.encoder.layers[0].self_attn.q_proj.out_features == 4 * 16
    assert model.model.decoder.layers[0].mlp.up_proj.out_features == 50
    asymmetric = ZooSeq2SeqConfig.from_preset("tiny", encoder_head_dim=8)
    asymmetric.head_dim = 32
    assert (asymmetric.encoder_head_dim, asymmetric.decoder_head_dim) == (8, 32)
