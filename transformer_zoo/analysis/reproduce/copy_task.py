"""Copy task: an encoder-decoder (`ZooSeq2SeqForConditionalGeneration`, post-norm as in Vaswani et al. 2017) learns
to copy digit sequences; without positional encoding it cannot (its encoder sees a bag of digits); one head against
four at the same width; a linear warmup against starting at the same high peak learning rate.

Dropout is off: the task is generated fresh every step, there is nothing to overfit, and dropout would only add
noise between seeds.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..figures import pyplot, save_figure
from .common import (IGNORE_INDEX, Experiment, RunResult, clearly_better, data_rng, format_mean_std, mean_curve,
                     mean_std, setup_line, train_steps, verdict, verdict_table)

TITLE = "Copy task: positions, heads and warmup"

# Token ids of the copy task: padding, the decoder's start token, end of sequence, then the ten digits.
# ================================================================================================ copy-task data
COPY_PAD, COPY_BOS, COPY_EOS, COPY_FIRST_DIGIT = 0, 1, 2, 3
COPY_VOCAB_SIZE = COPY_FIRST_DIGIT + 10

def copy_batch(rng: np.random.Generator, batch_size: int, min_length: int, max_length: int) -> dict[str, torch.Tensor]:
    """A batch of the copy task: source = n random digits (n uniform in [min_length, max_length]), right-padded;
    labels = the same digits followed by EOS, padded with -100 (ignored by the loss). The seq2seq model derives its
    decoder inputs from the labels (BOS + labels shifted right), as transformers' BART does.
    """
    if not 1 <= min_length <= max_length:
        raise ValueError(f"copy lengths need 1 <= min_length <= max_length, got {min_length} and {max_length}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    lengths = rng.integers(min_length, max_length + 1, size=batch_size)
    width = int(lengths.max())
    input_ids = np.full((batch_size, width), COPY_PAD, dtype=np.int64)
    attention_mask = np.zeros((batch_size, width), dtype=np.int64)
    labels = np.full((batch_size, width + 1), IGNORE_INDEX, dtype=np.int64)
    for row, length in enumerate(lengths):
        digits = rng.integers(0, 10, size=length) + COPY_FIRST_DIGIT
        input_ids[row, :length] = digits
        attention_mask[row, :length] = 1
        labels[row, :length] = digits
        labels[row, length] = COPY_EOS
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "labels": torch.from_numpy(labels),
    }

@dataclass(frozen=True)
class CopySettings:
    steps: int = 400
    batch_size: int = 64
    min_length: int = 3
    max_length: int = 10
    hidden_size: int = 64
    layers: int = 2  # encoder and decoder each
    intermediate_size: int = 256
    learning_rate: float = 1e-2  # the "high" peak learning rate every arm shares
    warmup_steps: int = 100
    eval_examples: int = 500

def copy_claims(results: Mapping[str, Mapping[str, Sequence[float]]], uniform_loss: float) -> list[dict[str, Any]]:
    """Verdicts for the copy experiment from per-arm lists over seeds: `results[arm]["accuracy"]` (exact-match
    sequence accuracy) and `results[arm]["eval_loss"]`. Arms: reference, no_positions, one_head, no_warmup."""
    claims = []
    reference_accuracy = mean_std(results["reference"]["accuracy"])[0]
    claims.append(verdict(
        "A small transformer (sinusoidal positions, 4 heads, warmup) learns to copy digit sequences.",
        "mean exact-match accuracy of the reference >= 0.90",
        reference_accuracy >= 0.90, f"mean accuracy {reference_accuracy:.3f}"))
    no_positions = mean_std(results["no_positions"]["accuracy"])[0]
    claims.append(verdict(
        "Without positional encoding it fails: attention alone is order-blind, so the encoder sees a bag of digits.",
        "mean exact-match accuracy without positions <= 0.10 and at least 0.5 below the reference",
        no_positions <= 0.10 and reference_accuracy - no_positions >= 0.5,
        f"mean accuracy {no_positions:.3f} vs reference {reference_accuracy:.3f}"))
    held, evidence = clearly_better(results["reference"]["eval_loss"], results["one_head"]["eval_loss"],
                                    lower_is_better=True, min_difference=0.01 * uniform_loss)
    claims.append(verdict(
        "Four heads do better than one head of the same total width (Vaswani et al. 2017, table 3 (A)).",
        "mean held-out loss of 4 heads below 1 head by more than the seed spread and than 1% of the uniform loss",
        held, evidence))
    held, evidence = clearly_better(results["reference"]["eval_loss"], results["no_warmup"]["eval_loss"],
                                    lower_is_better=True, min_difference=0.01 * uniform_loss)
    claims.append(verdict(
        "A linear warmup does better than starting at the same high learning rate (post-norm Transformer).",
        "mean held-out loss with warmup below the no-warmup runs by more than the seed spread and than 1% of "
        "the uniform loss", held, evidence))
    return claims

COPY_ARMS = {
    # arm -> (label, config overrides, warmup on?)
    "reference": ("sinusoidal, 4 heads, warmup", {}, True),
    "no_positions": ("no positional encoding", {"position_embedding_type": "none"}, True),
    "one_head": ("1 head (same width)", {"num_attention_heads": 1}, True),
    "no_warmup": ("no warmup (peak LR from step 1)", {}, False),
}

def copy_model(settings: CopySettings, seed: int, **overrides):
    from ...configuration_zoo_seq2seq import ZooSeq2SeqConfig
    from ...modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration

    fields = dict(
        vocab_size=COPY_VOCAB_SIZE, hidden_size=settings.hidden_size, encoder_layers=settings.layers,
        decoder_layers=settings.layers, num_attention_heads=4, intermediate_size=settings.intermediate_size,
        max_position_embeddings=max(64, settings.max_length + 2), embedding_dropout=0.0, hidden_dropout=0.0,
        attention_dropout=0.0, pad_token_id=COPY_PAD, bos_token_id=COPY_BOS, eos_token_id=COPY_EOS,
        decoder_start_token_id=COPY_BOS,
    )
    fields.update(overrides)
    torch.manual_seed(seed)
    return ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig(**fields))

@torch.no_grad()
def copy_evaluate(model, batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Exact-match sequence accuracy, token accuracy and mean loss per target token.

    The argmax under teacher forcing equals greedy decoding exactly when every target token (EOS included) is the
    argmax given the true prefix: then greedy decoding reproduces the target step by step, and if any is wrong,
    greedy's first mistake is there too. So exact match here is greedy exact match, without a generate loop.
    """
    exact = tokens_right = tokens = 0
    loss_sum = 0.0
    sequences = 0
    for batch in batches:
        logits = model(**batch).logits
        labels = batch["labels"]
        real = labels != IGNORE_INDEX
        correct = (logits.argmax(-1) == labels) & real
        exact += int((correct.sum(-1) == real.sum(-1)).sum())
        tokens_right += int(correct.sum())
        tokens += int(real.sum())
        loss_sum += float(torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"))
        sequences += labels.shape[0]
    return {"accuracy": exact / sequences, "token_accuracy": tokens_right / tokens, "eval_loss": loss_sum / tokens}

def run_copy(settings: CopySettings, seeds: Sequence[int], progress: bool = True) -> dict[str, Any]:
    runs = []
    for arm, (label, overrides, warmup) in COPY_ARMS.items():
        for seed in seeds:
            started = time.perf_counter()
            model = copy_model(settings, seed, **overrides)
            train_rng = data_rng(seed, 0)
            eval_rng = data_rng(seed, 1)
            eval_batches = [copy_batch(eval_rng, min(100, settings.eval_examples - i), settings.min_length,
                                       settings.max_length) for i in range(0, settings.eval_examples, 100)]
            curve, diverged, done = train_steps(
                model, lambda: copy_batch(train_rng, settings.batch_size, settings.min_length, settings.max_length),
                steps=settings.steps, learning_rate=settings.learning_rate,
                warmup_steps=settings.warmup_steps if warmup else 0, description=f"copy/{arm} seed {seed}",
                progress=progress)
            metrics = copy_evaluate(model, eval_batches)
            if diverged or not math.isfinite(metrics["eval_loss"]):
                diverged = True
                metrics = {"accuracy": 0.0, "token_accuracy": 0.0, "eval_loss": math.log(COPY_VOCAB_SIZE)}
            runs.append(RunResult("copy", arm, seed, {"label": label, **overrides, "warmup": warmup}, done, curve,
                                  diverged, metrics, time.perf_counter() - started))
    per_arm = {arm: {key: [r.metrics[key] for r in runs if r.arm == arm]
                     for key in ("accuracy", "token_accuracy", "eval_loss")} for arm in COPY_ARMS}
    uniform = math.log(COPY_VOCAB_SIZE)
    return {"experiment": "copy", "settings": asdict(settings), "seeds": list(seeds), "runs": [asdict(r) for r in runs],
            "summary": per_arm, "uniform_loss": uniform, "claims": copy_claims(per_arm, uniform)}

def copy_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    lines = [
        f"# {TITLE}", "",
        "A post-norm encoder-decoder (`ZooSeq2SeqForConditionalGeneration`, the original Transformer's layout: "
        f"{s['layers']}+{s['layers']} layers, width {s['hidden_size']}, feed-forward {s['intermediate_size']}, "
        "sinusoidal positions, no dropout) learns to copy random digit strings of length "
        f"{s['min_length']}-{s['max_length']} (source: the digits; target: the digits then EOS). "
        f"{s['steps']} steps of batch {s['batch_size']} (fresh random strings every step), AdamW, peak learning rate "
        f"{s['learning_rate']}, linear warmup over {s['warmup_steps']} steps then linear decay to 0 (the "
        "`no_warmup` arm starts at the peak). "
        f"Evaluated on {s['eval_examples']} held-out strings per seed: exact-match accuracy "
        "(the whole target right; equal to greedy decoding's, see `copy_evaluate`), token accuracy and the loss per "
        f"target token (uniform guessing: {results['uniform_loss']:.3f}).", "",
        setup_line(results), "",
        "| arm | exact-match accuracy | token accuracy | held-out loss | diverged runs |", "|---|---|---|---|---|",
    ]
    for arm, (label, _, _) in COPY_ARMS.items():
        row = results["summary"][arm]
        diverged = sum(1 for run in results["runs"] if run["arm"] == arm and run["diverged"])
        lines.append(f"| {label} (`{arm}`) | {format_mean_std(row['accuracy'])} | "
                     f"{format_mean_std(row['token_accuracy'])} | {format_mean_std(row['eval_loss'])} | "
                     f"{diverged}/{len(row['accuracy'])} |")
    lines += ["", verdict_table(results["claims"]), "", "![copy task](copy.png)", ""]
    return "\n".join(lines)

def plot_copy(results: Mapping[str, Any], path: Path) -> Path:
    plt = pyplot()
    figure, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4))
    arms = list(COPY_ARMS)
    for i, arm in enumerate(arms):
        values = results["summary"][arm]["accuracy"]
        mean, std = mean_std(values)
        bars.bar(i, mean, yerr=std, capsize=4, color=f"C{i}", alpha=0.7)
        bars.plot([i] * len(values), values, "k.", ms=6)
        runs = [run for run in results["runs"] if run["arm"] == arm]
        steps, loss = mean_curve(runs)
        curves.plot(steps, loss, color=f"C{i}", label=COPY_ARMS[arm][0])
    bars.set_xticks(range(len(arms)))
    bars.set_xticklabels([textwrap.fill(COPY_ARMS[arm][0], 16) for arm in arms], fontsize="small")
    bars.set_ylabel("exact-match accuracy (dots: seeds)")
    bars.set_ylim(0, 1.05)
    curves.set_yscale("log")
    curves.set_xlabel("step")
    curves.set_ylabel("training loss (mean over seeds)")
    curves.legend(fontsize="small")
    for axes in (bars, curves):
        axes.grid(alpha=0.3)
    figure.suptitle("Copy task (encoder-decoder, post-norm)")
    return save_figure(figure, path, dpi=110)


EXPERIMENT = Experiment(
    name="copy", title=TITLE,
    summary="an encoder-decoder learns to copy digit strings; without positional encoding it fails; one head "
    "against four; a linear warmup against starting at the same high peak learning rate",
    settings={
        "tiny": CopySettings(steps=6, batch_size=8, max_length=5, hidden_size=16, layers=1, intermediate_size=32,
                             warmup_steps=2, eval_examples=16),
        "quick": CopySettings(steps=300), "default": CopySettings(), "full": CopySettings(steps=1000),
    },
    run=run_copy, markdown=copy_markdown, plot=plot_copy,
)
