"""Initialisation of new vocabulary rows (transformer_zoo.training.adaptation.embedding_init through resize_and_initialise):
transformers' random resizing, FOCUS through deepfocus, and trans-tokenization through eflomal alignments. Old rows
never change; every new row comes from the named source, checked against a hand computation where one exists."""

import collections
import random

import pytest
import torch
from adaptation_helpers import ENGLISH, URDU_WORDS, tiny_mlm, urdu_sentences

from transformer_zoo.training.adaptation import embedding_init
from transformer_zoo.training.adaptation.vocabulary_extension import (
    extend_tokenizer,
    resize_and_initialise,
    train_tokenizer_like,
)
from transformer_zoo.training.data.tokenization import train_tokenizer

# Word-for-word "translations" with a fixed word order, so that an aligner has a clear signal.
LEXICON = dict(zip(URDU_WORDS[:12], ["book", "water", "boy", "girl", "house", "school", "friend", "food", "market",
                                     "city", "sky", "tree"]))


def parallel(count: int, seed: int = 0):
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(list(LEXICON)) for _ in range(rng.randint(3, 6))]
        pairs.append((" ".join(LEXICON[w] for w in words), " ".join(words)))
    return pairs


@pytest.fixture(scope="module")
def setting():
    # The Urdu letters, one per word, are in the old vocabulary (as in all-MiniLM-L6-v2's): FOCUS's anchors.
    letters = " ".join(sorted(set("".join(URDU_WORDS))))
    english = train_tokenizer(ENGLISH + [en for en, _ in parallel(200)] + [letters] * 3, kind="wordpiece",
                              vocab_size=240, show_progress=False)
    urdu = urdu_sentences(300) + [ur for _, ur in parallel(200)]
    trained = train_tokenizer_like(english, urdu, vocab_size=200, min_frequency=1)
    return english, trained, urdu


def fresh(setting):
    english, trained, urdu = setting
    extension = extend_tokenizer(english, trained)
    return english, trained, urdu, extension, tiny_mlm(len(english))


def test_unknown_method_and_missing_sources_are_refused(setting):
    english, trained, urdu, extension, model = fresh(setting)
    with pytest.raises(ValueError, match="Unknown embedding initialisation 'fancy'"):
        resize_and_initialise(model, extension, english, "fancy")
    with pytest.raises(ValueError, match="parallel pairs"):
        resize_and_initialise(model, extension, english, "trans-tokenization", trained=trained)
    with pytest.raises(ValueError, match="adaptation text"):
        resize_and_initialise(model, extension, english, "focus", trained=trained)


def test_random_is_transformers_default_resizing(setting):
    english, trained, urdu, extension, model = fresh(setting)
    old = model.get_input_embeddings().weight.detach().clone()
    reference = tiny_mlm(len(english))
    torch.manual_seed(5)
    reference.resize_token_embeddings(len(extension.tokenizer))
    torch.manual_seed(5)
    report = resize_and_initialise(model, extension, english, "random")
    weight = model.get_input_embeddings().weight
    torch.testing.assert_close(weight[: old.shape[0]], old, rtol=0, atol=0)
    torch.testing.assert_close(weight, reference.get_input_embeddings().weight, rtol=0, atol=0)
    assert report.counts == {"sampled from the old rows' distribution": len(extension.new_tokens)}


def test_trans_tokenization_rows_are_alignment_weighted_means(setting, monkeypatch):
    english, trained, urdu, extension, model = fresh(setting)
    old = model.get_input_embeddings().weight.detach().clone()
    vocab = english.get_vocab()
    first, second = extension.new_tokens[0], extension.new_tokens[1]
    counts = {first: collections.Counter({vocab["book"]: 3, vocab["tree"]: 1}), second: collections.Counter()}
    monkeypatch.setattr("transformer_zoo.training.adaptation.vocabulary_extension.align_pieces", lambda *a, **k: counts)
    report = resize_and_initialise(model, extension, english, "trans-tokenization", parallel_pairs=[("a", "b")],
                                   trained=trained)
    weight = model.get_input_embeddings().weight
    torch.testing.assert_close(weight[extension.first_new_id], (3 * old[vocab["book"]] + old[vocab["tree"]]) / 4)
    pieces = report.details["pieces"][second]
    torch.testing.assert_close(weight[extension.first_new_id + 1], old[pieces].mean(0))  # never aligned: fallback
    assert report.counts == {"aligned English pieces": 1,
                             "mean of old pieces (fallback)": len(extension.new_tokens) - 1}
    torch.testing.assert_close(weight[: old.shape[0]], old, rtol=0, atol=0)


def test_eflomal_aligns_each_urdu_word_to_its_translation(setting):
    english, trained, urdu, extension, model = fresh(setting)
    counts = embedding_init.align_pieces(english, extension.tokenizer, parallel(400, seed=1))
    vocab = english.get_vocab()
    right = 0
    for urdu_word, english_word in LEXICON.items():
        if urdu_word in counts and english_word in vocab:
            top, _ = counts[urdu_word].most_common(1)[0]
            right += top == vocab[english_word]
    assert right >= 10, f"only {right} of 12 words aligned to their translation"


def test_focus_without_shared_pieces_is_refused():
    english = train_tokenizer(ENGLISH, kind="wordpiece", vocab_size=120, show_progress=False)  # no Urdu letters
    urdu = urdu_sentences(300)
    trained = train_tokenizer_like(english, urdu, vocab_size=200, min_frequency=1)
    extension = extend_tokenizer(english, trained)
    with pytest.raises(ValueError, match="FOCUS needs old pieces"):
        resize_and_initialise(tiny_mlm(len(english)), extension, english, "focus", texts=urdu, trained=trained)


def test_focus_rows_are_convex_combinations_of_shared_pieces(setting):
    english, _, urdu = setting
    # A small Urdu vocabulary, so that words split into pieces and letters occur in the tokenized text (and get
    # fastText vectors), as rare words do in real Urdu.
    trained = train_tokenizer_like(english, urdu, vocab_size=60, min_frequency=1)
    extension = extend_tokenizer(english, trained)
    model = tiny_mlm(len(english))
    old = model.get_input_embeddings().weight.detach().clone()
    report = resize_and_initialise(model, extension, english, "focus", texts=urdu, trained=trained)
    weight = model.get_input_embeddings().weight.detach()
    torch.testing.assert_close(weight[: old.shape[0]], old, rtol=0, atol=0)
    without = set(report.details["no_fasttext_vector"])
    assert report.counts == {key: value for key, value in {
        "FOCUS": len(extension.new_tokens) - len(without),
        "FOCUS random (no fastText vector)": len(without)}.items() if value}
    assert len(without) < len(extension.new_tokens) / 2
    # FOCUS's anchors are the old pieces that the Urdu tokenizer also has (here: Urdu letters known to the English
    # tokenizer). A sparsemax combination lies inside their coordinate-wise range.
    shared = [index for token, index in english.get_vocab().items() if token in trained.get_vocab()]
    low, high = old[shared].min(0).values, old[shared].max(0).values
    combined = [extension.first_new_id + offset for offset, token in enumerate(extension.new_tokens)
                if token not in without]
    new = weight[combined]
    assert ((new >= low - 1e-5) & (new <= high + 1e-5)).all()
    mean_rows = torch.stack([old[report.details["pieces"][extension.new_tokens[i - extension.first_new_id]]].mean(0)
                             for i in combined])
    assert not torch.allclose(new, mean_rows, atol=1e-3)  # not the mean initialisation in disguise
