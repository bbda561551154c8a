"""Model cards for zoo models, rendered through huggingface_hub's `ModelCard` / `ModelCardData` / `EvalResult`.

The metadata (licence, languages, `library_name`, tags, data sets, metrics, `base_model`, `pipeline_tag` and a
`model-index` of the measured results) is built as a `ModelCardData`; the body comes from a Jinja2 template per
family (`templates/<model_type>.md.j2`, each extending the common `templates/base.md.j2`). Every value comes from
the config and the run's own records (the `card` dict the recipes write, see `reporting.render_model_card`); a
section whose records are missing is left out rather than filled with a placeholder, and local paths are rewritten
(`scrub.scrub_local_paths`) so that a card can be published as it is.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .citations import citations_for
from .model_facts import ARCHITECTURE_FIELDS, count_parameters, format_number, training_compute_flops
from .scrub import find_local_paths, find_tokens, scrub_local_paths


TEMPLATES = Path(__file__).resolve().parent / "templates"
FAMILIES = ("zoo_decoder", "zoo_encoder", "zoo_seq2seq", "zoo_vit")
#: Where the "How to load" snippets point before the model has a Hub id; `publish.py` puts the repo id there.
LOCATION_MARKER = "path/to/this/folder"
#: The licence of the weights the recipes produce unless the card says otherwise (transformer-zoo's own licence).
DEFAULT_LICENSE = "apache-2.0"
# Text the Hub's default template leaves in unfilled cards: a card containing it is refused.
UNFILLED_MARKERS = ("More Information Needed", "[optional]")

# Languages of the built-in corpora (ISO 639-1); user data sets say theirs through the card's "language" key.
CORPUS_LANGUAGES = {"shakespeare": ["en"], "hadith-en": ["en"], "hadith-ur": ["ur"], "hadith-en-ur": ["en", "ur"]}
# The recipes' metric names -> Hub metric ids (for `metrics:` and the model-index `type`).
METRIC_IDS = {"accuracy": "accuracy", "macro_f1": "f1", "f1_macro": "f1", "seqeval_f1": "seqeval",
              "seqeval_precision": "precision", "seqeval_recall": "recall", "token_accuracy": "accuracy",
              "perplexity": "perplexity", "eval_loss": "loss", "bleu": "bleu", "chrf": "chrf"}
METRIC_NAMES = {"accuracy": "Accuracy", "macro_f1": "Macro F1", "f1_macro": "Macro F1", "seqeval_f1": "Entity F1 "
                "(seqeval)", "seqeval_precision": "Entity precision (seqeval)", "seqeval_recall": "Entity recall "
                "(seqeval)", "token_accuracy": "Token accuracy", "perplexity": "Perplexity",
                "eval_loss": "Cross-entropy loss (nats)", "bleu": "sacreBLEU", "chrf": "chrF"}
# Hub task names of the pipeline tags the recipes use (model-index `task.name`).
TASK_NAMES = {"text-generation": "Text Generation", "fill-mask": "Fill-Mask", "text-classification":
              "Text Classification", "token-classification": "Token Classification", "translation": "Translation",
              "text2text-generation": "Text2Text Generation", "image-classification": "Image Classification",
              "feature-extraction": "Feature Extraction"}
# Hub licence ids accepted by `validate_model_card` (the common ones; see hf.co/docs/hub/repositories-licenses).
KNOWN_LICENSES = {"apache-2.0", "mit", "bsd-3-clause", "bsd-2-clause", "cc-by-4.0", "cc-by-sa-4.0", "cc-by-nc-4.0",
                  "cc-by-nc-sa-4.0", "cc0-1.0", "gpl-3.0", "lgpl-3.0", "agpl-3.0", "openrail", "llama2", "llama3",
                  "gemma", "unlicense", "other", "mpl-2.0", "bigscience-openrail-m", "creativeml-openrail-m",
                  "afl-3.0", "artistic-2.0", "bsl-1.0", "cc-by-3.0", "cc-by-sa-3.0", "wtfpl", "odc-by", "pddl"}


@lru_cache(maxsize=1)
def _environment():
    import jinja2

    # StrictUndefined: a template variable the renderer forgot is an error, never an empty string in a card.
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=False, autoescape=False)


def template_name(model_type: str) -> str:
    if model_type not in FAMILIES:
        raise ValueError(f"No model-card template for model_type {model_type!r}; templates exist for "
                         f"{', '.join(FAMILIES)} (transformer_zoo/model_cards/templates/).")
    return f"{model_type}.md.j2"


# ================================================================================================ pieces
def _table(rows, header=("field", "value")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | {format_number(value)} |" for key, value in rows]
    return "\n".join(lines)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _position_phrase(config) -> str:
    return {
        "sinusoidal": "fixed sinusoidal position encodings added to the embeddings (Vaswani et al. 2017)",
        "learned": "learned absolute position embeddings",
        "rope": f"rotary position embeddings (RoPE, base {getattr(config, 'rope_theta', 10000.0):g})",
        "alibi": "ALiBi linear attention biases instead of position embeddings",
        "relative": "T5-style bucketed relative position biases",
        "none": "no position information (order comes from causal masking only)",
    }.get(getattr(config, "position_embedding_type", None), "learned absolute position embeddings")


def _norm_phrase(config) -> str:
    kind = "RMSNorm" if getattr(config, "norm_type", "layernorm") == "rmsnorm" else "LayerNorm"
    placement = getattr(config, "norm_position", "post")
    return f"{kind} {'before' if placement == 'pre' else 'after'} each sub-layer ({placement}-LN)"


def architecture_rows(model, config, counts: dict, trained: int) -> list[tuple[str, object]]:
    """The human-readable architecture table: layers, width, heads, position scheme, norm placement, parameters."""
    rows = [("class", type(model).__name__), ("family (model_type)", config.model_type)]
    if hasattr(config, "encoder_layers"):
        rows.append(("layers", f"{config.encoder_layers} encoder + {config.decoder_layers} decoder"))
    else:
        rows.append(("layers", config.num_hidden_layers))
    rows.append(("width (hidden size)", config.hidden_size))
    # (query heads, key/value heads, head dimension, feed-forward width) per stack; the encoder-decoder's may differ.
    keys = {"encoder": "encoder.0", "decoder": "decoder.0"} if hasattr(config, "encoder_layers") else {"": 0}
    shapes = {stack: (*config.attention_shape(key), config.feed_forward_size(key)) for stack, key in keys.items()}

    def per_stack(describe) -> str:
        values = {stack: describe(*shape) for stack, shape in shapes.items()}
        if len(set(values.values())) == 1:
            return next(iter(values.values()))
        return ", ".join(f"{value} ({stack})" for stack, value in values.items())

    rows.append(("attention heads", per_stack(
        lambda heads, kv_heads, *_: str(heads) if kv_heads == heads else f"{heads} query, {kv_heads} key/value")))
    rows.append(("head dimension", per_stack(lambda heads, kv_heads, head_dim, ffn: str(head_dim))))
    rows.append(("feed-forward width", f"{per_stack(lambda *shape: str(shape[3]))} ({config.hidden_act})"))
    rows.append(("position scheme", getattr(config, "position_embedding_type", "learned")))
    norm = "rmsnorm" if getattr(config, "norm_type", "layernorm") == "rmsnorm" else "layernorm"
    rows.append(("normalisation", f"{norm}, {getattr(config, 'norm_position', 'post')}-LN"))
    if hasattr(config, "image_size"):
        rows.append(("image / patch size", f"{config.image_size} / {config.patch_size} ({config.num_channels} "
                                           "channels)"))
    else:
        rows.append(("vocabulary", config.vocab_size))
        if getattr(config, "max_position_embeddings", None):
            rows.append(("maximum positions", config.max_position_embeddings))
    if getattr(config, "num_labels", None) and getattr(config, "id2label", None) and \
            type(model).__name__.endswith("Classification"):
        rows.append(("labels", ", ".join(str(label) for label in config.id2label.values())))
    rows += [("parameters", counts["total"]), ("non-embedding parameters", counts["non_embedding"]),
             ("parameters trained in this run", trained)]
    return rows


def _batch_rows(hyper: dict, hardware: dict, training: dict) -> list[tuple[str, object]]:
    rows = []
    per_device = hyper.get("per_device_batch_size")
    processes = hardware.get("processes", 1) or 1
    accumulation = hyper.get("gradient_accumulation_steps", 1) or 1
    examples = hyper.get("global_batch_examples") or (per_device * processes * accumulation if per_device else None)
    if examples:
        rows.append(("batch size (examples per optimiser step)",
                     f"{examples:,} ({per_device} per device x {processes} process(es) x {accumulation} accumulation)"
                     if per_device else examples))
    steps = training.get("optimizer steps") or training.get("steps")
    tokens = training.get("tokens")
    if hyper.get("global_batch_tokens"):
        rows.append(("batch size (tokens per optimiser step)", hyper["global_batch_tokens"]))
    elif tokens and steps:
        rows.append(("batch size (tokens per optimiser step, measured mean)", round(tokens / steps, 1)))
    return rows


def procedure_rows(hyper: dict, hardware: dict, training: dict, flops: float) -> list[tuple[str, object]]:
    """Optimizer, peak learning rate, warmup, schedule, batch size in tokens, steps, precision, hardware, wall time,
    estimated compute: the rows whose records exist."""
    rows = []
    if "learning_rate" in hyper:
        rows.append(("optimizer", f"AdamW (beta1 {hyper.get('adam_beta1', 0.9)}, beta2 {hyper.get('adam_beta2', 0.999)}"
                                  f", epsilon {hyper.get('adam_epsilon', 1e-8):g}, weight decay "
                                  f"{hyper.get('weight_decay', 0.0)})"))
        rows.append(("peak learning rate", hyper["learning_rate"]))
    steps = training.get("optimizer steps") or training.get("steps")
    if hyper.get("warmup_steps") is not None:
        rows.append(("warmup", f"{hyper['warmup_steps']} steps (linear)"))
    elif hyper.get("warmup_ratio") is not None:
        warmup = f"{hyper['warmup_ratio']:g} of the run (linear)"
        if steps:
            warmup += f", {math.ceil(hyper['warmup_ratio'] * steps)} of {steps} steps"
        rows.append(("warmup", warmup))
    if hyper.get("lr_scheduler"):
        rows.append(("schedule after warmup", hyper["lr_scheduler"]))
    rows += _batch_rows(hyper, hardware, training)
    if steps is not None:
        rows.append(("optimiser steps", steps))
    if training.get("tokens"):
        rows.append(("tokens seen", training["tokens"]))
    if hyper.get("mixed_precision") is not None:
        precision = hyper["mixed_precision"]
        rows.append(("precision", "float32" if precision == "no" else f"{precision} autocast, float32 weights"))
    if hyper.get("max_grad_norm"):
        rows.append(("gradient clipping (global norm)", hyper["max_grad_norm"]))
    if hyper.get("label_smoothing"):
        rows.append(("label smoothing", hyper["label_smoothing"]))
    if hardware:
        device = ", ".join(hardware["gpus"]) if hardware.get("gpus") else \
            f"CPU: {hardware.get('cpu', 'unknown')} ({hardware.get('torch_threads', '?')} threads)"
        rows.append(("hardware", f"{hardware.get('processes', 1)} process(es); {device}"))
    wall = training.get("training time (s)")
    if wall is not None:
        rows.append(("wall time of training (s)", wall))
    rows.append(("estimated compute 6·N·D (FLOPs; N = non-embedding parameters, D = tokens)", flops))
    return rows


def _evaluation(card: dict, config) -> tuple[str, str, list[tuple[str, str, float]]]:
    """Markdown table with the baseline beside the measured numbers, a note, and (split, metric, value) triples."""
    evaluation = {split: {k: v for k, v in metrics.items() if _finite(v) and k != "step"}
                  for split, metrics in (card.get("evaluation") or {}).items()}
    evaluation = {split: metrics for split, metrics in evaluation.items() if metrics}
    if not evaluation:
        return "", card.get("evaluation_note", ""), []
    baseline = {k: v for k, v in (card.get("baseline") or {}).items() if _finite(v)}
    baseline_name = card.get("baseline_name", "majority-class baseline")
    note = card.get("baseline_note") or ("The majority-class baseline always predicts the most frequent training "
                                         "label." if baseline else "")
    names = sorted({name for metrics in evaluation.values() for name in metrics})
    if not baseline and {"perplexity", "eval_loss"} & set(names) and getattr(config, "vocab_size", None):
        # A model that has learnt nothing guesses uniformly over the vocabulary: perplexity = vocabulary size.
        baseline = {"perplexity": float(config.vocab_size), "eval_loss": math.log(config.vocab_size)}
        baseline_name = "uniform-guess baseline"
        note = (f"The uniform-guess baseline spreads probability evenly over the {config.vocab_size:,}-token "
                "vocabulary (perplexity = vocabulary size); a trained model must beat it.")
    if not baseline:
        note = "No baseline was computed for this task."
    header = "| metric | " + " | ".join(evaluation) + (f" | {baseline_name} |" if baseline else " |")
    lines = [header, "|---" * (len(evaluation) + 1 + bool(baseline)) + "|"]
    for name in names:
        cells = [format_number(metrics[name]) if name in metrics else "" for metrics in evaluation.values()]
        if baseline:
            cells.append(format_number(baseline[name]) if name in baseline else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    triples = [(split, name, float(value)) for split, metrics in evaluation.items() for name, value in metrics.items()]
    return "\n".join(lines), note, triples


# transformer-zoo is not on PyPI yet: say how it really installs.
INSTALL_HINT = ("it is not on PyPI yet: clone the transformer-zoo repository and run `bash scripts/install.sh` or "
                "`pip install -e .` in it")


def _usage(card: dict, location: str) -> str:
    auto_class = card.get("auto_class", "AutoModel")
    if card.get("adapter"):
        base = card.get("base_model") or "BASE_MODEL_ID"
        return (
            "These are LoRA adapters (PEFT format) for the base model below; load the base, then the adapters:\n\n"
            "```python\n"
            f"from transformers import {auto_class}\n"
            "from peft import PeftModel\n"
            "import transformer_zoo  # registers the zoo classes (or pass trust_remote_code=True to the base)\n"
            f'base = {auto_class}.from_pretrained("{base}")\n'
            f'model = PeftModel.from_pretrained(base, "{location}")\n'
            "model = model.merge_and_unload()  # optional: a plain model with the adapters folded in\n"
            "```"
        )
    preprocessor = ("from transformers import AutoImageProcessor\n"
                    f'processor = AutoImageProcessor.from_pretrained("{location}")\n') \
        if card.get("is_image") else ("from transformers import AutoTokenizer\n"
                                      f'tokenizer = AutoTokenizer.from_pretrained("{location}")\n')
    return (
        f"With transformer-zoo installed ({INSTALL_HINT}), the Auto classes know the zoo models:\n\n"
        "```python\n"
        "import transformer_zoo  # registers the zoo classes with the Auto classes\n"
        f"from transformers import {auto_class}\n"
        f'model = {auto_class}.from_pretrained("{location}")\n'
        f"{preprocessor}"
        "```\n\n"
        "Without it, the modeling code shipped with the model is used (read it first: it runs on your machine):\n\n"
        "```python\n"
        f"from transformers import {auto_class}\n"
        f'model = {auto_class}.from_pretrained("{location}", trust_remote_code=True)\n'
        "```"
    )


def _data_lines(data: dict) -> list[str]:
    labels = {"name": "Data set", "summary": "What it is", "provenance": "Provenance", "licence": "Licence",
              "caveats": "Caveats", "sizes": "Examples per split", "label_names": "Labels", "seed": "Split seed",
              "max_examples": "Examples used at most", "deduplicated": "Deduplicated"}
    lines = []
    for key, value in data.items():
        if value in (None, "", [], {}):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {format_number(v)}" for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value)
        lines.append(f"**{labels.get(key, key)}**: {value}")
    return lines


def card_languages(card: dict) -> list[str] | None:
    if card.get("language"):
        language = card["language"]
        return [language] if isinstance(language, str) else list(language)
    name = (card.get("data") or {}).get("name")
    return CORPUS_LANGUAGES.get(name)


# ================================================================================================ the card
def build_model_card(card: dict) -> ModelCard:
    """The `ModelCard` for a run's `card` dict (keys: see `transformer_zoo.training.reports.records.render_model_card`)."""

    model = card["model"]
    config = model.config
    model_type = str(config.model_type)
    counts = count_parameters(model)
    trained = card.get("trainable_parameters")
    trained = counts["trainable"] if trained is None else int(trained)
    training = dict(card.get("training") or {})
    hyper = {k: v for k, v in (card.get("hyperparameters") or {}).items() if v is not None}
    hardware = dict(card.get("hardware") or {})
    tokens = int(training.get("tokens", 0) or 0)
    flops = training_compute_flops(counts["non_embedding"], tokens)
    data = dict(card.get("data") or {})
    is_image = model_type == "zoo_vit"
    adapter = bool(card.get("adapter"))

    evaluation_table, evaluation_note, triples = _evaluation(card, config)
    pipeline_tag = card.get("pipeline_tag")
    dataset_name = str(data.get("name") or "")
    eval_results = [
        EvalResult(task_type=pipeline_tag or "other", task_name=TASK_NAMES.get(pipeline_tag),
                   dataset_type=dataset_name or "unknown", dataset_name=dataset_name or "unknown",
                   dataset_split=split.split(" ")[0], metric_type=METRIC_IDS.get(name, name),
                   metric_name=f"{METRIC_NAMES.get(name, name)} ({split})", metric_value=round(value, 6))
        for split, name, value in triples
    ] or None
    metrics = sorted({METRIC_IDS.get(name, name) for _, name, _ in triples} - {"loss"}) or None
    tags = ["transformer-zoo", model_type] + [tag for tag in card.get("tags", []) if tag]
    if adapter:
        tags += ["peft", "lora"]
    card_data = ModelCardData(
        license=card.get("license") or DEFAULT_LICENSE,
        language=card_languages(card),
        library_name="peft" if adapter else "transformers",
        tags=list(dict.fromkeys(tags)),
        datasets=[dataset_name] if dataset_name else None,
        metrics=metrics,
        base_model=card.get("base_model") or None,
        pipeline_tag=pipeline_tag,
        model_name=card.get("model_name") or scrub_local_paths(card["title"]).replace("`", ""),
        eval_results=eval_results,
    )

    license_id = card_data.license
    data_licence = data.get("licence")
    licence_text = (f"The weights are released under `{license_id}`"
                    + (" (transformer-zoo's default for the weights its recipes produce; `scripts/publish.py "
                       "--license` changes it)" if not card.get("license") else "") + ".")
    if data_licence:
        licence_text += (f" The training data's licence is: {data_licence}. A model trained on data inherits that "
                         "data's terms and caveats (see Data used for training).")
    if card.get("base_model"):
        licence_text += f" The starting weights (`{card['base_model']}`) come with their own licence."

    classifier = type(model).__name__.endswith("Classification")
    config_rows = [(field, getattr(config, field)) for field in ARCHITECTURE_FIELDS
                   if hasattr(config, field) and (classifier or field != "num_labels")]
    run_rows = list(training.items())
    run_rows.append(("compute estimate 6·N·D (FLOPs; N = non-embedding parameters, D = tokens)", flops))
    notes = list(card.get("notes") or [])
    body_context = dict(
        title=card["title"], summary=card.get("summary") or f"A transformer-zoo `{model_type}` model.",
        architecture_table=_table(architecture_rows(model, config, counts, trained)),
        config_table=_table(config_rows) if config_rows else "",
        provenance=list(card.get("provenance") or []),
        notes=notes, data_lines=_data_lines(data), data_name=dataset_name or "the data described below",
        tokens_seen=format_number(tokens), is_image=is_image, tokenizer=card.get("tokenizer") or "",
        procedure_table=_table(procedure_rows(hyper, hardware, training, flops), ("setting", "value")),
        run_table=_table(run_rows, ("quantity", "value")),
        hyperparameter_table=_table(sorted(hyper.items()), ("hyper-parameter", "value")) if hyper else "",
        hardware_table=_table(list(hardware.items())) if hardware else "",
        evaluation_table=evaluation_table, evaluation_note=evaluation_note,
        usage=_usage({**card, "is_image": is_image}, card.get("repo_id") or LOCATION_MARKER),
        extra_sections=[(str(heading), str(body)) for heading, body in card.get("extra_sections") or []],
        licence_text=licence_text, citations=citations_for(config, adapter=adapter),
        position_phrase=_position_phrase(config), norm_phrase=_norm_phrase(config), pipeline_tag=pipeline_tag,
    )
    body = _environment().get_template(template_name(model_type)).render(**body_context)
    body = "\n".join(line.rstrip() for line in body.splitlines())
    while "\n\n\n" in body:
        body = body.replace("\n\n\n", "\n\n")
    # The front matter comes from ModelCardData (its YAML dump builds the model-index from the EvalResults).
    card_object = ModelCard.from_template(card_data, template_str="---\n{{ card_data }}\n---\n\n{{ body }}",
                                          body=scrub_local_paths(body.strip()) + "\n")
    return card_object


