"""Export zoo models to transformers' own architectures (GPT-2, Llama, BERT, ViT, Marian, BART), exactly.

The reverse of `transformer_zoo.convert`, through the same tables (`transformer_zoo.conversion_tables`). A zoo config
exports to a native format only when that format expresses it exactly:
1. every zoo field the format fixes (`NativeFormat.fixed`: norm placement, position scheme, biases...) has the fixed
   value, the MLP is gated exactly when the format's is, and the model uses full attention with no pruned heads;
2. the native config built from it (`config_from_zoo`) converts back (`config_to_zoo`) to the same zoo config, field
   by field, over every field that changes what the model computes or how it trains.
Otherwise the export is refused with the fields that prevent it and the nearest format named; it never exports
approximately. The exported weights then give the same logits (checked by `scripts/export_checkpoint.py` and the
tests); the folder is a plain transformers checkpoint (no auto_map, no zoo code).
"""

import copy
import dataclasses
import json
import os

import torch
import transformers
from transformers import AutoImageProcessor, AutoTokenizer, PreTrainedConfig, PreTrainedModel
from transformers.utils import logging

from ..configuration_zoo_common import GATED_ACTIVATIONS
from ..configuration_zoo_decoder import ZooDecoderConfig
from ..configuration_zoo_encoder import ZooEncoderConfig
from ..configuration_zoo_seq2seq import ZooSeq2SeqConfig
from ..configuration_zoo_vit import ZooViTConfig
from ..conversion_tables import (
    NATIVE_FORMATS,
    NativeFormat,
    UnsupportedConversionError,
    find_rule,
    native_class_name,
    native_config_for,
    zoo_config_for,
)
from ..convert import _copy_sentence_transformers_modules
from ..modeling_zoo_encoder import ZooEncoderModel
from ..modeling_zoo_checks import read_model_config


logger = logging.get_logger(__name__)


class UnsupportedExportError(UnsupportedConversionError):
    """The zoo model has no exact equivalent in the requested (or any) native architecture; the message names the
    fields that prevent it."""


# The native formats each zoo family can export to, in the order `auto` tries them.
EXPORT_FORMATS = {
    ZooDecoderConfig: ("gpt2", "llama"),
    ZooEncoderConfig: ("bert",),
    ZooViTConfig: ("vit",),
    ZooSeq2SeqConfig: ("marian", "bart"),
}
EXPORT_TARGETS = ("auto", *NATIVE_FORMATS, "gguf")
# Zoo options no transformers architecture among the targets has, with what to say about each.
COMMON_FIXED = {"attention_variant": "full", "pruned_heads": None}
POSITION_HINTS = {
    "alibi": "transformers' ALiBi models (BLOOM, MPT) each fix more than the position scheme (fused layouts, fixed "
    "MLP width) and are not export targets yet",
    "relative": "T5's relative-position bias lives in an encoder-decoder with RMSNorm and no biases; T5 is not an "
    "export target",
}


def _untied_seq2seq(config) -> str | None:
    # transformers' Marian and BART untie the encoder and decoder embeddings from `shared` too when the output layer
    # is untied; the zoo always shares them. Outputs would match, fine-tuning would not.
    if not config.tie_word_embeddings:
        return ("tie_word_embeddings=False (transformers' Marian and BART then also untie the encoder and decoder "
                "embeddings, which the zoo shares)")
    return None


def _no_token_types(config) -> str | None:
    if config.type_vocab_size < 1:
        return f"type_vocab_size={config.type_vocab_size} (BERT always adds a token-type embedding; use 1 or more)"
    return None


# Differences the config round trip cannot see, per format.
EXTRA_CHECKS = {"marian": (_untied_seq2seq,), "bart": (_untied_seq2seq,), "bert": (_no_token_types,)}
# Zoo fields that do not change what a model computes or how it trains (token ids travel separately; use_cache is a
# run-time default).
NON_ARCHITECTURE_FIELDS = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "use_cache"}


def _zoo_fields(config) -> list[str]:
    base = {field.name for field in dataclasses.fields(PreTrainedConfig)}
    return [field.name for field in dataclasses.fields(config) if field.name not in base]


