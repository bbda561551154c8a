"""The functional kernels of the efficient attention variants (modeling_zoo_attention_variants.py holds their
modules, the registry that picks one per config, and the masks they take): tensors in, tensors out, no parameters.

* `sliding_window_attention`: Longformer's local window plus global slots, blocked so that no n x n tensor is built;
  `sliding_window_mask_function`, the same rule as a transformers / FlexAttention mask function;
* `performer_attention`: FAVOR+ with positive orthogonal random features (`draw_orthogonal_features`,
  `favor_features`), causal through chunked prefix sums.

Written here because neither PyTorch nor transformers has them on CPU (see the variants module's docstring); each is
tested against exact attention in tests/test_attention_variants.py.

This file is copied into saved checkpoints for `trust_remote_code`: it imports no sibling at all.
"""

import math

import torch
from torch import nn


def _masked_softmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis where `valid`, in float32. Masked entries get the dtype's minimum rather than -inf,
    so a row with no valid key (a padded query) gives finite weights instead of NaN; such rows are never read."""
    scores = scores.float().masked_fill(~valid, torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1)


def _dropout(weights: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    # Skipped at p = 0: F.dropout in training mode would still draw a mask the size of the weights.
    return nn.functional.dropout(weights, p=p, training=training) if p > 0 and training else weights


def existing_global_slots(global_indices: tuple[int, ...], length: int, device) -> torch.Tensor:
    """The configured global slots that exist in a sequence of `length` slots, as a long tensor."""
    return torch.tensor([i for i in global_indices if i < length], dtype=torch.long, device=device)



# ================================================================================================ sliding window
def sliding_window_mask_function(window: int, is_global: torch.Tensor | None):
    """A transformers/FlexAttention mask function (batch, head, q_idx, kv_idx) -> bool: |q - kv| <= window, or either
    slot global. Combined with the causal or bidirectional base mask by `masking_utils` (and_mask_function)."""

    def mask(batch_idx, head_idx, q_idx, kv_idx):
        local = (q_idx - kv_idx).abs() <= window
        if is_global is None:
            return local
        return local | is_global[q_idx] | is_global[kv_idx]

    return mask


def sliding_window_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    global_indices: tuple[int, ...],
    is_causal: bool,
    padding_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Longformer-style attention without an n x n tensor. Returns [batch, heads, q_len, head_dim].

    query [b, h, q, d]; key/value [b, h, k, d] (already repeated for GQA) with k >= q: the queries sit at slots
    k - q .. k - 1 (k > q when a cache holds earlier slots). Query i sees key j when |i - j| <= window (and j <= i if
    causal), or when i or j is a global slot. Softmax runs jointly over a query's local and global keys; a global key
    that is also local is counted once.

    Prefill / training (q == k): the sequence is cut into blocks of B = min(window, n) queries; block i's keys are
    blocks i-1, i, i+1 (3B keys, which contain every key within `window`), so scores are [b, h, n/B, B, 3B + g].
    Rows of global queries are then recomputed over all keys ([b, h, g, n]).
    Decoding with a cache (q < k): scores are the q x k rows of those queries, O(k) per generated token.
    """
    batch, heads, q_len, head_dim = query.shape
    kv_len = key.shape[-2]
    device = query.device
    global_slots = existing_global_slots(global_indices, kv_len, device)
    is_global = torch.zeros(kv_len, dtype=torch.bool, device=device)
    is_global[global_slots] = True

    if q_len != kv_len:
        # Cached decoding: the few new queries against every cached key, with the same rule.
        q_slots = torch.arange(kv_len - q_len, kv_len, device=device)[:, None]
        k_slots = torch.arange(kv_len, device=device)[None, :]
        valid = ((q_slots - k_slots).abs() <= window) | is_global[q_slots] | is_global[k_slots]
        if is_causal:
            valid = valid & (k_slots <= q_slots)
        valid = valid[None, None]
        if padding_mask is not None:
            valid = valid & padding_mask[:, None, None, :]
        weights = _masked_softmax(torch.matmul(query, key.transpose(-1, -2)) * scaling, valid)
        weights = _dropout(weights, dropout, training).to(value.dtype)
        return torch.matmul(weights, value)

    n = q_len
    block = max(1, min(window, n))
    num_blocks = math.ceil(n / block)
    pad = num_blocks * block - n
    q_blocks = nn.functional.pad(query, (0, 0, 0, pad)).view(batch, heads, num_blocks, block, head_dim)
    # One block of padding on each side; unfold gives every block its 3-block key window as a view.
    k_windows = nn.functional.pad(key, (0, 0, block, pad + block)).unfold(2, 3 * block, block)  # b h nb d 3B
    v_windows = nn.functional.pad(value, (0, 0, block, pad + block)).unfold(2, 3 * block, block).transpose(-1, -2)
    local_scores = torch.matmul(q_blocks, k_windows) * scaling  # b h nb B 3B

    q_slots = torch.arange(num_blocks * block, device=device).view(num_blocks, block, 1)
    k_slots = (torch.arange(num_blocks, device=device).view(num_blocks, 1, 1) - 1) * block + torch.arange(
        3 * block, device=device
    ).view(1, 1, 3 * block)
    in_range = (k_slots >= 0) & (k_slots < n)
    local_valid = in_range & ((q_slots - k_slots).abs() <= window)
    if is_causal:
        local_valid = local_valid & (k_slots <= q_slots)
    # Global keys are attended through the global columns below; drop them here so they are not counted twice.
    local_valid = local_valid & ~is_global[k_slots.clamp(0, n - 1)]
    local_valid = local_valid[None, None]  # 1 1 nb B 3B
    if padding_mask is not None:
        padded_keys = nn.functional.pad(padding_mask, (block, pad + block), value=False).unfold(1, 3 * block, block)
        local_valid = local_valid & padded_keys[:, None, :, None, :]  # b 1 nb B 3B

    num_global = global_slots.numel()
    if num_global:
        global_keys, global_values = key[:, :, global_slots], value[:, :, global_slots]  # b h g d
        global_scores = torch.matmul(q_blocks, global_keys.transpose(-1, -2)[:, :, None]) * scaling  # b h nb B g
        global_valid = torch.ones(num_blocks, block, num_global, dtype=torch.bool, device=device)
        if is_causal:
            global_valid = global_valid & (global_slots.view(1, 1, -1) <= q_slots)
        global_valid = global_valid[None, None]
        if padding_mask is not None:
            global_valid = global_valid & padding_mask[:, global_slots][:, None, None, None, :]
        scores = torch.cat((local_scores, global_scores), dim=-1)
        valid = _cat_masks(local_valid, global_valid)
    else:
        scores, valid = local_scores, local_valid
    weights = _masked_softmax(scores, valid)
    weights = _dropout(weights, dropout, training).to(value.dtype)
    output = torch.matmul(weights[..., : 3 * block], v_windows)  # b h nb B d
    if num_global:
        output = output + torch.matmul(weights[..., 3 * block :], global_values[:, :, None])
    output = output.reshape(batch, heads, num_blocks * block, head_dim)[:, :, :n]

    if num_global:
        # Global queries attend to every key (every earlier key if causal).
        g_scores = torch.matmul(query[:, :, global_slots], key.transpose(-1, -2)) * scaling  # b h g n
        g_valid = torch.ones(num_global, n, dtype=torch.bool, device=device)
        if is_causal:
            g_valid = g_valid & (torch.arange(n, device=device)[None, :] <= global_slots[:, None])
        g_valid = g_valid[None, None]
        if padding_mask is not None:
            g_valid = g_valid & padding_mask[:, None, None, :]
        g_weights = _masked_softmax(g_scores, g_valid)
        g_weights = _dropout(g_weights, dropout, training).to(value.dtype)
        output = output.index_copy(2, global_slots, torch.matmul(g_weights, value))
    return output


