"""Pre-norm against post-norm: the character-level decoder with pre-norm and post-norm blocks at 2, 6 and 12
layers, all with the same learning rate and warmup (Xiong et al. 2020; Wang et al. 2019)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..figures import pyplot, save_figure
from .characters import (CharacterCorpus, _character_corpus, character_model, evaluation_windows, per_position_loss,
                         random_windows, unigram_loss)
from .common import (Experiment, RunResult, clearly_better, data_rng, format_mean_std, mean_std, setup_line,
                     train_steps, verdict, verdict_table)

TITLE = "Pre-norm against post-norm as depth grows"


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

def norm_markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    lines = [
        f"# {TITLE}", "",
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
        setup_line(results), "",
        "| layers | pre-norm held-out loss | post-norm held-out loss | post - pre | diverged (pre / post) |",
        "|---|---|---|---|---|",
    ]
    final, diverged = results["summary"]["eval_loss"], results["summary"]["diverged"]
    for depth in s["depths"]:
        gap = mean_std(final["post"][depth])[0] - mean_std(final["pre"][depth])[0]
        n = len(final["pre"][depth])
        lines.append(f"| {depth} | {format_mean_std(final['pre'][depth])} | {format_mean_std(final['post'][depth])} "
                     f"| {gap:+.3f} | {diverged['pre'][depth]}/{n} / {diverged['post'][depth]}/{n} |")
    lines += ["", verdict_table(results["claims"]), "", "![pre-norm against post-norm](norm.png)", ""]
    return "\n".join(lines)

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


EXPERIMENT = Experiment(
    name="norm", title=TITLE,
    summary="pre-norm against post-norm at 2, 6 and 12 layers with the same learning rate and warmup",
    settings={
        "tiny": NormSettings(steps=4, batch_size=4, sequence_length=8, depths=(1, 2), hidden_size=16,
                             intermediate_size=32, eval_windows=8, train_characters=5000),
        "quick": NormSettings(steps=200, depths=(2, 6)), "default": NormSettings(),
        "full": NormSettings(steps=600, depths=(2, 6, 12, 24)),
    },
    run=run_norm, markdown=norm_markdown, plot=plot_norm,
)
