"""Checks on what a zoo forward is given: token ids, labels, keyword arguments. Each names the problem and the fix in
one line, where PyTorch would otherwise fail deep inside an embedding or a loss (or, for a misspelt keyword, not at
all).

This file is copied into saved checkpoints for `trust_remote_code`: it imports siblings only as `from .x import y`.
"""

import inspect
import json
import operator
import os
import re
from collections import defaultdict

import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from torch import nn
from transformers import AutoConfig
from transformers.loss.loss_utils import LOSS_MAPPING, fixed_cross_entropy
from transformers.utils import TransformersKwargs, logging


logger = logging.get_logger(__name__)


def values_are_checkable(tensor: torch.Tensor) -> bool:
    """Whether a check on a tensor's *values* is free: on CPU in eager mode. On an accelerator it would add a host
    sync to every step (CUDA's own kernels raise device-side asserts for out-of-range ids instead), and under
    torch.compile it would break the graph, so there only shapes and dtypes are checked."""
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


def check_token_ids(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    """[batch, sequence] integer ids inside the vocabulary, at least one of them."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor of token ids, got {type(ids).__name__}; the tokenizer's "
                        "return_tensors='pt' gives one.")
    if ids.ndim != 2:
        hint = " For one sequence use ids.unsqueeze(0)." if ids.ndim == 1 else ""
        raise ValueError(f"{name} must be 2-D [batch, sequence], got shape {tuple(ids.shape)}.{hint}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids (torch.long), got {ids.dtype}; convert with "
                         f"{name}.long() if the values are ids, or pass embeddings as inputs_embeds.")
    if ids.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}): pass at least one token per sequence.")
    if values_are_checkable(ids):
        low, high = (int(value) for value in torch.aminmax(ids))
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} holds id {high if high >= vocab_size else low}, outside the vocabulary of {vocab_size} "
                "(ids 0..vocab_size-1). The tokenizer and the model do not match: use the model's own tokenizer, "
                "or resize the embeddings (model.resize_token_embeddings(len(tokenizer))).")


def check_inputs_embeds(embeds: torch.Tensor, hidden_size: int, name: str = "inputs_embeds",
                        token_dtype: torch.dtype | None = None) -> None:
    """[batch, sequence >= 1, hidden_size] floating-point embeddings that `token_dtype` (what the model's own token
    embedding returns, which they replace) holds exactly, so the caller may cast them to it (bfloat16 into a float32
    model); under autocast, which casts for each layer, any floating dtype."""
    if not isinstance(embeds, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor [batch, sequence, hidden_size], got {type(embeds).__name__}.")
    if embeds.ndim != 3 or embeds.shape[1] == 0 or embeds.shape[2] != hidden_size:
        raise ValueError(
            f"{name} must be [batch, sequence, hidden_size={hidden_size}] with at least one position, got shape "
            f"{tuple(embeds.shape)}; model.get_input_embeddings()(input_ids) makes them.")
    if not embeds.is_floating_point():
        raise ValueError(f"{name} must be floating-point embeddings, got {embeds.dtype}; token ids go in "
                         f"{name.replace('inputs_embeds', 'input_ids')} instead.")
    if token_dtype is not None and torch.promote_types(embeds.dtype, token_dtype) != token_dtype \
            and not torch.is_autocast_enabled(embeds.device.type):
        # Compared with the embedding's dtype, not "the model's": a quantized model or one that keeps some modules
        # in float32 has no single dtype, but its layers take whatever its own token embedding gives them. Wider
        # inputs (float32 into bfloat16) failed inside the first layer; casting them down is the user's choice.
        raise ValueError(f"{name} are {embeds.dtype}, but the model's token embeddings are {token_dtype}: pass "
                         f"{name}.to({token_dtype}) (or run under torch.autocast).")


def check_position_ids(position_ids: torch.Tensor, batch_size: int, query_length: int,
                       name: str = "position_ids") -> None:
    """[batch or 1, new tokens] non-negative integer positions: one per token of this call (a cache's tokens have
    theirs already)."""
    if not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor of integer positions, got {type(position_ids).__name__}.")
    if position_ids.is_floating_point() or position_ids.is_complex() or position_ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer positions (torch.long), got {position_ids.dtype}.")
    if position_ids.ndim != 2 or position_ids.shape[0] not in (1, batch_size) or position_ids.shape[1] != query_length:
        hint = f" For positions shared by the batch use {name}.unsqueeze(0)." if position_ids.ndim == 1 else ""
        raise ValueError(
            f"{name} has shape {tuple(position_ids.shape)}, expected [batch or 1, new tokens] = [{batch_size} or 1, "
            f"{query_length}]: one position per token of this call.{hint}")
    if values_are_checkable(position_ids) and position_ids.numel():
        low = int(position_ids.min())
        if low < 0:
            raise ValueError(f"{name} holds {low}: positions count from 0. Positions derived from an attention mask "
                             "should be mask.cumsum(-1) - 1 with the padded places set to 0 or 1.")


def check_attention_mask(mask, batch_size: int, query_length: int, key_length: int,
                         name: str = "attention_mask", cache_key_length: int | None = None) -> None:
    """A 2-D [batch, key tokens] mask of 1 (attend) and 0 (padding), as transformers' models read it, or a 4-D
    [batch or 1, heads or 1, new tokens, keys] one, which transformers' mask functions pass through as given; its keys
    are the cached and new tokens, or the cache's whole length (`cache_key_length`: a static cache's). Anything else
    (a flex BlockMask, transformers' per-layer-type dict) is transformers' own to read."""
    if not isinstance(mask, torch.Tensor):
        return
    # A static cache counts its tokens in a tensor: comparing with it would sync a GPU, and break a compiled graph.
    keys = sorted({length for length in (key_length, cache_key_length) if isinstance(length, int)})
    if mask.ndim == 4:
        if mask.shape[0] not in (1, batch_size) or mask.shape[2] != query_length or (keys and mask.shape[3] not in keys):
            raise ValueError(
                f"{name} (4-D) has shape {tuple(mask.shape)}, expected [batch or 1, heads or 1, new tokens, keys] = "
                f"[{batch_size} or 1, ..., {query_length}, {' or '.join(map(str, keys)) or 'keys'}].")
        return
    if mask.ndim != 2:
        hint = f" For one sequence use {name}.unsqueeze(0)." if mask.ndim == 1 else ""
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}: it must be 2-D [batch, tokens] (1 = attend, 0 = padding) or 4-D "
            f"[batch, 1, new tokens, keys].{hint}")
    if mask.shape[0] != batch_size or (isinstance(key_length, int) and mask.shape[1] != key_length):
        cached = key_length - query_length if isinstance(key_length, int) else "cached"
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}, expected [batch, cached + new tokens] = [{batch_size}, "
            f"{cached} + {query_length}]: one entry per key position, the cached ones included.")
    if mask.dtype != torch.bool and values_are_checkable(mask):
        # transformers casts a 2-D mask to bool: an additive mask (0 keep, -10000 or -inf padding) would be read
        # inverted, and nothing would say so.
        if mask.is_floating_point():
            stray = mask[(mask != 0) & (mask != 1)]
        else:  # integers: one reduction (a tokenizer's mask is checked at every decoding step)
            low, high = (int(value) for value in torch.aminmax(mask))
            stray = mask[(mask < 0) | (mask > 1)] if low < 0 or high > 1 else mask[:0]
        if stray.numel():
            raise ValueError(
                f"{name} holds {stray[0].item()}: a 2-D mask is 1 for tokens to attend to and 0 for padding. An "
                f"additive mask (0 to keep, a large negative number to mask) would be read inverted; convert it with "
                f"({name} == 0).long().")


def check_prompt_mask(inputs, generate_kwargs: dict) -> None:
    """`generate`'s attention_mask against its prompt: one entry per prompt token. transformers derives the
    positions from the mask before the model sees either, so a mask of another length would fail as a position
    error (or, as a mask of ones, be dropped) instead of naming the mask."""
    mask = generate_kwargs.get("attention_mask")
    prompt = next((value for value in (inputs, generate_kwargs.get("input_ids"), generate_kwargs.get("inputs_embeds"))
                   if isinstance(value, torch.Tensor)), None)
    if isinstance(mask, torch.Tensor) and mask.ndim == 2 and prompt is not None and prompt.ndim >= 2 \
            and tuple(mask.shape) != tuple(prompt.shape[:2]):
        raise ValueError(f"attention_mask has shape {tuple(mask.shape)}, but the prompt is {tuple(prompt.shape[:2])} "
                         "[batch, tokens]: pass the mask the tokenizer returned with the prompt.")


def padding_target_id(config) -> int | None:
    """The pad token id when it is no token a language model learns to predict (not its eos or bos), else None.
    Among the targets it means padding was left in the labels instead of -100; where the pad token doubles as eos
    (GPT-2's usual setup) it is a legitimate target and nothing can be told apart."""
    pad = getattr(config, "pad_token_id", None)
    predicted = set()
    for name in ("eos_token_id", "bos_token_id"):
        value = getattr(config, name, None)
        predicted.update(value if isinstance(value, (list, tuple)) else [value])
    return None if pad is None or pad in predicted else pad


def check_labels(labels: torch.Tensor, *, shape: tuple, num_classes: int | None, name: str = "labels",
                 num_items_in_batch=None, shifted: bool = False, padding_id: int | None = None) -> None:
    """Class-index labels of `shape` in [0, num_classes) or -100 (ignored), not all ignored (`shifted`: the loss
    reads labels[..., 1:], as causal LM does). `padding_id` (see padding_target_id): warn once when it is a target.

    With num_items_in_batch (gradient accumulation) a micro-batch whose labels are all ignored is legitimate: it
    contributes zero to a sum divided by the items of all micro-batches. Without it the mean over no items is NaN.
    """
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(labels).__name__}.")
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(labels.shape)}, expected {tuple(shape)} (one class index per "
                         "predicted position; -100 marks positions without a label).")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be integer class indices (torch.long), got {labels.dtype}.")
    if values_are_checkable(labels) and num_classes is not None:
        counted = labels[..., 1:] if shifted else labels
        kept = counted[counted != -100]
        if kept.numel() == 0 and num_items_in_batch is None:
            raise ValueError(f"every entry of {name} is -100 (ignored): the loss would be NaN and nothing would be "
                             "learnt. Check the label masking (e.g. a prompt mask covering the whole sequence).")
        low, high = (int(value) for value in torch.aminmax(kept)) if kept.numel() else (0, 0)
        if low < 0 or high >= num_classes:
            bad = high if high >= num_classes else low
            raise ValueError(f"{name} holds {bad}, outside 0..{num_classes - 1} (and -100 for ignored positions).")
        if padding_id is not None and bool((kept == padding_id).any()):
            # A warning, not an error: a model may be meant to predict its pad token, though rarely one of its own.
            logger.warning_once(
                f"{name} hold the pad token id {padding_id} as a target, so the loss trains the model to predict "
                "padding. Set padded label positions to -100 (DataCollatorForSeq2Seq and "
                "DataCollatorForLanguageModeling do), unless the pad token is meant to be predicted.")


