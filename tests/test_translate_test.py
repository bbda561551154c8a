"""Translate-test (transformer_zoo/training/adaptation/translate_test.py): the Urdu task's own test subset, in
English, with its labels; the English task's training splits; translations cached; bad set-ups refused."""

import types

import datasets
import pytest

from transformer_zoo.training.adaptation import translate_test
from transformer_zoo.training.adaptation.data import stratified_subset
from transformer_zoo.training.adaptation.recipe import main


def labelled(texts, labels):
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["even", "odd"])})
    return datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)


@pytest.fixture
def tiny_translator(tmp_path):
    """A randomly initialised zoo encoder-decoder with a small BPE tokenizer, saved as a model folder."""
    from transformer_zoo.analysis.reproduce.translation_setup import ModelShape, build_model
    from transformer_zoo.training.data.tokenization import train_tokenizer

    tokenizer = train_tokenizer(["یہ ایک جملہ ہے", "this is a sentence", "وہ گھر گیا", "he went home"] * 20,
                                kind="bpe", vocab_size=300, show_progress=False)
    model = build_model(ModelShape(hidden_size=16, layers=1, heads=2, intermediate_size=32), tokenizer, 16, seed=0)
    model.save_pretrained(tmp_path / "ur-en")
    tokenizer.save_pretrained(tmp_path / "ur-en")
    return tmp_path / "ur-en"


def test_the_test_set_is_the_urdu_subset_in_english_with_its_labels(tmp_path, tiny_translator, monkeypatch):
    urdu = datasets.DatasetDict(train=labelled(["ا"] * 4, [0, 1, 0, 1]), validation=labelled(["ب"] * 2, [0, 1]),
                                test=labelled([f"جملہ {i}" for i in range(12)], [i % 2 for i in range(12)]))
    english = datasets.DatasetDict(train=labelled(["a b", "c d"] * 3, [0, 1] * 3),
                                   validation=labelled(["e", "f"], [0, 1]), test=labelled(["g", "h"], [0, 1]))
    args = types.SimpleNamespace(downstream_test_examples=6, data_seed=3, progress_bar=False)
    cache = tmp_path / "shared" / "translations.jsonl"
    corpus, quality = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    subset = stratified_subset(urdu["test"], 6, 3)
    assert corpus["test"]["label"] == subset["label"] and len(corpus["test"]) == 6
    assert all(isinstance(text, str) for text in corpus["test"]["text"])
    assert corpus["test"].features == english["test"].features
    assert corpus["train"] is english["train"] and corpus["validation"] is english["validation"]
    assert quality["paragraphs"] == 6 and quality["with_reference"] == 0  # made-up Urdu: no hadith to score against
    # a second call reads the cached translations instead of translating again
    monkeypatch.setattr("transformer_zoo.translation.translate", lambda *a, **k: pytest.fail("translated again"))
    again, _ = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    assert again["test"]["text"] == corpus["test"]["text"]
    # another subset of paragraphs is translated again, not read from a cache made for other paragraphs
    args.data_seed = 4
    monkeypatch.setattr("transformer_zoo.translation.translate",
                        lambda model, tokenizer, sources, **k: ["x"] * len(sources))
    other, _ = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    assert other["test"]["text"] == ["x"] * 6
    with pytest.raises(ValueError, match="not a saved model folder"):
        translate_test.translated_test_corpus(args, urdu, english, str(tmp_path / "missing"), tmp_path / "o.jsonl")


def test_translate_test_needs_the_unadapted_english_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--downstream_translate_test", str(tmp_path), "--output_dir", str(tmp_path / "out")])
    assert "needs --adapt false" in capsys.readouterr().err


def test_the_cache_flag_needs_translate_test(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--downstream_translate_test_cache", str(tmp_path / "t.jsonl"), "--output_dir", str(tmp_path / "out")])
    assert "--downstream_translate_test_cache" in capsys.readouterr().err


def test_a_model_folders_decoding_file_splits_long_paragraphs_and_keys_the_cache(tmp_path, tiny_translator,
                                                                               monkeypatch):
    """A folder saved by the translation study says how to decode it (translation_decoding.json): translate-test
    translates a paragraph longer than the training length in sentence pieces, reports the counts, and does not
    reuse translations cached before the folder said so."""
    from transformer_zoo import translation

    sentence = "یہ ایک جملہ ہے۔ وہ گھر گیا۔ "
    urdu = datasets.DatasetDict(train=labelled(["ا"] * 4, [0, 1, 0, 1]), validation=labelled(["ب"] * 2, [0, 1]),
                                test=labelled([sentence * 3, "وہ گھر گیا۔"] * 2, [0, 1, 0, 1]))
    english = datasets.DatasetDict(train=labelled(["a b", "c d"] * 3, [0, 1] * 3),
                                   validation=labelled(["e", "f"], [0, 1]), test=labelled(["g", "h"], [0, 1]))
    args = types.SimpleNamespace(downstream_test_examples=4, data_seed=0, progress_bar=False)
    cache = tmp_path / "translations.jsonl"
    _, plain = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    assert plain["decoding"] is None and plain["long_sources"]["split"] == 0
    translation.save_decoding_defaults(tiny_translator, max_source_tokens=12, source_sentences="urdu")
    calls = []
    real = translation.translate
    monkeypatch.setattr("transformer_zoo.translation.translate",
                        lambda *a, **k: calls.append(k) or real(*a, **k))
    _, split = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    assert len(calls) == 1 and calls[0]["max_source_tokens"] == 12  # the old cache was not reused
    assert split["decoding"] == {"max_source_tokens": 12, "source_sentences": "urdu"}
    assert split["long_sources"]["split"] == 2 and split["long_sources"]["pieces"] > 2
    _, again = translate_test.translated_test_corpus(args, urdu, english, str(tiny_translator), cache)
    assert len(calls) == 1 and again["long_sources"] == split["long_sources"]  # read back, counts included
    with pytest.raises(ValueError, match="Unknown sentence splitter 'french'"):
        translation.save_decoding_defaults(tiny_translator, max_source_tokens=12, source_sentences="french")
