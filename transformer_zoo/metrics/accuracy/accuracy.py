"""Accuracy: the fraction of predictions equal to the references (scikit-learn's `accuracy_score`).

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/accuracy")` works offline.
"""

import datasets
import evaluate
from sklearn.metrics import accuracy_score


_DESCRIPTION = (
    "Accuracy = (number of correct predictions) / (number of predictions), via sklearn.metrics.accuracy_score."
)

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): predicted class ids.
    references (`list` of `int`): true class ids.
    normalize (`bool`, default True): return the fraction (True) or the number (False) of correct predictions.
    sample_weight (`list` of `float`, optional): per-example weights.
Returns:
    accuracy (`float`): in [0, 1] (or a count when normalize=False).
Example:
    >>> accuracy = evaluate.load("transformer_zoo/metrics/accuracy")
    >>> accuracy.compute(predictions=[0, 1, 1, 2], references=[0, 1, 2, 2])
    {'accuracy': 0.75}
"""

_CITATION = """@article{scikit-learn, title={Scikit-learn: Machine Learning in {P}ython},
author={Pedregosa, F. and others}, journal={Journal of Machine Learning Research}, volume={12}, pages={2825--2830}, year={2011}}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.accuracy_score.html"],
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        if len(predictions) == 0:
            raise ValueError("accuracy needs at least one prediction.")
        return {
            "accuracy": float(
                accuracy_score(references, predictions, normalize=normalize, sample_weight=sample_weight)
            )
        }
