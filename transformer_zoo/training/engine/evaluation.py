"""The training loop's losses (the model's own, or label-smoothed cross-entropy) and evaluation: a sharded, RNG-isolated
pass over a dataset that returns the mean loss and any metrics, the same dict on every process."""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import gather_object
from tqdm.auto import tqdm

from ..data.data_order import fetch_examples, move_to_device

# ================================================================================================ losses
LossFn = Callable[[torch.nn.Module, dict], torch.Tensor]


def model_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The loss the model computes itself from `labels`."""
    outputs = model(**batch)
    if getattr(outputs, "loss", None) is None:
        raise ValueError(f"{type(model).__name__} returned no loss: the batch has no labels it can use.")
    return outputs.loss


def make_loss_fn(kind: str = "model", label_smoothing: float = 0.0) -> LossFn:
    """The training loss. Without label smoothing it is the model's own loss. With it, cross-entropy with smoothing
    (Szegedy et al. 2016; Vaswani et al. use 0.1) over the logits: `kind` is "causal_lm" (labels shifted by one),
    "token" (masked LM, seq2seq, token classification: labels aligned with logits) or "sequence" (one label per
    example). Labels of -100 are ignored, as everywhere in transformers.
    """
    if label_smoothing == 0.0 or kind == "model":
        return model_loss
    if kind not in ("causal_lm", "token", "sequence"):
        raise ValueError(f"Unknown loss kind {kind!r}; choose causal_lm, token, sequence or model.")

    def smoothed_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
        outputs = model(**batch)
        logits, labels = outputs.logits, batch["labels"]
        if kind == "causal_lm":
            logits, labels = logits[:, :-1], labels[:, 1:]
        elif logits.dim() == 2 and labels.dim() == 2:
            # Sparse masked-LM prediction (ZooEncoderConfig.sparse_prediction): logits of the labelled positions only.
            labels = labels[labels != -100]
        return F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1).to(logits.device),
            ignore_index=-100, label_smoothing=label_smoothing,
        )

    return smoothed_loss


def _loss_weight(batch: dict) -> int:
    labels = batch.get("labels")
    if labels is None:
        return 1
    if labels.dim() > 1:
        return max(int((labels != -100).sum()), 1)
    return int(labels.shape[0])


# ================================================================================================ evaluation
@contextlib.contextmanager
def isolated_rng(seed: int):
    """Run a block with every RNG seeded to `seed`, then put the previous states back: evaluation (e.g. random
    masking of a masked-LM validation set) sees the same randomness every time and never shifts training's.
    """
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def shard_range(num_examples: int, num_processes: int, process_index: int) -> range:
    """This process's contiguous share of an evaluation set (no example repeated, shares differ by at most one)."""
    per_process, remainder = divmod(num_examples, num_processes)
    start = process_index * per_process + min(process_index, remainder)
    return range(start, start + per_process + (process_index < remainder))


