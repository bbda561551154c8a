"""The zoo's own attention kernels, beside the ones transformers' attention interface provides.

* `eager_attention_forward`: softmax(Q K^T * scaling + bias + mask) V written out, the reference every other kernel
  is tested against, and the "eager" implementation;
* `sdpa_math_attention`: what "sdpa" runs when training with attention dropout on CPU, where PyTorch's SDPA would take
  its math path anyway: the same operations with the zoo's dropout masks (modeling_zoo_dropout.py).

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv

from .modeling_zoo_dropout import zoo_dropout


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scaling + bias + mask) V, the reference every other kernel is tested against.

    Takes [batch, heads, seq, head_dim] states and an additive mask; returns [batch, seq, heads, head_dim] and the
    attention weights. Differs from Llama's only in adding the position scheme's score bias.
    """
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    sampler = getattr(getattr(module, "config", None), "dropout_sampler", "pcg64")
    weights = zoo_dropout(weights, dropout, module.training, sampler)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def sdpa_math_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The "sdpa" kernel for training with attention dropout on CPU, where PyTorch's SDPA leaves its fused kernel for
    its math path: these same operations, with the mask drawn by the config's dropout sampler instead of PyTorch's
    (modeling_zoo_dropout.py). Takes the masks made for "sdpa" (boolean, or None with causal attention) and returns
    no weights, as "sdpa" does. Self-attention comes here only when queries and keys are the same positions (no
    cached keys), so a causal mask left to the kernel is the plain lower triangle."""
    if attention_mask is None and module.is_causal and query.shape[2] > 1:
        attention_mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
            ~attention_mask, torch.finfo(query.dtype).min)
    output, _ = eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout, position_bias)
    return output, None
