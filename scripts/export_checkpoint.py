#!/usr/bin/env python
"""Export a transformer-zoo checkpoint to transformers' own architecture (GPT-2, Llama, BERT, ViT, Marian, BART) or
to GGUF, and prove the export: reload what was written and compare its outputs with the zoo model's.

    python scripts/export_checkpoint.py runs/zoo-gpt2 out/gpt2                     # auto: the exact native match
    python scripts/export_checkpoint.py runs/zoo-llama out/llama --to llama
    python scripts/export_checkpoint.py runs/zoo-llama out/gguf --to gguf --gguf-dtype f16
    python scripts/export_checkpoint.py runs/lora-adapter out/lora --base runs/zoo-llama   # a LoRA adapter

SRC is a zoo model folder, or a PEFT LoRA adapter folder trained on one (its base from --base or the adapter's
base_model_name_or_path). OUT receives a plain transformers folder (no auto_map, no zoo code; the tokenizer or image
processor and the generation config are carried over), for an adapter OUT/base and OUT/adapter, for GGUF
OUT/model-<dtype>.gguf. A config with no exact native equivalent is refused with the fields that prevent it.

Exit status: 0 when the max |output difference| is within 1e-5 (float32, eval mode; for F16 GGUF against the zoo model
with its matrices rounded to F16, which is what the file stores), 1 when it is larger, 2 when SRC cannot be loaded or
exported.
"""

import argparse
import json
import logging as std_logging
import os
import sys

import torch
import transformers
from transformers.utils import logging

from transformer_zoo.convert import compare_outputs, random_inputs
from transformer_zoo.export import EXPORT_TARGETS, UnsupportedExportError, export_model, save_export, zoo_class_for_folder


# The project's bar for a faithful float32 export (outputs agree to rounding); never loosened.
TOLERANCE = 1e-5
logger = logging.get_logger("export_checkpoint")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Targets: " + ", ".join(EXPORT_TARGETS) + ". docs/deploy.md lists which zoo configs export where.",
    )
    parser.add_argument("src", metavar="SRC", help="A zoo model folder, or a PEFT LoRA adapter folder trained on one.")
    parser.add_argument("out", metavar="OUT", help="Output folder (created if missing).")
    parser.add_argument(
        "--to",
        default="auto",
        choices=EXPORT_TARGETS,
        help="Target architecture. 'auto' (default) picks the native architecture that expresses the config exactly "
        "(learned positions + LayerNorm decoder -> gpt2, RoPE + RMSNorm + gated MLP -> llama, ...); 'gguf' writes a "
        "GGUF file for a causal decoder that exports to Llama or GPT-2.",
    )
    parser.add_argument(
        "--gguf-dtype",
        default="f32",
        choices=["f32", "f16"],
        help="Tensor type of a GGUF export: f32 (default, exact) or f16 (matrices in F16, vectors in F32). No "
        "quantisation.",
    )
    parser.add_argument(
        "--base",
        default=None,
        metavar="DIR",
        help="For an adapter SRC: the zoo model folder it was trained on (default: the adapter's "
        "base_model_name_or_path).",
    )
    parser.add_argument(
        "--base-name",
        default=None,
        metavar="NAME",
        help="For an adapter SRC: the base_model_name_or_path written into the exported adapter (e.g. the Hub id you "
        "will publish OUT/base under). Default: the absolute path of OUT/base.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the random input used for the comparison (default 0).")
    parser.add_argument("-v", "--verbose", action="store_true", help="Also show transformers' info messages.")
    return parser.parse_args(argv)


