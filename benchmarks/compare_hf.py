#!/usr/bin/env python
"""Time transformer-zoo against transformers' own models, side by side in one process, with the same weights.

For each family a transformers reference model (GPT-2, BERT, Marian, BART, ViT) is built at the requested shape with
random weights, converted to the zoo family with `transformer_zoo.convert.convert_model` (so both hold identical
weights; the script checks their logits agree before timing), and then timed:

* train: one optimisation step (forward, backward, AdamW step, zero_grad) on a fixed batch, dropout on;
* generate: KV-cached greedy generation of --new-tokens tokens (decoder and encoder-decoder families);
* infer: one forward pass without gradients (encoder and ViT, which do not generate).

Runs alternate between the two models (zoo, hf, zoo, hf, ...) so that drifts in machine load hit both alike, and
the table reports medians and the ratio hf_time / zoo_time (above 1: zoo is faster).

Example:
    python benchmarks/compare_hf.py                       # all families, eager and sdpa, d=256, 4 layers, seq 256
    python benchmarks/compare_hf.py --families gpt2 --attn sdpa --repeats 5
"""

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import torch
import transformers as hf
from transformers.utils import logging as hf_logging

from transformer_zoo.convert import convert_model


logger = hf_logging.get_logger("transformer_zoo.benchmarks")
FAMILIES = ("gpt2", "bert", "marian", "bart", "vit")


def build_reference(family: str, args) -> tuple[torch.nn.Module, dict, bool]:
    """The transformers model, a training batch and whether the family generates."""
    d, layers, heads, seq, batch = args.hidden, args.layers, args.heads, args.seq_len, args.batch_size
    ffn, dropout = 4 * d, 0.1
    ids = torch.randint(4, 1000, (batch, seq))
    if family == "gpt2":
        config = hf.GPT2Config(
            n_embd=d, n_layer=layers, n_head=heads, n_positions=seq + args.new_tokens + 16, vocab_size=args.vocab_size,
            attn_implementation=args.current_attn,
        )
        return hf.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}, True
    if family == "bert":
        config = hf.BertConfig(
            hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
            max_position_embeddings=max(512, seq), vocab_size=30522, attn_implementation=args.current_attn,
        )
        labels = torch.full_like(ids, -100)
        masked = torch.rand(ids.shape) < 0.15
        labels[masked] = ids[masked]
        return hf.BertForMaskedLM(config), {"input_ids": ids, "labels": labels}, False
    if family in ("marian", "bart"):
        common = dict(
            d_model=d, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
            decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, dropout=dropout,
            max_position_embeddings=seq + args.new_tokens + 16, pad_token_id=1, eos_token_id=2,
            decoder_start_token_id=2, forced_eos_token_id=None, attn_implementation=args.current_attn,
        )
        if family == "marian":
            model = hf.MarianMTModel(hf.MarianConfig(vocab_size=args.seq2seq_vocab_size, **common))
        else:
            model = hf.BartForConditionalGeneration(hf.BartConfig(vocab_size=args.seq2seq_vocab_size, **common))
        return model, {"input_ids": ids, "labels": ids}, True
    if family == "vit":
        config = hf.ViTConfig(
            hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
            image_size=args.image_size, patch_size=args.patch_size, num_labels=10, hidden_dropout_prob=dropout,
            attn_implementation=args.current_attn,
        )
        pixels = torch.randn(batch, 3, args.image_size, args.image_size)
        return hf.ViTForImageClassification(config), {"pixel_values": pixels, "labels": torch.randint(0, 10, (batch,))}, False
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")


def max_logit_difference(zoo, ref, batch) -> float:
    zoo.eval(), ref.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    if "labels" in batch and getattr(ref.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = batch["labels"][:, :32]
    if "input_ids" in inputs:
        inputs["input_ids"] = inputs["input_ids"][:, :32]
    with torch.no_grad():
        return (zoo(**inputs).logits - ref(**inputs).logits).abs().max().item()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def training_step(model, batch, fused: bool):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)

    def step():
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def generation_run(model, batch, new_tokens: int):
    prompt = batch["input_ids"][:1, :16]

    def run():
        with torch.no_grad():
            model.generate(
                prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1,
                use_cache=True, pad_token_id=model.config.pad_token_id or 0,
            )

    return run


