"""The fine-tuning recipe's data: a labelled task from a built-in corpus, a user's file or a Hub id, split into
train/validation/test and checked (the columns the task needs, non-empty splits, no class only evaluation shows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import datasets

from ..data.corpora import BUILTIN_CORPORA, corpus_card_info, load_corpus


@dataclass
class TaskData:
    corpus: datasets.DatasetDict
    label_names: list[str] | None = None
    card: dict = field(default_factory=dict)
    # {split: {column: rows cut at --max_length}}, set by finetuning.build_features (features.take_truncation_counts).
    truncated: dict = field(default_factory=dict)


def load_task_data(args) -> TaskData:
    if args.task == "token-classification":
        return load_token_classification_data(args)
    corpus = load_corpus(
        args.dataset, text_column=args.text_column, encoding=args.encoding, label_column=args.label_column, source_column=args.source_column,
        target_column=args.target_column, max_examples=args.max_examples,
        validation_fraction=args.validation_fraction, test_fraction=args.test_fraction, seed=args.seed,
    )
    columns = corpus["train"].column_names
    needs = {"sequence-classification": ("text", "label"), "causal-lm": ("text",), "seq2seq": ("source", "target"),
             "image-classification": ("image", "label")}[args.task]
    missing = [column for column in needs if column not in columns]
    if missing:
        raise ValueError(f"--task {args.task} needs the columns {', '.join(needs)} but {args.dataset!r} gives "
                         f"{', '.join(columns)}: pass --text_column/--label_column (or --source_column/"
                         "--target_column), or pick a matching --dataset.")
    for split in ("validation", "test"):
        if len(corpus[split]) == 0:
            raise ValueError(f"The {split} split is empty: set --{split}_fraction above 0 (or provide that split).")
    if args.text_pair_column:
        raise ValueError("--text_pair_column needs the pair kept by the data loader; load_corpus keeps one text "
                         "column only (not supported yet).")
    names = corpus["train"].features["label"].names if "label" in columns else None
    if names is not None:
        check_every_label_is_trained(corpus, names)
    return TaskData(corpus, names, corpus_card_info(corpus))


def check_every_label_is_trained(corpus, names: list[str]) -> None:
    """Refuse evaluation splits with classes the training split never shows: the model would get untrained output
    rows for them and the metrics would read as usual."""
    from collections import Counter

    trained = set(corpus["train"]["label"])
    unseen = {}
    for split in ("validation", "test"):
        for label, count in Counter(corpus[split]["label"]).items():
            if label not in trained:
                unseen.setdefault(names[label], {})[split] = count
    if unseen:
        listed = "; ".join(f"{name!r} ({', '.join(f'{count} {split}' for split, count in splits.items())})"
                           for name, splits in sorted(unseen.items()))
        raise ValueError(
            f"Classes absent from the training split appear in evaluation: {listed}. The model cannot learn them: "
            "add training examples of these classes, remove them from the evaluation data, or (one file) use more "
            "data or another --seed so that every class reaches the training split.")


def load_token_classification_data(args) -> TaskData:
    """Word lists with per-word tags from a local json/jsonl/csv/parquet file (or Hub id), split like load_corpus."""
    source = args.dataset
    path = Path(source).expanduser()
    if path.exists():
        if path.is_file() and path.stat().st_size == 0:
            raise ValueError(f"The data file {path} is empty.")
        builder = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(path.suffix.lower())
        if builder is None:
            raise ValueError(f"Token classification reads .json/.jsonl/.parquet files with a {args.tokens_column!r} "
                             f"column of word lists and a {args.tags_column!r} column of tags; got {path}.")
        loaded = datasets.load_dataset(builder, data_files={"train": str(path)})
    elif source in BUILTIN_CORPORA:
        raise ValueError(f"The built-in {source!r} has no word-level tags; token classification needs a file with "
                         f"{args.tokens_column!r} and {args.tags_column!r} columns.")
    else:
        if "/" not in source:
            raise ValueError(f"Data file not found: {source!r}.")
        loaded = datasets.load_dataset(source)
    dataset = loaded["train"]
    for column, flag in ((args.tokens_column, "--tokens_column"), (args.tags_column, "--tags_column")):
        if column not in dataset.column_names:
            raise ValueError(f"{flag} {column!r} is not a column of {source} (columns: "
                             f"{', '.join(dataset.column_names)}).")
    dataset = dataset.select_columns([args.tokens_column, args.tags_column]).rename_columns(
        {args.tokens_column: "tokens", args.tags_column: "tags"} if args.tokens_column != "tokens" or
        args.tags_column != "tags" else {})
    if len(dataset) == 0:
        raise ValueError(f"{source} has no examples.")
    feature = dataset.features["tags"]
    inner = getattr(feature, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        names = list(inner.names)
    else:
        values = sorted({tag for tags in dataset["tags"] for tag in tags}, key=str)
        if all(isinstance(v, str) for v in values):
            names = sorted(values, key=lambda name: (name != "O", name))  # "O" first, as in CoNLL
            index = {name: i for i, name in enumerate(names)}
            dataset = dataset.map(lambda row: {"tags": [index[t] for t in row["tags"]]})
        else:
            names = [str(i) for i in range(int(max(values)) + 1)]
    if args.max_examples and args.max_examples < len(dataset):
        dataset = dataset.shuffle(seed=args.seed).select(range(args.max_examples))
    test_size = max(1, round(len(dataset) * args.test_fraction))
    validation_size = max(1, round(len(dataset) * args.validation_fraction))
    if len(dataset) - test_size - validation_size < 1:
        raise ValueError(f"{source} has only {len(dataset)} examples: too few for the validation and test splits.")
    first = dataset.train_test_split(test_size=test_size, seed=args.seed)
    second = first["train"].train_test_split(test_size=validation_size, seed=args.seed)
    corpus = datasets.DatasetDict(train=second["train"], validation=second["test"], test=first["test"])
    card = {"name": path.name if path.exists() else source, "provenance": str(path.resolve()) if path.exists()
            else f"Hugging Face Hub data set {source}", "licence": "unknown (supplied by the user)",
            "label_names": names, "sizes": {k: len(v) for k, v in corpus.items()}}
    return TaskData(corpus, names, card)
