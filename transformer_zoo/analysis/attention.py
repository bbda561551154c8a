"""Looking inside attention: capture every layer's attention weights, summarise each head (entropy, mean attention
distance, redundancy between heads) and draw heat-maps.

Attention tensors here are [layers, batch, heads, queries, keys] (a single layer's [batch, heads, q, k] is accepted
too) with rows that are probability distributions over the keys. Masks are [batch, length] with 1 for real tokens
and 0 for padding, as `attention_mask` is everywhere in transformers.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch

from .figures import pyplot, save_figure


def _restore_attention_implementation(model, implementation: str | None) -> None:
    if implementation is not None and model.config._attn_implementation != implementation:
        model.set_attn_implementation(implementation)


def capture_attentions(model, inputs) -> dict[str, torch.Tensor]:
    """Run `model` once with `output_attentions=True` and return its attention weights, stacked per stack.

    Only the eager ("manual softmax") path materialises the weights — SDPA and FlashAttention fuse them away — so
    the model is switched to eager for this call and then back to its previous implementation, even on error. It is
    also put in eval mode for the call (attention dropout would otherwise perturb the returned rows) and restored.

    `inputs` is a dict of forward keyword arguments (or a tensor of input ids). Returns {"self": ...} for encoders,
    decoders and ViT; {"encoder_self", "decoder_self", "cross"} for encoder-decoders; each [layers, batch, heads,
    q, k], float32 on the CPU.
    """
    if isinstance(inputs, torch.Tensor):
        inputs = {"input_ids": inputs}
    previous_implementation = model.config._attn_implementation
    was_training = model.training
    try:
        model.set_attn_implementation("eager")
        model.eval()
        with torch.no_grad():
            outputs = model(**inputs, output_attentions=True, return_dict=True)
    finally:
        _restore_attention_implementation(model, previous_implementation)
        model.train(was_training)

    def stack(layers):
        return torch.stack([layer.detach().float().cpu() for layer in layers])

    if getattr(outputs, "cross_attentions", None) is not None and getattr(outputs, "decoder_attentions", None):
        return {"encoder_self": stack(outputs.encoder_attentions), "decoder_self": stack(outputs.decoder_attentions),
                "cross": stack(outputs.cross_attentions)}
    if getattr(outputs, "attentions", None) is None:
        raise ValueError(f"{type(model).__name__} returned no attention weights with output_attentions=True.")
    return {"self": stack(outputs.attentions)}


def _with_layer_dim(attentions: torch.Tensor) -> torch.Tensor:
    attentions = torch.as_tensor(attentions, dtype=torch.float64)
    if attentions.ndim == 4:
        attentions = attentions.unsqueeze(0)
    if attentions.ndim != 5:
        raise ValueError(f"expected attentions [layers, batch, heads, q, k], got {tuple(attentions.shape)}.")
    return attentions


def _masks(attentions: torch.Tensor, attention_mask, query_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Key mask [batch, k] and query mask [batch, q] (float). The query mask defaults to the key mask when the map is
    square (self-attention), else to all queries (e.g. cross-attention: pass the target mask as `query_mask`)."""
    _, batch, _, queries, keys = attentions.shape
    key_mask = torch.ones(batch, keys, dtype=torch.float64) if attention_mask is None else (
        torch.as_tensor(attention_mask).to(torch.float64))
    if query_mask is None:
        query_mask = key_mask if (attention_mask is not None and queries == keys) else torch.ones(batch, queries)
    return key_mask, torch.as_tensor(query_mask).to(torch.float64)


