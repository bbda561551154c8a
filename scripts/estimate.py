"""Estimate the training compute, wall-clock time, training memory and generation KV cache of a zoo model.

    python scripts/estimate.py zoo_decoder:gpt2 --tokens 10e9 --throughput 100e12 --precision bf16
    python scripts/estimate.py path/to/config.json --tokens 2e9 --lora-trainable-fraction 0.01

The model is built on the meta device (shapes, no memory), so any size is cheap to estimate.
"""

import argparse
import json
import sys
from pathlib import Path

# Importing transformer_zoo (torch, transformers, every model) takes seconds, so it happens after argument parsing:
# --help and argument errors answer at once. These choices mirror PRECISION_BYTES and OPTIMIZER_STATES_PER_PARAMETER
# in transformer_zoo.analysis.estimates (estimate() asserts that they agree).
PRECISIONS = ("bf16", "fp16", "fp32")
OPTIMIZERS = ("adafactor", "adamw", "sgd")


def positive(kind):
    """An argparse type: a number of `kind` above 0 (a batch of 0 or a negative length would print sizes of 0 or
    below instead of an error)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="A zoo preset as family:preset (e.g. zoo_decoder:gpt2, zoo_encoder:bert-base, "
                                      "zoo_seq2seq:transformer-base, zoo_vit:vit-base), a config.json, or a folder "
                                      "holding one.")
    parser.add_argument("--tokens", type=positive(float), default=None,
                        help="Training token budget D (e.g. 10e9). Compute C = 6·N·D with N the non-embedding "
                             "parameters (Kaplan et al. 2020). Omit to skip compute and time.")
    parser.add_argument("--throughput", type=positive(float), default=None,
                        help="Sustained training throughput in FLOP/s (peak × utilisation, e.g. 0.4 × 989e12 for an "
                             "H100 in bf16). Omit to skip the time estimate.")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="Precision of weights and gradients; bf16/fp16 add an fp32 master copy (default fp32).")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw",
                        help="Optimizer whose states are counted: adamw 2 fp32 states, sgd (momentum) 1, adafactor "
                             "~0 (factored) (default adamw).")
    parser.add_argument("--lora-trainable-fraction", type=positive(float), default=None,
                        help="Fraction (0-1] of the parameters that train, e.g. 0.01 for LoRA adapters: only these "
                             "get gradients and optimizer states. Default: all parameters train.")
    parser.add_argument("--batch-size", type=positive(int), default=1,
                        help="Batch size for the KV-cache estimate (default 1).")
    parser.add_argument("--sequence-length", type=positive(int), default=None,
                        help="Generated sequence length for the KV cache (default: max_position_embeddings).")
    parser.add_argument("--source-length", type=positive(int), default=None,
                        help="Encoder-decoder only: source length of the cross-attention cache (default: "
                             "--sequence-length).")
    parser.add_argument("--kv-dtype", choices=PRECISIONS, default="fp16",
                        help="Precision of the cached keys and values (default fp16).")
    parser.add_argument("--json", action="store_true", help="Print the numbers as JSON instead of a table.")
    return parser.parse_args(argv)


def load_config(spec: str):
    """A zoo preset `family:preset`, or a config.json file / folder."""
    from transformer_zoo.modeling_zoo_checks import read_model_config

    import transformer_zoo as tz

    path = Path(spec)
    if path.exists():
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("model_type") not in tz.FAMILIES:
                raise SystemExit(f"{spec}: model_type {data.get('model_type')!r} is not a zoo family.")
            return tz.FAMILIES[data["model_type"]][0].from_dict(data)
        return read_model_config(path)
    family, _, preset = spec.partition(":")
    if family not in tz.FAMILIES or not preset:
        raise SystemExit(f"{spec!r} is neither an existing path nor family:preset with family in "
                         f"{', '.join(tz.FAMILIES)}.")
    config_class = tz.FAMILIES[family][0]
    if preset not in config_class.PRESETS:
        raise SystemExit(f"Unknown preset {preset!r} for {family}; choose one of "
                         f"{', '.join(config_class.preset_names())}.")
    return config_class.from_preset(preset)


def human(value: float, unit: str = "", base: int = 1000) -> str:
    for prefix in ("", "K", "M", "G", "T", "P", "E"):
        if abs(value) < base or prefix == "E":
            return f"{value:,.2f} {prefix}{'i' if base == 1024 and prefix else ''}{unit}".strip()
        value /= base


def duration(seconds: float) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return f"{seconds:,.0f} s ({int(days)} d {int(hours)} h {rest / 60:.1f} min)"


def estimate(args) -> tuple[dict, list[tuple[str, str]]]:
    from transformer_zoo.analysis.estimates import (
        OPTIMIZER_STATES_PER_PARAMETER,
        PRECISION_BYTES,
        kv_cache_bytes,
        memory_estimate,
        non_embedding_parameters,
        total_parameters,
        training_flops,
        training_time_seconds,
    )

    assert set(PRECISIONS) == set(PRECISION_BYTES) and set(OPTIMIZERS) == set(OPTIMIZER_STATES_PER_PARAMETER)
    config = load_config(args.model)
    total = total_parameters(config)
    non_embedding = non_embedding_parameters(config)
    trainable = None
    if args.lora_trainable_fraction is not None:
        if not 0 < args.lora_trainable_fraction <= 1:
            raise SystemExit("--lora-trainable-fraction must be in (0, 1].")
        trainable = round(total * args.lora_trainable_fraction)
    memory = memory_estimate(total, precision=args.precision, optimizer=args.optimizer,
                             trainable_parameters=trainable)
    result = {"model": args.model, "model_type": config.model_type, "parameters": total,
              "non_embedding_parameters": non_embedding, "memory": memory}
    rows = [("model", f"{args.model} ({config.model_type})"), ("parameters", f"{total:,}"),
            ("non-embedding parameters N", f"{non_embedding:,}")]
    if args.tokens is not None:
        flops = training_flops(non_embedding, args.tokens)
        result["training_flops"] = flops
        rows += [("tokens D", human(args.tokens)), ("training compute 6·N·D", human(flops, "FLOP"))]
        if args.throughput is not None:
            seconds = training_time_seconds(flops, args.throughput)
            result["training_seconds"] = seconds
            rows += [("throughput", human(args.throughput, "FLOP/s")), ("training time", duration(seconds))]
    rows += [(f"trainable parameters ({args.precision}, {args.optimizer})", f"{memory['trainable_parameters']:,}"),
             ("weights", human(memory["weights_bytes"], "B", 1024)),
             ("gradients", human(memory["gradients_bytes"], "B", 1024)),
             ("optimizer states (incl. fp32 master)", human(memory["optimizer_states_bytes"], "B", 1024)),
             ("training state total (no activations)", human(memory["total_bytes"], "B", 1024))]
    sequence_length = args.sequence_length or config.max_position_embeddings
    try:
        cache = kv_cache_bytes(config, args.batch_size, sequence_length, args.kv_dtype,
                               source_length=args.source_length)
        result["kv_cache_bytes"] = cache
        rows.append((f"KV cache (batch {args.batch_size}, seq {sequence_length}, {args.kv_dtype})",
                     human(cache, "B", 1024)))
    except ValueError as error:
        rows.append(("KV cache", f"n/a ({error})"))
    return result, rows


def main(argv=None):
    args = parse_arguments(argv)
    result, rows = estimate(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    width = max(len(name) for name, _ in rows)
    print(f"| {'quantity'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
