"""Corpus BLEU with the sacreBLEU library (Post 2018): standard tokenisation and a reproducible signature.

A local `evaluate` module of transformer-zoo: `evaluate.load("<path>/sacrebleu")` works offline. Report the
`signature` next to the score: BLEU numbers are only comparable under the same tokenisation and smoothing.
"""

import datasets
import evaluate
import sacrebleu as scb


_DESCRIPTION = "Corpus-level BLEU (0-100) computed by sacreBLEU, with its signature."

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): one hypothesis per segment (detokenised text).
    references (`list` of `list` of `str`, or `list` of `str`): the reference(s) per segment; every segment must have
        the same number of references.
    tokenize (`str`, optional): sacreBLEU tokeniser ("13a" by default, "intl", "char", "none", ...).
    lowercase (`bool`, default False).
    smooth_method (`str`, default "exp"), smooth_value (`float`, optional), use_effective_order (`bool`).
Returns:
    score (BLEU, 0-100), counts, totals, precisions, bp, sys_len, ref_len, signature.
Example:
    >>> bleu = evaluate.load("transformer_zoo/metrics/sacrebleu")
    >>> bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])["score"]
    100.00000000000004
"""

_CITATION = """@inproceedings{post-2018-call, title={A Call for Clarity in Reporting {BLEU} Scores},
author={Post, Matt}, booktitle={Proceedings of the Third Conference on Machine Translation}, year={2018}, pages={186--191}}"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sacrebleu(evaluate.Metric):
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
        self, predictions, references, smooth_method="exp", smooth_value=None, force=False, lowercase=False,
        tokenize=None, use_effective_order=False,
    ):
        if len(predictions) == 0:
            raise ValueError("sacrebleu needs at least one prediction.")
        references = [[r] if isinstance(r, str) else list(r) for r in references]
        counts = {len(r) for r in references}
        if len(counts) != 1:
            raise ValueError("sacrebleu needs the same number of references for every prediction.")
        transposed = [[refs[i] for refs in references] for i in range(counts.pop())]
        bleu = scb.BLEU(
            lowercase=lowercase, force=force, tokenize=tokenize, smooth_method=smooth_method,
            smooth_value=smooth_value, effective_order=use_effective_order,
        )
        output = bleu.corpus_score(predictions, transposed)
        return {
            "score": output.score, "counts": output.counts, "totals": output.totals,
            "precisions": output.precisions, "bp": output.bp, "sys_len": output.sys_len, "ref_len": output.ref_len,
            "signature": str(bleu.get_signature()),
        }
