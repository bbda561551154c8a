"""transformers' own common model tests (ModelTesterMixin, ConfigTester) on every zoo family and preset, and, as a
control, on transformers' own GPT-2, Llama, BERT, Marian and ViT through the same testers.

The test files are transformers' own, unmodified, from the PyPI source distribution of the installed version
(scripts/transformers_tests.py; hashes in tests/transformers_common/SOURCES.json). A tester here is what
transformers' tests/models/<name>/test_modeling_<name>.py writes for its own models: a small config, inputs, the
classes under test. The testers skip nothing themselves: every skip is one of transformers' own, with its reason, and
the skips are counted by reason at the end of the run (tests/conftest.py).

transformers lists each of its heads by task in `MODEL_FOR_*_MAPPING_NAMES`, and the common tests read those lists
to know which inputs (labels, positions) a class takes and which task checks apply (`shift_labels` for causal LM
heads, ...). The zoo's heads are listed there for the duration of these tests, as a model inside transformers would
be, so the same checks reach them.
"""

import importlib.metadata
import sys
import unittest
from pathlib import Path

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers.utils import logging as transformers_logging


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import transformers_tests  # noqa: E402  (scripts/transformers_tests.py)


TRANSFORMERS_VERSION = importlib.metadata.version("transformers")
sys.path.insert(0, str(transformers_tests.ensure_materialised(TRANSFORMERS_VERSION)))

from upstream_tests.generation.test_utils import GenerationTesterMixin  # noqa: E402
from upstream_tests.test_configuration_common import ConfigTester  # noqa: E402
from upstream_tests.test_modeling_common import (  # noqa: E402
    ModelTesterMixin,
    floats_tensor,
    ids_tensor,
    random_attention_mask,
)

import transformer_zoo as tz  # noqa: E402


# The zoo's heads by transformers' task lists (see the module docstring).
ZOO_TASKS = {
    "MODEL_MAPPING_NAMES": {"zoo_decoder": "ZooDecoderModel", "zoo_encoder": "ZooEncoderModel",
                            "zoo_seq2seq": "ZooSeq2SeqModel", "zoo_vit": "ZooViTModel"},
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": {"zoo_decoder": "ZooDecoderForCausalLM"},
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": {"zoo_encoder": "ZooEncoderForMaskedLM"},
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": {"zoo_decoder": "ZooDecoderForSequenceClassification",
                                                        "zoo_encoder": "ZooEncoderForSequenceClassification"},
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": {"zoo_encoder": "ZooEncoderForTokenClassification"},
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": {"zoo_encoder": "ZooEncoderForQuestionAnswering"},
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": {"zoo_seq2seq": "ZooSeq2SeqForConditionalGeneration"},
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": {"zoo_vit": "ZooViTForImageClassification"},
}


@pytest.fixture(autouse=True)
def transformers_default_verbosity():
    """Some common tests read transformers' warnings (CaptureLogger); a test elsewhere in the same process may have
    lowered the verbosity (the adaptation recipe's workers do), so each test here starts from the default."""
    previous = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    yield
    transformers_logging.set_verbosity(previous)


@pytest.fixture(autouse=True, scope="module")
def zoo_heads_in_transformers_task_lists():
    with pytest.MonkeyPatch.context() as patch:
        for mapping, entries in ZOO_TASKS.items():
            for model_type, class_name in entries.items():
                patch.setitem(getattr(modeling_auto, mapping), model_type, class_name)
        yield


# ---------------------------------------------------------------------------------------------------- testers
class TextModelTester:
    """Token inputs for an encoder or a decoder: what transformers' BERT, GPT-2 and Llama testers build."""

    def __init__(self, parent, make_config, batch_size=3, seq_length=7, vocab_size=99, token_types=0):
        self.parent, self.make_config = parent, make_config
        self.batch_size, self.seq_length, self.vocab_size = batch_size, seq_length, vocab_size
        self.token_types, self.is_training = token_types, True
        config = self.get_config()
        self.hidden_size, self.num_hidden_layers = config.hidden_size, config.num_hidden_layers
        self.num_attention_heads = config.num_attention_heads

    def get_config(self):
        # num_labels stays at its default (2), as in transformers' testers: a QA head has two outputs.
        return self.make_config(vocab_size=self.vocab_size)

    def prepare_config_and_inputs_for_common(self):
        inputs = {"input_ids": ids_tensor([self.batch_size, self.seq_length], self.vocab_size),
                  "attention_mask": random_attention_mask([self.batch_size, self.seq_length])}
        if self.token_types:
            inputs["token_type_ids"] = ids_tensor([self.batch_size, self.seq_length], self.token_types)
        return self.get_config(), inputs


