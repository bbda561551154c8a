"""Length extrapolation: a character-level decoder (`ZooDecoderForCausalLM`) on Shakespeare, trained on windows of
32 characters and evaluated on windows of 32, 64, 128 (and 256 in the full preset), with sinusoidal, learned, RoPE
and ALiBi positions (Press et al. 2022). A learned table has exactly 32 rows: the model refuses longer inputs with a
ValueError, which the report records as "refused" rather than a number.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..figures import pyplot, save_figure
from .characters import (CharacterCorpus, _character_corpus, character_model, evaluation_windows, per_position_loss,
                         random_windows)
from .common import (Experiment, RunResult, clearly_better, data_rng, format_mean_std, mean_std, setup_line,
                     train_steps, verdict, verdict_table)

TITLE = "Length extrapolation: sinusoidal, learned, RoPE and ALiBi"


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

def extrapolation_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    train_length = s["train_length"]
    lengths = list(s["eval_lengths"])
    lines = [
        f"# {TITLE}", "",
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
        setup_line(results), "",
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
        lines += ["", verdict_table(results["claims"])]
    lines += ["", "![length extrapolation](extrapolation.png)", ""]
    return "\n".join(lines)

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


EXPERIMENT = Experiment(
    name="extrapolation", title=TITLE,
    summary="a character-level decoder trained on 32-character windows of Shakespeare, evaluated on longer ones: "
    "sinusoidal, learned, RoPE and ALiBi positions (learned positions refuse lengths past their table; the report "
    "says so)",
    settings={
        "tiny": ExtrapolationSettings(steps=4, batch_size=4, train_length=8, eval_lengths=(8, 16), eval_characters=64,
                                      hidden_size=16, layers=1, intermediate_size=32, warmup_steps=1,
                                      train_characters=5000),
        "quick": ExtrapolationSettings(steps=300), "default": ExtrapolationSettings(),
        "full": ExtrapolationSettings(steps=1500, eval_lengths=(32, 64, 128, 256)),
    },
    run=run_extrapolation, markdown=extrapolation_markdown, plot=plot_extrapolation,
)