def architecture_fields(config) -> dict:
    """The zoo fields of `config` that decide what the model computes and how it trains, leaving out options the
    config's own choices make unused (rope_theta without RoPE, a variant's settings under another variant)."""
    values = {name: getattr(config, name) for name in _zoo_fields(config) if name not in NON_ARCHITECTURE_FIELDS}
    unused = set()
    if config.position_embedding_type != "rope":
        unused.add("rope_theta")
    if config.position_embedding_type != "relative":
        unused |= {"relative_attention_num_buckets", "relative_attention_max_distance"}
    variant_fields = {
        "sliding_window": {"attention_window", "global_attention_indices"},
        "linformer": {"linformer_k", "linformer_max_length", "linformer_sharing"},
        "performer": {"performer_features", "performer_redraw_interval", "performer_seed"},
    }
    for variant, names in variant_fields.items():
        if config.attention_variant != variant:
            unused |= names
    if isinstance(config, (ZooDecoderConfig, ZooViTConfig)):
        unused.add("classifier_dropout")  # their heads have no classifier dropout
    if isinstance(config, ZooViTConfig):
        unused.add("max_position_embeddings")  # the patch grid fixes the positions
    if isinstance(config, ZooSeq2SeqConfig):
        # Each stack's resolved shape is what the model builds; the shared fields only feed those.
        unused |= {"num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size"}
        for stack in ("encoder", "decoder"):
            values[f"{stack} attention (heads, key/value heads, head_dim)"] = config.attention_shape(stack)
    return {name: value for name, value in values.items() if name not in unused}


def export_problems(zoo_config, model_type: str) -> list[str]:
    """Why `zoo_config` cannot be exported exactly to the native format `model_type` (empty when it can)."""
    native_format = NATIVE_FORMATS[model_type]
    if model_type not in EXPORT_FORMATS.get(type(zoo_config), ()):
        return [f"a {type(zoo_config).__name__} is not a {native_format.name} model"]
    name = native_format.name
    problems = [
        f"{field}={getattr(zoo_config, field)!r} ({name}: {value!r})"
        for field, value in {**native_format.fixed, **COMMON_FIXED}.items()
        if getattr(zoo_config, field) != value
    ]
    gated_format = model_type == "llama"
    if (zoo_config.hidden_act in GATED_ACTIVATIONS) != gated_format:
        kind = f"gated ({', '.join(GATED_ACTIVATIONS)})" if gated_format else "not gated"
        problems.append(f"hidden_act={zoo_config.hidden_act!r} ({name}'s MLP is {kind})")
    problems += [problem for check in EXTRA_CHECKS.get(model_type, ()) if (problem := check(zoo_config))]
    if problems:
        return problems
    try:
        round_trip = zoo_config_for(native_config_for(zoo_config, native_format), native_format)
    except (ValueError, TypeError) as error:
        return [f"the {name} config does not accept these values ({error})"]
    expected, actual = architecture_fields(zoo_config), architecture_fields(round_trip)
    for field in sorted(expected.keys() | actual.keys()):
        if expected.get(field) != actual.get(field):
            problems.append(f"{field}={expected.get(field)!r} ({name} gives {actual.get(field)!r})")
    return problems


def choose_format(zoo_config, to: str = "auto") -> str:
    """The native model_type `zoo_config` exports to: `to` itself if it fits exactly, or with to="auto" the format
    that fits. Raises UnsupportedExportError naming the fields that prevent an exact export."""
    if to not in EXPORT_TARGETS or to == "gguf":
        raise ValueError(f"Unknown export target {to!r}; choose one of {', '.join(t for t in EXPORT_TARGETS if t != 'gguf')}.")
    candidates = EXPORT_FORMATS.get(type(zoo_config))
    if candidates is None:
        raise UnsupportedExportError(f"{type(zoo_config).__name__} is not a transformer-zoo family config.")
    tried = {model_type: export_problems(zoo_config, model_type) for model_type in ((to,) if to != "auto" else candidates)}
    for model_type, problems in tried.items():
        if not problems:
            return model_type
    nearest = min((m for m in tried if m in candidates), key=lambda m: len(tried[m]), default=None)
    lines = [f"{NATIVE_FORMATS[model_type].name}: {'; '.join(problems)}" for model_type, problems in tried.items()]
    family = type(zoo_config).__name__
    if to != "auto" and to not in candidates:
        message = (f"Cannot export a {family} to {NATIVE_FORMATS[to].name}: a {family} exports to "
                   f"{' or '.join(NATIVE_FORMATS[m].name for m in candidates)}.")
    elif to != "auto":
        message = (f"Cannot export this {family} to {NATIVE_FORMATS[to].name} exactly: {'; '.join(tried[to])}. "
                   f"Change these fields (values in parentheses are what {NATIVE_FORMATS[to].name} has) to export.")
    else:
        message = (f"This {family} has no exact equivalent among transformers' architectures ({' | '.join(lines)}). "
                   f"Nearest: {NATIVE_FORMATS[nearest].name}, with {len(tried[nearest])} field(s) to change to the "
                   "values in parentheses.")
    hint = POSITION_HINTS.get(zoo_config.position_embedding_type)
    if hint:
        message += f" ({hint}.)"
    raise UnsupportedExportError(message + " Nothing is exported approximately.")