class Seq2SeqModelTester(TextModelTester):
    """Source and target tokens: what transformers' Marian and BART testers build."""

    def __init__(self, parent, make_config, **kwargs):
        super().__init__(parent, make_config, **kwargs)
        # Source and target of one length, as transformers' Marian tester (its common tests build decoder masks and
        # labels from the source's shape).
        self.encoder_seq_length = self.decoder_seq_length = self.decoder_key_length = self.seq_length

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        # Ids from 3 on: 0-2 are the special tokens (pad, bos/decoder start, eos), as Marian's tester avoids them.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        decoder_input_ids = ids_tensor([self.batch_size, self.decoder_seq_length], self.vocab_size).clamp(3)
        return config, {"input_ids": input_ids, "decoder_input_ids": decoder_input_ids,
                        "attention_mask": torch.ones_like(input_ids),
                        "decoder_attention_mask": torch.ones_like(decoder_input_ids)}


class ImageModelTester:
    """Pixel inputs: what transformers' ViT tester builds."""

    def __init__(self, parent, make_config, batch_size=3, image_size=16, patch_size=4, num_labels=3):
        self.parent, self.make_config = parent, make_config
        self.batch_size, self.image_size, self.patch_size = batch_size, image_size, patch_size
        self.num_labels, self.is_training = num_labels, True
        config = self.get_config()
        self.num_channels = config.num_channels
        self.hidden_size, self.num_hidden_layers = config.hidden_size, config.num_hidden_layers
        self.num_attention_heads = config.num_attention_heads
        prefix_tokens = getattr(config, "num_prefix_tokens", 1)
        self.seq_length = (image_size // patch_size) ** 2 + prefix_tokens
        # Read by the eager/SDPA test for heads that take a patch mask (ViTModel's bool_masked_pos): one entry per
        # patch, without the class token.
        self.mask_length = (image_size // patch_size) ** 2
        self.num_masks = self.mask_length // 2

    def get_config(self):
        return self.make_config(image_size=self.image_size, patch_size=self.patch_size, num_labels=self.num_labels)

    def prepare_config_and_inputs_for_common(self):
        pixels = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return self.get_config(), {"pixel_values": pixels}


class CommonTests(ModelTesterMixin):
    """ModelTesterMixin plus ConfigTester for one family and preset; subclasses name them."""

    config_class = None
    model_tester_class = TextModelTester
    # transformers runs this test only for models it has fixed (dated by the config file's copyright line) unless a
    # tester asks for it; every zoo family and control model asks.
    test_can_init_all_missing_weights_before_2023 = True
    tester_kwargs: dict = {}
    config_tester_kwargs: dict = {}

    @staticmethod
    def make_config(**overrides):
        raise NotImplementedError

    def setUp(self):
        self.model_tester = self.model_tester_class(self, type(self).make_config, **self.tester_kwargs)
        self.config_tester = ConfigTester(self, config_class=self.config_class, **self.config_tester_kwargs)

    def test_config(self):
        self.config_tester.run_common_tests()


def zoo_preset(config_class, preset, **fixed):
    def make_config(**overrides):
        return config_class.from_preset(preset, **{**fixed, **overrides})
    return staticmethod(make_config)


TINY_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


# ------------------------------------------------------------------------------------------------ zoo families
class TestZooDecoderGPT2Style(CommonTests, GenerationTesterMixin, unittest.TestCase):
    config_class = tz.ZooDecoderConfig
    all_model_classes = (tz.ZooDecoderModel, tz.ZooDecoderForCausalLM, tz.ZooDecoderForSequenceClassification)
    make_config = zoo_preset(tz.ZooDecoderConfig, "tiny", **TINY_TEXT, pad_token_id=0)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestZooDecoderLlamaStyle(CommonTests, GenerationTesterMixin, unittest.TestCase):
    config_class = tz.ZooDecoderConfig
    all_model_classes = (tz.ZooDecoderModel, tz.ZooDecoderForCausalLM, tz.ZooDecoderForSequenceClassification)
    make_config = zoo_preset(tz.ZooDecoderConfig, "tiny-llama", **TINY_TEXT, num_key_value_heads=2, pad_token_id=0)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


ENCODER_CLASSES = (tz.ZooEncoderModel, tz.ZooEncoderForMaskedLM, tz.ZooEncoderForSequenceClassification,
                   tz.ZooEncoderForTokenClassification, tz.ZooEncoderForQuestionAnswering)


class TestZooEncoderBERTStyle(CommonTests, unittest.TestCase):
    config_class = tz.ZooEncoderConfig
    all_model_classes = ENCODER_CLASSES
    make_config = zoo_preset(tz.ZooEncoderConfig, "tiny", **TINY_TEXT)
    tester_kwargs = dict(token_types=2)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestZooEncoderModern(CommonTests, unittest.TestCase):
    config_class = tz.ZooEncoderConfig
    all_model_classes = ENCODER_CLASSES
    make_config = zoo_preset(tz.ZooEncoderConfig, "tiny-modern", **TINY_TEXT)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestZooSeq2Seq(CommonTests, GenerationTesterMixin, unittest.TestCase):
    config_class = tz.ZooSeq2SeqConfig
    all_model_classes = (tz.ZooSeq2SeqModel, tz.ZooSeq2SeqForConditionalGeneration)
    is_encoder_decoder = True
    make_config = zoo_preset(tz.ZooSeq2SeqConfig, "tiny", hidden_size=32, encoder_layers=2, decoder_layers=2,
                             num_attention_heads=4, intermediate_size=37)
    model_tester_class = Seq2SeqModelTester
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestZooViT(CommonTests, unittest.TestCase):
    config_class = tz.ZooViTConfig
    all_model_classes = (tz.ZooViTModel, tz.ZooViTForImageClassification)
    make_config = zoo_preset(tz.ZooViTConfig, "tiny", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=37)
    model_tester_class = ImageModelTester
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4, has_text_modality=False)
    test_resize_embeddings = False  # no token vocabulary, as transformers' ViT tester says

    def test_model_get_set_embeddings(self):
        """The input embedding is a patch projection, not an nn.Embedding: transformers' own ViT tester replaces this
        common test with the same check on an nn.Module."""
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIsInstance(model.get_input_embeddings(), torch.nn.Module)
            output_embeddings = model.get_output_embeddings()
            self.assertTrue(output_embeddings is None or isinstance(output_embeddings, torch.nn.Linear))


# ------------------------------------------------------------------------------- control: transformers' own models
# The same testers on transformers' own models of each family: they must pass, so that a failure above is known to be
# the zoo's and not the harness's.
def transformers_config(config_class, **fixed):
    def make_config(**overrides):
        return config_class(**{**fixed, **overrides})
    return staticmethod(make_config)


class TestControlGPT2(CommonTests, GenerationTesterMixin, unittest.TestCase):
    from transformers import GPT2Config as config_class
    from transformers import GPT2ForSequenceClassification, GPT2LMHeadModel, GPT2Model

    all_model_classes = (GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification)
    make_config = transformers_config(config_class, n_embd=32, n_layer=2, n_head=4, n_inner=37, pad_token_id=0)
    config_tester_kwargs = dict(n_embd=32, n_head=4)


class TestControlLlama(CommonTests, GenerationTesterMixin, unittest.TestCase):
    from transformers import LlamaConfig as config_class
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel

    all_model_classes = (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification)
    make_config = transformers_config(config_class, **TINY_TEXT, num_key_value_heads=2, pad_token_id=0)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestControlBERT(CommonTests, unittest.TestCase):
    from transformers import BertConfig as config_class
    from transformers import (
        BertForMaskedLM,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertModel,
    )

    all_model_classes = (BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
                         BertForQuestionAnswering)
    make_config = transformers_config(config_class, **TINY_TEXT, type_vocab_size=2)
    tester_kwargs = dict(token_types=2)
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4)


class TestControlMarian(CommonTests, GenerationTesterMixin, unittest.TestCase):
    from transformers import MarianConfig as config_class
    from transformers import MarianModel, MarianMTModel

    all_model_classes = (MarianModel, MarianMTModel)
    is_encoder_decoder = True
    make_config = transformers_config(config_class, d_model=32, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                                      decoder_ffn_dim=37, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    model_tester_class = Seq2SeqModelTester
    config_tester_kwargs = dict(d_model=32, encoder_attention_heads=4, decoder_attention_heads=4)


class TestControlViT(CommonTests, unittest.TestCase):
    from transformers import ViTConfig as config_class
    from transformers import ViTForImageClassification, ViTModel

    all_model_classes = (ViTModel, ViTForImageClassification)
    make_config = transformers_config(config_class, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=37)
    model_tester_class = ImageModelTester
    config_tester_kwargs = dict(hidden_size=32, num_attention_heads=4, has_text_modality=False)
    test_resize_embeddings = False
    test_model_get_set_embeddings = TestZooViT.test_model_get_set_embeddings
