"""Tiny models, tokenizers and Urdu data for the domain-adaptation tests (tests/test_domain_adaptation.py,
tests/test_adaptation_downstream.py, tests/test_embedding_init.py)."""

import json
import random

import torch

from transformer_zoo import ZooEncoderConfig, ZooEncoderForMaskedLM
from transformer_zoo.training.data.tokenization import train_tokenizer

ENGLISH = ["the cat sat on the mat", "a dog ran in the park", "we read books at night", "she has a red hat",
           "they play in the sun", "it is a good day"] * 20
URDU_WORDS = ["کتاب", "پانی", "لڑکا", "لڑکی", "گھر", "اسکول", "دوست", "کھانا", "بازار", "شہر", "آسمان", "درخت",
              "ہے", "تھا", "میں", "نے", "کو", "کی", "کا", "اور"]


def urdu_sentences(count: int, seed: int = 0, words=URDU_WORDS) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 9))) + "۔" for _ in range(count)]


def english_wordpiece_tokenizer():
    """A WordPiece tokenizer trained on English only: every Urdu letter is unknown to it."""
    return train_tokenizer(ENGLISH, kind="wordpiece", vocab_size=120, show_progress=False)


def tiny_mlm(vocab_size: int) -> ZooEncoderForMaskedLM:
    torch.manual_seed(0)
    return ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", vocab_size=vocab_size, pad_token_id=0))


def save_english_mlm(folder, tokenizer):
    """A tiny English masked LM with its tokenizer, saved as the recipe's --model."""
    tiny_mlm(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_adaptation_flags(model_dir, data_file, output_dir, changes: dict[str, str]) -> list[str]:
    """The recipe's flags for a few steps of adaptation on tiny data, without the English sample or the downstream
    check, with `changes` (flag -> value) on top."""
    flags = {"--model": str(model_dir), "--dataset": str(data_file), "--output_dir": str(output_dir),
             "--max_train_paragraphs": "none", "--eval_paragraphs": "12", "--urdu_vocab_size": "200",
             "--min_frequency": "1", "--context_length": "32", "--per_device_batch_size": "8",
             "--learning_rate": "3e-3", "--eval_steps": "none", "--bpb_sentences": "4", "--curve_sentences": "3",
             "--english_dataset": "none", "--downstream": "false", "--progress_bar": "false", "--report_to": "none",
             **changes}
    return [item for flag_and_value in flags.items() for item in flag_and_value]


def write_urdu_text(path, paragraphs: int):
    """Unlabelled Urdu, one paragraph a line."""
    path.write_text("\n".join(" ".join(urdu_sentences(2, seed=i)) for i in range(paragraphs)) + "\n", encoding="utf-8")
    return path


def write_labelled_urdu(path, paragraphs: int):
    """Labelled Urdu JSONL: two classes with different word distributions (a learnable "which source" task)."""
    rows = [{"text": " ".join(urdu_sentences(2, seed=i, words=URDU_WORDS[:12] if i % 2 else URDU_WORDS[8:])),
             "label": "odd" if i % 2 else "even"} for i in range(paragraphs)]
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    return path
