"""The mathematics of the building blocks, pinned to numbers worked out by hand.

Every expected value below is written literally, with the arithmetic that produces it in a comment, so that these
tests do not just compare the library with itself. Constants used throughout:

    sqrt(2) = 1.4142135623730951,  1/sqrt(2) = 0.7071067811865476
    e^sqrt(2)  = 4.1132503787829275,  e^-sqrt(2)  = 0.2431167344342142
    e^(1/sqrt2) = 2.028114981647472,  e^(-1/sqrt2) = 0.49306869139523984
    sin(1) = 0.8414709848078965, cos(1) = 0.5403023058681398
    sin(0.01) = 0.009999833334166664, cos(0.01) = 0.9999500004166653
    sin(2) = 0.9092974268256817, cos(2) = -0.4161468365471424
    sin(0.02) = 0.01999866669333308, cos(0.02) = 0.9998000066665778
"""

import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_causal_mask

from transformer_zoo import ZooDecoderConfig, ZooEncoderConfig
from transformer_zoo.modeling_zoo_vit import sincos_2d_table
from transformer_zoo.modeling_zoo_attention_kernels import eager_attention_forward
from transformer_zoo.modeling_zoo_positions import (
    AlibiPositions,
    RelativePositionBias,
    RotaryPositions,
    SinusoidalPositions,
    apply_rotary,
)


FP32 = dict(rtol=1e-6, atol=1e-6)  # hand-computed constants are exact to ~1e-16; fp32 round-off is ~1e-7
MIN = torch.finfo(torch.float32).min

# ------------------------------------------------------------------------------------------------ attention
# One head, head_dim 2, three tokens (shapes [batch=1, heads=1, seq=3, head_dim=2]).
Q = torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
K = torch.tensor([[1.0, 1.0], [0.0, 0.0], [-1.0, -1.0]])
V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
SCALING = 2**-0.5  # 1/sqrt(head_dim)

# Q K^T = [[0, 0, 0], [2, 0, -2], [1, 0, -1]]; times 1/sqrt(2): [[0, 0, 0], [s2, 0, -s2], [1/s2, 0, -1/s2]].
# Row 0: equal scores -> weights [1/3, 1/3, 1/3]; output = ([1,0] + [0,1] + [2,2]) / 3 = [1, 1].
# Row 1: exp -> [4.1132503787829275, 1, 0.2431167344342142], sum 5.356367113217142
#        weights [0.7679179361387025, 0.18669370094750282, 0.04538836291379464]
#        output  [w0 + 2 w2, w1 + 2 w2] = [0.8586946619662919, 0.2774704267750921]
# Row 2: exp -> [2.028114981647472, 1, 0.49306869139523984], sum 3.521183673042712
#        weights [0.575975345215362, 0.28399540974126003, 0.14002924504337805]
#        output  [w0 + 2 w2, w1 + 2 w2] = [0.8560338353021181, 0.5640538998280161]
EXPECTED_WEIGHTS = torch.tensor(
    [
        [1 / 3, 1 / 3, 1 / 3],
        [0.7679179361387025, 0.18669370094750282, 0.04538836291379464],
        [0.575975345215362, 0.28399540974126003, 0.14002924504337805],
    ]
)
EXPECTED_OUTPUT = torch.tensor(
    [[1.0, 1.0], [0.8586946619662919, 0.2774704267750921], [0.8560338353021181, 0.5640538998280161]]
)
# Causal: row 0 sees only key 0 -> weight [1, 0, 0], output V0 = [1, 0].
# Row 1 sees keys 0, 1: exp [4.1132503787829275, 1], sum 5.1132503787829275 -> [0.8044296825069569,
# 0.1955703174930431, 0]; output = [w0, w1] = [0.8044296825069569, 0.1955703174930431]. Row 2 sees every key: as above.
EXPECTED_CAUSAL_WEIGHTS = torch.tensor(
    [
        [1.0, 0.0, 0.0],
        [0.8044296825069569, 0.1955703174930431, 0.0],
        [0.575975345215362, 0.28399540974126003, 0.14002924504337805],
    ]
)
EXPECTED_CAUSAL_OUTPUT = torch.tensor(
    [[1.0, 0.0], [0.8044296825069569, 0.1955703174930431], [0.8560338353021181, 0.5640538998280161]]
)


