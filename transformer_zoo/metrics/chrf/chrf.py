"""chrF and chrF++ (Popović 2015, 2017) with the sacreBLEU library: character n-gram F-score.

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/chrf")` works offline. chrF is more reliable
than BLEU for morphologically rich languages and short segments (e.g. English-Urdu).
"""

import datasets
import evaluate
from sacrebleu import CHRF


_DESCRIPTION = "Corpus-level chrF (word_order=0) or chrF++ (word_order=2), 0-100, computed by sacreBLEU."

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one hypothesis per segment.
    references (`list` of `list` of `str`, or `list` of `str`): the reference(s) per segment (same number each).
    char_order (`int`, default 6), word_order (`int`, default 0; 2 gives chrF++), beta (`int`, default 2),
    lowercase (`bool`, default False), whitespace (`bool`, default False), eps_smoothing (`bool`, default False).
Returns:
    score (0-100), char_order, word_order, beta, signature.
"""

_CITATION = """@inproceedings{popovic-2015-chrf,
title={chr{F}: character n-gram {F}-score for automatic {MT} evaluation}, author={Popovi{\\'c}, Maja}, booktitle={Proceedings of the Tenth Workshop on Statistical Machine Translation},
year={2015}, pages={392--395}}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Chrf(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(
        self, predictions, references, char_order=6, word_order=0, beta=2, lowercase=False, whitespace=False,
        eps_smoothing=False,
    ):
        if len(predictions) == 0:
            raise ValueError("chrf needs at least one prediction.")
        references = [[r] if isinstance(r, str) else list(r) for r in references]
        counts = {len(r) for r in references}
        if len(counts) != 1:
            raise ValueError("chrf needs the same number of references for every prediction.")
        transposed = [[refs[i] for refs in references] for i in range(counts.pop())]
        chrf = CHRF(
            char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase, whitespace=whitespace,
            eps_smoothing=eps_smoothing,
        )
        output = chrf.corpus_score(predictions, transposed)
        return {
            "score": output.score, "char_order": char_order, "word_order": word_order, "beta": beta,
            "signature": str(chrf.get_signature()),
        }
