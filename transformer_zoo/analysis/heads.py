"""Attention heads: mask them at run time, score their importance, prune them physically, and trace quality against
the fraction removed (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?").

transformers 5 removed `head_mask` and `prune_heads`; these are the zoo's replacements, for every family (encoder,
decoder, encoder-decoder self- and cross-attention, ViT):

* `masked_heads(model, masks)`: a context manager that multiplies each head's output by its mask value just before
  the output projection o_proj (a forward pre-hook, so no forward signature changes). Michel et al.'s mask
  variables xi_h, which is also where their gradient importance is taken.
* `loss_change_importance`: the loss increase when one head alone is masked.
* `gradient_importance`: I_h = sum over batches of |dL/dxi_h| at the current mask, normalised per attention layer by
  its L2 norm (Michel et al. section 4.1; transformers' old bertology example does the same per batch).
* `prune_heads(model, heads)`: remove heads from q/k/v/o_proj (smaller Linear layers via transformers'
  `prune_linear_layer`) and record them in `config.pruned_heads`, which `ZooAttention` reads, so save/reload (also
  through trust_remote_code) rebuilds the smaller layers.
* `iterative_pruning`: repeatedly mask the least important remaining heads and measure loss/accuracy (Michel et al.
  section 4.2); `plot_pruning_curve` draws the result.

An attention module is named by its `pruned_heads` key (`ZooConfig.attention_key`): the layer index for encoders,
decoders and ViT; "encoder.<i>", "decoder.<i>" or "cross.<i>" for the encoder-decoder. A mask or score is a 1-D
tensor over the module's *current* heads (`module.num_heads`); `module.kept_heads` maps positions back to the
original head numbers after pruning, and every table here reports original numbers.

Grouped-query attention: masking and scoring work per query head. Physical pruning must leave every remaining
key/value group with the same number of query heads (`ZooConfig.validate_pruned_heads` explains a refusal); MQA can
drop any query heads but its single key/value head always stays.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn
from transformers.pytorch_utils import prune_linear_layer
from transformers.utils import logging

from .figures import pyplot, save_figure


logger = logging.get_logger(__name__)

IMPORTANCE_METHODS = ("gradient", "loss", "random")


# ------------------------------------------------------------------------------------------------------- modules
def _key(key):
    """Layer keys may arrive as strings (JSON, command lines): "3" means layer 3."""
    return int(key) if isinstance(key, str) and key.strip().isdigit() else key


def attention_modules(model: nn.Module) -> dict[int | str, nn.Module]:
    """Every zoo attention module of `model` by its `pruned_heads` key, in module order."""
    modules = {}
    for name, module in model.named_modules():
        key = getattr(module, "pruned_heads_key", None)
        if key is None or not hasattr(module, "o_proj") or not hasattr(module, "kept_heads"):
            continue
        if key in modules:
            raise ValueError(f"Two attention modules share the key {key!r} (second one: {name}); pass one zoo model.")
        modules[key] = module
    if not modules:
        raise ValueError(f"{type(model).__name__} has no transformer-zoo attention modules (ZooAttention); head "
                         "masking and pruning work on zoo models (convert others with transformer_zoo.convert).")
    return modules


def head_counts(model: nn.Module) -> dict[int | str, int]:
    """Current number of query heads of every attention module."""
    return {key: module.num_heads for key, module in attention_modules(model).items()}


def ones_masks(model: nn.Module) -> dict[int | str, torch.Tensor]:
    """An all-ones mask for every attention module (masking with it changes nothing)."""
    return {key: torch.ones(count) for key, count in head_counts(model).items()}


def masks_without(model: nn.Module, heads: Mapping[int | str, Iterable[int]]) -> dict[int | str, torch.Tensor]:
    """Masks that switch off the given heads (positions among the module's current heads) and keep the rest."""
    masks = ones_masks(model)
    for key, positions in heads.items():
        key = _key(key)
        if key not in masks:
            raise ValueError(f"Unknown attention {key!r}; this model's attentions are {list(masks)}.")
        for position in positions:
            if not 0 <= int(position) < len(masks[key]):
                raise ValueError(f"Attention {key!r} has {len(masks[key])} heads; there is no head {position}.")
            masks[key][int(position)] = 0.0
    return masks


def _scale_heads_hook(mask: torch.Tensor) -> Callable:
    def scale(module, args):
        states = args[0]  # [..., heads * head_dim]: the heads' outputs concatenated, before o_proj mixes them
        scaled = states.unflatten(-1, (mask.numel(), -1)) * mask.to(states.device, states.dtype)[:, None]
        return (scaled.flatten(-2), *args[1:])

    return scale


@contextlib.contextmanager
def masked_heads(model: nn.Module, masks: Mapping[int | str, torch.Tensor | Sequence[float]]):
    """Within the block, multiply each head's output by its mask value before the output projection.

    `masks` maps an attention key to a tensor of `num_heads` values (1 keeps a head, 0 removes its contribution;
    attentions not listed are left alone). A mask that requires grad receives dL/dmask, as Michel et al.'s xi_h.
    o_proj's bias is still added: a layer with every head masked adds only that bias (nothing, without biases).
    Hooks are removed on exit, also after an error.
    """
    modules = attention_modules(model)
    handles = []
    try:
        for key, mask in masks.items():
            key = _key(key)
            if key not in modules:
                raise ValueError(f"Unknown attention {key!r} in the head masks; this model's attentions are "
                                 f"{list(modules)}.")
            mask = mask if isinstance(mask, torch.Tensor) else torch.tensor(mask, dtype=torch.float32)
            if mask.shape != (modules[key].num_heads,):
                raise ValueError(f"The mask of attention {key!r} has shape {tuple(mask.shape)}; it needs one value "
                                 f"per head: ({modules[key].num_heads},).")
            handles.append(modules[key].o_proj.register_forward_pre_hook(_scale_heads_hook(mask)))
        yield
    finally:
        for handle in handles:
            handle.remove()


# ------------------------------------------------------------------------------------------------ loss, quality
def _loss(model, batch, loss_fn) -> torch.Tensor:
    if loss_fn is not None:
        return loss_fn(model, batch)
    loss = model(**batch).loss
    if loss is None:
        raise ValueError("The model returned no loss: give every batch its `labels` (or pass loss_fn).")
    return loss


def _predictions_and_targets(model, logits: torch.Tensor, labels: torch.Tensor):
    """Predicted classes and targets, aligned: a causal LM predicts token t+1 at position t."""
    if logits.ndim == labels.ndim + 1 and logits.ndim == 3 and model.config.model_type == "zoo_decoder":
        logits, labels = logits[:, :-1], labels[:, 1:]
    return logits.argmax(-1), labels


def evaluate(model, batches: Sequence[dict], masks=None, loss_fn=None) -> dict[str, float]:
    """Mean loss (weighted by the number of scored targets per batch) and accuracy of argmax predictions on the
    batches' `labels` (-100 ignored), with `masks` applied. Runs in eval mode, restored afterwards."""
    was_training = model.training
    model.eval()
    loss_sum = weight_sum = correct = counted = 0.0
    try:
        with torch.no_grad(), masked_heads(model, masks or {}):
            for batch in batches:
                if loss_fn is not None:
                    loss_sum += float(loss_fn(model, batch))
                    weight_sum += 1
                    continue
                outputs = model(**batch)
                if outputs.loss is None:
                    raise ValueError("The model returned no loss: give every batch its `labels`.")
                predictions, targets = _predictions_and_targets(model, outputs.logits, batch["labels"])
                valid = targets != -100
                scored = int(valid.sum())
                loss_sum += float(outputs.loss) * scored
                weight_sum += scored
                if outputs.logits.shape[-1] > 1:  # accuracy is meaningless for regression heads
                    correct += float((predictions[valid] == targets[valid]).sum())
                    counted += scored
    finally:
        model.train(was_training)
    return {"loss": loss_sum / max(weight_sum, 1), "accuracy": correct / counted if counted else math.nan}


# --------------------------------------------------------------------------------------------------- importance
def _check_masks(model, masks):
    base = ones_masks(model)
    for key, mask in (masks or {}).items():
        key = _key(key)
        if key not in base or torch.as_tensor(mask).shape != base[key].shape:
            raise ValueError(f"Mask {key!r} does not match this model's heads {head_counts(model)}.")
        base[key] = torch.as_tensor(mask, dtype=torch.float32).clone()
    return base


def normalise_per_layer(scores: Mapping, exponent: float = 2.0) -> dict:
    """Divide each attention's scores by their L^exponent norm (Michel et al.: 'normalize by layer, l2 norm')."""
    return {key: value / (value.pow(exponent).sum().pow(1 / exponent) + 1e-20) for key, value in scores.items()}


def gradient_importance(model, batches: Sequence[dict], masks=None, normalise: bool = True, loss_fn=None,
                        progress: bool = False) -> dict[int | str, torch.Tensor]:
    """Michel et al.'s head importance: the sum over batches of |dL/dxi_h| at the mask `masks` (default all ones),
    normalised per attention by its L2 norm when `normalise`.

    The absolute value is taken per batch, as transformers' bertology example did; with batches of one example it
    is exactly the paper's expectation over examples (up to the 1/N factor, which the normalisation removes).
    Parameters are frozen during the passes (only the mask variables need gradients) and the model runs in eval
    mode (no dropout); both are restored.
    """
    from tqdm.auto import tqdm

    variables = {key: mask.requires_grad_(True) for key, mask in _check_masks(model, masks).items()}
    totals = {key: torch.zeros_like(mask) for key, mask in variables.items()}
    was_training = model.training
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    model.eval()
    try:
        for parameter in trainable:
            parameter.requires_grad_(False)
        with masked_heads(model, variables):
            for batch in tqdm(batches, desc="gradient importance", disable=not progress, leave=False):
                loss = _loss(model, batch, loss_fn)
                gradients = torch.autograd.grad(loss, list(variables.values()), allow_unused=True)
                for key, gradient in zip(variables, gradients):
                    if gradient is not None:
                        totals[key] += gradient.detach().abs()
    finally:
        for parameter in trainable:
            parameter.requires_grad_(True)
        model.train(was_training)
    return normalise_per_layer(totals) if normalise else totals


def loss_change_importance(model, batches: Sequence[dict], masks=None, loss_fn=None,
                           progress: bool = False) -> dict[int | str, torch.Tensor]:
    """For each head still on in `masks`: the evaluation loss with that head also masked minus the loss without
    (Michel et al. section 2, one forward pass over `batches` per head). Heads already masked score NaN."""
    from tqdm.auto import tqdm

    base = _check_masks(model, masks)
    baseline = evaluate(model, batches, base, loss_fn)["loss"]
    scores = {key: torch.full_like(mask, math.nan) for key, mask in base.items()}
    heads = [(key, head) for key, mask in base.items() for head in range(len(mask)) if mask[head] != 0]
    for key, head in tqdm(heads, desc="loss-change importance", disable=not progress, leave=False):
        trial = {k: m.clone() for k, m in base.items()}
        trial[key][head] = 0.0
        scores[key][head] = evaluate(model, batches, trial, loss_fn)["loss"] - baseline
    return scores


def importance_table(model, scores: Mapping) -> list[dict]:
    """Rows of (attention, original head index, score), in module and head order."""
    modules = attention_modules(model)
    return [{"attention": str(key), "head": modules[key].kept_heads[position], "importance": float(value)}
            for key, values in scores.items() for position, value in enumerate(values.tolist())]


# ------------------------------------------------------------------------------------------------------ pruning
def _head_rows(positions: list[int], head_dim: int) -> torch.LongTensor:
    return (torch.tensor(positions, dtype=torch.long)[:, None] * head_dim + torch.arange(head_dim)).flatten()


def _pruned_linear(layer: nn.Module, rows: torch.LongTensor, dim: int) -> nn.Linear:
    if type(layer) is not nn.Linear:
        raise ValueError(f"Cannot prune a {type(layer).__name__} projection; physical pruning needs plain nn.Linear "
                         "layers (merge LoRA adapters first with merge_and_unload()).")
    new = prune_linear_layer(layer, rows, dim=dim)
    # prune_linear_layer builds the new layer in the default dtype; keep the model's (bf16 models stay bf16).
    return new.to(dtype=layer.weight.dtype)


def prune_heads(model, heads: Mapping[int | str, Iterable[int]]) -> dict[int | str, list[int]]:
    """Physically remove attention heads: `heads` maps an attention key to *original* head indices (as in
    `config.pruned_heads`). q/k/v/o_proj become smaller Linear layers (k/v lose a head only when its whole query
    group goes), and `config.pruned_heads` records the union with earlier pruning, so `save_pretrained` /
    `from_pretrained` rebuild the pruned shapes. Returns the new `config.pruned_heads`.

    Refused with a clear error: unknown attentions or heads, heads pruned already, all heads of one attention,
    uneven grouped-query groups, and self-attention under a score-bias position scheme (alibi/relative).
    """
    modules = attention_modules(model)
    config = model.config
    combined = {key: list(value) for key, value in (config.pruned_heads or {}).items()}
    for key, requested in heads.items():
        key = _key(key)
        if key not in modules:
            raise ValueError(f"Unknown attention {key!r}; this model's attentions are {list(modules)}.")
        if getattr(modules[key], "attention_variant", None) is not None:
            # The variant kernels (sliding window, Linformer, Performer) hold their own per-layer state sized for
            # the original heads; reslicing it here would be guesswork.
            raise ValueError(f"Attention {key!r} uses attention_variant={model.config.attention_variant!r}; physical "
                             "pruning supports exact attention only. Mask its heads at run time (masked_heads).")
        requested = {int(head) for head in requested}
        again = sorted(requested & set(combined.get(key, ())))
        if again:
            raise ValueError(f"Heads {again} of attention {key!r} are pruned already (config.pruned_heads).")
        combined[key] = sorted(set(combined.get(key, ())) | requested)
    previous = config.pruned_heads
    config.pruned_heads = config._normalised_pruned_heads(combined)
    try:
        config.validate_pruned_heads()
    except ValueError:
        config.pruned_heads = previous
        raise
    for key, module in modules.items():
        kept = config.kept_heads(key)
        if kept == module.kept_heads:
            continue
        group_size = config.key_value_group_size(key)
        current_kv = sorted({head // group_size for head in module.kept_heads})
        kept_kv = config.kept_key_value_heads(key)
        query_rows = _head_rows([module.kept_heads.index(head) for head in kept], module.head_dim)
        kv_rows = _head_rows([current_kv.index(group) for group in kept_kv], module.head_dim)
        module.q_proj = _pruned_linear(module.q_proj, query_rows, dim=0)
        module.k_proj = _pruned_linear(module.k_proj, kv_rows, dim=0)
        module.v_proj = _pruned_linear(module.v_proj, kv_rows, dim=0)
        module.o_proj = _pruned_linear(module.o_proj, query_rows, dim=1)
        module.kept_heads = kept
        module.num_heads = len(kept)
        module.num_key_value_heads = len(kept_kv)
        module.num_key_value_groups = module.num_heads // module.num_key_value_heads
    return config.pruned_heads


def masks_to_pruned_heads(model, masks: Mapping) -> dict[int | str, list[int]]:
    """The original indices of the heads a mask switches off, per attention (the argument `prune_heads` takes)."""
    modules = attention_modules(model)
    return {key: [modules[key].kept_heads[p] for p, value in enumerate(mask.tolist()) if value == 0]
            for key, mask in masks.items() if (torch.as_tensor(mask) == 0).any()}


# ---------------------------------------------------------------------------------------------- iterative pruning
def iterative_pruning(
    model,
    importance_batches: Sequence[dict],
    eval_batches: Sequence[dict] | None = None,
    method: str = "gradient",
    step_fraction: float = 0.1,
    max_fraction: float = 1.0,
    keep_one_head: bool = False,
    seed: int = 0,
    loss_fn=None,
    progress: bool = True,
) -> list[dict]:
    """Michel et al. section 4.2: score the heads on `importance_batches`, mask the `step_fraction` least important
    of all heads, re-score with that mask, and so on until `max_fraction` of the heads is masked; measure loss and
    accuracy on `eval_batches` (default: the importance batches) after every step.

    `method`: "gradient" (normalised |dL/dxi|), "loss" (loss change when masked alone; one pass per head, slow) or
    "random" (a fixed random order, the control). `keep_one_head` never masks the last head of an attention, so that
    every step can also be pruned physically. Returns one row per step (step 0 = nothing masked) with the fraction
    removed, loss, accuracy and the masked heads as `pruned_heads` (original indices).
    """
    if method not in IMPORTANCE_METHODS:
        raise ValueError(f"method={method!r}; choose one of {', '.join(IMPORTANCE_METHODS)}.")
    if not 0 < step_fraction <= 1 or not 0 < max_fraction <= 1:
        raise ValueError(f"step_fraction ({step_fraction}) and max_fraction ({max_fraction}) must be in (0, 1].")
    from tqdm.auto import tqdm

    importance_batches = list(importance_batches)
    eval_batches = importance_batches if eval_batches is None else list(eval_batches)
    masks = ones_masks(model)
    total = sum(len(mask) for mask in masks.values())
    per_step = max(1, round(step_fraction * total))
    target = min(total, math.floor(max_fraction * total + 1e-9))
    rng = random.Random(seed)
    random_order = {(key, head): rng.random() for key, mask in masks.items() for head in range(len(mask))}

    def row(step):
        quality = evaluate(model, eval_batches, masks, loss_fn)
        removed = int(sum(float((mask == 0).sum()) for mask in masks.values()))
        return {"method": method, "step": step, "heads_removed": removed, "fraction_removed": removed / total,
                **quality, "pruned_heads": masks_to_pruned_heads(model, masks)}

    rows = [row(0)]
    bar = tqdm(total=target, desc=f"iterative pruning ({method})", disable=not progress)
    step = 0
    while rows[-1]["heads_removed"] < target:
        step += 1
        if method == "gradient":
            scores = gradient_importance(model, importance_batches, masks, loss_fn=loss_fn)
        elif method == "loss":
            scores = loss_change_importance(model, importance_batches, masks, loss_fn=loss_fn)
        candidates, alive = [], {}
        for key, mask in masks.items():
            alive[key] = [head for head in range(len(mask)) if mask[head] != 0]
            for head in alive[key]:
                score = random_order[(key, head)] if method == "random" else float(scores[key][head])
                candidates.append((score, str(key), head, key))
        candidates.sort()
        wanted, count = min(per_step, target - rows[-1]["heads_removed"]), 0
        for _, _, head, key in candidates:
            if count == wanted:
                break
            if keep_one_head and len(alive[key]) == 1:
                continue
            masks[key][head] = 0.0
            alive[key].remove(head)
            count += 1
        if count == 0:
            break
        rows.append(row(step))
        bar.update(count)
    bar.close()
    return rows


def plot_pruning_curve(rows: Sequence[dict], path, title: str | None = None) -> Path:
    """Loss and accuracy against the fraction of heads removed, one line per method, as a PNG."""
    plt = pyplot()

    methods = list(dict.fromkeys(r["method"] for r in rows))
    has_accuracy = any(not math.isnan(r["accuracy"]) for r in rows)
    figure, axes = plt.subplots(1, 2 if has_accuracy else 1, figsize=(11 if has_accuracy else 6, 4), squeeze=False)
    metrics = ["loss", "accuracy"] if has_accuracy else ["loss"]
    for axis, metric in zip(axes[0], metrics):
        for method in methods:
            selected = [r for r in rows if r["method"] == method]
            axis.plot([r["fraction_removed"] for r in selected], [r[metric] for r in selected], marker="o",
                      markersize=3, label=method)
        axis.set(xlabel="fraction of attention heads removed", ylabel=metric)
        axis.grid(alpha=0.3)
        axis.legend(title="head order")
    if title:
        figure.suptitle(title)
    return save_figure(figure, path)
