"""transformer-zoo: the classic transformer families as Hugging Face models.

Importing the package registers every config, model and the ViT image processor with transformers' Auto classes,
so `AutoModel.from_pretrained(folder)` loads zoo checkpoints without `trust_remote_code`.
"""

import importlib.util

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_zoo_common import ZooConfig, ZooTextConfig
from .configuration_zoo_decoder import ZooDecoderConfig
from .configuration_zoo_encoder import ZooEncoderConfig
from .configuration_zoo_seq2seq import ZooSeq2SeqConfig
from .configuration_zoo_vit import ZooViTConfig
from .image_processing_zoo_vit import ZooViTImageProcessor
from .modeling_zoo_decoder import (
    ZooDecoderForCausalLM,
    ZooDecoderForSequenceClassification,
    ZooDecoderModel,
    ZooDecoderPreTrainedModel,
)
from .modeling_zoo_memory import free_reused_memory, set_memory_reuse
from .modeling_zoo_encoder import (
    ZooEncoderForMaskedLM,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
    ZooEncoderPreTrainedModel,
)
from .modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration, ZooSeq2SeqModel, ZooSeq2SeqPreTrainedModel
from .modeling_zoo_vit import ZooViTForImageClassification, ZooViTModel, ZooViTPreTrainedModel


__version__ = "0.1.0"

# (config, [(auto class, model class), ...]) per family: the single source for registration.
FAMILIES = {
    "zoo_encoder": (
        ZooEncoderConfig,
        [
            (AutoModel, ZooEncoderModel),
            (AutoModelForMaskedLM, ZooEncoderForMaskedLM),
            (AutoModelForSequenceClassification, ZooEncoderForSequenceClassification),
            (AutoModelForTokenClassification, ZooEncoderForTokenClassification),
            (AutoModelForQuestionAnswering, ZooEncoderForQuestionAnswering),
        ],
    ),
    "zoo_decoder": (
        ZooDecoderConfig,
        [
            (AutoModel, ZooDecoderModel),
            (AutoModelForCausalLM, ZooDecoderForCausalLM),
            (AutoModelForSequenceClassification, ZooDecoderForSequenceClassification),
        ],
    ),
    "zoo_seq2seq": (
        ZooSeq2SeqConfig,
        [(AutoModel, ZooSeq2SeqModel), (AutoModelForSeq2SeqLM, ZooSeq2SeqForConditionalGeneration)],
    ),
    "zoo_vit": (
        ZooViTConfig,
        [(AutoModel, ZooViTModel), (AutoModelForImageClassification, ZooViTForImageClassification)],
    ),
}


def _register() -> None:
    for model_type, (config_class, models) in FAMILIES.items():
        AutoConfig.register(model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models:
            auto_class.register(config_class, model_class, exist_ok=True)
    AutoImageProcessor.register(ZooViTConfig, image_processor_classes={"pil": ZooViTImageProcessor}, exist_ok=True)


_register()

if importlib.util.find_spec("peft") is not None:
    from .peft_defaults import register_peft_defaults

    register_peft_defaults()

__all__ = [
    "FAMILIES",
    "ZooConfig",
    "ZooTextConfig",
    "ZooDecoderConfig",
    "ZooDecoderForCausalLM",
    "ZooDecoderForSequenceClassification",
    "ZooDecoderModel",
    "ZooDecoderPreTrainedModel",
    "ZooEncoderConfig",
    "ZooEncoderForMaskedLM",
    "ZooEncoderForQuestionAnswering",
    "ZooEncoderForSequenceClassification",
    "ZooEncoderForTokenClassification",
    "ZooEncoderModel",
    "ZooEncoderPreTrainedModel",
    "ZooSeq2SeqConfig",
    "ZooSeq2SeqForConditionalGeneration",
    "ZooSeq2SeqModel",
    "ZooSeq2SeqPreTrainedModel",
    "ZooViTConfig",
    "ZooViTForImageClassification",
    "ZooViTImageProcessor",
    "ZooViTModel",
    "ZooViTPreTrainedModel",
    "free_reused_memory",
    "set_memory_reuse",
]