def _mean_over_queries(per_query: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
    """[layers, batch, heads, q] -> [layers, heads], averaging over real queries of every batch row."""
    weights = query_mask[None, :, None, :]
    return (per_query * weights).sum(dim=(1, 3)) / weights.sum(dim=(1, 3)).clamp_min(1e-12)


def head_entropy(attentions, attention_mask=None, query_mask=None) -> torch.Tensor:
    """Mean over (real) queries of the entropy −Σ_j p_ij log p_ij of each head's attention, in nats: [layers, heads].

    log n for a head spreading evenly over n keys, 0 for one attending to a single key — the "broad vs focused"
    measure of Clark et al. (2019, "What Does BERT Look At?", section 3.3). Padded keys are excluded from the sum
    and padded queries from the mean; 0·log 0 is taken as 0.
    """
    attentions = _with_layer_dim(attentions)
    key_mask, query_mask = _masks(attentions, attention_mask, query_mask)
    probabilities = attentions * key_mask[None, :, None, None, :]
    plogp = torch.where(probabilities > 0, probabilities * torch.log(probabilities.clamp_min(1e-300)),
                        torch.zeros_like(probabilities))
    return _mean_over_queries(-plogp.sum(dim=-1), query_mask).float()


def mean_attention_distance(attentions, attention_mask=None, query_mask=None) -> torch.Tensor:
    """Expected distance Σ_j p_ij |i − j| in token positions, averaged over (real) queries: [layers, heads].

    The "attention distance" of Dosovitskiy et al. (2021, fig. 7) measured in sequence positions rather than
    pixels: 0 for a head that attends to its own position, large for long-range heads. For ViT the positions are
    sequence indices (prefix tokens first, then patches row by row), not 2-D pixel distances.
    """
    attentions = _with_layer_dim(attentions)
    key_mask, query_mask = _masks(attentions, attention_mask, query_mask)
    queries, keys = attentions.shape[-2:]
    distance = (torch.arange(queries, dtype=torch.float64)[:, None]
                - torch.arange(keys, dtype=torch.float64)[None, :]).abs()
    expected = (attentions * key_mask[None, :, None, None, :] * distance).sum(dim=-1)
    return _mean_over_queries(expected, query_mask).float()


def head_similarity(attentions) -> torch.Tensor:
    """Pairwise cosine similarity of the heads' flattened attention maps (over batch, queries and keys) within each
    layer: [layers, heads, heads]. Values near 1 flag redundant heads, candidates for pruning (Michel et al. 2019)."""
    attentions = _with_layer_dim(attentions)
    layers, batch, heads, queries, keys = attentions.shape
    flat = attentions.permute(0, 2, 1, 3, 4).reshape(layers, heads, batch * queries * keys)
    unit = flat / flat.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.transpose(1, 2)).float()


def head_statistics_table(attentions, attention_mask=None, query_mask=None) -> list[dict]:
    """One row per (layer, head): entropy (nats), mean attention distance (positions), and the highest cosine
    similarity to another head of the same layer."""
    entropy = head_entropy(attentions, attention_mask, query_mask)
    distance = mean_attention_distance(attentions, attention_mask, query_mask)
    similarity = head_similarity(attentions)
    layers, heads = entropy.shape
    rows = []
    for layer in range(layers):
        for head in range(heads):
            others = [float(similarity[layer, head, other]) for other in range(heads) if other != head]
            rows.append({"layer": layer, "head": head, "entropy": float(entropy[layer, head]),
                         "mean_distance": float(distance[layer, head]),
                         "max_similarity_to_other_head": max(others) if others else math.nan})
    return rows


