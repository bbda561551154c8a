#!/usr/bin/env python
"""Beam search with the seq2seq model: reordering only the decoder's self-attention cache between steps (the
model's `_reorder_cache`, modeling_zoo_seq2seq.py) against transformers' own reordering of the self- and the
cross-attention caches, on the same model, inputs and number of steps.

The model is the translation study's default shape (translation_setup.ModelShape: 3+3 layers, width 256, 4 heads,
d_ff 1024), with 8,000 tokens of vocabulary and random weights: the work per step does not depend on what the
weights say, and every output is forced to --new-tokens tokens (min = max), so both sides run the same steps.
Sources are random token ids of each --source-lengths length. Per length: both sides in alternating order for
--rounds rounds, best of --steps each, median over rounds; the two must give identical tokens and scores.

    python benchmarks/beam_search_cache.py --output benchmarks/results/beam_search_cache_cpu.json
        (also writes beam_search_cache_cpu.png: time per generation against source length, both sides)
    python benchmarks/beam_search_cache.py --source-lengths 32 --rounds 1 --steps 1   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_hf import best_of  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-lengths", default="32,64,128,256",
                        help="comma-separated source lengths in tokens, one measurement each (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="sources per generate call (default: 32, as the "
                        "translation study decodes)")
    parser.add_argument("--num-beams", type=int, default=4, help="beams per source (default: 4, the paper's)")
    parser.add_argument("--new-tokens", type=int, default=32,
                        help="output tokens per beam, forced (min = max) so both sides run as many steps (default: 32)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per length (default: 5)")
    parser.add_argument("--steps", type=int, default=2, help="timed generations per side and round, the best "
                        "counts (default: 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1, as the study's workers)")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/beam_search_cache_cpu.json"),
                        help="the JSON to write; the PNG goes beside it (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        args.source_lengths = [int(value) for value in args.source_lengths.split(",")]
    except ValueError:
        parser.error(f"--source-lengths takes comma-separated integers, got {args.source_lengths!r}")
    for name in ("batch_size", "num_beams", "new_tokens", "rounds", "steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if min(args.source_lengths) < 1:
        parser.error("--source-lengths must be positive")
    return args


def study_shape():
    """The translation study's default model shape (translation_setup.ModelShape), so the benchmark follows it."""
    from transformer_zoo.analysis.reproduce.translation_setup import ModelShape

    return ModelShape()


