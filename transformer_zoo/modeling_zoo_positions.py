"""Position schemes: how a zoo stack tells tokens apart by place, chosen by `config.position_embedding_type` through
`POSITION_SCHEMES` (sinusoidal | learned | rope | alibi | relative | none).

A scheme injects order in one of three places, so it has three hooks: `embed` (added to the token embeddings:
sinusoidal, learned), `rotary` (rotates queries and keys: RoPE) and `score_bias` (added to attention scores: ALiBi,
T5 relative buckets). Attention (modeling_zoo_layers.ZooAttention) asks the scheme; it never branches on its name.

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import math

import torch
from torch import nn
from transformers import initialization as init


class PositionScheme(nn.Module):
    """No positional information (NoPE). Subclasses implement one of the three hooks.

    `num_heads` and `head_dim` are those of the stack's self-attention (the encoder-decoder's stacks may differ).
    """

    # True when score_bias returns a bias (FlashAttention kernels cannot add one).
    adds_score_bias = False

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__()
        self.is_causal = is_causal
        self.num_heads = num_heads or config.num_attention_heads
        self.head_dim = head_dim or config.head_dim

    def embed(self, position_ids: torch.Tensor) -> torch.Tensor | None:
        """Vectors added to the token embeddings, [batch, seq, hidden], or None."""
        return None

    def rotary(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(cos, sin), each [batch, seq, head_dim], that rotate queries and keys, or None."""
        return None

    def score_bias(self, query_length: int, key_length: int, past_length: int, device) -> torch.Tensor | None:
        """An additive attention-score bias [1, heads, query_length, key_length], or None.

        Distances are measured in cache slots (query i sits at slot past_length + i). With left padding the real
        tokens are contiguous, so their distances, and hence these relative biases, do not depend on the padding.
        """
        return None

    def reset_buffers(self) -> None:
        """Recompute non-persistent buffers (from_pretrained builds on the meta device and leaves them empty)."""


def _check_positions_fit(position_ids: torch.Tensor, limit: int, scheme: str) -> None:
    # A data-dependent check; skipped while torch.compile traces (it would break the graph).
    if not torch.compiler.is_compiling() and position_ids.numel() and int(position_ids.max()) >= limit:
        raise ValueError(
            f"Position {int(position_ids.max())} is beyond the {scheme} position table of max_position_embeddings="
            f"{limit}. Shorten the input, or build the model with a larger max_position_embeddings "
            "(for learned positions that means new, untrained rows)."
        )


