#!/usr/bin/env python
"""Evaluation in length order against dataset order, on the fine-tuning recipe's default job (all-MiniLM-L6-v2 +
LoRA on hadith-en, evaluation batches of 64, inputs truncated at 128 tokens): the validation and test splits evaluated
both ways in alternated rounds, in one process, with the model as the recipe builds it before training.

Per order: time per split (median over rounds), token positions run (padding included), accuracy, macro-F1 and
loss; and the largest difference between the two orders' logits of the same example.

    python benchmarks/evaluation_order.py --rounds 5 --output benchmarks/results/evaluation_order_cpu.json
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch


ORDERS = {"dataset order": False, "length order": True}


def build_job(threads: int | None):
    """The default fine-tuning job's model, splits and collator, as recipes/finetune.py builds them."""
    from transformer_zoo.training import finetuning
    from transformer_zoo.training.devices import create_accelerator
    from transformer_zoo.training.finetuning_data import load_task_data
    from transformer_zoo.training.finetuning_models import apply_mode, load_model
    from transformer_zoo.training.loop import TrainingConfig

    if threads:
        torch.set_num_threads(threads)
    args = finetuning.build_parser().parse_args(["--output_dir", "unused"])
    accelerator = create_accelerator(TrainingConfig(output_dir="unused", cpu=True, report_to="none"))
    data = load_task_data(args)
    loaded = load_model(args, data, lambda: iter(()))
    _, validation, test, collate = finetuning.build_features(args, data, loaded, accelerator)
    torch.manual_seed(args.seed)
    model = apply_mode(args, loaded.model)
    return args, accelerator, model, {"validation": validation, "test": test}, collate


def evaluate_once(args, accelerator, model, dataset, collate, sort_by_length: bool) -> dict:
    from transformer_zoo.training.evaluation import evaluate
    from transformer_zoo.training.tasks import classification_metrics, classification_predict_step

    positions = []

    def counting_collate(examples):
        batch = collate(examples)
        positions.append(batch["input_ids"].numel())
        return batch

    def predict(model, batch, outputs=None):
        predicted = classification_predict_step(model, batch, outputs=outputs)
        predicted["logits"] = outputs.logits.float().tolist()
        return predicted

    predict.reuses_outputs = True
    scores = classification_metrics()
    started = time.perf_counter()
    metrics = evaluate(model, dataset, counting_collate, accelerator=accelerator, batch_size=args.eval_batch_size,
                       predict_step=predict, compute_metrics=lambda out: {**scores(out), "logits": out["logits"]},
                       sort_by_length=sort_by_length, description="")
    metrics["seconds"] = time.perf_counter() - started
    metrics["token_positions"] = sum(positions)
    return metrics


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(record["splits"])
    figure, axis = plt.subplots(figsize=(6, 3.5))
    width = 0.38
    for offset, order in enumerate(ORDERS):
        values = [record["splits"][split][order]["seconds_median"] for split in splits]
        bars = axis.bar([i + (offset - 0.5) * width for i in range(len(splits))], values, width, label=order)
        axis.bar_label(bars, fmt="%.2f s")
    axis.set_xticks(range(len(splits)), splits)
    axis.set_ylabel("evaluation time (s, median)")
    axis.set_title("Fine-tuning recipe's default job: evaluation by order")
    axis.set_ylim(0, 1.3 * max(record["splits"][split]["dataset order"]["seconds_median"] for split in splits))
    axis.legend(loc="upper center", ncols=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds of both orders (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="JSON results (a PNG is written beside it)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    record = {"load_average_before": os.getloadavg(), "rounds": args.rounds, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "splits": {}}
    job_args, accelerator, model, splits, collate = build_job(args.threads)
    record["eval_batch_size"], record["max_length"] = job_args.eval_batch_size, job_args.max_length
    for name, dataset in splits.items():
        runs = {order: [] for order in ORDERS}
        for round_index in range(args.rounds):
            # Alternate which order goes first, so neither always runs on a warmer machine.
            for order in (list(ORDERS) if round_index % 2 == 0 else list(reversed(ORDERS))):
                runs[order].append(evaluate_once(job_args, accelerator, model, dataset, collate, ORDERS[order]))
        # Numbers and logits of each order's last run (every run of an order computes the same ones).
        last = {order: runs[order][-1] for order in ORDERS}
        logits = {order: torch.tensor(last[order]["logits"]) for order in ORDERS}
        result = {order: {
            "seconds": [run["seconds"] for run in runs[order]],
            "seconds_median": statistics.median(run["seconds"] for run in runs[order]),
            "token_positions": last[order]["token_positions"],
            **{key: last[order][key] for key in ("accuracy", "macro_f1", "eval_loss")},
        } for order in ORDERS}
        result["examples"] = len(dataset)
        result["speedup"] = result["dataset order"]["seconds_median"] / result["length order"]["seconds_median"]
        result["max_abs_logit_difference"] = float((logits["dataset order"] - logits["length order"]).abs().max())
        result["same_predictions"] = bool((logits["dataset order"].argmax(-1)
                                           == logits["length order"].argmax(-1)).all())
        result["same_metrics"] = all(last["dataset order"][key] == last["length order"][key]
                                     for key in ("accuracy", "macro_f1"))
        record["splits"][name] = result
        print(name, json.dumps({k: v for k, v in result.items() if k not in ORDERS}),
              {order: (round(result[order]["seconds_median"], 2), result[order]["token_positions"]) for order in ORDERS},
              flush=True)
    record["load_average_after"] = os.getloadavg()
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2) + "\n")
        plot(record, args.output.with_suffix(".png"))
    return record


if __name__ == "__main__":
    main()
