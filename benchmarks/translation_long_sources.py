#!/usr/bin/env python
"""Long sources: truncated, or translated in pieces of whole sentences? Measured on a translation pair's dev split.

The Urdu pairs train on paragraphs of at most 256 tokens a side; some dev and test paragraphs are longer. Decoded
whole, such a source runs into positions the model never trained on (its sinusoidal table is longer than the
training length, so nothing refuses them), or past the table, where it is truncated. Decoded in pieces
(`translate(split_sentences=...)`), it becomes runs of whole sentences within the training length, translated one by
one and joined. This script decodes the same dev sources both ways with the same weights, scores both with sacreBLEU
(the whole split, and the long sources alone), puts the retrieval baseline beside them, and writes JSON and a PNG.

    python benchmarks/translation_long_sources.py --pair urdu-translation-ur-en \
        --model outputs/translation-models/urdu-translation-ur-en --output docs/reproduce/long-sources
    python benchmarks/translation_long_sources.py --pair urdu-translation-en-ur \
        --snapshot outputs/translation-snapshots/default/default-urdu-translation-en-ur-seed0.pt   # mid-training

Greedy by default (the study's dev evaluations are greedy); --num-beams 4 decodes as the test decode does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="urdu-translation-ur-en",
                        help="The translation study's pair (its default settings give the data and the training "
                        "length). Default: urdu-translation-ur-en.")
    weights = parser.add_mutually_exclusive_group(required=True)
    weights.add_argument("--model", help="A model folder saved by scripts/reproduce.py --save-models.")
    weights.add_argument("--snapshot", help="A study snapshot (.pt, read with weights_only=True): the weights of a "
                         "run still training.")
    parser.add_argument("--num-beams", type=int, default=1, help="Beam size (1 = greedy, the default).")
    parser.add_argument("--threads", type=int, default=1, help="torch threads. Default: 1.")
    parser.add_argument("--output", default="docs/reproduce/long-sources",
                        help="Folder for PAIR.json and PAIR.png. Default: docs/reproduce/long-sources.")
    return parser.parse_args(argv)


def load_weights(args, pair, settings):
    import torch

    from transformer_zoo.analysis.reproduce.translation_setup import build_model

    if args.model:
        from transformers import AutoModelForSeq2SeqLM

        import transformer_zoo  # noqa: F401  (registers the zoo's classes)

        return AutoModelForSeq2SeqLM.from_pretrained(args.model), {"model": args.model}
    snapshot = torch.load(args.snapshot, weights_only=True, map_location="cpu")
    model = build_model(settings.model, pair.tokenizer, settings.max_length, 0, "cpu")
    model.load_state_dict(snapshot["model"])
    return model, {"snapshot": args.snapshot, "step": snapshot["result"]["steps"],
                   "note": "the last weights of a run still training (not averaged)"}


def scores(hypotheses, references) -> dict:
    from transformer_zoo.translation import corpus_scores

    values = corpus_scores(hypotheses, references)
    return {"bleu": round(values["bleu"], 2), "chrf": round(values["chrf"], 2)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    from transformer_zoo.analysis.reproduce.translation_setup import (TranslationSettings, for_pair, load_pair,
                                                                      source_sentences)
    from transformer_zoo.translation import RetrievalBaseline, sentence_splitter, translate

    torch.set_num_threads(args.threads)
    settings = for_pair(TranslationSettings(), args.pair)
    pair = load_pair(args.pair, settings)
    model, weights = load_weights(args, pair, settings)
    dev = pair.splits["validation"]
    sources, references = list(dev["source"]), list(dev["target"])
    limit = settings.max_length
    lengths = [len(ids) + 1 for ids in pair.tokenizer(sources, add_special_tokens=False)["input_ids"]]
    long_rows = [i for i, length in enumerate(lengths) if length > limit]
    started = time.perf_counter()
    whole_counts, piece_counts = {}, {}
    whole = translate(model, pair.tokenizer, sources, num_beams=args.num_beams, batch_size=32, counts=whole_counts)
    # Only the long sources differ between the two decodes: the short ones are the same inputs, the same outputs.
    pieces = list(whole)
    long_outputs = translate(model, pair.tokenizer, [sources[i] for i in long_rows], num_beams=args.num_beams,
                             batch_size=32, max_source_tokens=limit,
                             split_sentences=sentence_splitter(source_sentences(args.pair)), counts=piece_counts)
    for row, text in zip(long_rows, long_outputs):
        pieces[row] = text
    retrieval = RetrievalBaseline(pair.splits["train"]["source"], pair.splits["train"]["target"]).translate(sources)
    subset = [references[i] for i in long_rows]
    result = {
        "pair": args.pair, "weights": weights, "num_beams": args.num_beams, "training_length": limit,
        "dev_sources": len(sources), "longer_than_training_length": len(long_rows),
        "position_table": model.config.max_position_embeddings,
        "whole": {"all": scores(whole, references), "long": scores([whole[i] for i in long_rows], subset),
                  "counts": whole_counts},
        "pieces": {"all": scores(pieces, references), "long": scores(long_outputs, subset), "counts": piece_counts},
        "retrieval": {"all": scores(retrieval, references), "long": scores([retrieval[i] for i in long_rows], subset)},
        "seconds": round(time.perf_counter() - started, 1), "load_average": os.getloadavg(),
        "command": "python benchmarks/translation_long_sources.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{args.pair}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot(result, folder / f"{args.pair}.png")
    print(json.dumps({k: result[k] for k in ("whole", "pieces", "retrieval")}, indent=1))
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    names = [("whole", "decoded whole"), ("pieces", "in sentence pieces"), ("retrieval", "retrieval baseline")]
    for axis, metric in zip(axes, ("chrf", "bleu")):
        for offset, (key, label) in enumerate(names):
            values = [result[key]["all"][metric], result[key]["long"][metric]]
            axis.bar([x + 0.27 * (offset - 1) for x in range(2)], values, width=0.27, label=label)
        axis.set_xticks(range(2), [f"all {result['dev_sources']} dev sources",
                                   f"the {result['longer_than_training_length']} longer than {result['training_length']}"])
        axis.set_ylabel("chrF" if metric == "chrf" else "BLEU")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    step = result["weights"].get("step")
    figure.suptitle(f"{result['pair']}, dev, beam {result['num_beams']}" + (f", step {step}" if step else ""))
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