def _states(matrix, heads=1):
    return matrix.reshape(1, 1, 3, 2).expand(1, heads, 3, 2).contiguous()


def _module(is_causal=False, groups=1):
    # What the attention backends read from the calling module.
    return SimpleNamespace(num_key_value_groups=groups, training=False, is_causal=is_causal)


def _eager_causal_mask():
    config = ZooDecoderConfig.from_preset("tiny")
    config._attn_implementation = "eager"
    return create_causal_mask(config=config, inputs_embeds=torch.zeros(1, 3, 64), attention_mask=None, cache=None)


def test_eager_attention_by_hand():
    output, weights = eager_attention_forward(_module(), _states(Q), _states(K), _states(V), None, scaling=SCALING)
    assert output.shape == (1, 3, 1, 2)  # [batch, seq, heads, head_dim]
    assert_close(weights[0, 0], EXPECTED_WEIGHTS, **FP32)
    assert_close(output[0, :, 0], EXPECTED_OUTPUT, **FP32)


def test_eager_attention_causal_by_hand():
    mask = _eager_causal_mask()
    output, weights = eager_attention_forward(_module(True), _states(Q), _states(K), _states(V), mask, SCALING)
    assert_close(weights[0, 0], EXPECTED_CAUSAL_WEIGHTS, **FP32)
    assert_close(output[0, :, 0], EXPECTED_CAUSAL_OUTPUT, **FP32)


def test_eager_attention_adds_position_bias_before_softmax():
    # Row 0 has all-zero scores; a bias [0, ln 2, 0] makes its weights e^[0, ln2, 0] / 4 = [1/4, 1/2, 1/4],
    # so its output is 1/4 [1,0] + 1/2 [0,1] + 1/4 [2,2] = [0.75, 1.0].
    bias = torch.tensor([0.0, 0.6931471805599453, 0.0]).expand(3, 3).reshape(1, 1, 3, 3)
    output, weights = eager_attention_forward(
        _module(), _states(Q), _states(K), _states(V), None, SCALING, position_bias=bias
    )
    assert_close(weights[0, 0, 0], torch.tensor([0.25, 0.5, 0.25]), **FP32)
    assert_close(output[0, 0, 0], torch.tensor([0.75, 1.0]), **FP32)


def test_eager_attention_gqa_shares_key_value_heads():
    # Two query heads (Q and Q again) over one key/value head: repeat_kv gives both heads the same keys and values,
    # so each head reproduces the single-head result above.
    output, weights = eager_attention_forward(
        _module(groups=2), _states(Q, heads=2), _states(K), _states(V), None, SCALING
    )
    assert output.shape == (1, 3, 2, 2)
    for head in range(2):
        assert_close(weights[0, head], EXPECTED_WEIGHTS, **FP32)
        assert_close(output[0, :, head], EXPECTED_OUTPUT, **FP32)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_sdpa_attention_by_hand(causal):
    # No mask: transformers' sdpa backend falls back to the module's is_causal flag.
    output, weights = sdpa_attention_forward(_module(causal), _states(Q), _states(K), _states(V), None, scaling=SCALING)
    assert weights is None
    expected = EXPECTED_CAUSAL_OUTPUT if causal else EXPECTED_OUTPUT
    assert_close(output[0, :, 0], expected, **FP32)


def test_sdpa_attention_with_explicit_causal_mask_by_hand():
    config = ZooDecoderConfig.from_preset("tiny")
    config._attn_implementation = "sdpa"
    # allow_is_causal_skip=False materialises the boolean mask instead of returning None.
    mask = create_causal_mask(
        config=config, inputs_embeds=torch.zeros(1, 3, 64), attention_mask=None, cache=None, allow_is_causal_skip=False
    )
    assert mask.dtype == torch.bool
    output, _ = sdpa_attention_forward(_module(False), _states(Q), _states(K), _states(V), mask, scaling=SCALING)
    assert_close(output[0, :, 0], EXPECTED_CAUSAL_OUTPUT, **FP32)


