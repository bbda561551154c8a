#!/usr/bin/env python
"""The fine-tuning recipe's default job done with transformers' Trainer, for benchmarks/finetune_vs_trainer.py.

Same data (the recipe's own hadith-en loading, 6,000-example stratified subset, tokenised to 128 tokens by the same
code), same model weights (all-MiniLM-L6-v2 as transformers' BertForSequenceClassification; the recipe converts it to
the zoo), same LoRA (r 8, alpha 16, dropout 0.1 on query/value; classifier and pooler trained in full), batch 16,
AdamW at 1e-3 with linear warmup 6 %, the same number of steps. At the end, like the recipe: evaluation on the
validation and test splits, the adapter saved, the merged model saved with the tokenizer.

--max_steps 0 runs the recipe's whole default job: its length (one epoch), and its evaluation and checkpoint every
100 steps (two kept) with the best model by validation accuracy reloaded at the end, as Trainer's
load_best_model_at_end does it. Evaluation batches are the recipe's (64) in both modes.

    python benchmarks/trainer_finetune_job.py OUT --max_steps 20 --timings timings.json
    python benchmarks/trainer_finetune_job.py OUT --max_steps 0 --timings timings.json
"""

import time

STARTED = time.time()  # before the heavy imports: start-up is measured from here and from the launch

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from transformer_zoo.training.finetune import recipe as finetuning  # noqa: E402
from transformer_zoo.training.finetune import models as finetuning_models  # noqa: E402
from transformer_zoo.training.engine.optim import resolve_warmup_steps  # noqa: E402


class StepTimes(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.time())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", help="where the Trainer writes (overwritten)")
    parser.add_argument("--max_steps", type=int, default=20,
                        help="optimiser steps; 0 = the recipe's whole default job, with its periodic evaluation, "
                             "checkpoints and best-model reload (default: %(default)s)")
    parser.add_argument("--timings", required=True, help="JSON file for the step end times")
    parser.add_argument("--attention_dropout", type=float, default=None, help="override attention dropout")
    args = parser.parse_args()

    recipe_args = finetuning.build_parser().parse_args([])  # the recipe's defaults: data, lengths, LoRA settings
    data = finetuning.load_task_data(recipe_args)
    folder = str(finetuning_models.minilm_folder())
    overrides = {} if args.attention_dropout is None else {"attention_probs_dropout_prob": args.attention_dropout}
    model = AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=len(data.label_names), attn_implementation="sdpa", **overrides)
    loaded = finetuning.LoadedModel(model=model, source=folder)
    from transformers import AutoTokenizer

    loaded.tokenizer = AutoTokenizer.from_pretrained(folder)
    train_set, validation_set, test_set, _ = finetuning.build_features(recipe_args, data, loaded, Accelerator(cpu=True))
    model = get_peft_model(model, LoraConfig(
        r=recipe_args.lora_rank, lora_alpha=recipe_args.lora_alpha, lora_dropout=recipe_args.lora_dropout,
        target_modules=["query", "value"], modules_to_save=["classifier", "pooler"], task_type="SEQ_CLS"))

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    times = StepTimes()
    full_job = args.max_steps == 0
    # The recipe's length: num_epochs passes of ceil(examples / batch) steps (transformer_zoo.training.engine.loop).
    steps = args.max_steps or int(recipe_args.num_epochs * math.ceil(len(train_set) / recipe_args.per_device_batch_size))
    periodic = dict(
        eval_strategy="steps", eval_steps=recipe_args.eval_steps, save_strategy="steps", save_steps=recipe_args.save_steps,
        save_total_limit=2, load_best_model_at_end=True, metric_for_best_model="accuracy", greater_is_better=True,
    ) if full_job else dict(save_strategy="no", eval_strategy="no")
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=args.output_dir, max_steps=steps,
            per_device_train_batch_size=recipe_args.per_device_batch_size,
            per_device_eval_batch_size=recipe_args.eval_batch_size, learning_rate=recipe_args.learning_rate,
            warmup_steps=resolve_warmup_steps(steps, None, recipe_args.warmup_ratio), lr_scheduler_type="linear",
            weight_decay=0.01, logging_steps=10, report_to=[], disable_tqdm=True, use_cpu=True,
            seed=recipe_args.seed, dataloader_num_workers=0, **periodic),
        train_dataset=train_set, eval_dataset=validation_set if full_job else None,
        data_collator=DataCollatorWithPadding(loaded.tokenizer), compute_metrics=accuracy, callbacks=[times],
    )
    trainer.train()
    trained = time.time()
    validation = trainer.evaluate(validation_set, metric_key_prefix="validation")
    test = trainer.evaluate(test_set, metric_key_prefix="test")
    model.save_pretrained(f"{args.output_dir}/adapter")
    merged = model.merge_and_unload()
    merged.save_pretrained(args.output_dir)
    loaded.tokenizer.save_pretrained(args.output_dir)
    with open(args.timings, "w") as handle:
        json.dump({"started": STARTED, "step_ends": times.ends, "trained": trained, "finished": time.time(),
                   "validation_accuracy": validation["validation_accuracy"], "test_accuracy": test["test_accuracy"],
                   "threads": torch.get_num_threads()}, handle)


if __name__ == "__main__":
    main()
