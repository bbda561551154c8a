"""Pretraining recipe: a zoo model from scratch on a corpus, with the classic objective of its family.

    decoder  causal LM on packed blocks of --context_length tokens
    encoder  masked LM (15 % of tokens; 80 % [MASK], 10 % random, 10 % kept) on packed blocks
    seq2seq  translation on source/target pairs, or T5-style span-corruption denoising on plain text
    vit      image classification

`recipes/pretrain.py` is a thin wrapper around `main()`. With no arguments it trains a small GPT-style decoder on
the built-in Shakespeare corpus with a byte-level BPE tokenizer trained on the fly (a few minutes on two CPU cores).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch
from accelerate.utils import set_seed
from transformers import AutoTokenizer

from ... import (
    ZooViTImageProcessor,
)
from ..data.corpora import corpus_card_info, load_corpus
from ..data.features import (
    image_classification_transform,
    report_truncation,
    take_truncation_counts,
    translation_features,
)
from ..data.objectives import (
    causal_lm_collator,
    check_sequence_length,
    masked_lm_collator,
    pack_sequences,
)
from ..data.tokenization import (
    check_tokenizer_matches,
    load_tokenizer,
    train_tokenizer,
)
from ..engine.checkpointing import gather_model_state
from ..engine.cli import (
    check_early_stopping_metric,
    check_flags_apply,
    run_recipe,
    save_arguments,
    training_config_from_args,
)
from ..engine.devices import create_accelerator
from ..engine.evaluation import evaluate, make_loss_fn
from ..engine.loop import train
from ..engine.tasks import (
    PaddingCollator,
    ResumableDenoisingCollator,
    classification_metrics,
    classification_predict_step,
    finish_output_folder,
    image_collate,
    setup_logging,
    write_results,
)
from ..reports.records import count_parameters, format_metrics, hardware_summary

# The command line lives in arguments.py; its names are imported here too, where the recipe's users found them.
from .arguments import (  # noqa: F401
    DEFAULT_MODEL_OVERRIDES,
    FAMILIES,
    FAMILY_OBJECTIVES,
    FLAG_SCOPES,
    OBJECTIVES,
    Family,
    apply_family_defaults,
    build_parser,
    check_overrides,
    check_preset,
    parse_overrides,
)
from .text_scores import bits_per_byte_metrics
from .translation_stage import (
    average_last_checkpoints,
    check_averaging,
    translation_test,
)


def resolve_objective(args, corpus) -> str:
    family = args.family
    if args.objective != "auto":
        if args.objective not in FAMILY_OBJECTIVES[family]:
            raise ValueError(f"--objective {args.objective} does not apply to --family {family}; choose "
                             f"{' or '.join(sorted(FAMILY_OBJECTIVES[family]))}.")
        return args.objective
    if family == "seq2seq":
        return "translation" if "source" in corpus["train"].column_names else "denoising"
    return FAMILIES[family].objective


def check_corpus_fits(objective: str, corpus) -> None:
    columns = corpus["train"].column_names
    needed = {"clm": "text", "mlm": "text", "denoising": "text", "translation": "source", "image": "image"}[objective]
    if needed not in columns:
        kinds = {"text": "plain text (a text column)", "source": "parallel text (source and target columns)",
                 "image": "images with labels"}
        raise ValueError(f"The {objective} objective needs {kinds[needed]}, but the data has columns "
                         f"{', '.join(columns)}. Pick a matching --dataset or --objective.")


def build_tokenizer(args, corpus, objective: str, output_dir: Path, accelerator):
    """The user's tokenizer, or one trained on the training split (by the main process, then loaded by all)."""
    if args.tokenizer:
        return load_tokenizer(args.tokenizer), f"`{args.tokenizer}` (given with --tokenizer)"
    kind = args.tokenizer_kind if args.tokenizer_kind != "auto" else FAMILIES[args.family].tokenizer_kind
    saved = output_dir / "tokenizer.json"
    description = (f"{kind} tokenizer trained by this recipe on the training split "
                   f"(vocab_size {args.vocab_size}, lowercase {args.lowercase}), saved beside the model")
    if args.resume and saved.exists():
        return AutoTokenizer.from_pretrained(output_dir), description
    if accelerator.is_main_process:
        train_split = corpus["train"]
        if objective == "translation":
            texts = (text for row in train_split.select_columns(["source", "target"]) for text in row.values())
        else:
            texts = (row["text"] for row in train_split.select_columns(["text"]))
        tokenizer = train_tokenizer(
            texts, kind=kind, vocab_size=args.vocab_size, lowercase=args.lowercase, show_progress=False,
            num_sentinel_tokens=100 if objective == "denoising" else 0,
        )
        output_dir.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(output_dir)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(output_dir), description


