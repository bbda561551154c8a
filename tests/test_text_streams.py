"""Text read as text for language-model pretraining (training/data/text_streams.py): documents keep their line
breaks, lines are never de-duplicated, and splits are whole documents or contiguous spans, so no text is in two
splits."""

import pytest

from transformer_zoo.training.data.corpora import corpus_card_info, load_corpus
from transformer_zoo.training.data.objectives import pack_sequences
from transformer_zoo.training.data.text_streams import MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT, span_split
from transformer_zoo.training.data.tokenization import train_tokenizer

# A play-like text: speaker names and short lines repeat, as in tiny shakespeare.
PLAY = "".join(f"{('ROMEO', 'JULIET', 'NURSE')[i % 3]}:\n{'Ay.' if i % 4 == 0 else f'Line {i} of the play.'}\n\n"
               for i in range(300))


def test_a_text_file_is_one_stream_cut_into_contiguous_spans(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text(PLAY)
    corpus = load_corpus(str(path), as_text_stream=True, validation_fraction=0.1, test_fraction=0.1)
    train, validation, test = (corpus[name]["text"] for name in ("train", "validation", "test"))
    assert (len(train), len(validation), len(test)) == (1, 1, 1)
    # Nothing de-duplicated, nothing reordered: the three spans are the file, in order (less trailing blank lines).
    assert (train[0] + validation[0] + test[0]).rstrip("\n") == PLAY.rstrip("\n")
    assert (train[0] + validation[0] + test[0]).count("ROMEO:\nAy.") == PLAY.count("ROMEO:\nAy.")
    # Cuts fall at line starts, near the fractions asked for.
    assert train[0].endswith("\n") and validation[0].endswith("\n")
    assert 0.75 < len(train[0]) / len(PLAY) < 0.85 and 0.05 < len(test[0]) / len(PLAY) < 0.15
    assert "contiguous spans" in corpus_card_info(corpus)["text_stream"]


def test_the_same_file_read_line_by_line_loses_its_repeated_lines(tmp_path):
    """The old reading, still what sample_by='line' does for tasks that want lines: the contrast that makes the
    stream reading necessary for language models."""
    path = tmp_path / "play.txt"
    path.write_text(PLAY)
    by_line = load_corpus(str(path), validation_fraction=0.1, test_fraction=0.1)
    lines = sum(len(by_line[name]) for name in ("train", "validation", "test"))
    assert lines < len([line for line in PLAY.splitlines() if line.strip()])   # repeated names and "Ay." went


def test_many_documents_split_by_document_and_identical_ones_are_kept_once(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    count = MIN_DOCUMENTS_TO_SPLIT_BY_DOCUMENT + 10
    for index in range(count):
        (folder / f"book{index:02d}.txt").write_text(f"Book {index}.\nA line.\nA line.\n")
    (folder / "copy.txt").write_text("Book 3.\nA line.\nA line.\n")   # the same document twice
    corpus = load_corpus(str(folder), as_text_stream=True, validation_fraction=0.1, test_fraction=0.1)
    documents = [text for name in ("train", "validation", "test") for text in corpus[name]["text"]]
    assert len(documents) == count and len(set(documents)) == count
    assert all(text.count("A line.") == 2 for text in documents)          # lines inside a document stay
    assert len(corpus["validation"]) == len(corpus["test"]) == 3


def test_the_built_in_shakespeare_streams_as_whole_plays():
    corpus = load_corpus("shakespeare", as_text_stream=True, validation_fraction=0.05, test_fraction=0.05)
    plays = {name: list(corpus[name]["text"]) for name in ("train", "validation", "test")}
    assert sum(len(texts) for texts in plays.values()) == 38
    assert (len(plays["validation"]), len(plays["test"])) == (2, 2)
    assert not set(plays["train"]) & (set(plays["validation"]) | set(plays["test"]))
    assert all("\n\n" in play and ":\n" in play for texts in plays.values() for play in texts)
    assert corpus_card_info(corpus)["text_stream"] == "whole documents with their line breaks"


def test_packing_a_stream_keeps_its_line_breaks(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text(PLAY)
    corpus = load_corpus(str(path), as_text_stream=True)
    tokenizer = train_tokenizer(corpus["train"]["text"], kind="bpe", vocab_size=300)
    blocks = pack_sequences(corpus["train"], tokenizer, 32)
    text = tokenizer.decode([token for block in blocks["input_ids"] for token in block], skip_special_tokens=True)
    assert "ROMEO:\nAy.\n\nJULIET:" in text


def test_span_split_edges():
    assert span_split(["a\nb\nc\nd\n"], 0.25, 0.0) == {"train": ["a\nb\nc\n"], "validation": ["d\n"], "test": []}
    # A cut never splits a line: it moves to the next line start.
    assert span_split(["one long line\nx\n"], 0.1, 0.1)["train"] == ["one long line\n"]


def test_contradicting_sample_by_is_refused(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text(PLAY)
    with pytest.raises(ValueError, match="sample_by='line' contradicts as_text_stream=True"):
        load_corpus(str(path), as_text_stream=True, sample_by="line")


def test_a_text_too_short_to_cut_is_refused(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("one line only\n")
    with pytest.raises(ValueError, match="too short to cut into train, validation and test spans"):
        load_corpus(str(path), as_text_stream=True)


def test_a_character_tokenizer_keeps_every_character_and_line_break():
    corpus_text = PLAY[:2000]
    tokenizer = train_tokenizer([corpus_text], kind="char", vocab_size=1000, show_progress=False)
    ids = tokenizer(corpus_text)["input_ids"]
    assert len(ids) == len(corpus_text)                                     # one token per character
    assert tokenizer.decode(ids) == corpus_text                             # line breaks and spaces come back
    assert len(tokenizer) == len(set(corpus_text)) + 5                      # the characters and 5 special tokens
    assert tokenizer.convert_ids_to_tokens(tokenizer("Z")["input_ids"]) == ["<unk>"]   # never seen
    assert tokenizer.eos_token == "</s>" and tokenizer.pad_token == "<pad>"


def test_the_pretraining_recipe_trains_a_character_model_on_a_text_stream(tmp_path):
    import json

    from transformer_zoo.training.pretrain.recipe import main

    path = tmp_path / "play.txt"
    path.write_text(PLAY)
    results = main(["--dataset", str(path), "--output_dir", str(tmp_path / "out"), "--tokenizer_kind", "char",
                    "--context_length", "32", "--model_overrides", "", "--max_steps", "3", "--eval_steps", "3",
                    "--per_device_batch_size", "4", "--progress_bar", "false", "--report_to", "none",
                    "--cpu_threads", "none", "--sample_tokens", "40"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["vocab_size"] <= len(set(PLAY)) + 5 + 64            # characters, specials, row padding at most
    assert results["validation"]["bits_per_byte_texts"] == results["test"]["bits_per_byte_texts"] == 1  # one span
    assert results["test"]["bits_per_byte_bytes"] > 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert "char tokenizer" in card and "bits_per_byte" in card


def test_pretraining_without_a_test_split_scores_the_validation_split_only(tmp_path):
    """nanoGPT's layout: a training and a validation text, no test (`--test_fraction 0`)."""
    from transformer_zoo.training.pretrain.recipe import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text(PLAY[:6000])
    (data / "validation.txt").write_text(PLAY[6000:8000])
    results = main(["--dataset", str(data), "--output_dir", str(tmp_path / "out"), "--tokenizer_kind", "char",
                    "--test_fraction", "0", "--context_length", "32", "--model_overrides", "", "--max_steps", "2",
                    "--per_device_batch_size", "4", "--progress_bar", "false", "--report_to", "none",
                    "--cpu_threads", "none", "--sample_tokens", "5"])
    assert results["test"] == {}
    # The corpus reader strips white space around each document (the validation file starts mid-line with one).
    assert results["validation"]["bits_per_byte_bytes"] == len(PLAY[6000:8000].strip().encode())
    assert "## Evaluation" in (tmp_path / "out" / "README.md").read_text()