# ------------------------------------------------------------------------------------------------ masks
def test_causal_mask_eager_is_lower_triangular():
    # Query i may see keys j <= i: 0 on and below the diagonal, the float32 minimum above it.
    expected = torch.tensor([[0.0, MIN, MIN], [0.0, 0.0, MIN], [0.0, 0.0, 0.0]])
    mask = _eager_causal_mask()
    assert mask.shape == (1, 1, 3, 3)
    assert torch.equal(mask[0, 0], expected)


def test_causal_mask_eager_with_left_padding():
    config = ZooDecoderConfig.from_preset("tiny")
    config._attn_implementation = "eager"
    attention_mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    mask = create_causal_mask(
        config=config, inputs_embeds=torch.zeros(2, 3, 64), attention_mask=attention_mask, cache=None
    )
    # Row 1 has a pad in slot 0: that key is masked for every query, on top of the causal pattern.
    assert torch.equal(mask[0, 0], torch.tensor([[0.0, MIN, MIN], [0.0, 0.0, MIN], [0.0, 0.0, 0.0]]))
    assert torch.equal(mask[1, 0], torch.tensor([[MIN, MIN, MIN], [MIN, 0.0, MIN], [MIN, 0.0, 0.0]]))


def test_decoder_uses_a_causal_mask(make_config, make_model, random_ids):
    # Through the model: eager attention weights of every layer and head are zero above the diagonal.
    model = make_model("decoder", make_config("decoder"))
    attentions = model(input_ids=random_ids(1, 5), output_attentions=True).attentions
    upper = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    for layer in attentions:
        assert torch.all(layer[..., upper] == 0)
        assert torch.all(layer[..., ~upper] > 0)


# ------------------------------------------------------------------------------------------------ sinusoidal
def test_sinusoidal_table_by_hand():
    # dim 4: inverse frequencies 1/10000^(0/4) = 1 and 1/10000^(2/4) = 1/100. Concatenated halves:
    # PE[p] = [sin(p), sin(p/100), cos(p), cos(p/100)].
    expected = torch.tensor(
        [
            [0.0, 0.0, 1.0, 1.0],  # p = 0
            [0.8414709848078965, 0.009999833334166664, 0.5403023058681398, 0.9999500004166653],  # p = 1
            [0.9092974268256817, 0.01999866669333308, -0.4161468365471424, 0.9998000066665778],  # p = 2
        ]
    )
    assert_close(SinusoidalPositions.compute_table(3, 4), expected, **FP32)


def test_sinusoidal_positions_embed_by_hand():
    config = ZooEncoderConfig.from_preset(
        "tiny", hidden_size=4, num_attention_heads=1, position_embedding_type="sinusoidal"
    )
    positions = SinusoidalPositions(config, is_causal=False)
    vectors = positions.embed(torch.tensor([[1, 0]]))
    assert vectors.shape == (1, 2, 4)
    assert_close(vectors[0, 0], torch.tensor([math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)]), **FP32)
    assert_close(vectors[0, 1], torch.tensor([0.0, 0.0, 1.0, 1.0]), **FP32)


def test_sincos_2d_table_by_hand():
    # ViT's fixed 2-D positions, grid 2x2 and dim 4: a quarter of the channels per (row|col) x (sin|cos), with
    # inverse frequency 1/10000^(0/1) = 1, so patch (r, c) gets [sin r, cos r, sin c, cos c], patches row-major.
    s1, c1 = 0.8414709848078965, 0.5403023058681398
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],  # (0, 0)
            [0.0, 1.0, s1, c1],  # (0, 1)
            [s1, c1, 0.0, 1.0],  # (1, 0)
            [s1, c1, s1, c1],  # (1, 1)
        ]
    )
    # This is the layout of transformers' ViTMAE table ([sin_h | cos_h | sin_w | cos_w], patches row-major).
    assert_close(sincos_2d_table(2, 4), expected, **FP32)


# ------------------------------------------------------------------------------------------------ rope
def _rope(head_dim=4):
    config = ZooDecoderConfig.from_preset("tiny", hidden_size=4 * head_dim, position_embedding_type="rope")
    return RotaryPositions(config, is_causal=True)