def _cat_masks(local_valid: torch.Tensor, global_valid: torch.Tensor) -> torch.Tensor:
    """Concatenate two boolean masks along the key axis after broadcasting their leading axes."""
    shape = torch.broadcast_shapes(local_valid.shape[:-1], global_valid.shape[:-1])
    return torch.cat(
        (local_valid.expand(*shape, local_valid.shape[-1]), global_valid.expand(*shape, global_valid.shape[-1])),
        dim=-1,
    )


# ================================================================================================ Performer
def draw_orthogonal_features(num_features: int, head_dim: int, generator: torch.Generator) -> torch.Tensor:
    """FAVOR+'s random projection [num_features, head_dim]: stacked blocks of head_dim orthonormal rows (QR of a
    Gaussian matrix), each row rescaled to the norm of a Gaussian vector so rows are marginally N(0, I)."""
    blocks = []
    for _ in range(math.ceil(num_features / head_dim)):
        orthonormal, _ = torch.linalg.qr(torch.randn(head_dim, head_dim, generator=generator, dtype=torch.float64))
        blocks.append(orthonormal.T)
    directions = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, head_dim, generator=generator, dtype=torch.float64).norm(dim=1, keepdim=True)
    return (directions * norms).float()


def favor_features(states: torch.Tensor, projection: torch.Tensor, is_query: bool, stabilise_keys: bool,
                   eps: float = 1e-6) -> torch.Tensor:
    """Positive random features phi(x) = exp(w x - |x|^2 / 2 - c) / sqrt(m), so E[phi(q) phi(k)] = exp(q k) e^{-c..}.

    The shift c cancels between numerator and denominator. Queries use their own row maximum (no other position is
    involved, so it is causal-safe). Keys use the maximum over all keys in bidirectional attention; causal attention
    uses no key shift, because a maximum over the sequence would depend on future keys. Unshifted it is still bounded:
    w k - |k|^2 / 2 <= |w|^2 / 2, independent of k. `eps` keeps denominators positive (as in Performer's code).
    """
    projected = torch.matmul(states, projection.T)  # ... n m
    half_norm = states.pow(2).sum(-1, keepdim=True) / 2
    if is_query:
        shift = projected.amax(dim=-1, keepdim=True).detach()
    elif stabilise_keys:
        shift = projected.amax(dim=(-1, -2), keepdim=True).detach()
    else:
        shift = 0.0
    return (torch.exp(projected - half_norm - shift) + eps) * projection.shape[0] ** -0.5


