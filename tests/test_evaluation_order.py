"""Evaluation in length order (training/engine/evaluation.py): batches of similar lengths carry less padding, the metrics
and the per-example predictions are those of dataset order, and predictions come back in dataset order."""

import datasets
import numpy as np
import pytest
import torch

from transformer_zoo import ZooEncoderConfig, ZooEncoderForSequenceClassification
from transformer_zoo.training.engine.devices import create_accelerator
from transformer_zoo.training.engine.evaluation import evaluate, length_sorted_indices
from transformer_zoo.training.engine.loop import TrainingConfig
from transformer_zoo.training.engine.tasks import classification_metrics, classification_predict_step


def _pad_collate(examples):
    """Right-padding with pad id 0 and an attention mask; scalar labels stacked."""
    length = max(len(e["input_ids"]) for e in examples)
    ids = torch.zeros(len(examples), length, dtype=torch.long)
    mask = torch.zeros(len(examples), length, dtype=torch.long)
    for row, example in enumerate(examples):
        ids[row, : len(example["input_ids"])] = torch.as_tensor(example["input_ids"])
        mask[row, : len(example["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.as_tensor([e["labels"] for e in examples], dtype=torch.long)}


def _varied_lengths(count=30, seed=0):
    generator = np.random.default_rng(seed)
    lengths = generator.integers(2, 48, count)
    return datasets.Dataset.from_dict({
        "input_ids": [generator.integers(5, 1000, n).tolist() for n in lengths],
        "labels": generator.integers(0, 3, count).tolist(),
    })


def test_length_order_is_longest_first_stable_and_counts_sequence_labels():
    data = datasets.Dataset.from_dict({"input_ids": [[1] * 3, [1] * 5, [1] * 3, [1] * 1, [1] * 5],
                                       "labels": [[2] * 4, [2], [2], [2] * 9, [2]]})
    # Token counts input_ids + labels: 7, 6, 4, 10, 6; ties (6, 6) keep dataset order.
    assert length_sorted_indices(data, range(5)) == [3, 0, 1, 4, 2]
    # A shard (another process's contiguous share) sorts within itself and keeps absolute indices.
    assert length_sorted_indices(data, range(2, 5)) == [3, 4, 2]
    # A list of dicts gives the same order; scalar labels count nothing.
    assert length_sorted_indices([data[i] for i in range(5)], range(5)) == [3, 0, 1, 4, 2]
    classes = datasets.Dataset.from_dict({"input_ids": [[1] * 2, [1] * 4], "labels": [7, 8]})
    assert length_sorted_indices(classes, range(2)) == [1, 0]
    assert length_sorted_indices(list(classes), range(2)) == [1, 0]
    # Examples without input_ids (images through a transform) stay in dataset order.
    assert length_sorted_indices(datasets.Dataset.from_dict({"pixel_values": [[0.0], [1.0]]}), range(2)) is None


def test_length_sorted_evaluation_equals_dataset_order_with_less_padding():
    torch.manual_seed(0)
    # float64, so that what the two orders may differ by (rounding: a row padded further is reduced over more masked
    # zeros, in another blocking) is ~1e-16 relative and a tolerance of 1e-12 holds on any CPU, while a mismatched
    # example would differ by the logits' own scale (~0.1).
    model = ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny", num_labels=3)).double().eval()
    data = _varied_lengths()
    accelerator = create_accelerator(TrainingConfig(output_dir="unused", cpu=True, report_to="none"))

    def run(sort_by_length):
        positions = []

        def counting_collate(examples):
            batch = _pad_collate(examples)
            positions.append(batch["input_ids"].numel())
            return batch

        def predict_step(model, batch, outputs=None):
            # The example's own tokens identify it; its logits and predicted class are compared across orders.
            predicted = classification_predict_step(model, batch, outputs=outputs)
            lengths = batch["attention_mask"].sum(-1).tolist()
            predicted["tokens"] = [row[:n] for row, n in zip(batch["input_ids"].tolist(), lengths)]
            predicted["logits"] = outputs.logits.tolist()
            return predicted

        predict_step.reuses_outputs = True
        metrics_of = classification_metrics()

        def compute(outputs):
            return {**metrics_of(outputs), "outputs": outputs}

        metrics = evaluate(model, data, counting_collate, accelerator=accelerator, batch_size=8,
                           predict_step=predict_step, compute_metrics=compute, sort_by_length=sort_by_length)
        return metrics, sum(positions)

    in_order, in_order_positions = run(False)
    by_length, by_length_positions = run(True)
    lengths = [len(ids) for ids in data["input_ids"]]
    assert in_order_positions == sum(max(lengths[i : i + 8]) * len(lengths[i : i + 8]) for i in range(0, 30, 8))
    longest_first = sorted(lengths, reverse=True)
    assert by_length_positions == sum(longest_first[i] * len(longest_first[i : i + 8]) for i in range(0, 30, 8))
    assert by_length_positions < 0.8 * in_order_positions
    # Back in dataset order: the same examples, references and predicted classes, position by position.
    assert by_length["outputs"]["tokens"] == data["input_ids"]
    for key in ("references", "predictions"):
        assert by_length["outputs"][key] == in_order["outputs"][key]
    assert (by_length["accuracy"], by_length["macro_f1"]) == (in_order["accuracy"], in_order["macro_f1"])
    # A row's logits do not depend on how far its batch is padded beyond it, up to rounding (see the top).
    torch.testing.assert_close(torch.tensor(by_length["outputs"]["logits"], dtype=torch.float64),
                               torch.tensor(in_order["outputs"]["logits"], dtype=torch.float64), rtol=0, atol=1e-12)
    # evaluate() accumulates each batch's loss as a float32 number (rounded by at most 2**-24 relative), so the
    # weighted means of the two batchings may differ by that much on each side.
    assert by_length["eval_loss"] == pytest.approx(in_order["eval_loss"], rel=2 * 2**-24)


def test_a_predict_step_without_one_item_per_example_is_refused_in_length_order():
    torch.manual_seed(0)
    model = ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny", num_labels=3)).eval()
    accelerator = create_accelerator(TrainingConfig(output_dir="unused", cpu=True, report_to="none"))

    def per_token(model, batch):
        return {"tokens": batch["input_ids"][batch["attention_mask"].bool()].tolist()}

    with pytest.raises(ValueError, match="one per example.*sort_by_length=False"):
        evaluate(model, _varied_lengths(), _pad_collate, accelerator=accelerator, batch_size=8, loss_fn=None,
                 predict_step=per_token)
    gathered = evaluate(model, _varied_lengths(), _pad_collate, accelerator=accelerator, batch_size=8, loss_fn=None,
                        predict_step=per_token, compute_metrics=lambda out: {"count": len(out["tokens"])},
                        sort_by_length=False)
    assert gathered["count"] == sum(len(ids) for ids in _varied_lengths()["input_ids"])
