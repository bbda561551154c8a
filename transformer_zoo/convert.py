"""Convert transformers checkpoints into the matching transformer-zoo family, with identical outputs.

Supported sources (exact class names; anything else is refused with the list below):

    BERT    BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
            BertForQuestionAnswering                                    -> ZooEncoder*
    GPT-2   GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification   -> ZooDecoder*
    Llama   LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification -> ZooDecoder*
    ViT     ViTModel, ViTForImageClassification                         -> ZooViT*
    Marian  MarianModel, MarianMTModel                                  -> ZooSeq2Seq*
    BART    BartModel, BartForConditionalGeneration                     -> ZooSeq2Seq*

Each source format is one `NativeFormat` in `conversion_tables` (shared with `transformer_zoo.export`, which reads
the same tables backwards): a function mapping the source config to zoo config fields (refusing options the zoo cannot
reproduce, naming them), and renaming rules for parameter names, with the few reshapes that need more than a rename
(GPT-2's transposed Conv1D weights and fused q/k/v projection, BART's position table offset). Every source tensor must
be claimed by a rule and every zoo parameter must be filled, so a conversion never drops or invents weights silently.
The deliberate drops: BERT's `cls.predictions.bias` (tied to the decoder bias), Marian's sinusoidal table (checked
against the formula the zoo recomputes), and, with a warning, ViTModel's pooler and mask token (the zoo's ViT pools
[CLS] without a dense layer).

This module is a library helper, not remote code: it is not copied into saved checkpoints.
"""

import copy
import json
import os
import shutil

import torch
import transformers
from transformers import (
    AutoImageProcessor,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedModel,
)
from transformers.utils import logging

from .conversion_tables import (
    SOURCE_FAMILIES,
    SUPPORTED_SOURCES,
    NativeFormat,
    UnsupportedConversionError,
    find_rule,
    zoo_config_for,
)
from .configuration_zoo_vit import ZooViTConfig
from .modeling_zoo_encoder import ZooEncoderModel
from .modeling_zoo_checks import read_model_config


logger = logging.get_logger(__name__)

__all__ = [
    "SUPPORTED_SOURCES",
    "TASKS",
    "UnsupportedConversionError",
    "compare_outputs",
    "convert_checkpoint",
    "convert_model",
    "load_source_model",
    "random_inputs",
    "save_conversion",
]


# ================================================================================================ weights
def _rename_state_dict(source_model: PreTrainedModel, zoo_model: PreTrainedModel, family: NativeFormat) -> dict:
    """Source state dict -> zoo state dict through the format's rules. Raises on any tensor no rule claims."""
    source_is_head = source_model.base_model is not source_model
    source_prefix = source_model.base_model_prefix + "." if source_is_head else ""
    zoo_prefix = zoo_model.base_model_prefix + "." if zoo_model.base_model is not zoo_model else ""

    converted: dict[str, torch.Tensor] = {}
    unclaimed: list[str] = []
    warnings: set[str] = set()
    for name, tensor in source_model.state_dict().items():
        rules, relative, in_backbone = family.rules_for(name, source_prefix)
        out_prefix = zoo_prefix if in_backbone else ""
        rule, slots = find_rule(rules, relative, "native")
        if rule is None:
            unclaimed.append(name)
            continue
        if rule.zoo is None:
            if rule.check:
                rule.check(tensor)
            if rule.dropped_warning:
                warnings.add(rule.dropped_warning)
            continue
        values = rule.to_zoo(tensor) if rule.to_zoo else tensor
        values = values if isinstance(values, tuple) else (values,)
        for target, value in zip(rule.zoo_names(slots), values, strict=True):
            converted[out_prefix + target] = value
    if unclaimed:
        raise UnsupportedConversionError(
            f"No conversion rule for these {type(source_model).__name__} tensors: {', '.join(unclaimed[:10])}"
            f"{' ...' if len(unclaimed) > 10 else ''}. The checkpoint has parts the zoo model does not know."
        )
    for warning in sorted(warnings):
        logger.warning(warning)
    return converted


