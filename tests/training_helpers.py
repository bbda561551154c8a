"""A tiny decoder, synthetic sequences and a TrainingConfig for the training-loop tests (tests/test_training_loop.py,
tests/test_training_reports_and_cli.py)."""

import torch

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM
from transformer_zoo.training.engine.loop import TrainingConfig


def tiny_decoder(dropout=0.0, seed=0):
    torch.manual_seed(seed)
    config = ZooDecoderConfig.from_preset(
        "tiny", embedding_dropout=dropout, attention_dropout=dropout, hidden_dropout=dropout,
        attn_implementation="eager",
    )
    return ZooDecoderForCausalLM(config)


def sequences(count=32, length=16, seed=1):
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(3, 900, (count,), generator=generator)
    return [{"input_ids": (start + torch.arange(length)) % 997 + 3} for start in starts]


def collate(examples):
    input_ids = torch.stack([example["input_ids"] for example in examples])
    return {"input_ids": input_ids, "labels": input_ids.clone()}


def training_config(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path), max_steps=6, per_device_batch_size=4, logging_steps=1,
                  learning_rate=1e-3, warmup_steps=2, report_to="none", progress_bar=False, seed=5)
    values.update(overrides)
    return TrainingConfig(**values)