def write_table_csv(rows: list[dict], path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def table_markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"{value:.4f}" if isinstance(value, float) else str(value) for value in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_attention_map(weights, tokens_q, tokens_k, path, title: str | None = None) -> Path:
    """Save one head's attention map [q, k] as a heat-map PNG, query tokens down the rows and key tokens across."""
    plt = pyplot()

    weights = torch.as_tensor(weights, dtype=torch.float32)
    if weights.ndim != 2 or weights.shape != (len(tokens_q), len(tokens_k)):
        raise ValueError(f"weights {tuple(weights.shape)} do not match {len(tokens_q)} query and {len(tokens_k)} "
                         "key tokens.")
    size = 2.5 + 0.3 * max(weights.shape)
    figure, axis = plt.subplots(figsize=(min(size, 20), min(size, 20)))
    image = axis.imshow(weights.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    axis.set_xticks(range(len(tokens_k)), [str(t) for t in tokens_k], rotation=90, fontsize=7)
    axis.set_yticks(range(len(tokens_q)), [str(t) for t in tokens_q], fontsize=7)
    axis.set(xlabel="key", ylabel="query", title=title or "")
    figure.colorbar(image, ax=axis, fraction=0.046)
    return save_figure(figure, path)


# ----------------------------------------------------------------------------------------- ViT [CLS] attention
def attention_rollout(attentions, residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how much each output token draws on each input token through all
    layers. Per layer the heads are averaged, the residual connection is modelled as 0.5·A + 0.5·I (rows
    renormalised), and layers are multiplied bottom-up: R = A'_L ··· A'_1. Input [layers, batch, heads, n, n] (or
    one layer's [batch, heads, n, n]); returns [batch, n, n], whose rows are distributions over the input tokens.
    """
    attentions = _with_layer_dim(attentions)
    layers, batch, _, queries, keys = attentions.shape
    if queries != keys:
        raise ValueError(f"rollout needs square self-attention maps, got {queries} queries and {keys} keys.")
    identity = torch.eye(queries, dtype=torch.float64)
    rollout = identity.expand(batch, queries, queries)
    for layer in range(layers):
        mixed = attentions[layer].mean(dim=1)
        if residual:
            mixed = 0.5 * mixed + 0.5 * identity
            mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        rollout = mixed @ rollout
    return rollout.float()


def cls_attention_map(attentions, num_prefix_tokens: int = 1, method: str = "rollout") -> torch.Tensor:
    """Where the ViT [CLS] token looks, as a [batch, rows, cols] patch grid.

    `method="rollout"`: the [CLS] row of `attention_rollout`; `method="last"`: the last layer's [CLS] attention,
    averaged over heads. Prefix tokens ([CLS], DeiT's [DIST]) come first in the sequence (`num_prefix_tokens` of
    them) and are dropped; the patches must form a square grid. Values are the attention mass on each patch (they
    sum to at most 1: the rest goes to the prefix tokens).
    """
    attentions = _with_layer_dim(attentions)
    if method == "rollout":
        cls_row = attention_rollout(attentions)[:, 0]
    elif method == "last":
        cls_row = attentions[-1].mean(dim=1)[:, 0].float()
    else:
        raise ValueError(f"method={method!r}; choose 'rollout' or 'last'.")
    patches = cls_row[:, num_prefix_tokens:]
    grid = math.isqrt(patches.shape[-1])
    if grid * grid != patches.shape[-1]:
        raise ValueError(f"{patches.shape[-1]} patch tokens after {num_prefix_tokens} prefix tokens do not form a "
                         "square grid; check num_prefix_tokens (2 with a distillation token).")
    return patches.reshape(-1, grid, grid)


def upsample_heatmap(heatmap, height: int, width: int) -> torch.Tensor:
    """A [rows, cols] patch map stretched to [height, width] pixels (bilinear), for overlaying on the image."""
    heatmap = torch.as_tensor(heatmap, dtype=torch.float32)
    return torch.nn.functional.interpolate(heatmap[None, None], size=(height, width), mode="bilinear",
                                           align_corners=False)[0, 0]


def plot_cls_attention_overlay(image, heatmap, path, title: str | None = None, alpha: float = 0.5) -> Path:
    """Save the image with a [CLS]-attention heat-map (a patch grid, upsampled bilinearly) laid over it, next to
    the bare image. `image` is [channels, height, width] or [height, width] in any value range (min-max scaled for
    display)."""
    plt = pyplot()

    image = torch.as_tensor(image, dtype=torch.float32)
    if image.ndim == 3:
        image = image.permute(1, 2, 0)
        if image.shape[-1] == 1:
            image = image[..., 0]
    elif image.ndim != 2:
        raise ValueError(f"image must be [channels, height, width] or [height, width], got {tuple(image.shape)}.")
    image = (image - image.min()) / (image.max() - image.min()).clamp_min(1e-12)
    height, width = image.shape[:2]
    overlay = upsample_heatmap(heatmap, height, width)
    figure, axes = plt.subplots(1, 2, figsize=(8, 4))
    cmap = "gray" if image.ndim == 2 else None
    axes[0].imshow(image.numpy(), cmap=cmap)
    axes[0].set_title("image")
    axes[1].imshow(image.numpy(), cmap=cmap)
    shown = axes[1].imshow(overlay.numpy(), cmap="inferno", alpha=alpha)
    axes[1].set_title(title or "[CLS] attention", fontsize=9)
    figure.colorbar(shown, ax=axes[1], fraction=0.046)
    for axis in axes:
        axis.axis("off")
    return save_figure(figure, path)