def classification_problem(config, labels: torch.Tensor) -> str:
    """The loss transformers' ForSequenceClassificationLoss will compute: config.problem_type, or what it infers from
    num_labels and the labels' dtype (and then writes into the config) when that is None."""
    if config.problem_type is not None:
        return config.problem_type
    if config.num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


def check_classification_labels(labels: torch.Tensor, config, batch_size: int, num_items_in_batch=None) -> None:
    """Sequence/image classification labels as transformers' loss reads them for the problem type: class indices
    [batch] (single-label), float targets [batch] (num_labels=1) or [batch, num_labels] (regression), float 0/1
    targets [batch, num_labels] in [0, 1] (multi-label)."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch tensor, got {type(labels).__name__}.")
    num_labels = config.num_labels
    problem = classification_problem(config, labels)
    if problem == "single_label_classification":
        if labels.is_floating_point():
            raise ValueError(f"problem_type='single_label_classification' takes integer class indices [batch], got "
                             f"{labels.dtype} labels; float targets are for regression or multi-label problems.")
        if tuple(labels.shape) == (batch_size, 1):
            labels = labels.view(-1)  # [batch, 1] is read as [batch] by transformers' loss too
        check_labels(labels, shape=(batch_size,), num_classes=num_labels, num_items_in_batch=num_items_in_batch)
        return
    if problem == "regression":
        expected = [(batch_size,), (batch_size, 1)] if num_labels == 1 else [(batch_size, num_labels)]
        reason = ("num_labels=1 makes this a regression head (transformers' rule)" if config.problem_type is None
                  else "problem_type='regression'")
        what = "regression targets"
        fix = (" For single-label classification build the model with num_labels set to the number of classes."
               if config.problem_type is None else "")
    elif problem == "multi_label_classification":
        expected = [(batch_size, num_labels)]
        reason, what, fix = "problem_type='multi_label_classification'", "multi-label 0/1 targets, one per class", ""
    else:
        return  # transformers raises "Invalid problem type" itself
    if not labels.is_floating_point():
        raise ValueError(f"labels are {labels.dtype}, but {reason}, which takes float targets: pass "
                         f"labels.float().{fix}")
    if tuple(labels.shape) not in expected:
        raise ValueError(f"float labels have shape {tuple(labels.shape)}, expected {expected[0]} ({what}); for "
                         "single-label classification pass integer class indices of shape [batch].")
    if problem == "multi_label_classification" and values_are_checkable(labels) and labels.numel():
        low, high = (float(value) for value in torch.aminmax(labels))
        if low < 0 or high > 1:
            raise ValueError(f"labels hold {high if high > 1 else low}, but multi-label targets are probabilities in "
                             "[0, 1] (1: the class applies).")


def check_span_positions(start_positions, end_positions, batch_size: int) -> None:
    """Extractive-QA targets: both or neither, integer [batch] (or [batch, 1]) token indices, none negative. A
    position at or past the sequence length is transformers' documented way to leave an example out of the loss
    (an answer truncated away), so it is allowed."""
    if (start_positions is None) != (end_positions is None):
        given = "start_positions" if end_positions is None else "end_positions"
        raise ValueError(f"only {given} was given: pass both start_positions and end_positions to compute the loss "
                         "(with one of them it would silently not be computed), or neither for inference.")
    for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
        if positions is None:
            continue
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor of token indices, got {type(positions).__name__}.")
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise ValueError(f"{name} must be integer token indices (torch.long), got {positions.dtype}.")
        if tuple(positions.shape) not in ((batch_size,), (batch_size, 1)):
            raise ValueError(f"{name} has shape {tuple(positions.shape)}, expected ({batch_size},): one token index "
                             "per example.")
        if values_are_checkable(positions) and positions.numel() and int(positions.min()) < 0:
            raise ValueError(
                f"{name} holds {int(positions.min())}: token indices count from 0. Mark an unanswerable question "
                "with 0 (the [CLS] position, as SQuAD 2.0 does), or leave an example out of the loss with a "
                "position at or past the sequence length.")


def check_new_vocabulary_size(config, new_num_tokens, pad_to_multiple_of=None) -> None:
    """`resize_token_embeddings(new_num_tokens, pad_to_multiple_of)`: a positive number of tokens (transformers
    would resize to 0, a model no input can reach). A special token id the new size leaves outside the vocabulary
    is warned about, not refused, as transformers does: it only matters once it reaches the model as an input,
    and the inputs are checked then."""
    if new_num_tokens is None:
        return
    try:
        size = operator.index(new_num_tokens)  # int, NumPy and 0-d integer tensors alike
    except TypeError:
        size = None
    if isinstance(new_num_tokens, bool) or size is None or size < 1:
        raise ValueError(f"resize_token_embeddings({new_num_tokens!r}): the new vocabulary must be a positive number "
                         "of tokens, usually len(tokenizer).")
    if pad_to_multiple_of:
        size = -(-size // pad_to_multiple_of) * pad_to_multiple_of
    special_token_ids = getattr(config, "special_token_ids", None)  # text configs; a ViT has no token ids
    for name, token_id in special_token_ids() if special_token_ids else ():
        if 0 <= token_id < config.vocab_size and token_id >= size:
            logger.warning(
                f"resize_token_embeddings({new_num_tokens}): {name}={token_id} falls outside the new vocabulary "
                f"(ids 0..{size - 1}); an input holding it will be refused. Keep at least {token_id + 1} tokens, or "
                f"set the config's {name} to a token the new vocabulary has.")


def _transformers_loss_keywords() -> frozenset:
    """The optional keywords transformers' token losses read: a transformers head passes its **kwargs on to
    `self.loss_function` (LlamaForCausalLM), so Trainer and context-parallel set-ups pass them to the model
    (`shift_labels`, `ignore_index`, `num_items_in_batch`). Read from transformers' own loss functions, so a
    keyword a later version adds is known without a change here."""
    names = set()
    for loss in (LOSS_MAPPING["ForCausalLM"], LOSS_MAPPING["ForMaskedLM"], fixed_cross_entropy):
        for parameter in inspect.signature(loss).parameters.values():
            if parameter.default is not parameter.empty and parameter.kind is not parameter.VAR_KEYWORD:
                names.add(parameter.name)
    return frozenset(names)


# Keywords a zoo forward passes on to the stack besides its own parameters: transformers' TransformersKwargs
# (output flags, num_items_in_batch for the loss, FlashAttention's packed-sequence lengths, ...).
ACCEPTED_FORWARD_KWARGS = frozenset(TransformersKwargs.__annotations__)
# Keywords only a head's loss reads (taken off by take_loss_keywords before the stack sees the rest).
LOSS_KEYWORDS = _transformers_loss_keywords() - ACCEPTED_FORWARD_KWARGS


def take_loss_keywords(module: nn.Module, labels, kwargs: dict, *, shifts_labels: bool = False):
    """Takes transformers' loss keywords (LOSS_KEYWORDS) out of a head's **kwargs and applies them to its labels,
    as transformers' losses do. Returns (labels, shift): the targets the loss reads and whether the loss still
    shifts them by one (causal LM heads, `shifts_labels=True`).

    - `ignore_index`: targets holding it are left out of the loss (the zoo's losses and checks then see -100).
    - `shift_labels`: targets already aligned with the logits (context parallelism shifts before sharding); a
      causal LM head reads them instead of shifting `labels`, and computes the loss from them alone. Heads whose
      labels are aligned already have no use for them: they are named in a warning, not dropped silently.
    """
    ignore_index = kwargs.pop("ignore_index", None)
    shift_labels = kwargs.pop("shift_labels", None)
    shift = shifts_labels
    if shift_labels is not None:
        if shifts_labels:
            labels, shift = shift_labels, False
        else:
            logger.warning_once(f"{type(module).__name__} ignores shift_labels: its labels are aligned with its "
                                "logits already (only causal language-model heads shift). Pass the targets as labels.")
    if ignore_index is not None and ignore_index != -100:
        if labels is None:
            logger.warning_once(f"{type(module).__name__} ignores ignore_index={ignore_index}: it applies to labels, "
                                "and none were given.")
        elif isinstance(labels, torch.Tensor) and not labels.is_floating_point():
            labels = labels.masked_fill(labels == ignore_index, -100)
    return labels, shift


def reject_unknown_kwargs(module: nn.Module, kwargs: dict) -> None:
    """Refuse keywords no part of the model reads. A zoo forward takes **kwargs (transformers' contract), and without
    this check a misspelt or outdated argument (`past_key_value=`, `head_mask=`) would vanish without a trace.
    transformers' loss keywords reaching a stack come from a call on a model without a loss (a base model): accepted,
    as transformers' base models accept them, and named in a warning (taken out of `kwargs`)."""
    for name in sorted(set(kwargs) & LOSS_KEYWORDS):
        kwargs.pop(name)
        logger.warning_once(f"{type(module).__name__} ignores {name}: it computes no loss. Pass it with labels to a "
                            "model with a head (e.g. ...ForCausalLM).")
    unknown = sorted(set(kwargs) - ACCEPTED_FORWARD_KWARGS)
    if unknown:
        raise TypeError(
            f"{type(module).__name__}.forward() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}. "
            f"Besides its named parameters it accepts {', '.join(sorted(ACCEPTED_FORWARD_KWARGS))}, and a head with "
            f"labels also {', '.join(sorted(LOSS_KEYWORDS))}."
        )


# A block's parameters: <stack>.layers.<index>.<rest> (model.layers, model.encoder.layers, vit.layers, ...).
LAYER_KEY = re.compile(r"^(.*\blayers)\.(\d+)\.")


def warn_layer_count_mismatch(model: nn.Module, loading_info: dict, source) -> None:
    """A config whose layer count disagrees with the weights loads, as in transformers (growing or cutting a model
    is a real use), but transformers reports it only as a list of missing or unexpected keys. This names it in one
    line: the layers that start from random weights, or the checkpoint's layers that were dropped, and the field
    that says how many there are."""
    def layer_indices(keys):
        found = defaultdict(set)
        for key in keys:
            if match := LAYER_KEY.match(key):
                found[match.group(1)].add(int(match.group(2)))
        return found

    if getattr(model, "_hf_peft_config_loaded", False):
        return  # the loading report is the adapter's, whose keys say nothing of the base model's layers
    names = [name for name, _ in model.named_parameters()]
    missing_keys = set(loading_info.get("missing_keys", ()))
    in_model = layer_indices(names)
    # A layer counts as absent only when none of its parameters came from the checkpoint.
    loaded = layer_indices(name for name in names if name not in missing_keys)
    unexpected = layer_indices(loading_info.get("unexpected_keys", ()))
    for stack in sorted(set(in_model) | set(unexpected)):
        absent = sorted(in_model.get(stack, set()) - loaded.get(stack, set()))
        dropped = sorted(unexpected.get(stack, set()) - in_model.get(stack, set()))
        if not (absent or dropped):
            continue
        built = len(in_model.get(stack, ()))
        saved = built - len(absent) + len(dropped)
        field = ("encoder_layers" if "encoder" in stack else "decoder_layers") \
            if getattr(model.config, "is_encoder_decoder", False) else "num_hidden_layers"
        consequence = (f"layer(s) {', '.join(map(str, absent))} start from random weights" if absent else
                       f"the checkpoint's layer(s) {', '.join(map(str, dropped))} are not loaded")
        logger.warning(
            f"{source}: the config builds {built} layer(s) in {stack}, but the weights hold {saved}: {consequence}. "
            f"If the checkpoint is a {saved}-layer model, set {field}={saved} in its config.json; growing or "
            "cutting a model on purpose needs no change.")


def is_hub_model_id(name) -> bool:
    """Whether `name` could name a Hub repository ('org/name' or 'name'); a path object or a string that is no
    valid repository id (absolute, './x', 'a/b/c') can only mean a local folder."""
    if not isinstance(name, str):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def check_model_folder(source, *, exists_only: bool = False) -> None:
    """The failures of a local model folder, each in one line, where transformers would misname them: a folder that
    does not exist (transformers reads it as a malformed Hub id), one without config.json, and a config.json without
    `model_type` (transformers then sees the zoo's `auto_map` and asks to trust remote code). A Hub id, or a folder
    that looks right, passes untouched. exists_only: only the first (a model class given `config=` needs no
    config.json, and one whose config.json lacks model_type loads with its own config class, as in transformers)."""
    if not isinstance(source, (str, os.PathLike)):
        return
    folder = os.fspath(source)
    if not os.path.exists(folder):
        if is_hub_model_id(source):
            return
        raise OSError(f"No such folder: {folder}. Give the folder a model was saved to (save_pretrained or a "
                      "recipe's --output_dir), or a Hub id such as 'org/name'.")
    if exists_only or not os.path.isdir(folder):
        return  # a single file (a GGUF, say) is for its loader to judge
    config_file = os.path.join(folder, "config.json")
    if not os.path.isfile(config_file):
        raise OSError(f"{folder} has no config.json, so it is no folder save_pretrained wrote. Give the folder that "
                      "holds the model's config.json and weights.")
    try:
        with open(config_file, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        return  # transformers names an unreadable config.json itself
    if isinstance(saved, dict) and "model_type" not in saved:
        class_ref = str((saved.get("auto_map") or {}).get("AutoConfig", ""))
        family = re.search(r"configuration_(zoo_\w+)\.", class_ref)
        fix = (f'add "model_type": "{family.group(1)}" to it (its auto_map names {class_ref})' if family
               else 'add the model\'s "model_type" to it')
        raise ValueError(f"{config_file} has no \"model_type\", so transformers cannot tell which model it is (with an "
                         f"auto_map it asks to trust remote code instead): {fix}, or re-save the model with "
                         "save_pretrained.")


def read_model_config(source, **kwargs):
    """`AutoConfig.from_pretrained(source, **kwargs)` after `check_model_folder(source)`: what the zoo's scripts and
    recipes use to open a model folder."""
    check_model_folder(source, exists_only=bool(kwargs.get("gguf_file")))  # a GGUF folder has no config.json
    return AutoConfig.from_pretrained(source, **kwargs)