# ================================================================================================ weights
def _prefix(model: PreTrainedModel) -> str:
    return model.base_model_prefix + "." if model.base_model is not model else ""


def _export_state_dict(zoo_model: PreTrainedModel, native_model: PreTrainedModel, native_format: NativeFormat) -> dict:
    """Zoo state dict -> native state dict through the format's rules, read backwards."""
    zoo_prefix, native_prefix = _prefix(zoo_model), _prefix(native_model)
    exported: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}  # native name -> the zoo tensors it joins, by position
    unclaimed = []
    for name, tensor in zoo_model.state_dict().items():
        rules, relative, in_backbone = native_format.rules_for(name, zoo_prefix)
        out_prefix = native_prefix if in_backbone else ""
        rule, match = find_rule(rules, relative, "zoo")
        if rule is None:
            unclaimed.append(name)
            continue
        index, slots = match
        native_name = out_prefix + rule.native_name(slots)
        if len(rule.zoo_templates) == 1:
            exported[native_name] = rule.to_native(tensor) if rule.to_native else tensor
            continue
        parts.setdefault(native_name, {})[index] = tensor
        if len(parts[native_name]) == len(rule.zoo_templates):
            joined = parts.pop(native_name)
            exported[native_name] = rule.to_native(*(joined[i] for i in range(len(rule.zoo_templates))))
    if unclaimed or parts:
        # A table bug rather than a user error: every zoo tensor of an exportable config has a native place.
        raise RuntimeError(
            f"Exporting {type(zoo_model).__name__} to {native_format.name}: no rule for {unclaimed[:10]}, "
            f"incomplete fused tensors {sorted(parts)[:10]}."
        )
    return exported


def _complete_native_tensors(native_model, native_format: NativeFormat, missing: list[str]) -> None:
    """Native tensors the zoo has no counterpart for: tied to a loaded one, recomputed by the native model itself
    (checked), or given a value by their rule (ViT's identity pooler). Anything else is a table bug."""
    native_prefix = _prefix(native_model)
    shared = {}
    for name, parameter in native_model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(parameter), []).append(name)
    tied = {name for names in shared.values() if len(names) > 1 for name in names if set(names) - set(missing)}
    state = native_model.state_dict()
    unexplained = []
    for name in missing:
        if name in tied:
            continue
        rules, relative, _ = native_format.rules_for(name, native_prefix)
        rule, _ = find_rule(rules, relative, "native")
        if rule is None or rule.zoo is not None or not (rule.check or rule.export_value):
            unexplained.append(name)
        elif rule.export_value:
            with torch.no_grad():
                state[name].copy_(rule.export_value(state[name]))
        else:
            rule.check(state[name])
    if unexplained:
        raise RuntimeError(f"{native_format.name} tensors the zoo model has no source for: {unexplained[:10]}.")


@torch.no_grad()
def export_model(zoo_model: PreTrainedModel, to: str = "auto") -> PreTrainedModel:
    """The transformers model (GPT-2, Llama, BERT, ViT, Marian or BART class) equivalent to a zoo model, with its
    dtype, train/eval mode, labels, special tokens and generation config. Raises UnsupportedExportError when the
    config has no exact native equivalent (see the module docstring)."""
    model_type = choose_format(zoo_model.config, to)
    native_format = NATIVE_FORMATS[model_type]
    class_name = native_class_name(model_type, type(zoo_model))
    if class_name is None:
        raise UnsupportedExportError(
            f"{native_format.name} has no class for a {type(zoo_model).__name__}; its classes are "
            f"{', '.join(native_format.classes)}."
        )
    native_config = native_config_for(zoo_model.config, native_format)
    native_config.architectures = [class_name]
    init_kwargs = {}
    if isinstance(zoo_model, ZooEncoderModel):
        init_kwargs["add_pooling_layer"] = zoo_model.pooler is not None
        if zoo_model.pooler is None:
            logger.warning(
                "This ZooEncoderModel has no pooler: the exported BertModel has none either, and BertModel."
                "from_pretrained will initialise one at random (pooler_output is then meaningless; "
                "last_hidden_state is exact). Load it with add_pooling_layer=False."
            )
    native_model = getattr(transformers, class_name)(native_config, **init_kwargs).float()
    state = _export_state_dict(zoo_model, native_model, native_format)
    state = {name: tensor.float() for name, tensor in state.items()}
    result = native_model.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise RuntimeError(f"Exported names {native_format.name} lacks: {result.unexpected_keys[:10]}.")
    _complete_native_tensors(native_model, native_format, result.missing_keys)
    zoo_parameter = next(zoo_model.parameters())
    native_model.to(device=zoo_parameter.device, dtype=zoo_parameter.dtype)
    if zoo_model.can_generate() and native_model.can_generate():
        native_model.generation_config = copy.deepcopy(zoo_model.generation_config)
    native_model.train(zoo_model.training)
    return native_model