def test_rope_rotates_a_known_vector():
    # head_dim 4, theta 10000: inv_freq = [1, 1/100]. Half-split layout: dims (0, 2) rotate by angle p,
    # dims (1, 3) by p/100:  x' = x cos + rotate_half(x) sin, rotate_half([a, b, c, d]) = [-c, -d, a, b].
    # x = [1, 2, 3, 4] at p = 1:
    #   x'0 = 1 cos1 - 3 sin1       = 0.5403023058681398 - 2.5244129546236895 = -1.9841106485555495
    #   x'1 = 2 cos.01 - 4 sin.01   = 1.9999000008333306 - 0.039999333336666656 = 1.959900667496664
    #   x'2 = 3 cos1 + 1 sin1       = 1.6209069176044194 + 0.8414709848078965 = 2.4623779024123156
    #   x'3 = 4 cos.01 + 2 sin.01   = 3.999800001666661 + 0.019999666668333328 = 4.019799668334994
    # At p = 0 the rotation is the identity.
    rope = _rope()
    assert_close(rope.inv_freq, torch.tensor([1.0, 0.01]), **FP32)
    cos, sin = rope.rotary(torch.tensor([[0, 1]]), torch.float32)
    assert cos.shape == sin.shape == (1, 2, 4)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).expand(1, 1, 2, 4)  # [batch, heads, seq, head_dim]
    rotated = apply_rotary(x, cos, sin)
    assert_close(rotated[0, 0, 0], torch.tensor([1.0, 2.0, 3.0, 4.0]), **FP32)
    assert_close(
        rotated[0, 0, 1],
        torch.tensor([-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994]),
        **FP32,
    )
    # A rotation preserves the norm: |x|^2 = 1 + 4 + 9 + 16 = 30.
    assert_close(rotated[0, 0, 1].pow(2).sum(), torch.tensor(30.0), **FP32)


def test_rope_scores_depend_only_on_relative_position():
    # q(m) . k(n) = q^T R(n - m) k, so shifting both positions by the same amount leaves the score unchanged.
    rope = _rope(head_dim=8)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, generator=generator)

    def score(m, n):
        cos, sin = rope.rotary(torch.tensor([[m, n]]), torch.float32)
        rotated_q = apply_rotary(q.expand(1, 1, 2, 8), cos, sin)[0, 0, 0]
        rotated_k = apply_rotary(k.expand(1, 1, 2, 8), cos, sin)[0, 0, 1]
        return rotated_q @ rotated_k

    assert_close(score(3, 1), score(10, 8), rtol=1e-5, atol=1e-5)
    assert_close(score(0, 0), q @ k, rtol=1e-5, atol=1e-5)
    assert abs(float(score(3, 1) - score(3, 2))) > 1e-3  # and it does depend on the distance


# ------------------------------------------------------------------------------------------------ alibi
def test_alibi_slopes_power_of_two():
    # n = 8: start = 2^(-8/8) = 1/2, slopes 2^-1, 2^-2, ..., 2^-8.
    expected = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625])
    assert_close(AlibiPositions.compute_slopes(8), expected, rtol=0, atol=0)


def test_alibi_slopes_not_power_of_two():
    # n = 6: the 4 slopes of n = 4 (start 2^(-8/4) = 1/4: 2^-2, 2^-4, 2^-6, 2^-8), then every other slope of n = 8
    # (2^-1, 2^-3, 2^-5, 2^-7), the first 6 - 4 = 2 of them: 2^-1, 2^-3 (Press et al.'s reference get_slopes).
    expected = torch.tensor([0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125])
    assert_close(AlibiPositions.compute_slopes(6), expected, rtol=0, atol=0)
    # n = 12: 8 slopes 2^-1..2^-8, then slopes of n = 16 (2^-0.5, 2^-1, ...) at even indices: 2^-0.5, 2^-1.5,
    # 2^-2.5, 2^-3.5.
    expected_12 = [2.0**-e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)]
    assert_close(AlibiPositions.compute_slopes(12), torch.tensor(expected_12), rtol=1e-7, atol=0)


