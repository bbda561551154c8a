"""The domain-adaptation recipe's data: the Urdu corpus in fixed splits and normalised slices of it, English text of
the same domain (what adaptation may forget), and English-Urdu pairs for trans-tokenization."""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np

from ...text.urdu import normalize_urdu, split_sentences
from ..data.corpora import corpus_card_info, load_corpus

DEFAULT_DATASET = "hadith-ur"


@dataclass
class UrduData:
    corpus: datasets.DatasetDict  # the fixed splits as loaded (not normalised), with labels if the source has them
    adaptation_texts: list[str]  # normalised training paragraphs used for adaptation
    eval_texts: list[str]  # normalised held-out paragraphs (validation split): tokenizer statistics, the curve
    test_texts: list[str]  # normalised test-split paragraphs: the reported bits per byte
    card: dict
    options: dict  # normalize_urdu options


def normalise_options(args) -> dict:
    return dict(remove_diacritics=args.remove_diacritics, digits=args.digits, zwnj=args.zwnj,
                punctuation=args.urdu_punctuation)


def normalise_texts(texts, options: dict) -> list[str]:
    return [text for text in (normalize_urdu(t, **options) for t in texts) if text]


def normalise_dataset(dataset: datasets.Dataset, options: dict) -> datasets.Dataset:
    dataset = dataset.map(lambda batch: {"text": [normalize_urdu(t, **options) for t in batch["text"]]},
                          batched=True, desc="normalising Urdu")
    return dataset.filter(lambda batch: [bool(t) for t in batch["text"]], batched=True)


def load_urdu_data(args) -> UrduData:
    """Fixed, de-duplicated splits (load_corpus, seed --data_seed, 80/10/10). The adaptation text is a deterministic
    shuffle of the training split cut to --max_train_paragraphs, the held-out text one of the validation split;
    only those slices are normalised (the whole corpus would take minutes)."""
    corpus = load_corpus(args.dataset, text_column=args.text_column, seed=args.data_seed, encoding=args.encoding,
                         validation_fraction=0.1, test_fraction=0.1)
    if "text" not in corpus["train"].column_names:
        raise ValueError(f"{args.dataset!r} gives columns {corpus['train'].column_names}; domain adaptation needs "
                         "plain text: pass --text_column, or text files (.txt: one paragraph per line).")
    for split in ("validation", "test"):
        if len(corpus[split]) == 0:
            raise ValueError(f"{args.dataset!r} left an empty {split} split; provide more text.")
    options = normalise_options(args)
    train_split = corpus["train"].shuffle(seed=args.data_seed)
    if args.max_train_paragraphs:
        train_split = train_split.select(range(min(args.max_train_paragraphs, len(train_split))))
    held_out = {}
    for split in ("validation", "test"):
        shuffled = corpus[split].shuffle(seed=args.data_seed)
        held_out[split] = normalise_texts(shuffled.select(range(min(args.eval_paragraphs, len(shuffled))))["text"],
                                          options)
    return UrduData(corpus, normalise_texts(train_split["text"], options), held_out["validation"], held_out["test"],
                    corpus_card_info(corpus), options)


@dataclass
class EnglishData:
    corpus: datasets.DatasetDict
    train_texts: list[str]  # for fitting a missing LM head on English
    test_texts: list[str]


def load_english_data(args) -> EnglishData | None:
    """English text of the same domain (what adaptation may forget), split like the Urdu corpus."""
    if args.english_dataset in (None, "none"):
        return None
    corpus = load_corpus(args.english_dataset, seed=args.data_seed, validation_fraction=0.1, test_fraction=0.1)
    train = corpus["train"].shuffle(seed=args.data_seed)
    test = corpus["test"].shuffle(seed=args.data_seed)
    return EnglishData(corpus, list(train.select(range(min(args.max_train_paragraphs or len(train), len(train))))["text"]),
                       list(test.select(range(min(args.eval_paragraphs, len(test))))["text"]))


def sentences_dataset(texts: list[str]) -> datasets.Dataset:
    """One row per sentence: pack_sequences then ends each sentence with the end token ([SEP] for BERT)."""
    return datasets.Dataset.from_dict({"text": [s for text in texts for s in split_sentences(text)]})


def stratified_subset(dataset: datasets.Dataset, count: int | None, seed: int) -> datasets.Dataset:
    """`count` rows drawn across the label strata: row for row what `dataset.train_test_split(test_size=count,
    stratify_by_column="label", seed=seed)["test"]` returns (tests/test_domain_adaptation.py compares the two).

    train_test_split reads the labels as `np.asarray(dataset.with_format("numpy")["label"])`, which in datasets 5 walks
    a lazy column one row at a time: 1.7-2.1 s per subset of hadith-ur's 26,904-row train split, 0.2 s of its
    3,363-row splits. Here the labels are read as one batch (0.13-0.36 s and 0.02-0.03 s) and handed to the same draw
    datasets uses, with the same generator."""
    if count is None or count >= len(dataset):
        return dataset
    from datasets.utils.stratify import stratified_shuffle_split_generate_indices

    if not isinstance(dataset.features.get("label"), datasets.ClassLabel):
        raise ValueError(f"a stratified subset needs a ClassLabel 'label' column; this dataset has "
                         f"{dataset.features.get('label')!r}.")
    labels = dataset.select_columns(["label"]).with_format("numpy")[:]["label"]
    try:
        _, test_indices = next(stratified_shuffle_split_generate_indices(
            labels, len(dataset) - count, count, rng=np.random.default_rng(seed)))
    except ValueError as error:
        if str(error) == "Minimum class count error":
            raise ValueError("a stratified subset needs at least 2 rows of every label; the least populated label "
                             "has 1.") from error
        raise
    return dataset.select(test_indices)


def parallel_pairs(args, data: UrduData) -> list[tuple[str, str]]:
    """(english, urdu) pairs for trans-tokenization, the Urdu side normalised like the adaptation text."""
    pairs: list[tuple[str, str]] = []
    if args.parallel_dataset not in (None, "none"):
        corpus = load_corpus(args.parallel_dataset, seed=args.data_seed)
        for split in corpus.values():
            if not {"source", "target"} <= set(split.column_names):
                raise ValueError(f"--parallel_dataset {args.parallel_dataset!r} has columns {split.column_names}; "
                                 "it needs English 'source' and Urdu 'target' columns (e.g. quran-en-ur).")
            pairs.extend(zip(split["source"], normalise_texts(split["target"], data.options)))
    if args.parallel_in_domain and args.dataset == DEFAULT_DATASET:
        # Only the translations of paragraphs the adaptation reads anyway: never a held-out paragraph.
        wanted = set(data.adaptation_texts)
        train = load_corpus("hadith-en-ur", seed=args.data_seed)["train"]
        for english, urdu in zip(train["source"], normalise_texts(train["target"], data.options)):
            if urdu in wanted:
                pairs.append((english, urdu))
    pairs = [(en, ur) for en, ur in pairs if en and ur]
    if not pairs:
        raise ValueError("--embedding_init trans-tokenization found no parallel pairs: pass --parallel_dataset.")
    return pairs
