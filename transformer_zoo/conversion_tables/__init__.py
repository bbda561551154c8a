"""The mapping between transformers' native architectures and the zoo families, one table per native format, read in
both directions: `transformer_zoo.convert` (native -> zoo) and `transformer_zoo.export` (zoo -> native) share it.

Per native format (`NativeFormat`):
- `config_to_zoo`: the native config -> zoo config fields. The zoo fields the native architecture fixes (its norm
  placement, position scheme, biases...) are a plain dict, `fixed`, so an export can name every zoo field that keeps
  a config from the format; `config_from_zoo` is the inverse for the fields that vary.
- parameter renaming rules (`Rule`): name templates with named slots such as "{layer}", matched either way, and the
  few reshapes that need more than a rename as a pair of functions (to the zoo, back to the native layout).

One file per format (bert, gpt2, llama, vit, marian, bart; fairseq holds what Marian and BART share, common the
rule machinery): a new format is one new file and one line in NATIVE_FORMATS.

This module is a library helper, not remote code: it is not copied into saved checkpoints.
"""

from transformers import PreTrainedModel

from ..modeling_zoo_decoder import ZooDecoderForCausalLM, ZooDecoderForSequenceClassification, ZooDecoderModel
from ..modeling_zoo_encoder import (
    ZooEncoderForMaskedLM,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from ..modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration, ZooSeq2SeqModel
from ..modeling_zoo_vit import ZooViTForImageClassification, ZooViTModel
from . import bart, bert, gpt2, llama, marian, vit
from .common import (
    LAYOUT_ONLY_RESHAPES,
    NativeFormat,
    Rule,
    UnsupportedConversionError,
    find_rule,
)


NATIVE_FORMATS = {module.FORMAT.model_type: module.FORMAT for module in (bert, gpt2, llama, vit, marian, bart)}
SOURCE_FAMILIES = NATIVE_FORMATS

# Native class name -> (native model_type, zoo class). Exact names: a subclass or a relative (RoBERTa, mBART) may
# differ in ways these tables do not know about. Read backwards, it is the export's class table.
SUPPORTED_SOURCES: dict[str, tuple[str, type[PreTrainedModel]]] = {
    "BertModel": ("bert", ZooEncoderModel),
    "BertForMaskedLM": ("bert", ZooEncoderForMaskedLM),
    "BertForSequenceClassification": ("bert", ZooEncoderForSequenceClassification),
    "BertForTokenClassification": ("bert", ZooEncoderForTokenClassification),
    "BertForQuestionAnswering": ("bert", ZooEncoderForQuestionAnswering),
    "GPT2Model": ("gpt2", ZooDecoderModel),
    "GPT2LMHeadModel": ("gpt2", ZooDecoderForCausalLM),
    "GPT2ForSequenceClassification": ("gpt2", ZooDecoderForSequenceClassification),
    "LlamaModel": ("llama", ZooDecoderModel),
    "LlamaForCausalLM": ("llama", ZooDecoderForCausalLM),
    "LlamaForSequenceClassification": ("llama", ZooDecoderForSequenceClassification),
    "ViTModel": ("vit", ZooViTModel),
    "ViTForImageClassification": ("vit", ZooViTForImageClassification),
    "MarianModel": ("marian", ZooSeq2SeqModel),
    "MarianMTModel": ("marian", ZooSeq2SeqForConditionalGeneration),
    "BartModel": ("bart", ZooSeq2SeqModel),
    "BartForConditionalGeneration": ("bart", ZooSeq2SeqForConditionalGeneration),
}
for _class_name, (_model_type, _zoo_class) in SUPPORTED_SOURCES.items():
    NATIVE_FORMATS[_model_type].classes[_class_name] = _zoo_class


def native_class_name(model_type: str, zoo_class: type) -> str | None:
    """The transformers class that a zoo class exports to in one format (None when the format has no such head)."""
    for class_name, candidate in NATIVE_FORMATS[model_type].classes.items():
        if candidate is zoo_class:
            return class_name
    return None


def _shared_config_kwargs(config, native_format: NativeFormat) -> dict:
    """Labels and special tokens, copied as they are."""
    kwargs = dict(id2label=config.id2label, label2id=config.label2id, problem_type=config.problem_type)
    if native_format.has_token_ids:
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            kwargs[name] = getattr(config, name, None)
    return kwargs


def zoo_config_for(native_config, native_format: NativeFormat):
    kwargs = {**native_format.config_to_zoo(native_config), **_shared_config_kwargs(native_config, native_format)}
    return native_format.zoo_config_class(**kwargs)


def native_config_for(zoo_config, native_format: NativeFormat):
    """The native config that expresses `zoo_config` (see transformer_zoo.export for the check that it does)."""
    kwargs = {**native_format.config_from_zoo(zoo_config), **_shared_config_kwargs(zoo_config, native_format)}
    return native_format.native_config_class(**kwargs)


__all__ = [
    "LAYOUT_ONLY_RESHAPES", "NATIVE_FORMATS", "NativeFormat", "Rule", "SOURCE_FAMILIES", "SUPPORTED_SOURCES",
    "UnsupportedConversionError", "find_rule", "native_class_name", "native_config_for", "zoo_config_for",
]
