"""Corpus-level BLEU and chrF with sacreBLEU (Post 2018), and its signature, which says exactly how a number was
computed (tokenizer, smoothing, case, version) so that it can be compared with another paper's."""

from __future__ import annotations

from collections.abc import Sequence


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str = "13a") -> dict:
    """BLEU and chrF of detokenized `hypotheses` against one reference each.

    Returns {"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"}; `tokenize` is sacreBLEU's (13a is
    its default and WMT's; "intl" and "flores200" are alternatives for other scripts).
    """
    from sacrebleu.metrics import BLEU, CHRF

    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError("corpus_scores takes lists of sentences, not single strings.")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: they must pair up "
                         "line by line.")
    if not hypotheses:
        raise ValueError("No sentences to score.")
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    references = [list(references)]
    bleu_score = bleu.corpus_score(list(hypotheses), references)
    chrf_score = chrf.corpus_score(list(hypotheses), references)
    return {"bleu": float(bleu_score.score), "chrf": float(chrf_score.score),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
            "sentences": len(hypotheses)}
