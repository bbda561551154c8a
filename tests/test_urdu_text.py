"""Urdu normalisation, sentence splitting and tokenizer statistics on tricky, hand-checked strings."""

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from transformer_zoo.text.tokenizer_stats import statistics_table, tokenizer_statistics
from transformer_zoo.text.urdu import normalize_urdu, split_sentences


# ------------------------------------------------------------------------------------------------ code points
@pytest.mark.parametrize("text, expected", [
    ("كتاب", "کتاب"),                    # Arabic kaf U+0643 -> keheh U+06A9
    ("هذه", "ہذہ"),                      # Arabic heh U+0647 -> heh goal U+06C1
    ("يہ علي", "یہ علی"),               # Arabic yeh U+064A -> farsi yeh U+06CC
    ("مصطفى", "مصطفی"),                 # alef maksura U+0649 -> U+06CC
    ("مدرسة", "مدرسۃ"),                 # teh marbuta U+0629 -> U+06C3
    ("ڪتاب", "کتاب"),                    # swash kaf U+06AA
])
def test_arabic_code_points_become_urdu(text, expected):
    assert normalize_urdu(text) == expected


def test_presentation_forms_and_ligature_are_folded():
    # contextual glyphs (U+FE.., U+FB..) as PDF extraction emits them
    assert normalize_urdu("\ufee3\ufea0\ufbad \ufb94\ufbfe\u0627") == "مجھ گیا"
    # the salawat ligature U+FDFA becomes the Urdu spelling of its words
    assert normalize_urdu("نبی \ufdfa نے") == "نبی صلی اللہ علیہ وسلم نے"


def test_mixed_scripts_keep_latin_text_and_its_punctuation():
    text = "Hello, world. یہ كتاب 2.5 ہے? OK."
    assert normalize_urdu(text) == "Hello, world. یہ کتاب 2.5 ہے؟ OK."


# ------------------------------------------------------------------------------------------------ diacritics
def test_diacritics_removed_or_kept():
    text = "اَلْحَمْدُ لِلّٰہِ"  # fatha, sukun, damma, kasra, shadda, khari zabar
    assert normalize_urdu(text) == "الحمد للہ"
    kept = normalize_urdu(text, remove_diacritics=False)
    assert "\u064e" in kept and "\u0670" in kept and "\u0651" in kept


def test_honorific_signs_and_tatweel_are_removed():
    assert normalize_urdu("ابوبکر \u0613 نے کہـــا") == "ابوبکر نے کہا"


def test_hamza_and_madda_compose_before_diacritics_are_removed():
    # decomposed sequences must become the letters, not lose their hamza/madda as "diacritics"
    assert normalize_urdu("\u0627\u0653") == "\u0622"          # ا + madda -> آ
    assert normalize_urdu("\u06c1\u0654") == "\u06c2"          # ہ + hamza -> ۂ
    assert normalize_urdu("\u06d2\u0654") == "\u06d3"          # ے + hamza -> ۓ
    assert normalize_urdu("\u06cc\u0654") == "\u0626"          # ی + hamza (no precomposed form) -> ئ
    assert normalize_urdu("\u0647\u0654") == "\u06c2"          # Arabic heh + hamza -> ۂ via heh goal
    assert normalize_urdu("\u064a\u0654") == "\u0626"          # Arabic yeh + hamza -> ئ (not ی + hamza)


# ------------------------------------------------------------------------------------------------ digits
def test_digits_three_modes():
    text = "سنہ ١٤٣٢ اور ۱۹۴۷ اور 2024"
    assert normalize_urdu(text) == "سنہ 1432 اور 1947 اور 2024"
    assert normalize_urdu(text, digits="urdu") == "سنہ ۱۴۳۲ اور ۱۹۴۷ اور ۲۰۲۴"
    assert normalize_urdu(text, digits="keep") == text


# ------------------------------------------------------------------------------------------------ joiners
def test_zero_width_characters():
    text = "ذمہ\u200cدار\u200d \u200fکتاب\u200b\ufeff"
    assert normalize_urdu(text) == "ذمہ دار کتاب"
    assert normalize_urdu(text, zwnj="remove") == "ذمہدار کتاب"
    assert normalize_urdu(text, zwnj="keep") == "ذمہ\u200cدار کتاب"


def test_white_space_is_collapsed():
    assert normalize_urdu("  ایک\u00a0\u00a0دو\r\n\tتین  ") == "ایک دو تین"


# ------------------------------------------------------------------------------------------------ punctuation
def test_ascii_punctuation_after_urdu_becomes_urdu():
    assert normalize_urdu("کیا حال ہے? ٹھیک ہوں, شکریہ; اچھا.") == "کیا حال ہے؟ ٹھیک ہوں، شکریہ؛ اچھا۔"
    assert normalize_urdu("قیمت ہے.5") == "قیمت ہے.5"  # a '.' before a digit is a decimal point
    assert normalize_urdu("ہے?", punctuation=False) == "ہے?"


def test_bad_options_name_the_choices():
    with pytest.raises(ValueError, match="digits must be one of ascii, urdu, keep"):
        normalize_urdu("ایک", digits="latin")
    with pytest.raises(ValueError, match="zwnj must be one of space, remove, keep"):
        normalize_urdu("ایک", zwnj="drop")
    with pytest.raises(TypeError, match="expects a str"):
        normalize_urdu(None)


# ------------------------------------------------------------------------------------------------ sentences
def test_sentence_splitting():
    text = "گا۔ پس جس کی ہجرت ( ترک وطن ) ہو؟ ہاں! ”ٹھیک۔” قیمت 3.5 ہے۔ آخری"
    assert split_sentences(text) == ["گا۔", "پس جس کی ہجرت ( ترک وطن ) ہو؟", "ہاں!", "”ٹھیک۔”", "قیمت 3.5 ہے۔",
                                     "آخری"]
    assert split_sentences("ایک۔۔۔ دو؟! تین") == ["ایک۔۔۔", "دو؟!", "تین"]
    assert split_sentences("") == []


# ------------------------------------------------------------------------------------------------ statistics
def _toy_wordpiece():
    vocab = {"[UNK]": 0, "ab": 1, "##c": 2, "a": 3, "##b": 4, "##d": 5, "x": 6, "!": 7}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_tokenizer_statistics_hand_computed():
    tokenizer = _toy_wordpiece()
    # words: abc -> ab ##c (2); ab -> ab (1); abd -> ab ##d (2); ad -> a ##d (2, letter by letter);
    # yz -> [UNK] (1, unknown); x -> x (1, single-character word, not counted as "split"). '!' is not a word.
    stats = tokenizer_statistics(tokenizer, ["abc ab abd!", "ad yz x", "   "])
    assert stats["texts"] == 2
    assert stats["words"] == 6
    assert stats["pieces_in_words"] == 9
    assert stats["fertility"] == pytest.approx(9 / 6)
    assert stats["single_character_word_share"] == pytest.approx(1 / 5)  # ad, of the 5 words of >= 2 characters
    assert stats["unknown_share"] == pytest.approx(1 / 10)  # 10 pieces in all, including '!'
    assert stats["unknown_word_share"] == pytest.approx(1 / 6)
    table = statistics_table({"toy": stats})
    assert "| fertility | 1.500 |" in table


def test_tokenizer_statistics_refuses_empty_input():
    with pytest.raises(ValueError, match="no non-empty texts"):
        tokenizer_statistics(_toy_wordpiece(), ["", "  "])