def _nonzero(denominator: torch.Tensor) -> torch.Tensor:
    """A query that sees no key at all (a left-padded slot in a causal model) has numerator and denominator 0; give
    it output 0 instead of NaN, which would spread to every later layer through that slot's keys and values."""
    return torch.where(denominator == 0, 1.0, denominator)


def performer_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    projection: torch.Tensor,
    is_causal: bool,
    padding_mask: torch.Tensor | None,
    scaling: float,
    chunk_size: int = 64,
) -> torch.Tensor:
    """FAVOR+ attention in float32. query [b, h, q, d], key/value [b, h, k, d] (k >= q; the queries are the last q
    slots). Returns [b, h, q, d].

    Bidirectional: out = phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1), O(n m d).
    Causal: keys of cached slots (k - q of them) are visible to every query and enter as a starting state; the new
    slots use prefix sums computed per chunk of `chunk_size`: the state of all earlier chunks (an exclusive cumulative
    sum of per-chunk phi(K)^T V, [b, h, n/C, m, d]) plus an exact lower-triangular C x C term within the chunk. Memory
    O(n m d / C + n C) instead of the O(n m d) of a per-position cumulative sum.
    """
    dtype = query.dtype
    root = scaling**0.5  # q k * scaling = (q sqrt(s)) (k sqrt(s))
    query, key, value = query.float() * root, key.float() * root, value.float()
    projection = projection.to(device=query.device, dtype=torch.float32)
    q_features = favor_features(query, projection, is_query=True, stabilise_keys=False)
    k_features = favor_features(key, projection, is_query=False, stabilise_keys=not is_causal)
    if padding_mask is not None:
        # where, not multiply: a padded slot's state may be non-finite, and 0 * inf is NaN.
        k_features = torch.where(padding_mask[:, None, :, None], k_features, 0.0)
        value = torch.where(padding_mask[:, None, :, None], value, 0.0)

    if not is_causal:
        key_value = torch.matmul(k_features.transpose(-1, -2), value)  # b h m d
        numerator = torch.matmul(q_features, key_value)
        denominator = torch.matmul(q_features, k_features.sum(dim=-2, keepdim=True).transpose(-1, -2))
        return (numerator / _nonzero(denominator)).to(dtype)

    q_len, kv_len = query.shape[-2], key.shape[-2]
    past = kv_len - q_len
    past_state = torch.matmul(k_features[:, :, :past].transpose(-1, -2), value[:, :, :past])  # b h m d
    past_norm = k_features[:, :, :past].sum(dim=-2)  # b h m
    k_features, value = k_features[:, :, past:], value[:, :, past:]

    batch, heads, n, num_features = q_features.shape
    head_dim = value.shape[-1]
    chunk = min(chunk_size, n)
    num_chunks = math.ceil(n / chunk)
    pad = num_chunks * chunk - n  # zero features: padded keys add nothing, padded queries are cut off below
    q_chunks = nn.functional.pad(q_features, (0, 0, 0, pad)).view(batch, heads, num_chunks, chunk, num_features)
    k_chunks = nn.functional.pad(k_features, (0, 0, 0, pad)).view(batch, heads, num_chunks, chunk, num_features)
    v_chunks = nn.functional.pad(value, (0, 0, 0, pad)).view(batch, heads, num_chunks, chunk, head_dim)

    chunk_state = torch.matmul(k_chunks.transpose(-1, -2), v_chunks)  # b h c m d
    chunk_norm = k_chunks.sum(dim=-2)  # b h c m
    state = torch.cumsum(chunk_state, dim=2) - chunk_state + past_state[:, :, None]
    norm = torch.cumsum(chunk_norm, dim=2) - chunk_norm + past_norm[:, :, None]
    numerator = torch.matmul(q_chunks, state)  # b h c C d
    denominator = torch.matmul(q_chunks, norm.unsqueeze(-1)).squeeze(-1)  # b h c C
    within = torch.matmul(q_chunks, k_chunks.transpose(-1, -2)).tril()  # b h c C C
    numerator = numerator + torch.matmul(within, v_chunks)
    denominator = denominator + within.sum(dim=-1)
    output = (numerator / _nonzero(denominator).unsqueeze(-1)).reshape(batch, heads, num_chunks * chunk, head_dim)[:, :, :n]
    return output.to(dtype)
