"""Bits per byte (transformer_zoo.analysis.bits_per_byte): a uniform model gives log2(V) bits per token exactly,
sliding windows score every token once, and both measures equal a hand-written token-by-token computation.

The comparisons with the token-by-token computation run in float64: batched and one-at-a-time forwards round
differently in float32, by amounts that depend on the CPU."""

import math

import pytest
import torch

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, ZooEncoderConfig, ZooEncoderForMaskedLM
from transformer_zoo.analysis.bits_per_byte import causal_lm_bits_per_byte, masked_lm_pseudo_bits_per_byte
from transformer_zoo.training.data.tokenization import train_tokenizer

TEXTS = ["the cat sat on the mat", "Das ist schön", "شروع الله کا نام", "a dog ran in the park and the cat sat"]


@pytest.fixture(scope="module")
def bpe():
    return train_tokenizer(TEXTS * 5, kind="bpe", vocab_size=300, show_progress=False)


@pytest.fixture(scope="module")
def wordpiece():
    return train_tokenizer(TEXTS * 5, kind="wordpiece", vocab_size=300, show_progress=False)


def decoder(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = ZooDecoderConfig.from_preset("tiny", vocab_size=len(tokenizer), tie_word_embeddings=False,
                                          max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id)
    return ZooDecoderForCausalLM(config).eval()


def test_uniform_causal_lm_gives_log2_vocab_bits_per_token_in_any_window(bpe):
    model = decoder(bpe)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()  # logits 0: uniform over the vocabulary
    size = sum(len(t.encode("utf-8")) for t in TEXTS)
    tokens = sum(len(ids) for ids in bpe(TEXTS, add_special_tokens=False)["input_ids"])
    for window, stride in ((64, 32), (5, 2), (3, 1)):
        result = causal_lm_bits_per_byte(model, bpe, TEXTS, window=window, stride=stride, batch_size=3)
        assert result["tokens"] == tokens and result["bytes"] == size
        assert result["bits"] == pytest.approx(tokens * math.log2(model.config.vocab_size), rel=1e-6)


def test_causal_bits_equal_a_token_by_token_sum(bpe):
    model = decoder(bpe, seed=3).double()
    start = bpe.bos_token_id
    expected = 0.0
    for text in TEXTS:
        ids = [start] + bpe(text, add_special_tokens=False)["input_ids"]
        for position in range(1, len(ids)):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids[:position]])).logits[0, -1]
            expected -= float(torch.log_softmax(logits, -1)[ids[position]]) / math.log(2)
    result = causal_lm_bits_per_byte(model, bpe, TEXTS, batch_size=2)
    assert result["bits"] == pytest.approx(expected, rel=1e-10)
    assert result["bits_per_byte"] == pytest.approx(expected / sum(len(t.encode()) for t in TEXTS), rel=1e-10)
    # A window shorter than a text: tokens keep at most window - 1 tokens of context, so the loss can only differ.
    short = causal_lm_bits_per_byte(model, bpe, TEXTS, window=4, stride=2)
    assert short["tokens"] == result["tokens"] and short["bits"] != pytest.approx(result["bits"], rel=1e-9)


def test_pseudo_log_likelihood_equals_masking_each_token_by_hand(wordpiece):
    torch.manual_seed(0)
    config = ZooEncoderConfig.from_preset("tiny", vocab_size=len(wordpiece), max_position_embeddings=64,
                                          pad_token_id=wordpiece.pad_token_id)
    model = ZooEncoderForMaskedLM(config).eval().double()
    expected, tokens = 0.0, 0
    for text in TEXTS:
        encoded = wordpiece(text, return_special_tokens_mask=True)
        for position, special in enumerate(encoded["special_tokens_mask"]):
            if special:
                continue
            ids = list(encoded["input_ids"])
            truth, ids[position] = ids[position], wordpiece.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, position]
            expected -= float(torch.log_softmax(logits, -1)[truth]) / math.log(2)
            tokens += 1
    result = masked_lm_pseudo_bits_per_byte(model, wordpiece, TEXTS, batch_size=5)
    assert result["tokens"] == tokens
    assert result["bits"] == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="more than max_length"):
        masked_lm_pseudo_bits_per_byte(model, wordpiece, ["the cat " * 40])


class _LogitsOnly(torch.nn.Module):
    """A masked LM seen only through its logits (no backbone/head split): the generic path."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, attention_mask=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


def test_word_l2r_masks_the_later_pieces_of_the_word_by_hand(wordpiece):
    torch.manual_seed(1)
    config = ZooEncoderConfig.from_preset("tiny", vocab_size=len(wordpiece), max_position_embeddings=64,
                                          pad_token_id=wordpiece.pad_token_id)
    model = ZooEncoderForMaskedLM(config).eval().double()
    # Words the tokenizer never saw whole, so that they are split into several pieces.
    texts = ["the cats sat on the mats", "Dasist schönes", "شروعات الله کا نام"]
    expected, multi_piece_words = 0.0, 0
    for text in texts:
        encoded = wordpiece(text, return_special_tokens_mask=True)
        words = encoded.word_ids()
        multi_piece_words += sum(words.count(w) > 1 for w in set(words) if w is not None)
        for position, special in enumerate(encoded["special_tokens_mask"]):
            if special:
                continue
            ids = list(encoded["input_ids"])
            truth = ids[position]
            for later in range(position, len(ids)):
                if words[later] == words[position]:
                    ids[later] = wordpiece.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, position]
            expected -= float(torch.log_softmax(logits, -1)[truth]) / math.log(2)
    assert multi_piece_words > 0  # else l2r would equal the plain PLL and the test would prove nothing
    l2r = masked_lm_pseudo_bits_per_byte(model, wordpiece, texts, batch_size=4, within_word="l2r")
    plain = masked_lm_pseudo_bits_per_byte(model, wordpiece, texts, batch_size=4)
    assert l2r["bits"] == pytest.approx(expected, rel=1e-10)
    # Both sums are exact to ~1e-12 in float64 (the by-hand check above holds to 1e-10), so a difference beyond
    # 1e-9 is a real one; a near-uniform tiny model makes it small (CI measured 7e-7 relative), not absent.
    assert l2r["tokens"] == plain["tokens"] and l2r["bits"] != pytest.approx(plain["bits"], rel=1e-9)
    # The head-at-the-masked-position path of a zoo encoder equals scoring the full logits.
    generic = masked_lm_pseudo_bits_per_byte(_LogitsOnly(model), wordpiece, texts, batch_size=3, within_word="l2r")
    assert generic["bits"] == pytest.approx(l2r["bits"], rel=1e-10)
    with pytest.raises(ValueError, match="within_word"):
        masked_lm_pseudo_bits_per_byte(model, wordpiece, texts, within_word="right")


def test_bad_inputs(bpe):
    model = decoder(bpe)
    with pytest.raises(ValueError, match="list of texts"):
        causal_lm_bits_per_byte(model, bpe, "one string")
    with pytest.raises(ValueError, match="non-empty"):
        causal_lm_bits_per_byte(model, bpe, ["", "x"])
    with pytest.raises(ValueError, match="stride"):
        causal_lm_bits_per_byte(model, bpe, TEXTS, window=4, stride=4)
    no_mask = train_tokenizer(TEXTS, kind="bpe", vocab_size=300, show_progress=False, special_tokens={"mask_token": None})
    with pytest.raises(ValueError, match="mask token"):
        masked_lm_pseudo_bits_per_byte(model, no_mask, TEXTS)
