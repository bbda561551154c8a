"""Text utilities for language adaptation: Urdu normalisation (`urdu`) and tokenizer statistics
(`tokenizer_stats`)."""

from .tokenizer_stats import tokenizer_statistics
from .urdu import normalize_urdu, normalized_sentences, split_sentences


__all__ = ["normalize_urdu", "normalized_sentences", "split_sentences", "tokenizer_statistics"]
