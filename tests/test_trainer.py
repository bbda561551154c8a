"""Zoo models under transformers' Trainer (issue 11, point 10): with gradient accumulation the update equals one
large batch. A forward that takes **kwargs makes the Trainer pass `num_items_in_batch` and stop dividing by the
accumulation steps, so a head returning its micro-batch mean would be off whenever micro-batches hold different
numbers of label tokens (here: labels masked with -100 at different lengths), and off by the step count for
sequence-level heads.
"""

import copy

import pytest
import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooEncoderForSequenceClassification,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
)


class Examples(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def examples(family, count=4, length=8):
    generator = torch.Generator().manual_seed(0)
    rows = []
    for index in range(count):
        ids = torch.randint(3, 1000, (length,), generator=generator)
        if family == "encoder":
            rows.append({"input_ids": ids, "labels": torch.tensor(index % 3)})
            continue
        labels = ids.clone() if family == "decoder" else torch.randint(3, 1000, (5,), generator=generator)
        labels[len(labels) - 1 - 2 * index:] = -100  # 7, 5, 3, 1 real label tokens: unequal micro-batches
        rows.append({"input_ids": ids, "labels": labels})
    return rows


MODELS = {
    "decoder": lambda: ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", hidden_dropout=0.0,
                                                                          attention_dropout=0.0,
                                                                          embedding_dropout=0.0)),
    "encoder": lambda: ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset(
        "tiny", num_labels=3, hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)),
    "seq2seq": lambda: ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset(
        "tiny", hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0)),
}


def train_one_step(model, rows, batch_size, accumulation, output_dir):
    arguments = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=batch_size, gradient_accumulation_steps=accumulation,
        max_steps=1, learning_rate=1.0, optim="sgd", lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=0.0, weight_decay=0.0, report_to="none", save_strategy="no", use_cpu=True, seed=0,
        dataloader_drop_last=False, logging_steps=1, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=Examples(rows))
    assert trainer.model_accepts_loss_kwargs  # the case where the pitfall bites
    trainer.train()
    return model


@pytest.mark.parametrize("family", list(MODELS))
def test_gradient_accumulation_equals_one_large_batch(family, tmp_path):
    torch.manual_seed(0)
    initial = MODELS[family]()
    before = {name: p.detach().clone() for name, p in initial.named_parameters()}
    rows = examples(family)
    large = train_one_step(copy.deepcopy(initial), rows, batch_size=4, accumulation=1, output_dir=tmp_path / "a")
    accumulated = train_one_step(copy.deepcopy(initial), rows, batch_size=1, accumulation=4,
                                 output_dir=tmp_path / "b")
    moved = 0
    for (name, p_large), (_, p_accumulated) in zip(large.named_parameters(), accumulated.named_parameters()):
        # SGD with lr 1: the parameter change is minus the gradient. Both sum the same per-item terms, in another
        # grouping, so they agree to float32 rounding of the gradient sums (relative ~1e-6), not exactly.
        torch.testing.assert_close(p_accumulated - before[name], p_large - before[name], atol=1e-6, rtol=1e-4,
                                   msg=lambda m: f"{name}: {m}")
        moved += int((p_large - before[name]).abs().max() > 1e-4)
    assert moved > 0
