"""The time-to-quality benchmark's scoring (benchmarks/time_to_quality.py): every token after the first is scored
exactly once whatever the window, and the text is tiny shakespeare's size and layout."""

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("time_to_quality", ROOT / "benchmarks" / "time_to_quality.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def _bigram_logits(table):
    """A 'model' whose prediction depends on the current token only, so the context a window gives cannot matter."""
    return lambda piece: table[piece]


def test_windowed_scoring_scores_every_token_once():
    torch.manual_seed(0)
    table = torch.randn(7, 7, dtype=torch.float64)
    ids = torch.randint(0, 7, (101,)).tolist()
    whole = float(torch.nn.functional.cross_entropy(table[torch.tensor(ids[:-1])], torch.tensor(ids[1:]),
                                                    reduction="sum"))
    for window in (4, 10, 64, 200):
        assert abs(benchmark.score_windows(_bigram_logits(table), ids, window) - whole) < 1e-9, window


def test_windowed_scoring_gives_context_to_every_scored_token():
    seen = []

    def logits(piece):
        seen.append(piece.shape[1])
        return torch.zeros(1, piece.shape[1], 5)

    nats = benchmark.score_windows(logits, list(range(5)) * 20, 16)
    assert abs(nats - 99 * torch.log(torch.tensor(5.0)).item()) < 1e-4   # uniform: log 5 for each of 99 tokens
    assert seen[0] == 16 and all(length > 8 for length in seen)


def test_the_text_has_tiny_shakespeares_size_and_layout():
    text = benchmark.shakespeare_text()
    assert benchmark.TINY_SHAKESPEARE_CHARACTERS - 200 < len(text) <= benchmark.TINY_SHAKESPEARE_CHARACTERS
    assert text.endswith("\n") and ":\n" in text[:200] and "\n\n" in text[:400]
    train, validation = benchmark.split_text(text)
    assert train + validation == text and train.endswith("\n")
    assert abs(len(validation) / len(text) - 0.1) < 0.001
