"""Entity-level precision, recall and F1 for sequence labelling (BIO/IOBES tags) with the seqeval library.

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/seqeval")` works offline. An entity counts as
correct only when its type and its exact span match (CoNLL-2000 evaluation).
"""

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report


_DESCRIPTION = "Entity-level (chunk) precision/recall/F1 and token accuracy for tag sequences, via seqeval."

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `str`): predicted tags per token, e.g. [["B-PER", "I-PER", "O"]].
    references (`list` of `list` of `str`): true tags, same shape.
    suffix (`bool`, default False): tags are written "PER-B" instead of "B-PER".
    scheme (`str`, optional): "IOB1", "IOB2", "IOE1", "IOE2", "IOBES" or "BILOU"; with mode="strict" chunks must
        follow it exactly.
    mode (`str`, optional): None (CoNLL-style lenient chunking) or "strict".
    sample_weight (`list` of `float`, optional).
    zero_division (default 0): value when a ratio is 0/0.
Returns:
    overall_precision, overall_recall, overall_f1 (micro over entities), overall_accuracy (per token), and for each
    entity type a dict with precision, recall, f1 and number.
"""

_CITATION = """@misc{seqeval, title={{seqeval}: A Python framework for sequence labeling evaluation},
url={https://github.com/chakki-works/seqeval}, author={Hiroki Nakayama}, year={2018}}"""

_SCHEMES = ("IOB1", "IOB2", "IOE1", "IOE2", "IOBES", "BILOU")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Seqeval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            reference_urls=["https://github.com/chakki-works/seqeval"],
        )

    def _compute(
        self, predictions, references, suffix=False, scheme=None, mode=None, sample_weight=None, zero_division=0
    ):
        if len(predictions) == 0:
            raise ValueError("seqeval needs at least one sequence.")
        for prediction, reference in zip(predictions, references):
            if len(prediction) != len(reference):
                raise ValueError(
                    f"A prediction has {len(prediction)} tags but its reference has {len(reference)}; align them "
                    "(drop the -100 positions from both) before computing seqeval."
                )
        if scheme is not None:
            if scheme not in _SCHEMES:
                raise ValueError(f"scheme={scheme!r}; choose one of {', '.join(_SCHEMES)}.")
            import importlib

            scheme = getattr(importlib.import_module("seqeval.scheme"), scheme)
        report = classification_report(
            y_true=references, y_pred=predictions, suffix=suffix, output_dict=True, scheme=scheme, mode=mode,
            sample_weight=sample_weight, zero_division=zero_division,
        )
        overall = report.pop("micro avg")
        for key in ("macro avg", "weighted avg"):
            report.pop(key, None)
        scores = {
            entity: {
                "precision": float(values["precision"]), "recall": float(values["recall"]),
                "f1": float(values["f1-score"]), "number": int(values["support"]),
            }
            for entity, values in report.items()
        }
        scores["overall_precision"] = float(overall["precision"])
        scores["overall_recall"] = float(overall["recall"])
        scores["overall_f1"] = float(overall["f1-score"])
        scores["overall_accuracy"] = float(accuracy_score(y_true=references, y_pred=predictions))
        return scores
