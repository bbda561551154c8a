"""Parameter counts at the published sizes match transformers' own models (within 1%) and the paper's Transformer
base/big figures (within 5%). Models are built on the meta device, so nothing is allocated."""

import pytest
import torch
import transformers as hf

import transformer_zoo as tz


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() counts a tied weight once


REFERENCE_PAIRS = {
    "bert-base": (lambda: hf.BertModel(hf.BertConfig()), lambda: tz.ZooEncoderModel(tz.ZooEncoderConfig())),
    "bert-large": (
        lambda: hf.BertModel(
            hf.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
        ),
        lambda: tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("bert-large")),
    ),
    "gpt2": (lambda: hf.GPT2LMHeadModel(hf.GPT2Config()), lambda: tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig())),
    "gpt2-medium": (
        lambda: hf.GPT2LMHeadModel(hf.GPT2Config(n_embd=1024, n_layer=24, n_head=16)),
        lambda: tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("gpt2-medium")),
    ),
    "vit-base": (
        lambda: hf.ViTForImageClassification(hf.ViTConfig(num_labels=1000)),
        lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig(num_labels=1000)),
    ),
    "vit-small": (
        lambda: hf.ViTForImageClassification(
            hf.ViTConfig(hidden_size=384, num_attention_heads=6, intermediate_size=1536, num_labels=1000)
        ),
        lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig.from_preset("vit-small", num_labels=1000)),
    ),
    "vit-large": (
        lambda: hf.ViTForImageClassification(
            hf.ViTConfig(
                hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, num_labels=1000
            )
        ),
        lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig.from_preset("vit-large", num_labels=1000)),
    ),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_PAIRS))
def test_parameter_count_matches_transformers(name):
    build_reference, build_zoo = REFERENCE_PAIRS[name]
    with torch.device("meta"):
        reference, zoo = count(build_reference()), count(build_zoo())
    assert abs(zoo - reference) / reference < 0.01, (name, zoo, reference)


@pytest.mark.parametrize(("preset", "paper_count"), [("transformer-base", 65e6), ("transformer-big", 213e6)])
def test_transformer_parameter_count_matches_paper(preset, paper_count):
    # Vaswani et al. 2017, table 3, with the 37k shared BPE vocabulary of WMT'14 en-de.
    with torch.device("meta"):
        zoo = count(tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset(preset)))
    assert abs(zoo - paper_count) / paper_count < 0.05, (preset, zoo)