# ================================================================================================ folders
def zoo_class_for_folder(folder: str):
    """The zoo class named in a saved zoo config (every zoo class is registered by importing transformer_zoo)."""
    import transformer_zoo  # the package registry; a library helper, never copied into checkpoints

    config = read_model_config(folder, trust_remote_code=False)
    architecture = (config.architectures or [None])[0]
    for _, models in transformer_zoo.FAMILIES.values():
        for _, model_class in models:
            if model_class.__name__ == architecture:
                return model_class
    raise ValueError(
        f"{folder} holds a {architecture or config.model_type!r} model, not a transformer-zoo one; export reads zoo "
        "checkpoints (scripts/convert_checkpoint.py goes the other way)."
    )


# Files any saved transformers tokenizer has at least one of.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model")


def _save_preprocessor(src: str, out_dir: str, is_text: bool) -> None:
    """The zoo folder's tokenizer (already a plain transformers one) or image processor (re-made as transformers'
    ViTImageProcessor, whose settings are the same), when it has one."""
    if is_text and not any(os.path.isfile(os.path.join(src, name)) for name in TOKENIZER_FILES):
        logger.info(f"{src!r} has no tokenizer files; the export has none either.")
        return
    try:
        if is_text:
            processor = AutoTokenizer.from_pretrained(src, trust_remote_code=False)
        else:
            zoo_processor = AutoImageProcessor.from_pretrained(src, trust_remote_code=False)
            settings = {key: value for key, value in zoo_processor.to_dict().items()
                        if key not in ("image_processor_type", "auto_map", "processor_class")}
            processor = transformers.ViTImageProcessor(**settings)
    except (OSError, ValueError, KeyError, TypeError) as error:
        kind = "tokenizer" if is_text else "image processor"
        logger.warning(f"No {kind} saved: {src!r} has none that loads ({type(error).__name__}: {error}).")
        return
    processor.save_pretrained(out_dir)


def check_plain_transformers_folder(out_dir: str) -> None:
    """Refuse an output folder that would need zoo code: an auto_map in any JSON file, or Python files."""
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if name.endswith(".py"):
            raise RuntimeError(f"{path} is code; an exported folder must load with transformers alone.")
        if name.endswith(".json") and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                content = json.load(handle)
            if isinstance(content, dict) and "auto_map" in content:
                raise RuntimeError(f"{path} has an auto_map; an exported folder must load with transformers alone.")


def save_export(native_model: PreTrainedModel, out_dir: str, *, src: str | None = None) -> str:
    """Save an exported model (safetensors, generation config) with the tokenizer / image processor of the zoo
    folder `src` and its sentence-transformers modules, then check the folder needs no zoo code."""
    os.makedirs(out_dir, exist_ok=True)
    native_model.save_pretrained(out_dir, safe_serialization=True)
    if src is not None:
        _save_preprocessor(src, out_dir, native_model.config.model_type != "vit")
        if os.path.isdir(src):
            _copy_sentence_transformers_modules(src, out_dir)
    check_plain_transformers_folder(out_dir)
    return out_dir


def export_checkpoint(src: str, out_dir: str, *, to: str = "auto") -> str:
    """Load the zoo checkpoint `src`, export it to transformers' native architecture `to` (auto: the one that
    expresses it exactly) and save it to `out_dir`. Returns `out_dir`."""
    zoo_model = zoo_class_for_folder(src).from_pretrained(src)
    native_model = export_model(zoo_model, to)
    save_export(native_model, out_dir, src=src)
    logger.info(f"Exported {type(zoo_model).__name__} from {src!r} to {type(native_model).__name__} in {out_dir}.")
    return out_dir