def inference_run(model, batch):
    inputs = {k: v for k, v in batch.items() if k != "labels"}

    def run():
        with torch.no_grad():
            model(**inputs)

    return run


def compare(runs: dict, repeats: int, warmup: int) -> dict:
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"zoo_s": medians["zoo"], "hf_s": medians["hf"], "ratio": medians["hf"] / medians["zoo"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of: %(default)s")
    parser.add_argument("--attn", default="eager,sdpa", help="attention implementations to time (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="model width d (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=4, help="layers (each of encoder and decoder) (default: %(default)s)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=256, help="training sequence length (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch size (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=50257, help="GPT-2 vocabulary (default: %(default)s)")
    parser.add_argument("--seq2seq-vocab-size", type=int, default=32000, help="Marian/BART vocabulary (default: %(default)s)")
    parser.add_argument("--image-size", type=int, default=224, help="ViT image size (default: %(default)s)")
    parser.add_argument("--patch-size", type=int, default=16, help="ViT patch size (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per timed generation (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per model; the median is reported (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per model first (default: %(default)s)")
    parser.add_argument("--no-fused-adamw", action="store_true", help="use the foreach AdamW instead of fused=True")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--output", type=Path, default=None, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    hf_logging.set_verbosity_error()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)

    rows = []
    for family in args.families.split(","):
        for attn in args.attn.split(","):
            args.current_attn = attn
            torch.manual_seed(0)
            ref, batch, generates = build_reference(family, args)
            zoo = convert_model(ref)
            zoo.set_attn_implementation(attn)
            difference = max_logit_difference(zoo, ref, batch)
            row = {"family": family, "attn": attn, "max_logit_diff": difference}
            zoo.train(), ref.train()
            fused = not args.no_fused_adamw
            row["train"] = compare(
                {"zoo": training_step(zoo, batch, fused), "hf": training_step(ref, batch, fused)}, args.repeats, args.warmup
            )
            zoo.eval(), ref.eval()
            if generates:
                runs = {"zoo": generation_run(zoo, batch, args.new_tokens), "hf": generation_run(ref, batch, args.new_tokens)}
                row["generate"] = compare(runs, args.repeats, args.warmup)
            else:
                row["infer"] = compare({"zoo": inference_run(zoo, batch), "hf": inference_run(ref, batch)}, args.repeats, args.warmup)
            rows.append(row)
            logger.info(format_row(row))

    print("\n" + format_table(rows, args))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "output"}, "rows": rows}, indent=2, default=str))


def format_row(row) -> str:
    parts = [f"{row['family']:>7} {row['attn']:>5} |logit diff| {row['max_logit_diff']:.1e}"]
    for kind in ("train", "generate", "infer"):
        if kind in row:
            r = row[kind]
            parts.append(f"{kind}: zoo {r['zoo_s'] * 1e3:.0f} ms, hf {r['hf_s'] * 1e3:.0f} ms, hf/zoo {r['ratio']:.2f}")
    return " | ".join(parts)


def format_table(rows, args) -> str:
    header = (
        f"d={args.hidden}, {args.layers} layers, {args.heads} heads, seq {args.seq_len}, batch {args.batch_size}, "
        f"{torch.get_num_threads()} threads; medians of {args.repeats}; ratio = hf time / zoo time (>1: zoo faster)\n\n"
        "| family | attn | train zoo ms | train hf ms | train ratio | gen/infer zoo ms | gen/infer hf ms | gen/infer ratio |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [header]
    for row in rows:
        second_kind = "generate" if "generate" in row else "infer"
        t, s = row["train"], row[second_kind]
        lines.append(
            f"| {row['family']} | {row['attn']} | {t['zoo_s'] * 1e3:.0f} | {t['hf_s'] * 1e3:.0f} | {t['ratio']:.2f} | "
            f"{s['zoo_s'] * 1e3:.0f} ({second_kind}) | {s['hf_s'] * 1e3:.0f} | {s['ratio']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