def render_model_card(card: dict) -> str:
    return str(build_model_card(card))


# ================================================================================================ checks
def validate_model_card(text: str, *, adapter: bool | None = None, require_results: bool = True) -> list[str]:
    """Problems that make a card unfit to publish (an empty list when it is fine).

    The metadata must parse (including the model-index) and carry a licence, `library_name` (transformers, or peft
    for adapters), the transformer-zoo and family tags, a pipeline tag, languages for text models, `base_model` for
    adapters, and at least one measured result; the text must hold no placeholder, local path or token.
    """
    problems = []
    try:
        card = ModelCard(text, ignore_metadata_errors=False)
    except Exception as error:  # noqa: BLE001 - any parse failure is the problem to report
        return [f"the metadata block does not parse: {error}"]
    data = card.data
    if adapter is None:
        adapter = data.library_name == "peft"
    expected_library = "peft" if adapter else "transformers"
    if data.library_name != expected_library:
        problems.append(f"library_name is {data.library_name!r}, expected {expected_library!r}")
    if not data.license:
        problems.append("no licence (metadata `license`); pass --license")
    elif data.license not in KNOWN_LICENSES:
        problems.append(f"licence {data.license!r} is not a Hub licence id (e.g. apache-2.0, mit, cc-by-4.0, other)")
    elif data.license == "other" and not (data.get("license_name") and data.get("license_link")):
        problems.append("licence 'other' needs license_name and license_link in the metadata")
    tags = list(data.tags or [])
    family = next((tag for tag in tags if tag in FAMILIES), None)
    if "transformer-zoo" not in tags or family is None:
        problems.append(f"tags {tags} must include 'transformer-zoo' and the family ({', '.join(FAMILIES)})")
    if not data.pipeline_tag:
        problems.append("no pipeline_tag")
    if family != "zoo_vit" and not data.language:
        problems.append("no language for a text model (metadata `language`); pass --language, e.g. --language en")
    if adapter and not data.base_model:
        problems.append("an adapter needs base_model (the Hub id of the model it adapts); pass --base_model")
    # require_results=False for a card built from the config alone, which says its results were not measured.
    if require_results and not data.eval_results:
        problems.append("no evaluation results in the model-index")
    body = card.text
    for marker in UNFILLED_MARKERS:
        if marker in text:
            problems.append(f"the card contains the placeholder {marker!r}")
    if "BASE_MODEL_ID" in body:
        problems.append("the adapter's usage snippet has no base model id; pass --base_model")
    if LOCATION_MARKER in body:
        problems.append(f"the usage snippets still point at {LOCATION_MARKER!r} instead of the repo id")
    paths = find_local_paths(text)
    if paths:
        problems.append(f"the card names local paths: {paths[:3]}")
    tokens = find_tokens(text)
    if tokens:
        problems.append(f"the card contains something that looks like an access token ({', '.join(tokens)})")
    return problems


def finalize_for_repo(text: str, repo_id: str, *, license: str | None = None, language: list[str] | None = None,
                      base_model: str | None = None) -> ModelCard:
    """The card as published to `repo_id`: the usage snippets point at it, and the metadata given at publish time
    (licence, languages, base model) replaces the recorded values."""
    card = ModelCard(text.replace(LOCATION_MARKER, repo_id))
    if license:
        card.data.license = license
    if language:
        card.data.language = list(language)
    if base_model:
        card.data.base_model = base_model
        card.text = card.text.replace("BASE_MODEL_ID", base_model)
    if card.data.eval_results and not card.data.model_name:
        card.data.model_name = repo_id.split("/")[-1]
    return ModelCard(str(card))