def _token_counts_of_sequences(column) -> np.ndarray:
    """Lengths of an Arrow column's lists (zero for a column of scalars, such as class labels)."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return np.zeros(len(column), dtype=np.int64)
    return pc.list_value_length(column).fill_null(0).to_numpy().astype(np.int64)


def length_sorted_indices(dataset, indices: range) -> list[int] | None:
    """`indices`, longest example first, by token count (input_ids, plus labels where they are sequences); a stable
    sort, so examples of equal length (packed blocks) keep their order. None where the lengths cannot be read without
    loading the examples: a dataset that is neither a `datasets.Dataset` with an input_ids column nor a list of dicts.

    Evaluating in dataset order pads every batch to its longest example: on the fine-tuning recipe's default job
    (hadith-en, all-MiniLM-L6-v2's tokenizer, batches of 64, inputs truncated at 128 tokens) the validation split runs
    76,800 token positions in dataset order and 53,368 in length order (the evaluation_order probe, docs/speed.md). Longest
    first: the first batch is the largest, so one that does not fit in memory fails at once.
    """
    if isinstance(dataset, datasets.Dataset):
        columns = [name for name in ("input_ids", "labels") if name in dataset.column_names]
        if "input_ids" not in columns:
            return None
        table = dataset.select_columns(columns).with_format("arrow")[indices.start : indices.stop]
        lengths = sum(_token_counts_of_sequences(table[name]) for name in columns)
    elif isinstance(dataset, (list, tuple)):
        examples = [dataset[i] for i in indices]
        if not all(isinstance(example, dict) and "input_ids" in example for example in examples):
            return None
        lengths = np.array([sum(len(example[name]) for name in ("input_ids", "labels")
                                if np.ndim(example.get(name, 0)) > 0) for example in examples])
    else:
        return None
    return [indices.start + int(i) for i in np.argsort(-np.asarray(lengths), kind="stable")]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    dataset,
    collate_fn: Callable[[list[dict]], dict],
    *,
    accelerator: Accelerator,
    batch_size: int = 16,
    loss_fn: LossFn | None = model_loss,
    predict_step: Callable[[torch.nn.Module, dict], dict[str, list]] | None = None,
    compute_metrics: Callable[[dict[str, list]], dict] | None = None,
    perplexity: bool = False,
    seed: int = 0,
    description: str = "evaluating",
    sort_by_length: bool = True,
) -> dict:
    """Mean loss over `dataset` (weighted by label count), optional perplexity, and metrics.

    Each process evaluates its shard. `predict_step(model, batch)` returns lists (predictions, references, ...), one
    item per example; one marked `reuses_outputs` is called as predict_step(model, batch, outputs=...) with the
    outputs of the forward that gave the model's own loss, so a batch is run once, not twice;
    they are gathered from all processes in dataset order, and `compute_metrics(gathered)` turns them into numbers.
    Collective: every process must call it; every process gets the same dict.

    sort_by_length: batch the shard longest example first (`length_sorted_indices`), so batches carry less padding;
    predictions are put back in dataset order. Loss and predictions are the same as in dataset order up to float
    rounding (a padded position is masked out, but a longer padded row sums in another order). A collator that draws
    random numbers (masked-LM masking) draws them for other batches, unless the examples have equal lengths (packed
    blocks keep their order). False keeps dataset order.
    """
    unwrapped = accelerator.unwrap_model(model)
    was_training = unwrapped.training
    unwrapped.eval()
    # A predict step that can read the outputs of the loss's forward (`reuses_outputs`) saves a second forward pass.
    shared_forward = loss_fn is model_loss and getattr(predict_step, "reuses_outputs", False)
    indices = shard_range(len(dataset), accelerator.num_processes, accelerator.process_index)
    # A shard of one batch has no padding to save.
    order = length_sorted_indices(dataset, indices) if sort_by_length and len(indices) > batch_size else None
    positions = order if order is not None else list(indices)
    loss_sum, weight_sum = 0.0, 0
    outputs: dict[str, list] = {}
    with isolated_rng(seed):
        bar = tqdm(
            total=math.ceil(len(indices) / batch_size), desc=description, leave=False,
            disable=not accelerator.is_local_main_process,
        )
        for start in range(0, len(positions), batch_size):
            examples = fetch_examples(dataset, positions[start : start + batch_size])
            batch = move_to_device(collate_fn(examples), accelerator.device)
            predicted = None
            if shared_forward:
                # One forward for both: the model's own loss and the predictions from the same logits.
                with accelerator.autocast():
                    model_outputs = unwrapped(**batch)
                loss = model_outputs.loss
                if loss is None:
                    raise ValueError(f"{type(unwrapped).__name__} returned no loss: the batch has no labels it can use.")
                predicted = predict_step(unwrapped, batch, outputs=model_outputs)
            elif loss_fn is not None:
                with accelerator.autocast():
                    loss = loss_fn(unwrapped, batch)
            if loss_fn is not None:
                weight = _loss_weight(batch)
                loss_sum += float(loss.float()) * weight
                weight_sum += weight
            if predict_step is not None:
                predicted = predicted if predicted is not None else predict_step(unwrapped, batch)
                for key, values in predicted.items():
                    if order is not None and len(values) != len(examples):
                        raise ValueError(
                            f"predict_step returned {len(values)} {key!r} for a batch of {len(examples)} examples; "
                            "evaluating in length order needs one per example to put them back in dataset order. "
                            "Return one per example, or pass sort_by_length=False."
                        )
                    outputs.setdefault(key, []).extend(values)
            bar.update(1)
        bar.close()
    if order is not None:
        in_dataset_order = np.argsort(order, kind="stable")
        outputs = {key: [values[i] for i in in_dataset_order] for key, values in outputs.items()}
    metrics: dict = {}
    if loss_fn is not None:
        totals = torch.tensor([loss_sum, float(weight_sum)], dtype=torch.float64, device=accelerator.device)
        totals = accelerator.reduce(totals, reduction="sum")
        metrics["eval_loss"] = float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")
        if perplexity:
            metrics["perplexity"] = float(math.exp(min(metrics["eval_loss"], 700.0)))
    if predict_step is not None:
        gathered = {key: gather_object(values) if accelerator.num_processes > 1 else values
                    for key, values in outputs.items()}
        if compute_metrics is not None:
            metrics.update(compute_metrics(gathered))
    unwrapped.train(was_training)
    return metrics
