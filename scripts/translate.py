#!/usr/bin/env python
"""Translate text with a sequence-to-sequence checkpoint: one sentence per line in, one translation per line out,
batched beam search; with --reference, score the output with sacreBLEU (BLEU and chrF, signatures printed).

transformers 5 removed the "translation" pipeline; this is its replacement for the zoo's encoder-decoder (and any
AutoModelForSeq2SeqLM whose code ships with transformers).

    python scripts/translate.py outputs/models/bible-en-es --input test.en --output test.es
    echo "In the beginning God created the heaven and the earth." | python scripts/translate.py outputs/models/bible-en-es
    python scripts/translate.py MODEL --input test.en --reference test.es --output hyp.es

Empty input lines stay empty lines in the output, so the output lines up with the input. Exit status: 0 on
success, 2 for a bad model folder or input (the message says which and what to do).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}.")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="translate.py", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL",
                        help="Folder of a saved sequence-to-sequence model with its tokenizer (e.g. from "
                        "scripts/reproduce.py --save-models, or recipes/pretrain.py --family seq2seq).")
    parser.add_argument("--input", default="-",
                        help="UTF-8 text file, one source sentence per line; '-' (the default) reads stdin.")
    parser.add_argument("--output", default="-", help="Where to write the translations; '-' (default) is stdout.")
    parser.add_argument("--reference", default=None,
                        help="UTF-8 file of reference translations, line by line with the input: prints sacreBLEU "
                        "BLEU and chrF with their signatures on stderr (and as JSON with --scores).")
    parser.add_argument("--scores", default=None, help="With --reference: also write the scores to this JSON file.")
    parser.add_argument("--num_beams", type=positive_int, default=4, help="Beam size; 1 is greedy. Default: 4.")
    parser.add_argument("--length_penalty", type=float, default=0.6,
                        help="Exponent of transformers' length normalisation of beam scores (sum log p / "
                        "length ** penalty); 0.6 as Vaswani et al. (whose form is Wu et al.'s). Default: 0.6.")
    parser.add_argument("--batch_size", type=positive_int, default=32, help="Sentences per batch. Default: 32.")
    parser.add_argument("--max_source_tokens", type=positive_int, default=None,
                        help="The longest source the model reads, in tokens (end token included); longer ones are "
                        "split (--split_sentences) or truncated, with a warning. Default: the length the model was "
                        "trained on where its folder says (translation_decoding.json, written by scripts/reproduce.py "
                        "--save-models), else the model's position table, if it has one.")
    parser.add_argument("--split_sentences", choices=["auto", "urdu", "english", "none"], default="auto",
                        help="Translate a source longer than --max_source_tokens in pieces of whole sentences, split "
                        "the way this names (urdu: at ۔ ؟ ! and the rest; english: at . ! ? before a capital), and "
                        "join the pieces' translations; none truncates it instead. Default: auto, the model folder's "
                        "translation_decoding.json if it has one, else none.")
    parser.add_argument("--extra_length", type=int, default=50,
                        help="An output may be up to the longest source of its batch plus this many tokens "
                        "(Vaswani et al.: 50). Default: 50.")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda. Default: cpu.")
    parser.add_argument("--tokenize", default="13a",
                        help="sacreBLEU tokenizer for --reference scoring: 13a (default, WMT's), intl, char, "
                        "flores200, ...")
    return parser.parse_args(argv)


def read_lines(path: str, what: str) -> list[str]:
    if path == "-":
        return [line.rstrip("\n") for line in sys.stdin]
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"The {what} file {path} does not exist.")
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"The {what} file {path} is not UTF-8 (byte {error.start}); convert it, e.g. with iconv.")


def load_model(folder: str, device: str):
    from transformers import AutoModelForSeq2SeqLM
    from transformer_zoo.modeling_zoo_checks import read_model_config

    import transformer_zoo  # noqa: F401  (registers the zoo's classes with the Auto* factories)
    from transformer_zoo.training.data.tokenization import load_tokenizer

    path = Path(folder)
    if not (path / "config.json").is_file():
        raise ValueError(f"{folder} is not a saved model folder (no config.json). Pass the folder that "
                         "save_pretrained wrote.")
    config = read_model_config(folder)  # no trust_remote_code: only code already installed runs
    if not getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{folder} holds a {config.model_type} model, which is not an encoder-decoder; translation "
                         "needs a sequence-to-sequence model.")
    tokenizer = load_tokenizer(None, folder, model_flag="the model folder",
                               fix="save the tokenizer into it (tokenizer.save_pretrained)")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).to(device)
    return model, tokenizer


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        sources = read_lines(args.input, "input")
        references = read_lines(args.reference, "reference") if args.reference else None
        if references is not None and len(references) != len(sources):
            raise ValueError(f"--reference has {len(references)} lines but the input has {len(sources)}: they must "
                             "pair up line by line.")
        if args.input == "-" and args.reference == "-":
            raise ValueError("The input and the reference cannot both come from stdin.")
        model, tokenizer = load_model(args.model, args.device)
    except (ValueError, OSError) as error:
        print(f"translate.py: {error}", file=sys.stderr)
        return 2
    from transformer_zoo.translation import corpus_scores, load_decoding_defaults, sentence_splitter, translate

    defaults = load_decoding_defaults(args.model)
    splitter = defaults.get("split_sentences") if args.split_sentences == "auto" else \
        sentence_splitter(args.split_sentences)
    limit = args.max_source_tokens or defaults.get("max_source_tokens")
    filled = [i for i, line in enumerate(sources) if line.strip()]
    translations = [""] * len(sources)
    counts = {}
    if filled:
        outputs = translate(model, tokenizer, [sources[i] for i in filled], num_beams=args.num_beams,
                            length_penalty=args.length_penalty, batch_size=args.batch_size,
                            max_source_tokens=limit, extra_length=args.extra_length, split_sentences=splitter,
                            counts=counts, progress=args.output != "-")
        if counts.get("split"):
            print(f"{counts['split']} of {len(filled)} sources were longer than {limit} tokens and went in "
                  f"{counts['pieces']} pieces of whole sentences.", file=sys.stderr)
        for i, text in zip(filled, outputs):
            translations[i] = text
    text = "".join(line + "\n" for line in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    if references is not None:
        scores = corpus_scores(translations, references, tokenize=args.tokenize)
        print(f"BLEU {scores['bleu']:.2f} ({scores['bleu_signature']})\nchrF {scores['chrf']:.2f} "
              f"({scores['chrf_signature']})\n{scores['sentences']} sentences", file=sys.stderr)
        if args.scores:
            Path(args.scores).write_text(json.dumps(scores, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
