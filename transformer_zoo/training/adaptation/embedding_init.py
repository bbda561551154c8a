"""Initialising the embedding rows of new vocabulary pieces (vocabulary extension for language adaptation).

Each method fills the rows of the pieces appended by `vocabulary_extension.extend_tokenizer`; the original rows are
never changed. Chosen by name (`--embedding_init`) from EMBEDDING_INITS:

* ``random``: transformers' own default for `resize_token_embeddings` (mean_resizing=True: new rows are drawn from
  a normal distribution with the old rows' mean and covariance; Hewitt 2021, "Initializing new word embeddings for
  pretrained language models").
* ``mean``: the mean of the rows of the pieces the *old* tokenizer spells the new piece with (e.g. its letters);
  the common baseline of vocabulary-extension work (e.g. Gee et al. 2022, "Fast vocabulary transfer").
* ``focus``: FOCUS (Dobler & de Melo 2023, "FOCUS: Effective Embedding Initialization for Monolingual Specialization
  of Multilingual Models"), through its authors' `deepfocus` package: fastText vectors are trained on the adaptation
  text tokenized with the new Urdu tokenizer, and each new piece becomes a sparsemax-weighted combination of the old
  pieces that also occur in that text, weighted by fastText similarity.
* ``trans-tokenization``: cross-lingual initialisation from a parallel corpus (Remy et al. 2024, "Trans-Tokenization
  and Cross-lingual Vocabulary Transfers"): the Urdu side is tokenized with the new pieces, the English side with the
  model's own tokenizer, the pieces are aligned with `eflomal` (Östling & Tiedemann 2016), and each new piece becomes
  the alignment-count-weighted mean of the rows of the English pieces it is aligned to. Pieces never aligned fall back
  to ``mean``.

Output-layer biases (and an untied output matrix) of new rows take the mean of the old pieces' in every method but
``random``, which leaves them as transformers' resizing sets them.
"""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

logger = hf_logging.get_logger(__name__)

EMBEDDING_INITS = ("mean", "random", "focus", "trans-tokenization")


@dataclass
class InitReport:
    """How the new rows were set: counts per source (e.g. {'aligned': 5200, 'mean fallback': 800})."""

    method: str
    counts: dict[str, int] = field(default_factory=dict)
    details: dict = field(default_factory=dict)


def _check_sources(method: str, texts, parallel_pairs, piece_tokenizer):
    if method not in EMBEDDING_INITS:
        raise ValueError(f"Unknown embedding initialisation {method!r}; choose one of {', '.join(EMBEDDING_INITS)}.")
    if method == "focus" and not texts:
        raise ValueError("embedding_init='focus' trains fastText on the adaptation text: pass texts.")
    if method == "trans-tokenization" and not parallel_pairs:
        raise ValueError("embedding_init='trans-tokenization' needs English-Urdu parallel pairs (e.g. the built-in "
                         "quran-en-ur corpus): pass parallel_pairs.")
    if method in ("focus", "trans-tokenization") and piece_tokenizer is None:
        raise ValueError(f"embedding_init={method!r} needs the trained Urdu tokenizer whose pieces were added.")


def fasttext_piece_vectors(tokenizer, texts: Sequence[str], *, dim: int = 100, epochs: int = 3,
                           min_count: int = 3, folder: Path | None = None):
    """A fastText CBOW model over the pieces of `texts` as `tokenizer` (the extended one) splits them, as FOCUS
    trains it.

    One thread: fastText's training is only reproducible single-threaded (the installed fasttext takes no seed
    argument; it seeds itself with a constant). min_count 3 rather than FOCUS's 10: the
    adaptation text here is small, and a piece without a vector falls back to a random row in FOCUS.
    """
    import fasttext

    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        corpus = Path(scratch) / "pieces.txt"
        with corpus.open("w", encoding="utf-8") as handle:
            for text in texts:
                pieces = tokenizer.tokenize(text)
                if pieces:
                    handle.write(" ".join(pieces) + "\n")
        model = fasttext.train_unsupervised(str(corpus), model="cbow", dim=dim, epoch=epochs, minCount=min_count,
                                            neg=10, thread=1, verbose=0)
        path = Path(scratch) / "pieces.bin"
        model.save_model(str(path))
        # deepfocus loads a model from a path; keep the bytes so the temporary folder can go.
        return path.read_bytes()


