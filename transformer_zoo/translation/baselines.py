"""Two baselines that tell whether a translation score means anything.

* copy: the source sentence itself as the translation. Between languages that share names and numbers it scores
  above zero; a model must beat it to have translated anything.
* retrieval: the target side of the training pair whose source is most similar to the input, by TF-IDF cosine
  similarity (scikit-learn) over word unigrams and bigrams. Bibles repeat formulae ("And the LORD spake unto
  Moses, saying"), so a nearest-neighbour memory is a strong baseline here: a model that only memorised the training
  set scores about this.
"""

from __future__ import annotations

from collections.abc import Sequence


def copy_baseline(sources: Sequence[str]) -> list[str]:
    return [str(source) for source in sources]


class RetrievalBaseline:
    """Nearest training source by TF-IDF cosine similarity; its target is the translation."""

    def __init__(self, train_sources: Sequence[str], train_targets: Sequence[str], *, ngram_range=(1, 2)):
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(train_sources) != len(train_targets):
            raise ValueError(f"{len(train_sources)} training sources but {len(train_targets)} targets.")
        if not train_sources:
            raise ValueError("The retrieval baseline needs at least one training pair.")
        self.targets = list(train_targets)
        # sublinear_tf: a word said twice is not twice as telling; lowercase: "And"/"and".
        self.vectorizer = TfidfVectorizer(ngram_range=ngram_range, sublinear_tf=True, lowercase=True)
        self.matrix = self.vectorizer.fit_transform(list(train_sources))

    def nearest(self, sources: Sequence[str], batch_size: int = 1024) -> list[int]:
        """Index of the most similar training source for each input (ties: the lowest index)."""
        indices: list[int] = []
        for start in range(0, len(sources), batch_size):
            queries = self.vectorizer.transform(list(sources[start:start + batch_size]))
            similarity = (queries @ self.matrix.T).toarray()  # rows are L2-normalised: a dot product is the cosine
            indices.extend(similarity.argmax(axis=1).tolist())
        return indices

    def translate(self, sources: Sequence[str]) -> list[str]:
        return [self.targets[i] for i in self.nearest(sources)]
