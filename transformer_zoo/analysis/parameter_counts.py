"""Parameter counts of the zoo's presets at the published sizes, beside the reference each should match:
transformers' own model of the same shape, or the figure Vaswani et al. (2017) give for the Transformer.

Models are built on the meta device (shapes without storage), so counting BERT-large allocates nothing. The tests
(tests/test_parameter_counts.py) hold each count to its reference, and the families page renders this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PublishedSize:
    label: str
    reference_label: str  # where the reference count comes from
    zoo: Callable[[], torch.nn.Module]
    reference: Callable[[], torch.nn.Module] | None = None  # transformers' model of the same shape, or
    paper_count: float | None = None  # the count a paper gives
    tolerance: float = 0.01  # relative difference allowed


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() counts a tied weight once


def published_sizes() -> dict[str, PublishedSize]:
    import transformers as hf

    import transformer_zoo as tz

    big = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    return {
        "bert-base": PublishedSize("BERT-base (with pooler)", "transformers `BertModel`",
                                   lambda: tz.ZooEncoderModel(tz.ZooEncoderConfig()),
                                   lambda: hf.BertModel(hf.BertConfig())),
        "bert-large": PublishedSize("BERT-large", "transformers `BertModel`",
                                    lambda: tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("bert-large")),
                                    lambda: hf.BertModel(hf.BertConfig(**big))),
        "gpt2": PublishedSize("GPT-2 small", "transformers `GPT2LMHeadModel`",
                              lambda: tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig()),
                              lambda: hf.GPT2LMHeadModel(hf.GPT2Config())),
        "gpt2-medium": PublishedSize("GPT-2 medium", "transformers `GPT2LMHeadModel`",
                                     lambda: tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("gpt2-medium")),
                                     lambda: hf.GPT2LMHeadModel(hf.GPT2Config(n_embd=1024, n_layer=24, n_head=16))),
        "vit-small": PublishedSize(
            "ViT-S/16 (1000 classes)", "transformers `ViTForImageClassification`",
            lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig.from_preset("vit-small", num_labels=1000)),
            lambda: hf.ViTForImageClassification(hf.ViTConfig(hidden_size=384, num_attention_heads=6,
                                                              intermediate_size=1536, num_labels=1000))),
        "vit-base": PublishedSize("ViT-B/16 (1000 classes)", "transformers `ViTForImageClassification`",
                                  lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig(num_labels=1000)),
                                  lambda: hf.ViTForImageClassification(hf.ViTConfig(num_labels=1000))),
        "vit-large": PublishedSize(
            "ViT-L/16 (1000 classes)", "transformers `ViTForImageClassification`",
            lambda: tz.ZooViTForImageClassification(tz.ZooViTConfig.from_preset("vit-large", num_labels=1000)),
            lambda: hf.ViTForImageClassification(hf.ViTConfig(**big, num_labels=1000))),
        # Vaswani et al. 2017, table 3, with the 37k shared BPE vocabulary of WMT'14 en-de.
        "transformer-base": PublishedSize(
            "Transformer base (37k shared vocabulary)", "the paper, table 3",
            lambda: tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset("transformer-base")),
            paper_count=65e6, tolerance=0.05),
        "transformer-big": PublishedSize(
            "Transformer big", "the paper, table 3",
            lambda: tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset("transformer-big")),
            paper_count=213e6, tolerance=0.05),
    }


def counted(size: PublishedSize) -> tuple[int, float]:
    """(the zoo's count, the reference count), both on the meta device."""
    with torch.device("meta"):
        zoo = count(size.zoo())
        reference = count(size.reference()) if size.reference is not None else size.paper_count
    return zoo, reference


def markdown_table() -> str:
    lines = ["| model | reference | transformer-zoo | difference |", "|---|---|---|---|"]
    for size in published_sizes().values():
        zoo, reference = counted(size)
        shown = f"{reference / 1e6:.2f} M" if size.reference is not None else f"{reference / 1e6:.0f} M"
        lines.append(f"| {size.label} | {shown} ({size.reference_label}) | {zoo / 1e6:.2f} M | "
                     f"{(zoo - reference) / reference:+.2%} |")
    return "\n".join(lines) + "\n"