def focus_rows(old_tokenizer, extended_tokenizer, piece_tokenizer, old_embeddings: torch.Tensor,
               texts: Sequence[str], *, seed: int = 0) -> tuple[torch.Tensor, set[str]]:
    """FOCUS embeddings for every id of `extended_tokenizer` (deepfocus.FOCUS in its vocabulary-extension mode),
    and the pieces without a fastText vector, to which FOCUS gives a random row (the source rows' mean and std)."""
    try:
        from deepfocus import FOCUS
    except ImportError as error:
        raise ValueError("embedding_init='focus' needs the `deepfocus` and `fasttext` packages: "
                         "pip install deepfocus==1.0.1 fasttext-wheel") from error
    # Tokenized with the extended tokenizer, which is how the model will see the text (the trained tokenizer alone
    # has no unknown token for characters it never saw); FOCUS uses `piece_tokenizer` only to know which pieces are
    # Urdu ones.
    model_bytes = fasttext_piece_vectors(extended_tokenizer, texts)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "pieces.bin"
        path.write_bytes(model_bytes)
        import fasttext

        # FOCUS combines the old pieces that the new language's tokenizer shares and that got a fastText vector
        # (e.g. the letters); with none, deepfocus fails deep inside numba. Refuse first, with the reason.
        with_vectors = set(fasttext.load_model(str(path)).words)
        anchors = set(old_tokenizer.get_vocab()) & set(piece_tokenizer.get_vocab()) & with_vectors
        if not anchors:
            raise ValueError("FOCUS needs old pieces that also occur in the adaptation text (e.g. the new language's "
                             "letters in the old vocabulary); this tokenizer shares none. Use --embedding_init mean "
                             "or trans-tokenization.")
        rows = FOCUS(target_tokenizer=extended_tokenizer, source_tokenizer=old_tokenizer,
                     source_embeddings=old_embeddings.float(), fasttext_model_path=str(path),
                     extend_tokenizer=piece_tokenizer, processes=1, seed=seed, verbosity="silent")
        return rows, set(extended_tokenizer.get_vocab()) - with_vectors


def align_pieces(old_tokenizer, extended_tokenizer, parallel_pairs: Sequence[tuple[str, str]]
                 ) -> dict[str, collections.Counter]:
    """For each Urdu piece, how often eflomal aligned it to each English piece id (both directions, links summed).

    parallel_pairs: (english, urdu) texts. The English side is tokenized with the model's own tokenizer, the Urdu
    side with the extended tokenizer (new pieces where they match, old ones elsewhere, as the model will see it).
    """
    try:
        import eflomal
    except ImportError as error:
        raise ValueError("embedding_init='trans-tokenization' needs the `eflomal` word aligner: "
                         "pip install eflomal==2.0.0") from error
    english, urdu = [], []
    for source, target in parallel_pairs:
        en_ids = old_tokenizer(source, add_special_tokens=False)["input_ids"]
        ur_pieces = extended_tokenizer.tokenize(target)
        if en_ids and ur_pieces:
            english.append(en_ids)
            urdu.append(ur_pieces)
    if not english:
        raise ValueError("No parallel pair has text on both sides after tokenization.")
    # eflomal reads whitespace-separated words; Urdu pieces and English ids contain no spaces.
    urdu_lines = [" ".join(p) for p in urdu]
    english_lines = [" ".join(str(i) for i in ids) for ids in english]
    aligner = eflomal.Aligner(n_samplers=2)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as scratch:
        forward, reverse = Path(scratch) / "fwd", Path(scratch) / "rev"
        aligner.align(urdu_lines, english_lines, links_filename_fwd=str(forward), links_filename_rev=str(reverse),
                      quiet=True)
        for links_file in (forward, reverse):
            lines = links_file.read_text(encoding="utf-8").split("\n")
            for pieces, ids, line in zip(urdu, english, lines):
                for link in line.split():
                    i, j = (int(x) for x in link.split("-"))
                    counts[pieces[i]][ids[j]] += 1
    return counts


def trans_tokenization_rows(old_embeddings: torch.Tensor, new_tokens: Sequence[str],
                            counts: dict[str, collections.Counter]) -> dict[str, torch.Tensor]:
    """Alignment-count-weighted means of English rows, for the new pieces that were aligned at least once."""
    rows = {}
    for token in new_tokens:
        aligned = counts.get(token)
        if not aligned:
            continue
        ids = torch.tensor(list(aligned.keys()), dtype=torch.long)
        weights = torch.tensor(list(aligned.values()), dtype=old_embeddings.dtype)
        rows[token] = (old_embeddings[ids] * weights[:, None]).sum(0) / weights.sum()
    return rows
