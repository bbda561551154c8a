#!/usr/bin/env python
"""Convert a transformers checkpoint (BERT, GPT-2, Llama, ViT, Marian, BART) into a transformer-zoo checkpoint and
prove the conversion: reload the output folder and compare its outputs with the source's on a fixed random input.

    python scripts/convert_checkpoint.py path/to/bert out/zoo-bert
    python scripts/convert_checkpoint.py path/to/smollm2 out/zoo-smollm2 --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf
    python scripts/convert_checkpoint.py path/to/bert-classifier out/zoo-cls --task sequence-classification

Exit status: 0 when the max |output difference| is within 1e-5 (both models in float32, eval mode), 1 when it is
larger, 2 for a checkpoint that cannot be loaded or converted.
"""

import argparse
import logging as std_logging
import sys

import torch
from transformer_zoo.modeling_zoo_checks import read_model_config
from transformers.utils import logging

import transformer_zoo
from transformer_zoo.convert import (
    SUPPORTED_SOURCES,
    TASKS,
    UnsupportedConversionError,
    compare_outputs,
    convert_model,
    load_source_model,
    random_inputs,
    save_conversion,
)


# The project's bar for a faithful float32 conversion (outputs agree to rounding); never loosened.
TOLERANCE = 1e-5
logger = logging.get_logger("convert_checkpoint")


def _zoo_class(folder: str):
    """The zoo class named in the saved config (every zoo class is registered by importing transformer_zoo)."""
    architecture = read_model_config(folder).architectures[0]
    for _, models in transformer_zoo.FAMILIES.values():
        for _, model_class in models:
            if model_class.__name__ == architecture:
                return model_class
    raise ValueError(f"{folder} holds a {architecture}, which is not a transformer-zoo class.")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Supported source classes: " + ", ".join(SUPPORTED_SOURCES),
    )
    parser.add_argument(
        "src", metavar="SRC", help="Source checkpoint: a local folder, or a Hub id (needs network access)."
    )
    parser.add_argument("out", metavar="OUT", help="Output folder for the zoo checkpoint (created if missing).")
    parser.add_argument(
        "--gguf-file",
        default=None,
        metavar="NAME",
        help="Name of a GGUF file inside SRC to load (transformers dequantises it; needs the `gguf` package).",
    )
    parser.add_argument(
        "--task",
        default="auto",
        choices=["auto", *TASKS],
        help="Which head to load from SRC. 'auto' (default) uses config.architectures when it names a supported "
        "class, else the family's default: causal-lm for GPT-2/Llama, seq2seq-lm for Marian/BART, base for "
        "BERT/ViT.",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Seed of the random input used for the comparison (default 0)."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="Also show transformers' info messages (loading details)."
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # transformers' library logger has its own handler and verbosity; ours (transformer_zoo.*, this script's) get
    # one handler here, without touching the root logger (huggingface_hub would then print every message twice).
    handler = std_logging.StreamHandler()
    handler.setFormatter(std_logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for name in ("transformer_zoo", "convert_checkpoint"):
        own_logger = std_logging.getLogger(name)
        own_logger.addHandler(handler)
        own_logger.setLevel(std_logging.INFO)
        own_logger.propagate = False
    if args.verbose:
        logging.set_verbosity_info()
    else:
        logging.set_verbosity_warning()

    try:
        # The library's convert_checkpoint in three steps, so that the source stays in memory for the comparison.
        source = load_source_model(args.src, task=args.task, gguf_file=args.gguf_file)
        converted = convert_model(source)
        out = save_conversion(converted, args.out, src=args.src, gguf_file=args.gguf_file)
    except (OSError, UnsupportedConversionError) as error:
        logger.error(str(error))
        return 2
    del converted

    # Reload what was written and compare in float32: a bf16 source converts losslessly, and fp32 makes the
    # tolerance meaningful.
    if next(source.parameters()).dtype != torch.float32:
        source = source.float()  # only when needed: GGUF-loaded models (already fp32) refuse .float()
    source.eval()
    zoo = _zoo_class(out).from_pretrained(out, dtype=torch.float32).eval()
    differences = compare_outputs(source, zoo, random_inputs(source, seed=args.seed))
    worst = max(differences.values())
    details = ", ".join(f"{name} {value:.3g}" for name, value in differences.items())
    print(f"{type(source).__name__} -> {type(zoo).__name__} in {out}")
    print(f"max |logit difference| = {worst:.3g} ({details}); tolerance {TOLERANCE:g}")
    if worst > TOLERANCE:
        logger.error(f"The converted model differs from the source by {worst:.3g} > {TOLERANCE:g}.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