def _setup_logging(verbose: bool) -> None:
    # Ours get one handler here, without touching the root logger (huggingface_hub would print every message twice).
    handler = std_logging.StreamHandler()
    handler.setFormatter(std_logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for name in ("transformer_zoo", "export_checkpoint"):
        own_logger = std_logging.getLogger(name)
        own_logger.addHandler(handler)
        own_logger.setLevel(std_logging.INFO)
        own_logger.propagate = False
    if verbose:
        logging.set_verbosity_info()
    else:
        logging.set_verbosity_warning()


def _report(label: str, differences: dict) -> int:
    worst = max(differences.values())
    details = ", ".join(f"{name} {value:.3g}" for name, value in differences.items())
    print(label)
    print(f"max |output difference| = {worst:.3g} ({details}); tolerance {TOLERANCE:g}")
    if worst > TOLERANCE:
        logger.error(f"The export differs from the zoo model by {worst:.3g} > {TOLERANCE:g}.")
        return 1
    return 0


def _load_zoo(folder: str):
    return zoo_class_for_folder(folder).from_pretrained(folder, dtype=torch.float32).eval()


def export_native(args) -> int:
    zoo = _load_zoo(args.src)
    native = export_model(zoo, args.to)
    save_export(native, args.out, src=args.src)
    reloaded = getattr(transformers, type(native).__name__).from_pretrained(args.out, dtype=torch.float32).eval()
    differences = compare_outputs(reloaded, zoo, random_inputs(reloaded, seed=args.seed))
    return _report(f"{type(zoo).__name__} -> {type(reloaded).__name__} in {args.out}", differences)


def export_to_gguf(args) -> int:
    from transformer_zoo.export.gguf_file import export_gguf, rounded_like_gguf

    zoo = _load_zoo(args.src)
    os.makedirs(args.out, exist_ok=True)
    name = f"model-{args.gguf_dtype}.gguf"
    export_gguf(zoo, os.path.join(args.out, name), dtype=args.gguf_dtype, tokenizer_dir=args.src,
                name=os.path.basename(os.path.normpath(args.src)))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(args.out, gguf_file=name).eval()
    differences = compare_outputs(reloaded, rounded_like_gguf(zoo, args.gguf_dtype), random_inputs(reloaded, seed=args.seed))
    return _report(f"{type(zoo).__name__} -> {name} ({type(reloaded).__name__} when read back) in {args.out}", differences)


def export_adapter(args) -> int:
    from peft import PeftModel

    from transformer_zoo.export.adapters import export_lora_adapter, save_adapter_export

    with open(os.path.join(args.src, "adapter_config.json"), encoding="utf-8") as handle:
        base = args.base or json.load(handle).get("base_model_name_or_path")
    if not base or not os.path.isdir(base):
        raise OSError(
            f"The adapter's base model {base!r} is not a local folder; pass the zoo model it was trained on with --base."
        )
    zoo_peft = PeftModel.from_pretrained(_load_zoo(base), args.src).eval()
    native_base, native_peft = export_lora_adapter(zoo_peft, "auto" if args.to == "gguf" else args.to)
    base_dir, adapter_dir = save_adapter_export(native_base, native_peft, args.out, src_base=base, base_name=args.base_name)
    native_class = getattr(transformers, type(native_base).__name__)
    reloaded = PeftModel.from_pretrained(native_class.from_pretrained(base_dir, dtype=torch.float32), adapter_dir).eval()
    differences = compare_outputs(reloaded, zoo_peft, random_inputs(native_base, seed=args.seed))
    return _report(f"LoRA adapter on {type(zoo_peft.get_base_model()).__name__} -> PEFT adapter on "
                   f"{type(native_base).__name__} in {adapter_dir}", differences)


def main(argv=None) -> int:
    args = parse_args(argv)
    _setup_logging(args.verbose)
    if not os.path.isdir(args.src):
        # Else transformers reads the path as a Hub id and says it is not one, without naming the missing folder.
        logger.error(f"{args.src}: no such folder. Pass a zoo model folder (what save_pretrained or a recipe's "
                     "--output_dir wrote) or a LoRA adapter folder trained on one.")
        return 2
    try:
        if os.path.isfile(os.path.join(args.src, "adapter_config.json")):
            if args.to == "gguf":
                raise UnsupportedExportError(
                    "GGUF export takes a whole model; merge the adapter (merge_and_unload(), save_pretrained) and export "
                    "that folder.")
            return export_adapter(args)
        if args.to == "gguf":
            return export_to_gguf(args)
        return export_native(args)
    except (OSError, ValueError, ImportError) as error:
        # UnsupportedExportError is a ValueError; so are configs that do not load.
        logger.error(str(error))
        return 2


if __name__ == "__main__":
    sys.exit(main())