def build_config(args, tokenizer, corpus, objective: str):
    family = FAMILIES[args.family]
    overrides = parse_overrides(args.model_overrides)
    if args.dropout is not None:
        overrides.update(embedding_dropout=args.dropout, attention_dropout=args.dropout, hidden_dropout=args.dropout)
    if args.attention_dropout is not None:
        overrides["attention_dropout"] = args.attention_dropout
    if args.dropout_sampler is not None:
        overrides["dropout_sampler"] = args.dropout_sampler
    if tokenizer is not None:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
        end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        overrides.setdefault("vocab_size", len(tokenizer))
        overrides.setdefault("pad_token_id", tokenizer.pad_token_id)
        if args.family != "encoder":
            overrides.setdefault("bos_token_id", start)
            overrides.setdefault("eos_token_id", end)
        if args.family == "seq2seq":
            overrides.setdefault("decoder_start_token_id", start)
    else:
        names = corpus["train"].features["label"].names
        overrides.update(num_labels=len(names), id2label=dict(enumerate(names)),
                         label2id={name: i for i, name in enumerate(names)})
        if args.image_size:
            overrides["image_size"] = args.image_size
        if args.num_channels:
            overrides["num_channels"] = args.num_channels
    if args.attn_implementation:
        overrides["attn_implementation"] = args.attn_implementation
    check_preset(args)
    config = family.config_class.from_preset(args.preset, **overrides)
    if tokenizer is not None:
        check_sequence_length(config, args.context_length)
        check_tokenizer_matches(tokenizer, config, objective={"clm": "clm", "mlm": "mlm"}.get(objective, "seq2seq"))
    return config


def limit(dataset, count: int | None):
    return dataset if dataset is None or count is None or count >= len(dataset) else dataset.select(range(count))


def build_datasets(args, corpus, tokenizer, config, objective: str, accelerator):
    """(train, validation, test, collate_fn, image_processor)."""
    image_processor = None
    if objective in ("clm", "mlm", "denoising"):
        with accelerator.main_process_first():
            # An empty test split (--test_fraction 0, e.g. nanoGPT's train/validation layout) is not evaluated.
            splits = {name: pack_sequences(corpus[name], tokenizer, args.context_length)
                      if name != "test" or len(corpus[name]) else None for name in ("train", "validation", "test")}
        collate = {"clm": lambda: causal_lm_collator(tokenizer),
                   # seed=None: masking draws from the global torch RNG, which checkpoints save and restore.
                   "mlm": lambda: masked_lm_collator(tokenizer, args.mlm_probability),
                   "denoising": lambda: ResumableDenoisingCollator(
                       tokenizer, noise_density=args.noise_density, mean_span_length=args.mean_span_length)}[objective]()
    elif objective == "translation":
        def features(batch):
            return translation_features(batch, tokenizer, max_length=args.context_length, mark_truncated=True)

        with accelerator.main_process_first():
            splits = {name: corpus[name].map(features, batched=True, remove_columns=corpus[name].column_names,
                                             desc=f"tokenizing {name}")
                      for name in ("train", "validation", "test")}
        splits, truncated = take_truncation_counts(splits)
        if accelerator.is_main_process:
            report_truncation(truncated, {name: len(split) for name, split in splits.items()}, task=None,
                              flag="--context_length", limit=args.context_length)
        collate = PaddingCollator(tokenizer)
    else:
        size, channels = config.image_size, config.num_channels
        image_processor = ZooViTImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * channels,
                                               image_std=[0.5] * channels)
        transform = image_classification_transform(image_processor, num_channels=channels)
        splits = {name: corpus[name].with_transform(transform) for name in ("train", "validation", "test")}
        collate = image_collate
    for name in ("validation", "test"):
        splits[name] = limit(splits[name], args.eval_max_examples)
    return splits["train"], splits["validation"], splits["test"], collate, image_processor


