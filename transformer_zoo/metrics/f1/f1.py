"""F1 score, macro-averaged over classes by default (scikit-learn's `f1_score`).

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/f1")` works offline. Macro averaging gives every
class the same weight, so a classifier that ignores small classes is penalised (unlike accuracy).
"""

import datasets
import evaluate
from sklearn.metrics import f1_score


_DESCRIPTION = (
    "F1 = 2 * precision * recall / (precision + recall), per class, then averaged (macro by default) via "
    "sklearn.metrics.f1_score."
)

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): predicted class ids.
    references (`list` of `int`): true class ids.
    average (`str`, default "macro"): "macro" (unweighted mean over classes), "micro", "weighted", "binary", or None
        (one score per class).
    labels (`list` of `int`, optional): the classes to average over (default: those in references or predictions).
    pos_label (default 1): the positive class when average="binary".
    sample_weight (`list` of `float`, optional): per-example weights.
    zero_division (default 0.0): the value for a class with no predicted and no true examples.
Returns:
    f1 (`float`, or `list` of `float` when average=None).
Example:
    >>> f1 = evaluate.load("transformer_zoo/metrics/f1")
    >>> f1.compute(predictions=[0, 1, 1, 2], references=[0, 1, 2, 2])
    {'f1': 0.7777777777777777}
"""

_CITATION = """@article{scikit-learn, title={Scikit-learn: Machine Learning in {P}ython},
author={Pedregosa, F. and others}, journal={Journal of Machine Learning Research}, volume={12}, pages={2825--2830}, year={2011}}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.f1_score.html"],
        )

    def _compute(
        self, predictions, references, average="macro", labels=None, pos_label=1, sample_weight=None,
        zero_division=0.0,
    ):
        if len(predictions) == 0:
            raise ValueError("f1 needs at least one prediction.")
        score = f1_score(
            references, predictions, labels=labels, pos_label=pos_label, average=average,
            sample_weight=sample_weight, zero_division=zero_division,
        )
        return {"f1": score.tolist() if average is None else float(score)}
