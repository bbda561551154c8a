"""Attention-head importance and pruning of a saved zoo model (Michel, Levy & Neubig 2019): quality against the
fraction of heads removed.

The model's loss decides which heads matter. Head importance is computed on the corpus's validation split; after
each step the `--step-fraction` least important remaining heads are masked, importance is recomputed with that
mask, and loss and accuracy are measured on the test split. `--methods random` adds the control Michel et al.
compare against: the same steps in a random head order. Writes pruning.md/.csv/.json (one row per method and step),
pruning.png (loss and accuracy against the fraction removed) and importance.csv (each head's importance in the
unpruned model, by every gradient/loss method asked for). With --save-pruned, the heads masked at --save-fraction
are removed physically (smaller q/k/v/o projections, recorded in config.pruned_heads) and the smaller model is
saved, reloaded, and its test loss checked against the masked model's.

The task follows the model's head (config.architectures): causal LM (next-token loss), masked LM (15% of tokens
masked with transformers' DataCollatorForLanguageModeling, seeded), sequence classification, encoder-decoder
(labels = the target text) and image classification. The data set is a built-in corpus of
transformer_zoo.training.load_corpus (default: shakespeare for language models, hadith-en for text classification,
hadith-en-ur for encoder-decoders, digits for images) or a local file. Pass the --corpus-max-examples and
--corpus-seed the model was fine-tuned with, so that the validation and test splits are the held-out ones.

Examples:
  python scripts/prune_heads.py outputs/finetune --corpus-max-examples 6000 --corpus-seed 42
  python scripts/prune_heads.py outputs/pretrain --methods gradient,loss,random --step-fraction 0.05
  python scripts/prune_heads.py outputs/finetune --save-pruned outputs/finetune-pruned --save-fraction 0.3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# torch, transformers and transformer_zoo are imported inside functions: --help and argument errors answer at once.

DEFAULT_DATASETS = {"causal-lm": "shakespeare", "masked-lm": "shakespeare", "sequence-classification": "hadith-en",
                    "seq2seq": "hadith-en-ur", "image-classification": "digits"}
TASK_OF_HEAD = {"ForCausalLM": "causal-lm", "ForMaskedLM": "masked-lm",
                "ForSequenceClassification": "sequence-classification", "ForConditionalGeneration": "seq2seq",
                "ForImageClassification": "image-classification"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prune_heads.py", description=__doc__.split("\n\nExamples:")[0],
        epilog="Examples:" + __doc__.split("Examples:")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="A saved zoo model folder with a task head (its config.architectures names "
                                      "e.g. ZooDecoderForCausalLM) and, for text, its tokenizer.")
    parser.add_argument("--dataset", help="Built-in corpus name (shakespeare, hadith-en, hadith-ur, hadith-en-ur, "
                                          "digits) or a local data file/folder (see load_corpus). Default: by task "
                                          "(shakespeare for language models, hadith-en for text classification, "
                                          "hadith-en-ur for encoder-decoders, digits for images).")
    parser.add_argument("--corpus-max-examples", type=int, default=6000,
                        help="Subset size load_corpus takes before splitting 80/10/10 (the fine-tuning recipe's "
                             "--max_examples; default 6000, the recipe's default). 0 = the whole corpus.")
    parser.add_argument("--corpus-seed", type=int, default=42,
                        help="Seed of the subset and split (the recipe's --seed; default 42, the recipe's default).")
    parser.add_argument("--importance-examples", type=int, default=200,
                        help="Validation examples used to score heads (a random subset chosen with --seed; default "
                             "200).")
    parser.add_argument("--eval-examples", type=int, default=300,
                        help="Test examples on which loss and accuracy are measured after every step (a random "
                             "subset chosen with --seed; default 300).")
    parser.add_argument("--max-length", type=int, default=128, help="Truncate texts to this many tokens (default 128).")
    parser.add_argument("--batch-size", type=int, default=32, help="Examples per forward pass (default 32).")
    parser.add_argument("--methods", default="gradient,random",
                        help="Comma-separated head orders to trace: gradient (Michel et al.'s normalised |dL/dmask|),"
                             " loss (loss increase when a head alone is masked; one pass per head, slow), random "
                             "(control). Default: gradient,random.")
    parser.add_argument("--step-fraction", type=float, default=0.1,
                        help="Fraction of all heads masked per step (default 0.1, as Michel et al.).")
    parser.add_argument("--max-fraction", type=float, default=0.9,
                        help="Stop once this fraction of the heads is masked (default 0.9).")
    parser.add_argument("--keep-one-head", action="store_true",
                        help="Never mask the last head of an attention layer (always on with --save-pruned, whose "
                             "physical pruning needs one head per layer).")
    parser.add_argument("--save-pruned", help="Folder to save the model with the heads masked at --save-fraction "
                                              "removed physically (first method of --methods).")
    parser.add_argument("--save-fraction", type=float, default=0.3,
                        help="With --save-pruned: the step whose fraction removed is the largest not above this "
                             "(default 0.3).")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the masked-LM masking and the random order "
                                                            "(default 0).")
    parser.add_argument("--output-dir", default="outputs/prune_heads",
                        help="Where the tables and plot go (default outputs/prune_heads).")
    return parser


def task_of(model) -> str:
    name = type(model).__name__
    for suffix, task in TASK_OF_HEAD.items():
        if name.endswith(suffix):
            return task
    raise SystemExit(f"{name} has no head this script can score ({', '.join(TASK_OF_HEAD)}); save the model with "
                     "its task head (e.g. ZooDecoderForCausalLM), not the bare backbone.")


def load_model(folder: str):
    import transformers
    from transformer_zoo.modeling_zoo_checks import read_model_config

    import transformer_zoo

    if not Path(folder).is_dir():
        raise SystemExit(f"{folder!r} is not a folder; pass a saved zoo model (save_pretrained output).")
    config = read_model_config(folder)
    if config.model_type not in transformer_zoo.FAMILIES:
        raise SystemExit(f"{folder} holds a {config.model_type!r} model; convert it to a zoo model first "
                         "(scripts/convert_checkpoint.py).")
    architecture = (config.architectures or [None])[0]
    model_class = getattr(transformer_zoo, architecture or "", None)
    if model_class is None:
        raise SystemExit(f"{folder}/config.json names no zoo model class in 'architectures' ({architecture!r}).")
    model = model_class.from_pretrained(folder).eval()
    processor = None
    if config.model_type == "zoo_vit":
        try:
            processor = transformers.AutoImageProcessor.from_pretrained(folder)
        except (OSError, ValueError):
            processor = transformer_zoo.ZooViTImageProcessor(
                size={"height": config.image_size, "width": config.image_size})
    else:
        try:
            processor = transformers.AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as error:
            raise SystemExit(f"{folder} has no tokenizer ({error}); save the tokenizer next to the model.")
    return model, processor


def build_batches(task, model, processor, examples, args) -> list[dict]:
    """Tensors with `labels` for `task` from a datasets split, in batches of --batch-size."""
    import torch
    from transformers import DataCollatorForLanguageModeling

    batches = []
    for start in range(0, len(examples), args.batch_size):
        rows = examples[start:start + args.batch_size]
        if task == "image-classification":
            images = [image.convert("RGB") if model.config.num_channels == 3 else image.convert("L")
                      for image in rows["image"]]
            pixels = processor(images, return_tensors="pt")["pixel_values"]
            batches.append({"pixel_values": pixels, "labels": torch.tensor(rows["label"])})
            continue
        if task == "seq2seq":
            encoded = processor(rows["source"], text_target=rows["target"], truncation=True,
                                max_length=args.max_length, padding=True, return_tensors="pt")
            encoded["labels"] = encoded["labels"].masked_fill(encoded["labels"] == processor.pad_token_id, -100)
            batches.append(dict(encoded))
            continue
        encoded = processor(rows["text"], truncation=True, max_length=args.max_length, padding=True,
                            return_tensors="pt")
        if model.config.model_type != "zoo_encoder":  # only the encoder family has token types
            encoded.pop("token_type_ids", None)
        if task == "sequence-classification":
            encoded["labels"] = torch.tensor(rows["label"])
        elif task == "causal-lm":
            encoded["labels"] = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        elif task == "masked-lm":
            collator = DataCollatorForLanguageModeling(processor, mlm_probability=0.15, seed=args.seed + start)
            features = [{key: value[i] for key, value in encoded.items()} for i in range(len(rows["text"]))]
            encoded = collator(features)
        batches.append(dict(encoded))
    return batches


def load_data(task, model, processor, args):
    from transformer_zoo.training.data.corpora import load_corpus

    dataset = args.dataset or DEFAULT_DATASETS[task]
    corpus = load_corpus(dataset, max_examples=args.corpus_max_examples or None, seed=args.corpus_seed)
    needs = {"sequence-classification": ("text", "label"), "causal-lm": ("text",), "masked-lm": ("text",),
             "seq2seq": ("source", "target"), "image-classification": ("image", "label")}[task]
    missing = [column for column in needs if column not in corpus["validation"].column_names]
    if missing:
        raise SystemExit(f"The {task} model needs the columns {', '.join(needs)}, but --dataset {dataset!r} has "
                         f"{', '.join(corpus['validation'].column_names)}.")
    if task in ("causal-lm", "masked-lm", "seq2seq") and processor.pad_token_id is None:
        processor.pad_token = processor.eos_token  # padding is masked out of the loss (-100) anyway
    if "label" in needs:
        classes = corpus["validation"].features["label"].num_classes
        if classes != model.config.num_labels:
            raise SystemExit(f"--dataset {dataset!r} has {classes} classes but the model's head has "
                             f"{model.config.num_labels}; pass the data set it was fine-tuned on.")
    splits = {}
    for split, count in (("validation", args.importance_examples), ("test", args.eval_examples)):
        examples = corpus[split]
        if len(examples) < count:
            print(f"Note: the {split} split has {len(examples)} examples (< {count} asked); using all of them.")
        # A seeded random subset, not the first rows: load_corpus's splits are grouped by label, so the first rows
        # of a labelled split may all be one or two classes.
        examples = examples.shuffle(seed=args.seed).select(range(min(count, len(examples))))
        splits[split] = build_batches(task, model, processor, examples, args)
    return dataset, splits


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    methods = [method.strip() for method in args.methods.split(",") if method.strip()]
    import torch

    from transformer_zoo.analysis.attention import table_markdown, write_table_csv
    from transformer_zoo.analysis.heads import (
        IMPORTANCE_METHODS,
        attention_modules,
        evaluate,
        gradient_importance,
        importance_table,
        iterative_pruning,
        loss_change_importance,
        plot_pruning_curve,
        prune_heads,
    )

    unknown = [method for method in methods if method not in IMPORTANCE_METHODS]
    if unknown or not methods:
        raise SystemExit(f"--methods {args.methods!r}: choose from {', '.join(IMPORTANCE_METHODS)}.")
    if args.save_pruned and not 0 < args.save_fraction <= args.max_fraction:
        raise SystemExit(f"--save-fraction {args.save_fraction} must be in (0, --max-fraction={args.max_fraction}].")
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    model, processor = load_model(args.model)
    task = task_of(model)
    dataset, splits = load_data(task, model, processor, args)
    total_heads = sum(module.num_heads for module in attention_modules(model).values())
    parameters = model.num_parameters()
    if args.save_pruned:
        # The first step already masks this many heads (iterative_pruning's step size); a --save-fraction below it
        # would select step 0, nothing pruned, and save an unpruned copy. Refuse before any work is done.
        first_step = max(1, round(args.step_fraction * total_heads)) / total_heads
        if first_step > args.save_fraction:
            raise SystemExit(
                f"--save-fraction {args.save_fraction} is below the first pruning step, which already removes "
                f"{first_step:.0%} of the {total_heads} heads (--step-fraction {args.step_fraction}): nothing would be "
                f"pruned. Raise --save-fraction to at least {first_step:.3g}, or lower --step-fraction.")

    importance = {}
    for method in methods:
        if method == "gradient":
            importance[method] = gradient_importance(model, splits["validation"], progress=True)
        elif method == "loss":
            importance[method] = loss_change_importance(model, splits["validation"], progress=True)
    rows = []
    for method in methods:
        rows += iterative_pruning(model, splits["validation"], splits["test"], method=method,
                                  step_fraction=args.step_fraction, max_fraction=args.max_fraction,
                                  keep_one_head=args.keep_one_head or bool(args.save_pruned), seed=args.seed)

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    table_rows = [{key: value for key, value in row.items() if key != "pruned_heads"} for row in rows]
    write_table_csv(table_rows, output_dir / "pruning.csv")
    if importance:
        head_rows = None
        for method, scores in importance.items():
            method_rows = importance_table(model, scores)
            if head_rows is None:
                head_rows = [{"attention": r["attention"], "head": r["head"]} for r in method_rows]
            for row, scored in zip(head_rows, method_rows):
                row[f"{method}_importance"] = scored["importance"]
        write_table_csv(head_rows, output_dir / "importance.csv")
    description = (f"{Path(args.model).name} ({type(model).__name__}, {total_heads} heads, {parameters:,} "
                   f"parameters) on {dataset}")
    plot_pruning_curve(rows, output_dir / "pruning.png", title=description)

    saved = None
    if args.save_pruned:
        candidates = [r for r in rows if r["method"] == methods[0] and r["fraction_removed"] <= args.save_fraction]
        chosen = candidates[-1]
        prune_heads(model, chosen["pruned_heads"])
        pruned_quality = evaluate(model, splits["test"])
        model.save_pretrained(args.save_pruned)
        processor.save_pretrained(args.save_pruned)
        reloaded, _ = load_model(args.save_pruned)
        reloaded_quality = evaluate(reloaded, splits["test"])
        saved = {"folder": args.save_pruned, "step": chosen["step"], "fraction_removed": chosen["fraction_removed"],
                 "masked_loss": chosen["loss"], "pruned_loss": pruned_quality["loss"],
                 "reloaded_loss": reloaded_quality["loss"], "accuracy": reloaded_quality["accuracy"],
                 "parameters_before": parameters, "parameters_after": reloaded.num_parameters(),
                 "pruned_heads": {str(k): v for k, v in (reloaded.config.pruned_heads or {}).items()}}

    elapsed = time.perf_counter() - started
    header = (f"# Head pruning: {description}\n\n"
              f"Importance on {sum(len(b[next(iter(b))]) for b in splits['validation'])} validation examples, "
              f"loss/accuracy on {sum(len(b[next(iter(b))]) for b in splits['test'])} test examples "
              f"({task}; corpus subset {args.corpus_max_examples}, seed {args.corpus_seed}). Each step masks "
              f"{args.step_fraction:.0%} of all heads (the least important remaining ones, importance recomputed "
              f"with the current mask; Michel et al. 2019). {elapsed:.0f} s.\n")
    if saved:
        header += (f"\nSaved {saved['folder']}: step {saved['step']} ({saved['fraction_removed']:.0%} of heads "
                   f"removed), {saved['parameters_before']:,} -> {saved['parameters_after']:,} parameters; test loss "
                   f"masked {saved['masked_loss']:.6f}, pruned {saved['pruned_loss']:.6f}, reloaded "
                   f"{saved['reloaded_loss']:.6f}.\n")
    markdown = header + "\n" + table_markdown(table_rows)
    (output_dir / "pruning.md").write_text(markdown)
    (output_dir / "pruning.json").write_text(json.dumps(
        {"settings": vars(args), "model": description, "task": task, "rows": rows, "saved": saved,
         "seconds": elapsed}, indent=2, default=str))
    print(markdown)
    print(f"Wrote pruning.md/.csv/.json, pruning.png{', importance.csv' if importance else ''} to {output_dir} "
          f"in {elapsed:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