def build_model(max_source: int, new_tokens: int):
    from transformer_zoo import ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration

    shape = study_shape()
    config = ZooSeq2SeqConfig(vocab_size=8000, hidden_size=shape.hidden_size, encoder_layers=shape.layers,
                              decoder_layers=shape.layers, num_attention_heads=shape.heads,
                              intermediate_size=shape.intermediate_size, head_dim=shape.head_dim,
                              max_position_embeddings=max(max_source, new_tokens) + 64, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    torch.manual_seed(0)
    return ZooSeq2SeqForConditionalGeneration(config).eval()


def model_text(shape) -> str:
    return (f"{shape.layers}+{shape.layers} layers, width {shape.hidden_size}, {shape.heads} heads, d_ff "
            f"{shape.intermediate_size}, vocabulary 8,000, random weights")


def transformers_reordering(cache, beam_idx):
    """What GenerationMixin does for a model without `_reorder_cache`: reorder every layer of both caches."""
    cache.reorder_cache(beam_idx)
    return cache


def generation(model, inputs, args, reorder):
    """One side's generate call; `reorder` None is the model's own `_reorder_cache`, else it stands in for the call."""
    model_class = type(model)
    ours = model_class.__dict__["_reorder_cache"]

    def run():
        if reorder is not None:
            model_class._reorder_cache = staticmethod(reorder)
        try:
            with torch.no_grad():
                return model.generate(**inputs, num_beams=args.num_beams, max_new_tokens=args.new_tokens,
                                      min_new_tokens=args.new_tokens, do_sample=False, return_dict_in_generate=True,
                                      output_scores=True)
        finally:
            model_class._reorder_cache = ours

    return run


def measure(model, length: int, args) -> dict:
    generator = torch.Generator().manual_seed(length)
    input_ids = torch.randint(3, model.config.vocab_size, (args.batch_size, length), generator=generator)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    runs = {"self_attention_only": generation(model, inputs, args, None),
            "both_caches": generation(model, inputs, args, transformers_reordering)}
    outputs = {name: run() for name, run in runs.items()}  # also the warm-up
    same_tokens = torch.equal(outputs["self_attention_only"].sequences, outputs["both_caches"].sequences)
    same_scores = torch.allclose(outputs["self_attention_only"].sequences_scores,
                                 outputs["both_caches"].sequences_scores, rtol=1e-5, atol=1e-5)
    if not (same_tokens and same_scores):
        raise SystemExit(f"source length {length}: the two reorderings gave different outputs; nothing is timed.")
    times = {name: [] for name in runs}
    for round_index in range(args.rounds):
        for name in (list(runs) if round_index % 2 == 0 else list(reversed(runs))):
            times[name].append(best_of(runs[name], args.steps))
    ours, theirs = statistics.median(times["self_attention_only"]), statistics.median(times["both_caches"])
    return {"source_length": length, "self_attention_only_s": ours, "both_caches_s": theirs, "speedup": theirs / ours,
            "identical_tokens_and_scores": True, "rounds": times}


def plot(result: dict, path: Path) -> Path:
    from transformer_zoo.analysis.figures import pyplot, save_figure

    figure, axes = pyplot().subplots(figsize=(6.4, 4.2))
    rows = result["rows"]
    lengths = [row["source_length"] for row in rows]
    for key, label in (("both_caches_s", "transformers' reordering (self + cross caches)"),
                       ("self_attention_only_s", "zoo: self-attention cache only")):
        axes.plot(lengths, [row[key] for row in rows], "o-", label=label)
        for row in rows:  # every round, faint
            axes.scatter([row["source_length"]] * len(row["rounds"][key[:-2]]), row["rounds"][key[:-2]], s=8,
                         alpha=0.3, color=axes.lines[-1].get_color())
    for row in rows:
        axes.annotate(f"{row['speedup']:.2f}x", (row["source_length"], row["both_caches_s"]),
                      textcoords="offset points", xytext=(0, 8), ha="center", fontsize="small")
    setup = result["setup"]
    axes.set_xscale("log", base=2)
    axes.set(xlabel="source length (tokens)", ylabel="seconds per generate call (median)",
             title=f"beam search, {setup['batch_size']} sources x {setup['num_beams']} beams, "
                   f"{setup['new_tokens']} new tokens")
    axes.set_xticks(lengths, [str(length) for length in lengths])
    axes.minorticks_off()
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return save_figure(figure, path, dpi=110)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started, load_start = time.perf_counter(), os.getloadavg()
    model = build_model(max(args.source_lengths), args.new_tokens)
    rows = []
    for length in args.source_lengths:
        rows.append(measure(model, length, args))
        print(f"source {length:4d} tokens: both caches {rows[-1]['both_caches_s']:.3f} s, self-attention only "
              f"{rows[-1]['self_attention_only_s']:.3f} s ({rows[-1]['speedup']:.2f}x)", flush=True)
    import transformers

    result = {"setup": {"batch_size": args.batch_size, "num_beams": args.num_beams, "new_tokens": args.new_tokens,
                        "rounds": args.rounds, "steps": args.steps, "threads": args.threads,
                        "model": model_text(study_shape()),
                        "torch": torch.__version__, "transformers": transformers.__version__,
                        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                        "load_average_start": load_start, "load_average_end": os.getloadavg(),
                        "seconds": time.perf_counter() - started,
                        "command": "python benchmarks/beam_search_cache.py " + " ".join(sys.argv[1:] if argv is None
                                                                                      else argv)},
              "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.output} and {plot(result, args.output.with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