def validation_metric_names(objective: str) -> set[str]:
    """What make_eval_fn's evaluation reports for an objective (a chosen early-stopping metric is checked against
    it before any work); every token objective reports the same two."""
    if objective == "image":
        return {"eval_loss", *classification_metrics().names}
    return {"eval_loss", "perplexity"}


def make_eval_fn(args, objective: str, dataset, collate, accelerator, loss_fn):
    batch_size = args.eval_batch_size or args.per_device_batch_size
    if objective == "image":
        predict, compute = classification_predict_step, classification_metrics()
    else:
        predict = compute = None

    def eval_fn(model):
        return evaluate(model, dataset, collate, accelerator=accelerator, batch_size=batch_size, loss_fn=loss_fn,
                        predict_step=predict, compute_metrics=compute, perplexity=objective != "image",
                        seed=args.seed)

    return eval_fn


def generate_sample(model, tokenizer, prompt: str, max_new_tokens: int, seed: int) -> str:
    model.eval()
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    torch.manual_seed(seed)
    with torch.no_grad():
        # min_new_tokens: an early end-of-speech token would otherwise cut the sample to a line or two.
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                do_sample=True, top_k=50, top_p=0.95, temperature=0.8,
                                pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(output[0], skip_special_tokens=True)


# ================================================================================================ the recipe
def run(args) -> dict:
    """Run the pretraining recipe with parsed arguments; returns the results dict (also saved as results.json)."""
    started = time.perf_counter()
    training_config = training_config_from_args(args)
    accelerator = create_accelerator(training_config)
    setup_logging(accelerator.is_main_process)
    output_dir = Path(args.output_dir)
    family = FAMILIES[args.family]
    dataset_name = args.dataset or family.dataset
    # Before the corpus is read: the validation metrics depend only on whether the family reads images.
    check_early_stopping_metric(args.early_stopping_metric, validation_metric_names(family.objective),
                                f"--family {args.family}")

    with accelerator.main_process_first():
        corpus = load_corpus(
            dataset_name, text_column=args.text_column, encoding=args.encoding, label_column=args.label_column,
            source_column=args.source_column, target_column=args.target_column, max_examples=args.max_examples,
            validation_fraction=args.validation_fraction, test_fraction=args.test_fraction, seed=args.seed,
            # Language models read text as text: documents with their line breaks, split by document or span.
            as_text_stream=args.family != "vit",
        )
    objective = resolve_objective(args, corpus)
    check_corpus_fits(objective, corpus)
    for split in ("validation", "test"):
        # A language model may go without a test split when asked (--test_fraction 0: nanoGPT's train/validation
        # layout); its run is then scored on the validation split alone.
        asked_for_none = split == "test" and args.test_fraction == 0 and objective in ("clm", "mlm", "denoising")
        if len(corpus[split]) == 0 and not asked_for_none:
            raise ValueError(f"The {split} split is empty: set --{split}_fraction above 0 (or provide that split).")

    tokenizer, tokenizer_description = (None, None)
    if objective != "image":
        tokenizer, tokenizer_description = build_tokenizer(args, corpus, objective, output_dir, accelerator)
    config = build_config(args, tokenizer, corpus, objective)
    train_set, validation_set, test_set, collate, image_processor = build_datasets(
        args, corpus, tokenizer, config, objective, accelerator)

    set_seed(args.seed)  # the same initial weights on every process and on resume
    model = family.model_class(config)
    if objective == "mlm":
        # Project only the masked positions onto the vocabulary while training (same loss and gradients, less work);
        # the saved config keeps the default, full logits (save_outputs).
        model.config.sparse_prediction = True
    counts = count_parameters(model)
    tokens_per_sequence = (config.num_patches + config.num_prefix_tokens) if objective == "image" \
        else args.context_length
    global_batch = args.per_device_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    if accelerator.is_main_process:
        unit = "images" if objective == "image" else "sequences"
        print(f"Pretraining {type(model).__name__} ({counts['total'] / 1e6:.2f} M parameters) on {dataset_name!r} "
              f"with {OBJECTIVES[objective]}.\nTraining split: {len(train_set):,} {unit}"
              + (f" of {args.context_length} tokens ({len(train_set) * args.context_length:,} tokens)"
                 if objective in ("clm", "mlm", "denoising") else "")
              + (f"; token-count batches of up to {args.max_tokens_per_batch * accelerator.num_processes:,} padded "
                 f"tokens x {args.gradient_accumulation_steps} accumulation per step."
                 if args.max_tokens_per_batch else
                 f"; global batch {global_batch} {unit}"
                 + (f" = {global_batch * args.context_length:,} tokens per step." if objective != "image" else ".")),
              flush=True)

    loss_kind = {"clm": "causal_lm", "image": "sequence"}.get(objective, "token")
    loss_fn = make_loss_fn(loss_kind, args.label_smoothing)
    # Validation loss is always the plain cross-entropy (comparable across label-smoothing settings).
    validation_fn = make_eval_fn(args, objective, validation_set, collate, accelerator, make_loss_fn())
    training_config = training_config_from_args(
        args, throughput_unit="images" if objective == "image" else "tokens",
        run_name=f"pretrain-{args.family}-{objective}",
    )
    result = train(model, train_set, collate, training_config, eval_fn=validation_fn, loss_fn=loss_fn,
                   accelerator=accelerator, tracker_config={"family": args.family, "objective": objective,
                                                            "dataset": dataset_name})
    model = result.model
    averaged = None
    if args.average_last > 1:
        accelerator.wait_for_everyone()
        averaged = average_last_checkpoints(model, output_dir, args.average_last)
        if accelerator.is_main_process:
            print(f"Evaluating and saving the average of {len(averaged)} checkpoints: {', '.join(averaged)}.")

    test_metrics = {}
    if test_set is not None:
        test_metrics = make_eval_fn(args, objective, test_set, collate, accelerator, make_loss_fn())(model)
    elif accelerator.is_main_process:
        print("No test split (--test_fraction 0): the run is scored on its validation split only.")
    # Every process scores the same texts (a sharded model needs them all in its forward passes).
    text_scores = bits_per_byte_metrics(model, tokenizer, corpus, objective, context_length=args.context_length,
                                        texts=args.bits_per_byte_texts)
    test_metrics.update(text_scores["test"])
    if objective == "translation" and args.generation_examples > 0 and accelerator.is_main_process:
        test_metrics.update(translation_test(model, tokenizer, corpus, args))
    sample = None
    if objective == "clm" and args.sample_prompt and accelerator.is_main_process:
        sample = generate_sample(model, tokenizer, args.sample_prompt, args.sample_tokens, args.seed)

    tokens_seen = result.progress.tokens_seen if objective != "image" \
        else result.progress.examples_seen * tokens_per_sequence
    results = {
        "family": args.family, "objective": objective, "dataset": dataset_name,
        "parameters": counts["total"], "steps": result.progress.step, "tokens_seen": tokens_seen,
        "examples_seen": result.progress.examples_seen, "best_step": result.progress.best_step,
        "validation": {**(result.best_metrics or result.final_metrics), **text_scores["validation"]},
        "test": test_metrics, "sample": sample,
        "train_seconds": round(result.progress.train_seconds, 1), "averaged_checkpoints": averaged,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    gathered = gather_model_state(model)  # collective for a sharded (FSDP) model; None otherwise
    if accelerator.is_main_process:
        save_outputs(args, model, tokenizer, image_processor, corpus, results, tokenizer_description, result,
                     accelerator, objective, global_batch, tokens_per_sequence, gathered)
        print(f"\nDone in {results['wall_seconds']:.0f} s ({results['steps']} steps, {tokens_seen:,} tokens).")
        validation = {k: v for k, v in results["validation"].items() if k != "step"}
        print("Validation (best checkpoint):\n" + format_metrics(validation))
        if test_metrics:  # --test_fraction 0: the run said so before training; no empty heading here
            print("Test:\n" + format_metrics(test_metrics))
        if sample:
            print(f"Sample ({args.sample_prompt!r}, temperature 0.8):\n{sample}")
        print(f"Saved to {output_dir} (model, {'tokenizer' if tokenizer else 'image processor'}, README.md, "
              "metrics.jsonl, training_curves.png).")
    accelerator.wait_for_everyone()
    return results


def save_outputs(args, model, tokenizer, image_processor, corpus, results, tokenizer_description, result,
                 accelerator, objective, global_batch, tokens_per_sequence, gathered_state=None) -> None:
    output_dir = Path(args.output_dir)
    family = FAMILIES[args.family]
    if getattr(model.config, "sparse_prediction", False):
        model.config.sparse_prediction = False  # a training-time setting (see run)
    model.save_pretrained(output_dir, **({"state_dict": gathered_state} if gathered_state else {}))
    if tokenizer is not None:
        tokenizer.save_pretrained(output_dir)
    if image_processor is not None:
        image_processor.save_pretrained(output_dir)
    save_arguments(args, output_dir / "run_args.json")
    write_results(output_dir, results)
    hyperparameters = {key: value for key, value in asdict(training_config_from_args(args)).items()
                       if key not in ("output_dir", "resume", "report_to", "progress_bar", "cpu", "run_name")}
    hyperparameters.update(objective=objective, context_length=args.context_length if tokenizer else None,
                           global_batch_examples=None if args.max_tokens_per_batch else global_batch,
                           global_batch_tokens=(args.max_tokens_per_batch * accelerator.num_processes
                                                * args.gradient_accumulation_steps if args.max_tokens_per_batch
                                                else global_batch * tokens_per_sequence),
                           averaged_checkpoints=results.get("averaged_checkpoints"),
                           mlm_probability=args.mlm_probability if objective == "mlm" else None)
    notes = []
    if results.get("sample"):
        notes.append(f"Sample after training (prompt {args.sample_prompt!r}, top-p 0.95, temperature 0.8): "
                     + json.dumps(results["sample"], ensure_ascii=False))
    notes.append("Trained from random initialisation by transformer-zoo's pretraining recipe "
                 "(recipes/pretrain.py); the exact flags are in run_args.json and the loss curve in metrics.jsonl.")
    card = {
        "title": f"{type(model).__name__} pretrained on {results['dataset']} ({OBJECTIVES[objective]})",
        "summary": f"A transformer-zoo `{config_name(model)}` model trained from scratch with {OBJECTIVES[objective]}.",
        "model": model, "auto_class": family.auto_class, "pipeline_tag": family.pipeline_tag,
        "provenance": ["Random initialisation (no pretrained weights)."],
        "data": _card_data(corpus), "tokenizer": tokenizer_description,
        "hyperparameters": hyperparameters, "hardware": hardware_summary(accelerator),
        "training": {"optimizer steps": results["steps"], "tokens": results["tokens_seen"],
                     "examples": results["examples_seen"], "best step": results["best_step"],
                     "training time (s)": results["train_seconds"]},
        "evaluation": {"validation": _numbers(results["validation"]),
                       **({"test": _numbers(results["test"])} if results["test"] else {})},
        "notes": notes,
    }
    finish_output_folder(output_dir, card, title=card["title"], best_model_saved=args.load_best_at_end)


def config_name(model) -> str:
    return str(model.config.model_type)


def _numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k != "step"}


def _card_data(corpus) -> dict:
    info = corpus_card_info(corpus)
    keep = ("name", "summary", "provenance", "licence", "caveats", "sizes", "label_names", "seed", "max_examples",
            "deduplicated")
    data = {key: info[key] for key in keep if key in info}
    if isinstance(data.get("caveats"), list):
        data["caveats"] = " ".join(data["caveats"])
    return data


def main(argv=None) -> dict:
    parser = build_parser()
    # Family defaults fill the unset flags after check_flags_apply, which must see them unset (a vit run that leaves
    # --vocab_size out has not asked for one).
    return run_recipe(parser, parser.parse_args(argv), run, lambda args: check_flags_apply(parser, args, FLAG_SCOPES),
                      apply_family_defaults, check_overrides, check_averaging)