def _fill_tied_parameters(converted: dict, zoo_model: PreTrainedModel, source_name: str) -> None:
    """Zoo parameters that share one tensor (tied embeddings) must receive one value: fill the names the source
    does not provide from their tie partners, and refuse sources whose corresponding tensors differ.
    """
    groups: dict[int, list[str]] = {}
    for name, parameter in zoo_model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    for names in groups.values():
        if len(names) < 2:
            continue
        provided = [name for name in names if name in converted]
        if not provided:
            continue
        reference = converted[provided[0]]
        for name in provided[1:]:
            if not torch.equal(converted[name], reference):
                raise UnsupportedConversionError(
                    f"{source_name} has different values for {provided[0]!r} and {name!r}, which the zoo model ties "
                    "into one tensor (e.g. separate encoder/decoder embeddings, or an untied output layer under "
                    "tie_word_embeddings=True)."
                )
        for name in names:
            converted.setdefault(name, reference)


@torch.no_grad()
def convert_model(source_model: PreTrainedModel) -> PreTrainedModel:
    """Build the zoo model equivalent to an instantiated transformers model (see the module docstring for the list).

    The result has the source's dtype, train/eval mode, labels, special tokens and generation config, and gives the
    same outputs (to float rounding). Raises `UnsupportedConversionError` naming any feature the zoo cannot match.
    """
    source_name = type(source_model).__name__
    if source_name not in SUPPORTED_SOURCES:
        raise UnsupportedConversionError(
            f"Cannot convert a {source_name}: supported source classes are {', '.join(SUPPORTED_SOURCES)}."
        )
    model_type, zoo_class = SUPPORTED_SOURCES[source_name]
    family = SOURCE_FAMILIES[model_type]
    if source_model.config.model_type != model_type:
        raise UnsupportedConversionError(
            f"{source_name} carries a config of model_type={source_model.config.model_type!r}, expected "
            f"{model_type!r}."
        )

    zoo_config = zoo_config_for(source_model.config, family)
    init_kwargs = {}
    if zoo_class is ZooEncoderModel:
        # BertModel(add_pooling_layer=False) has no pooler; mirror it rather than invent one.
        init_kwargs["add_pooling_layer"] = getattr(source_model, "pooler", None) is not None
    # Built normally (random init, then overwritten): transformers' no_init_weights context would also skip the
    # weight tying done in post_init.
    zoo_model = zoo_class(zoo_config, **init_kwargs)

    state = _rename_state_dict(source_model, zoo_model, family)
    _fill_tied_parameters(state, zoo_model, source_name)
    expected = set(zoo_model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        # A table bug rather than a user error: the rules and the zoo layout disagree.
        raise RuntimeError(
            f"Converting {source_name}: zoo tensors without a source {missing[:10]}, converted names the zoo model "
            f"lacks {unexpected[:10]}."
        )
    # load_state_dict copies into the zoo's float32 parameters (exact for any source dtype); then match the source.
    zoo_model.load_state_dict(state, strict=True)
    source_parameter = next(source_model.parameters())
    zoo_model.to(device=source_parameter.device, dtype=source_parameter.dtype)

    if zoo_model.can_generate() and source_model.can_generate():
        # Beam settings, forced BOS/EOS, max_length... live in the generation config, not the model config.
        zoo_model.generation_config = copy.deepcopy(source_model.generation_config)
    zoo_model.train(source_model.training)
    return zoo_model


# ================================================================================================ checkpoints
# Task names accepted by convert_checkpoint / the CLI, and the transformers Auto class that loads each head.
TASKS = {
    "base": AutoModel,
    "masked-lm": AutoModelForMaskedLM,
    "causal-lm": AutoModelForCausalLM,
    "seq2seq-lm": AutoModelForSeq2SeqLM,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
    "question-answering": AutoModelForQuestionAnswering,
    "image-classification": AutoModelForImageClassification,
}


def _source_load_error(src: str, error: Exception, gguf_file: str | None = None) -> OSError:
    """One line: what `src` was read as, transformers' reason, and what to pass instead."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not os.path.exists(src):
        try:
            validate_repo_id(src)
        except HFValidationError:  # a path such as ./model or /data/model: transformers would call it a bad repo id
            return OSError(f"The source checkpoint {src!r} does not exist (no such folder, and not a Hub id). Pass "
                           "the folder that save_pretrained wrote.")
    if os.path.isdir(src) and not gguf_file and not os.path.isfile(os.path.join(src, "config.json")):
        return OSError(f"The source folder {src!r} holds no config.json: it is not a saved model folder. Pass the "
                       "folder that save_pretrained wrote.")
    where = "local folder" if os.path.isdir(src) else "Hub id (no such local folder)"
    reason = " ".join(str(error).split())
    return OSError(
        f"Could not load the source checkpoint {src!r} as a {where} ({reason}). Pass a local folder holding "
        "config.json and the weights (or a folder and gguf_file, the name of a GGUF file in it), or a Hub id with "
        "network access."
    )


def load_source_model(src: str, *, task: str = "auto", gguf_file: str | None = None) -> PreTrainedModel:
    """Load a transformers model from a folder or Hub id, without remote code.

    task="auto" loads the class in config.architectures when it is a supported source, else the family's default
    head (causal LM for GPT-2/Llama, seq2seq LM for Marian/BART, the bare model for BERT/ViT).
    """
    if task != "auto" and task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose 'auto' or one of {', '.join(TASKS)}.")
    load_kwargs = dict(trust_remote_code=False)
    if gguf_file:
        load_kwargs["gguf_file"] = gguf_file
    try:
        config = read_model_config(src, **load_kwargs)
    except (OSError, ValueError) as error:
        raise _source_load_error(src, error, gguf_file) from error
    if config.model_type not in SOURCE_FAMILIES:
        raise UnsupportedConversionError(
            f"{src!r} is a {config.model_type!r} model; convertible model types are {', '.join(SOURCE_FAMILIES)}."
        )
    if task == "auto":
        architecture = (config.architectures or [None])[0]
        if architecture in SUPPORTED_SOURCES:
            loader = getattr(transformers, architecture)
        else:
            loader = TASKS[SOURCE_FAMILIES[config.model_type].default_task]
    else:
        loader = TASKS[task]
    try:
        return loader.from_pretrained(src, **load_kwargs)
    except OSError as error:
        raise _source_load_error(src, error, gguf_file) from error


def _save_preprocessor(src: str, out_dir: str, is_text: bool, gguf_file: str | None) -> None:
    """Copy the source's tokenizer (text) or image processor (ViT) into out_dir when src has one."""
    kwargs = dict(trust_remote_code=False)
    try:
        if is_text:
            if gguf_file:
                kwargs["gguf_file"] = gguf_file  # transformers rebuilds the tokenizer from the GGUF metadata
            processor = AutoTokenizer.from_pretrained(src, **kwargs)
        else:
            processor = AutoImageProcessor.from_pretrained(src, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        # A checkpoint without tokenizer files is normal (e.g. weights-only folders); say so and go on.
        kind = "tokenizer" if is_text else "image processor"
        logger.warning(f"No {kind} saved: {src!r} has none that loads ({type(error).__name__}: {error}).")
        return
    processor.save_pretrained(out_dir)
    logger.info(f"Saved the source's {type(processor).__name__} to {out_dir}.")


# sentence-transformers keeps its pipeline beside the transformers files: modules.json lists the modules (the
# transformer at path "", then e.g. 1_Pooling/, 2_Normalize/), and sentence_*config.json files hold settings such as
# max_seq_length. Without them SentenceTransformer(folder) guesses a plain mean-pooling pipeline over 512 tokens.
SENTENCE_TRANSFORMERS_INDEX = "modules.json"


def _copy_sentence_transformers_modules(src: str, out_dir: str) -> list[str]:
    """Copy a sentence-transformers folder's module files from `src` to `out_dir`; returns what was copied."""
    index = os.path.join(src, SENTENCE_TRANSFORMERS_INDEX)
    if not os.path.isfile(index):
        return []
    with open(index, encoding="utf-8") as handle:
        modules = json.load(handle)
    copied = [SENTENCE_TRANSFORMERS_INDEX]
    shutil.copyfile(index, os.path.join(out_dir, SENTENCE_TRANSFORMERS_INDEX))
    for name in sorted(os.listdir(src)):
        if name.startswith("sentence_") and name.endswith("config.json") or name == "config_sentence_transformers.json":
            shutil.copyfile(os.path.join(src, name), os.path.join(out_dir, name))
            copied.append(name)
    for module in modules:
        path = os.path.normpath(module.get("path") or "")
        if path in ("", ".") or path.startswith("..") or os.path.isabs(path):
            continue  # the transformer itself (the converted model), or a path outside the folder
        source_path = os.path.join(src, path)
        if os.path.isdir(source_path):
            shutil.copytree(source_path, os.path.join(out_dir, path), dirs_exist_ok=True)
            copied.append(path + "/")
    logger.info(f"Copied the sentence-transformers modules of {src!r}: {', '.join(copied)}.")
    return copied


def save_conversion(
    zoo_model: PreTrainedModel, out_dir: str, *, src: str | None = None, gguf_file: str | None = None
) -> str:
    """Save a converted model (safetensors, plus generation_config.json where it generates) to `out_dir`, with the
    tokenizer (text families) or image processor (ViT) of `src` when `src` has one that loads.
    """
    os.makedirs(out_dir, exist_ok=True)
    zoo_model.save_pretrained(out_dir, safe_serialization=True)
    if src is not None:
        _save_preprocessor(src, out_dir, not isinstance(zoo_model.config, ZooViTConfig), gguf_file)
        if os.path.isdir(src):
            _copy_sentence_transformers_modules(src, out_dir)
    return out_dir


def convert_checkpoint(src: str, out_dir: str, *, gguf_file: str | None = None, task: str = "auto") -> str:
    """Load `src` (a local folder or Hub id) with transformers, convert it, and save the zoo model (safetensors),
    its generation config where it generates, and the source's tokenizer or image processor to `out_dir`.

    Returns `out_dir`. `gguf_file` names a GGUF file inside `src` (dequantised by transformers on load); `task`
    picks the head to load (see `load_source_model`).
    """
    source_model = load_source_model(src, task=task, gguf_file=gguf_file)
    zoo_model = convert_model(source_model)
    save_conversion(zoo_model, out_dir, src=src, gguf_file=gguf_file)
    logger.info(f"Converted {type(source_model).__name__} from {src!r} to {type(zoo_model).__name__} in {out_dir}.")
    return out_dir


# ================================================================================================ verification
def random_inputs(source_model: PreTrainedModel, *, seed: int = 0, batch_size: int = 2, length: int = 12) -> dict:
    """A fixed random batch the source model accepts: token ids with a right-padded second row (where padding is
    meaningful), or pixel values for ViT. Used by the CLI to compare a conversion against its source.
    """
    generator = torch.Generator().manual_seed(seed)
    config = source_model.config
    if config.model_type == "vit":
        size = config.image_size
        pixel_values = torch.randn(batch_size, config.num_channels, size, size, generator=generator)
        return {"pixel_values": pixel_values.to(source_model.device)}

    pad_token_id = config.pad_token_id
    if type(source_model).__name__.endswith("ForSequenceClassification") and config.model_type in ("gpt2", "llama"):
        if pad_token_id is None:
            # These heads find the last token through pad_token_id and refuse batches without one.
            batch_size = 1
    input_ids = torch.randint(0, config.vocab_size, (batch_size, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if batch_size > 1:
        attention_mask[1, length - length // 3 :] = 0  # right padding: no query row is fully masked
    if pad_token_id is not None:
        # Real tokens never equal the pad id, padded ones always do (decoder classifiers look for it).
        input_ids[input_ids == pad_token_id] = (pad_token_id + 1) % config.vocab_size
        input_ids[attention_mask == 0] = pad_token_id
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if config.is_encoder_decoder:
        decoder_shape = (batch_size, length // 2)
        inputs["decoder_input_ids"] = torch.randint(0, config.vocab_size, decoder_shape, generator=generator)
    return {name: tensor.to(source_model.device) for name, tensor in inputs.items()}


# Output fields compared between source and zoo, when both models return them.
COMPARED_OUTPUTS = ("logits", "start_logits", "end_logits", "last_hidden_state", "pooler_output")


@torch.no_grad()
def compare_outputs(source_model: PreTrainedModel, zoo_model: PreTrainedModel, inputs: dict) -> dict[str, float]:
    """Max |difference| per output field on `inputs`, both models run in eval mode. Pass float32 models: the
    project's 1e-5 bar is meant for float32 outputs.
    """
    was_training = source_model.training, zoo_model.training
    source_model.eval()
    zoo_model.eval()
    try:
        source_out, zoo_out = source_model(**inputs), zoo_model(**inputs)
    finally:
        source_model.train(was_training[0])
        zoo_model.train(was_training[1])
    differences = {}
    for field in COMPARED_OUTPUTS:
        if field == "pooler_output" and getattr(zoo_model.base_model, "pooler", None) is None:
            continue  # the zoo pools without a dense layer (ViT): not a converted output
        source_value, zoo_value = getattr(source_out, field, None), getattr(zoo_out, field, None)
        if source_value is None or zoo_value is None:
            continue
        differences[field] = (source_value.float() - zoo_value.float()).abs().max().item()
    return differences
