"""Perplexity from language-model losses: exp(mean token cross-entropy). No model is loaded or downloaded.

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/perplexity")` works offline. (The Hub's
"perplexity" module downloads a model and scores texts; this one takes the losses your evaluation loop computed.)
"""

import math

import datasets
import evaluate


_DESCRIPTION = (
    "Perplexity = exp(mean loss), where the losses are mean token cross-entropies in nats (natural log), e.g. "
    "model(...).loss per evaluation batch. Pass num_tokens to weight each loss by its number of predicted tokens, "
    "which gives the exact corpus perplexity when batches hold different numbers of tokens."
)

_KWARGS_DESCRIPTION = """
Args:
    losses (`list` of `float`): mean token losses in nats (one per batch, or a single overall mean).
    num_tokens (`list` of `int`, optional): the number of predicted tokens behind each loss (weights).
Returns:
    perplexity (`float`), mean_loss (`float`, the weighted mean in nats), bits_per_token (`float`).
Example:
    >>> ppl = evaluate.load("transformer_zoo/metrics/perplexity")
    >>> ppl.compute(losses=[2.0, 3.0])["perplexity"]   # exp(2.5)
    12.182493960703473
"""

_CITATION = ""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Perplexity(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"losses": datasets.Value("float64")}),
        )

    def _compute(self, losses, num_tokens=None):
        if len(losses) == 0:
            raise ValueError("perplexity needs at least one loss.")
        if any(loss is None or not math.isfinite(loss) for loss in losses):
            raise ValueError("perplexity got a NaN or infinite loss; check the evaluation loop (e.g. all labels -100).")
        if num_tokens is None:
            weights = [1.0] * len(losses)
        else:
            if len(num_tokens) != len(losses):
                raise ValueError(f"num_tokens has {len(num_tokens)} entries but losses has {len(losses)}.")
            if any(n < 0 for n in num_tokens) or sum(num_tokens) <= 0:
                raise ValueError("num_tokens must be non-negative with a positive sum.")
            weights = [float(n) for n in num_tokens]
        mean_loss = sum(w * loss for w, loss in zip(weights, losses)) / sum(weights)
        return {
            "perplexity": math.exp(mean_loss) if mean_loss < 709 else float("inf"),
            "mean_loss": mean_loss,
            "bits_per_token": mean_loss / math.log(2),
        }