class SinusoidalPositions(PositionScheme):
    """Fixed sine/cosine positions (Vaswani et al. 2017, 3.5): PE[p, i] = sin(p / 10000^(2i/d)) in the first half of
    the vector and cos(...) in the second half. The paper interleaves sin and cos; its own code (tensor2tensor),
    fairseq and Marian concatenate the halves, which differs only by a fixed permutation of dimensions. Concatenated
    halves let Marian checkpoints convert exactly.
    """

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__(config, is_causal, num_heads, head_dim)
        self.num_positions, self.dim = config.max_position_embeddings, config.hidden_size
        self.table = nn.Buffer(self.compute_table(self.num_positions, self.dim), persistent=False)

    @staticmethod
    def compute_table(num_positions: int, dim: int) -> torch.Tensor:
        # float64 as Marian does, so that large positions keep full float32 precision.
        position = torch.arange(num_positions, dtype=torch.float64)[:, None]
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        angles = position * inv_freq
        table = torch.zeros(num_positions, dim, dtype=torch.float64)
        half = dim // 2 + dim % 2
        table[:, :half] = torch.sin(angles)
        table[:, half:] = torch.cos(angles[:, : dim // 2])
        return table.float()

    def embed(self, position_ids):
        _check_positions_fit(position_ids, self.num_positions, "sinusoidal")
        return nn.functional.embedding(position_ids, self.table)

    def reset_buffers(self):
        init.copy_(self.table, self.compute_table(self.num_positions, self.dim))


class LearnedPositions(PositionScheme):
    """A trained table of absolute positions (BERT, GPT-2)."""

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__(config, is_causal, num_heads, head_dim)
        self.embedding = nn.Embedding(config.max_position_embeddings, config.hidden_size)

    def embed(self, position_ids):
        _check_positions_fit(position_ids, self.embedding.num_embeddings, "learned")
        return self.embedding(position_ids)


class RotaryPositions(PositionScheme):
    """Rotary position embedding (Su et al. 2021) in the half-split layout transformers' Llama uses."""

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__(config, is_causal, num_heads, head_dim)
        self.theta = config.rope_theta
        self.inv_freq = nn.Buffer(self.compute_inv_freq(self.head_dim, self.theta), persistent=False)

    @staticmethod
    def compute_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
        return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))

    def rotary(self, position_ids, dtype):
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def reset_buffers(self):
        init.copy_(self.inv_freq, self.compute_inv_freq(self.head_dim, self.theta))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    # Two slices, not chunk(): chunk dispatches a split and two narrows, which a generated token pays per layer twice.
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate [batch, heads, seq, head_dim] states by angles given as [batch, seq, head_dim] (or already broadcast
    over heads, [batch, 1, seq, head_dim]: attention unsqueezes them once for the queries and the keys)."""
    if cos.ndim == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return states * cos + rotate_half(states) * sin


class AlibiPositions(PositionScheme):
    """Attention with Linear Biases (Press et al. 2022): score -= slope_h * distance.

    Decoders use the causal distance i - j (future keys are masked anyway); encoders use |i - j|, the symmetric
    variant bidirectional ALiBi models (e.g. MosaicBERT) use.
    """

    adds_score_bias = True

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__(config, is_causal, num_heads, head_dim)
        self.slopes = nn.Buffer(self.compute_slopes(self.num_heads), persistent=False)

    @staticmethod
    def compute_slopes(num_heads: int) -> torch.Tensor:
        # Geometric sequence starting at 2^(-8/n); for n not a power of two, interleave the next power's slopes
        # (the paper's reference implementation).
        def power_of_two_slopes(n):
            start = 2.0 ** (-8.0 / n)
            return [start ** (i + 1) for i in range(n)]

        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two_slopes(closest)
        if closest < num_heads:
            slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
        return torch.tensor(slopes, dtype=torch.float32)

    def score_bias(self, query_length, key_length, past_length, device):
        query_slots = torch.arange(past_length, past_length + query_length, device=device)[:, None]
        key_slots = torch.arange(key_length, device=device)[None, :]
        distance = (query_slots - key_slots).abs().float()
        return (-self.slopes.to(device)[:, None, None] * distance).unsqueeze(0)

    def reset_buffers(self):
        init.copy_(self.slopes, self.compute_slopes(self.num_heads))


class RelativePositionBias(PositionScheme):
    """T5's bucketed relative position bias (Raffel et al. 2020): one learned scalar per head and distance bucket,
    exact buckets for short distances and logarithmic ones up to `relative_attention_max_distance`. Shared by all
    layers of a stack, as in T5.
    """

    adds_score_bias = True

    def __init__(self, config, is_causal: bool, num_heads: int | None = None, head_dim: int | None = None):
        super().__init__(config, is_causal, num_heads, head_dim)
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_attention_bias = nn.Embedding(self.num_buckets, self.num_heads)

    @staticmethod
    def bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int):
        buckets = torch.zeros_like(relative_position)
        if bidirectional:
            num_buckets //= 2
            buckets += (relative_position > 0).long() * num_buckets
            distance = relative_position.abs()
        else:
            distance = -torch.clamp(relative_position, max=0)
        max_exact = num_buckets // 2
        is_small = distance < max_exact
        log_bucket = max_exact + (
            torch.log(distance.float().clamp(min=1) / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
        log_bucket = torch.clamp(log_bucket, max=num_buckets - 1)
        return buckets + torch.where(is_small, distance, log_bucket)

    def score_bias(self, query_length, key_length, past_length, device):
        query_slots = torch.arange(past_length, past_length + query_length, device=device)[:, None]
        key_slots = torch.arange(key_length, device=device)[None, :]
        buckets = self.bucket(key_slots - query_slots, not self.is_causal, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)


POSITION_SCHEMES: dict[str, type[PositionScheme]] = {
    "none": PositionScheme,
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
    "relative": RelativePositionBias,
}