def test_alibi_score_bias_by_hand():
    # 2 heads: slopes 2^-4 = 1/16 and 2^-8 = 1/256; bias = -slope * |i - j|.
    config = ZooEncoderConfig.from_preset("tiny", num_attention_heads=2, position_embedding_type="alibi")
    alibi = AlibiPositions(config, is_causal=False)
    bias = alibi.score_bias(3, 3, 0, "cpu")
    distance = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 1.0, 0.0]])
    assert bias.shape == (1, 2, 3, 3)
    assert_close(bias[0, 0], -distance / 16, rtol=0, atol=0)
    assert_close(bias[0, 1], -distance / 256, rtol=0, atol=0)
    # One decoding step after 2 cached tokens: query slot 2 against keys 0, 1, 2 -> distances [2, 1, 0].
    step = alibi.score_bias(1, 3, 2, "cpu")
    assert_close(step[0, 0, 0], torch.tensor([-2 / 16, -1 / 16, 0.0]), rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ T5 relative
def test_relative_buckets_bidirectional():
    # num_buckets 32, max_distance 128, bidirectional: 16 buckets per direction, keys after the query (positive
    # relative position key - query) get +16. max_exact = 8: distances 0..7 are their own bucket; a larger distance
    # d goes to 8 + floor(ln(d / 8) / ln(128 / 8) * (16 - 8)), clamped to 15:
    #   d = 8   -> 8 + floor(0)                                   = 8
    #   d = 12  -> 8 + floor(ln 1.5  / ln 16 * 8) = 8 + floor(1.170) = 9
    #   d = 20  -> 8 + floor(ln 2.5  / ln 16 * 8) = 8 + floor(2.644) = 10
    #   d = 100 -> 8 + floor(ln 12.5 / ln 16 * 8) = 8 + floor(7.288) = 15
    #   d = 500 -> beyond max_distance, clamped                 = 15
    relative = torch.tensor([0, -1, 1, -7, 7, -8, -12, -20, 20, -100, 100, -500])
    expected = torch.tensor([0, 1, 17, 7, 23, 8, 9, 10, 26, 15, 31, 15])
    assert torch.equal(RelativePositionBias.bucket(relative, True, 32, 128), expected)


def test_relative_buckets_causal():
    # Unidirectional: future keys (relative > 0) fall in bucket 0; past distance d = query - key uses all 32 buckets,
    # max_exact = 16, larger d -> 16 + floor(ln(d / 16) / ln(128 / 16) * 16), clamped to 31:
    #   d = 16   -> 16                                         = 16
    #   d = 20   -> 16 + floor(ln 1.25    / ln 8 * 16) = 16 + floor(1.717)  = 17
    #   d = 64   -> 16 + floor(ln 4       / ln 8 * 16) = 16 + floor(10.667) = 26
    #   d = 127  -> 16 + floor(ln 7.9375  / ln 8 * 16) = 16 + floor(15.939) = 31
    #   d = 1000 -> clamped                                    = 31
    relative = torch.tensor([5, 0, -3, -15, -16, -20, -64, -127, -1000])
    expected = torch.tensor([0, 0, 3, 15, 16, 17, 26, 31, 31])
    assert torch.equal(RelativePositionBias.bucket(relative, False, 32, 128), expected)


@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
def test_relative_score_bias_orientation(is_causal):
    # With the bias table set to weight[bucket, head] = bucket + 100 * head, the bias reads back the bucket of
    # (key - query) for every query i and key j:
    #   bidirectional: key after query by 1 -> 17, by 2 -> 18; before by 1 -> 1, by 2 -> 2;
    #   causal: future keys -> 0; past keys by 1 -> 1, by 2 -> 2.
    config = ZooDecoderConfig.from_preset("tiny", num_attention_heads=2, position_embedding_type="relative")
    relative = RelativePositionBias(config, is_causal=is_causal)
    with torch.no_grad():
        relative.relative_attention_bias.weight.copy_(torch.arange(32.0)[:, None] + torch.tensor([0.0, 100.0]))
    expected = (
        torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 1.0, 0.0]])
        if is_causal
        else torch.tensor([[0.0, 17.0, 18.0], [1.0, 0.0, 17.0], [2.0, 1.0, 0.0]])
    )
    bias = relative.score_bias(3, 3, 0, "cpu")
    assert bias.shape == (1, 2, 3, 3)
    assert torch.equal(bias[0, 0], expected)
    assert torch.equal(bias[0, 1], expected + 100)
    # Decoding one token after two cached ones reproduces the last row.
    assert torch.equal(relative.score_bias(1, 3, 2, "cpu")[0, 0, 0], expected[2])
