"""Configs: defaults are the classic models, presets, validation at construction, serialisation round trips."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderModel,
    ZooEncoderConfig,
    ZooEncoderModel,
    ZooSeq2SeqConfig,
    ZooSeq2SeqModel,
    ZooViTConfig,
    ZooViTModel,
)


CONFIGS = {"encoder": ZooEncoderConfig, "decoder": ZooDecoderConfig, "seq2seq": ZooSeq2SeqConfig, "vit": ZooViTConfig}
# A validator failure surfaces as huggingface_hub's StrictDataclassClassValidationError (not a ValueError subclass)
# wrapping our ValueError; the typo check raises ValueError directly.
CONFIG_ERRORS = (ValueError, StrictDataclassError)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------ classic defaults
def test_seq2seq_defaults_are_transformer_base():
    # Vaswani et al. 2017, table 3 "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, sinusoidal positions,
    # post-norm residuals, ReLU, shared and tied embeddings scaled by sqrt(d_model).
    c = ZooSeq2SeqConfig()
    assert (c.encoder_layers, c.decoder_layers, c.num_hidden_layers) == (6, 6, 6)
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size) == (512, 8, 8, 2048)
    assert c.attention_head_dim == 64
    assert c.position_embedding_type == "sinusoidal"
    assert (c.norm_position, c.norm_type, c.hidden_act) == ("post", "layernorm", "relu")
    assert (c.hidden_dropout, c.embedding_dropout, c.attention_dropout) == (0.1, 0.1, 0.0)
    assert c.tie_word_embeddings is True and c.scale_embedding is True and c.is_encoder_decoder is True
    assert c.vocab_size == 37000 and c.decoder_start_token_id is not None


def test_seq2seq_default_parameter_count_by_hand():
    # shared embedding 37000 * 512                         = 18,944,000
    # encoder layer: attention 4 (512*512 + 512)            =  1,050,624
    #                FFN 512*2048 + 2048 + 2048*512 + 512  =  2,099,712
    #                2 LayerNorms 2 * 2 * 512               =      2,048   -> 3,152,384, x6 = 18,914,304
    # decoder layer: + cross-attention 1,050,624 + LayerNorm 1,024       -> 4,204,032, x6 = 25,224,192
    # total (embeddings shared by encoder, decoder and, tied, the output layer)            = 63,082,496
    with torch.device("meta"):
        model = ZooSeq2SeqModel(ZooSeq2SeqConfig())
    assert n_params(model) == 63_082_496


def test_encoder_defaults_are_bert_base():
    c = ZooEncoderConfig()
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads) == (30522, 768, 12, 12)
    assert (c.intermediate_size, c.hidden_act, c.max_position_embeddings, c.type_vocab_size) == (3072, "gelu", 512, 2)
    assert (c.position_embedding_type, c.norm_position, c.layer_norm_eps) == ("learned", "post", 1e-12)
    assert c.embedding_norm is True
    assert (c.hidden_dropout, c.attention_dropout, c.initializer_range, c.pad_token_id) == (0.1, 0.1, 0.02, 0)
    # BERT-base has 109,482,240 parameters (transformers' BertModel with its pooler); ours must have the same.
    with torch.device("meta"):
        assert n_params(ZooEncoderModel(c)) == 109_482_240


def test_decoder_defaults_are_gpt2_small():
    c = ZooDecoderConfig()
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads) == (50257, 768, 12, 12)
    assert (c.intermediate_size, c.hidden_act, c.max_position_embeddings) == (3072, "gelu_new", 1024)
    assert (c.position_embedding_type, c.norm_position, c.layer_norm_eps) == ("learned", "pre", 1e-5)
    assert c.tie_word_embeddings is True and c.bos_token_id == c.eos_token_id == 50256
    # GPT-2 small: 124,439,808 parameters (transformers' GPT2Model).
    with torch.device("meta"):
        assert n_params(ZooDecoderModel(c)) == 124_439_808


def test_vit_defaults_are_vit_b16_224():
    c = ZooViTConfig()
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == (768, 12, 12, 3072)
    assert (c.image_size, c.patch_size, c.num_channels, c.num_patches) == (224, 16, 3, 196)
    assert (c.position_embedding_type, c.norm_position, c.pooling, c.hidden_act) == ("learned", "pre", "cls", "gelu")
    # ViT-B/16 without pooler: 85,798,656 parameters (transformers' ViTModel(add_pooling_layer=False)).
    with torch.device("meta"):
        assert n_params(ZooViTModel(c)) == 85_798_656


# ------------------------------------------------------------------------------------------------ presets
@pytest.mark.parametrize("family", list(CONFIGS))
def test_every_family_has_tiny(family):
    cls = CONFIGS[family]
    assert "tiny" in cls.preset_names()
    config = cls.from_preset("tiny")
    assert config.hidden_size <= 64 and config.num_attention_heads == 4


LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)


@pytest.mark.parametrize(
    "family,preset,expected",
    [
        ("encoder", "bert-large", LARGE),
        ("decoder", "gpt2-medium", LARGE),
        # Vaswani et al. table 3 "big": d_model 1024, d_ff 4096, h 16, P_drop 0.3, still 6 layers.
        (
            "seq2seq",
            "transformer-big",
            dict(hidden_size=1024, num_attention_heads=16, intermediate_size=4096, encoder_layers=6,
                 hidden_dropout=0.3, embedding_dropout=0.3),
        ),
        (
            "vit",
            "vit-small",
            dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536),
        ),
        ("vit", "vit-large", LARGE),
        ("encoder", "tiny-modern", dict(position_embedding_type="rope", norm_position="pre", norm_type="rmsnorm")),
        ("decoder", "tiny-llama", dict(position_embedding_type="rope", hidden_act="swiglu", num_key_value_heads=2)),
    ],
)
def test_named_presets(family, preset, expected):
    cls = CONFIGS[family]
    assert preset in cls.preset_names()
    config = cls.from_preset(preset)
    assert {k: getattr(config, k) for k in expected} == expected


def test_preset_overrides_apply():
    config = ZooDecoderConfig.from_preset("tiny", position_embedding_type="alibi", num_hidden_layers=3)
    assert config.position_embedding_type == "alibi" and config.num_hidden_layers == 3 and config.hidden_size == 64


@pytest.mark.parametrize("family", list(CONFIGS))
def test_unknown_preset_lists_the_available_ones(family):
    cls = CONFIGS[family]
    with pytest.raises(ValueError, match="Available presets") as info:
        cls.from_preset("no-such-preset")
    message = str(info.value)
    assert "no-such-preset" in message
    for name in cls.preset_names():
        assert name in message


# ------------------------------------------------------------------------------------------------ validation
TOKEN_FAMILIES = ["encoder", "decoder", "seq2seq"]
INVALID = [
    # (overrides, pattern the message must contain: the offending field)
    (dict(hidden_size=65), r"hidden_size \(65\) is not divisible by num_attention_heads \(4\)"),
    (dict(num_key_value_heads=3), r"num_key_value_heads \(3\)"),
    (dict(num_key_value_heads=0), r"num_key_value_heads"),
    (dict(hidden_act="gelux"), r"hidden_act='gelux'"),
    (dict(hidden_dropout=1.0), r"hidden_dropout must be in \[0, 1\)"),
    (dict(attention_dropout=-0.1), r"attention_dropout must be in \[0, 1\)"),
    (dict(embedding_dropout=1.5), r"embedding_dropout must be in \[0, 1\)"),
    (dict(norm_position="middle"), r"norm_position='middle'"),
    (dict(norm_type="batchnorm"), r"norm_type='batchnorm'"),
    (dict(layer_norm_eps=0.0), r"layer_norm_eps"),
]


INVALID_IDS = ["-".join(f"{k}={v}" for k, v in overrides.items()) for overrides, _ in INVALID]


@pytest.mark.parametrize("overrides,pattern", INVALID, ids=INVALID_IDS)
@pytest.mark.parametrize("family", list(CONFIGS))
def test_invalid_values_fail_at_construction(family, overrides, pattern):
    with pytest.raises(CONFIG_ERRORS, match=pattern):
        CONFIGS[family].from_preset("tiny", **overrides)


@pytest.mark.parametrize("family", list(CONFIGS))
def test_unknown_position_scheme(family):
    # Each family names its own schemes: ViT has no rope/alibi, token models have no sincos2d.
    bad = "rope" if family == "vit" else "sincos2d"
    with pytest.raises(CONFIG_ERRORS, match=rf"position_embedding_type='{bad}'"):
        CONFIGS[family].from_preset("tiny", position_embedding_type=bad)
    with pytest.raises(CONFIG_ERRORS, match=r"position_embedding_type='absolute'"):
        CONFIGS[family].from_preset("tiny", position_embedding_type="absolute")


def test_rope_needs_an_even_head_dim():
    with pytest.raises(CONFIG_ERRORS, match="head dimension must be even"):
        ZooDecoderConfig.from_preset("tiny", hidden_size=12, position_embedding_type="rope")


@pytest.mark.parametrize(
    "family,typo,field",
    [
        ("decoder", "num_hidden_layer", "num_hidden_layers"),
        ("encoder", "num_attention_head", "num_attention_heads"),
        ("seq2seq", "encoder_layer", "encoder_layers"),
        ("vit", "patch_sizes", "patch_size"),
        ("encoder", "position_embedding", "position_embedding_type"),
    ],
)
def test_typo_field_suggests_the_real_one(family, typo, field):
    with pytest.raises(ValueError, match=rf"unknown field '{typo}'; did you mean '{field}'"):
        CONFIGS[family].from_preset("tiny", **{typo: 3})


def test_vit_image_size_must_be_a_multiple_of_patch_size():
    with pytest.raises(CONFIG_ERRORS, match=r"image_size \(30\) must be a positive multiple of patch_size \(8\)"):
        ZooViTConfig.from_preset("tiny", image_size=30)


def test_vit_conv_stem_needs_power_of_two_patch():
    with pytest.raises(CONFIG_ERRORS, match=r"conv_stem=True .* patch_size must be a power of 2 >= 2; got 12"):
        ZooViTConfig.from_preset("tiny", image_size=48, patch_size=12, conv_stem=True)
    # The same geometry without the stem, and a power-of-two patch with it, are fine.
    ZooViTConfig.from_preset("tiny", image_size=48, patch_size=12)
    ZooViTConfig.from_preset("tiny", conv_stem=True)


def test_vit_pooling_must_be_known():
    with pytest.raises(CONFIG_ERRORS, match=r"pooling='max'"):
        ZooViTConfig.from_preset("tiny", pooling="max")


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_input_longer_than_position_table_raises_at_forward(family, position, make_config, make_model, random_ids):
    config = make_config(family, position_embedding_type=position, max_position_embeddings=8)
    model = make_model(family, config)
    with torch.no_grad():
        model(input_ids=random_ids(1, 8))  # exactly the table size is fine
        with pytest.raises(ValueError, match=r"Position 8 is beyond the .* max_position_embeddings=8"):
            model(input_ids=random_ids(1, 9))


def test_generation_past_the_position_table_raises(make_config, make_model, random_ids):
    model = make_model("decoder", make_config("decoder", max_position_embeddings=8))
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model.generate(random_ids(1, 6), max_new_tokens=5, pad_token_id=0, eos_token_id=None, do_sample=False)


# ------------------------------------------------------------------------------------------------ round trips
ROUND_TRIP_CASES = [
    ("encoder", "tiny", {}),
    ("encoder", "tiny-modern", {"position_embedding_type": "alibi", "num_key_value_heads": 2}),
    ("decoder", "tiny-llama", {}),
    ("decoder", "tiny", {"position_embedding_type": "relative", "relative_attention_num_buckets": 16}),
    ("seq2seq", "tiny", {"decoder_layers": 3, "tie_word_embeddings": False}),
    ("vit", "tiny", {"position_embedding_type": "sincos2d", "pooling": "mean", "use_distillation_token": True}),
]


def _comparable(config):
    # Bookkeeping that legitimately differs after loading: the library version and the folder loaded from.
    return {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "_name_or_path")}


@pytest.mark.parametrize("family,preset,overrides", ROUND_TRIP_CASES)
def test_to_dict_from_dict_round_trip(family, preset, overrides):
    cls = CONFIGS[family]
    config = cls.from_preset(preset, **overrides)
    restored = cls.from_dict(config.to_dict())
    assert type(restored) is cls
    assert _comparable(restored) == _comparable(config)
    for key, value in overrides.items():
        assert getattr(restored, key) == value


@pytest.mark.parametrize("family,preset,overrides", ROUND_TRIP_CASES)
def test_save_pretrained_from_pretrained_round_trip(family, preset, overrides, tmp_path):
    cls = CONFIGS[family]
    config = cls.from_preset(preset, **overrides)
    config.save_pretrained(tmp_path)
    assert (tmp_path / "config.json").is_file()
    restored = cls.from_pretrained(tmp_path)
    assert _comparable(restored) == _comparable(config)
    # AutoConfig knows the model_type (registered on import) and rebuilds the same class.
    auto = AutoConfig.from_pretrained(tmp_path)
    assert type(auto) is cls and _comparable(auto) == _comparable(config)
