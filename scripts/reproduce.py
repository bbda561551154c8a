"""Reproduce classic transformer claims on a CPU, with several seeds, and write a report per experiment.

Experiments (one module each in transformer_zoo/analysis/reproduce/, with the exact setups and criteria):
  copy           an encoder-decoder learns to copy digit strings; without positional encoding it fails; one head
                 against four; a linear warmup against starting at the same high peak learning rate
  extrapolation  a character-level decoder trained on 32-character windows of Shakespeare, evaluated on longer
                 ones: sinusoidal, learned, RoPE and ALiBi positions (learned positions refuse lengths past their
                 table; the report says so)
  norm           pre-norm against post-norm at 2, 6 and 12 layers with the same learning rate and warmup
  translation    the original Transformer on English-Spanish (Bible) and English-Urdu both ways (hadith paragraphs
                 and Quran verses, never the Urdu task's held-out paragraphs): test chrF and BLEU (sacreBLEU)
                 against copying the source and retrieving the nearest training pair; and table 3's rows (A)
                 heads, (B) d_k, (C) width and depth, (D) dropout and label smoothing, (E) learned positions,
                 scored as the paper scores

Presets (--preset):
  tiny     for tests only: seconds, numbers meaningless
  quick    a first look: 2 seeds, 300 steps (norm: 200 steps at 2 and 6 layers only); copy, extrapolation and norm
           took 6.1 min here, 4.0 min of CPU, with the same verdicts as the default. translation: every row on
           1,000 pairs per corpus with 1-layer models of width 64, scored on 32 dev and test sentences (63 s on 2
           idle cores with --jobs 2 on 2026-12-08, 75-85 s earlier; its numbers only show the pipeline works)
  default  the committed report in docs/reproduce/: 3 seeds, 400 steps (norm: 300 steps at 2, 6 and 12 layers);
           11.3 min of CPU here. translation: the three pairs' default models (Bible 5 epochs, Urdu 12) and 12
           table-3 rows x 2 seeds over a base of the default model's shape trained 4 epochs: many hours of CPU, run
           in the background and --resume after a stop (docs/reproduce/translation.md has the times)
  full     5 seeds, 1000-1500 steps, evaluation up to 256 characters, norm at 2, 6, 12 and 24 layers; translation
           with a Transformer-base model for 20 epochs (several times the default's time; a GPU or a long night)

For each experiment the output folder gets <experiment>.md (claims, table of mean ± std over seeds, verdicts
computed from the numbers), <experiment>.png and <experiment>.json (every run's numbers and loss curve), and a
README.md index of all experiments found there.

Examples:
  python scripts/reproduce.py --preset quick
  python scripts/reproduce.py --experiment extrapolation --seeds 0,1,2,3
  python scripts/reproduce.py --preset default --output docs/reproduce      # regenerates the committed report
  python scripts/reproduce.py --experiment translation --output docs/reproduce --jobs 2 --resume
  python scripts/reproduce.py --experiment translation --output docs/reproduce --report-only   # a partial report
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path


def seed_list(text: str) -> list[int]:
    """Parse '0,1,2' into distinct non-negative integers, with a message that says what is wrong."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes comma-separated integers such as 0,1,2; got {text!r}.")
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds needs at least one seed, e.g. --seeds 0,1,2.")
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds must be distinct non-negative integers; got {text!r}.")
    return seeds


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}.")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reproduce.py", description=__doc__.split("\n\nExamples:")[0],
        epilog="Examples:" + __doc__.split("Examples:")[1], formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--experiment", choices=("copy", "extrapolation", "norm", "translation", "all"), default="all",
        help="Which experiment to run; 'all' runs copy, extrapolation, norm and translation in that order. "
             "Default: all.")
    parser.add_argument(
        "--preset", choices=("tiny", "quick", "default", "full"), default="default",
        help="Size of every experiment: steps, seeds, model sizes, evaluation lengths (listed above). "
             "Default: default.")
    parser.add_argument(
        "--seeds", type=seed_list, default=None,
        help="Comma-separated seeds, e.g. 0,1,2, replacing the preset's. Each seed fixes the initial weights, the "
             "training batches and the evaluation data; the report's ± is the standard deviation over seeds, so "
             "give at least two. Default: the preset's (default preset: 0,1,2).")
    parser.add_argument(
        "--output", default="outputs/reproduce",
        help="Folder for the reports (created if missing; an experiment's earlier files there are replaced, the "
             "other experiments' files are kept and listed in the index). Default: outputs/reproduce "
             "(the committed report lives in docs/reproduce).")
    parser.add_argument(
        "--threads", type=positive_int, default=1,
        help="torch CPU threads. These models are tiny, so a second thread gains little, and a fixed count keeps "
             "the numbers reproducible from machine to machine (float sums depend on how work is split). "
             "Default: 1.")
    parser.add_argument(
        "--save-models", default=None, metavar="DIR",
        help="translation: also save each language pair's default model and its tokenizer in DIR/<pair> (e.g. "
             "DIR/bible-en-es), loadable with AutoModelForSeq2SeqLM and usable with scripts/translate.py. Default: "
             "not saved (the report needs only the numbers).")
    parser.add_argument(
        "--jobs", type=positive_int, default=1,
        help="translation: train this many runs side by side, in worker processes of one thread each (on 2 cores, "
             "--jobs 2 got through the committed report's runs faster than one process on 2 threads). A run's "
             "numbers depend only on its seed and thread count, not on the worker. Default: 1.")
    parser.add_argument(
        "--device", default="cpu",
        help="translation: where the models train and decode, 'cpu' or 'cuda' (or 'cuda:N'). A GPU runs the same "
             "study (the same settings, so --resume mixes its runs with a CPU's); each run records its device and "
             "the report says how many runs came from each. The other experiments are CPU-sized and ignore it. "
             "Default: cpu.")
    parser.add_argument(
        "--resume", action="store_true",
        help="translation: continue a study that was cut off. Runs already in OUTPUT/translation.partial.jsonl or "
             "OUTPUT/translation.json whose recorded settings match this preset's are kept, not run again; the "
             "others run and are appended as they finish. Default: start afresh (the partial file is removed).")
    parser.add_argument(
        "--snapshot-dir", default=None, metavar="DIR",
        help="translation: where a run in progress writes its whole training state every 100 steps (one file per "
             "run, a few hundred MB at most), so that --resume continues a run cut off mid-way from its last "
             "snapshot instead of from the start. A table-3 run's file is removed when it ends; a language pair's "
             "default model leaves its last state there, so that a longer budget for it (more epochs) continues "
             "from that state instead of from the start. Default: outputs/translation-snapshots/PRESET (one folder per "
             "preset, so that a quick run never replaces a default study's snapshots).")
    parser.add_argument(
        "--only", choices=("defaults", "table3"), default=None,
        help="translation: train only the language pairs' default models ('defaults') or only table 3's rows "
             "('table3') this time; the report still lists every run and marks the others missing. With --resume, "
             "e.g. '--only table3 --jobs 2' gives both cores to table 3's hour-long runs while a default model "
             "too long for one sitting waits. Default: every run.")
    parser.add_argument(
        "--report-only", action="store_true",
        help="translation: train nothing; write the report from the runs finished so far (partial file and "
             "previous report), marking the rows and claims still waiting for runs. Default: off.")
    parser.add_argument(
        "--no-progress", action="store_true",
        help="Hide the tqdm progress bars (one per training run), e.g. in logs.")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    import dataclasses

    from transformer_zoo.analysis.reproduce import EXPERIMENTS, PRESETS, run_experiment, write_report

    torch.set_num_threads(args.threads)
    command = "python scripts/reproduce.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None
                                                                                  else argv))
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    if (args.resume or args.report_only or args.only) and "translation" not in names:
        print("reproduce.py: --resume, --report-only and --only apply to the translation study; add --experiment "
              "translation.", file=sys.stderr)
        return 2
    if "translation" in names:
        from transformer_zoo.analysis.reproduce.translation import check_device

        try:
            check_device(args.device)
        except ValueError as error:
            print(f"reproduce.py: {error}", file=sys.stderr)
            return 2
    started = time.perf_counter()
    for name in names:
        settings = None
        if name == "translation":
            # Each finished run is appended to translation.partial.jsonl as it ends (kept if the study is cut off);
            # --resume keeps that file and the runs of the folder's translation.json whose settings match.
            Path(args.output).mkdir(parents=True, exist_ok=True)
            partial = Path(args.output) / "translation.partial.jsonl"
            previous = Path(args.output) / "translation.json"
            if not (args.resume or args.report_only):
                partial.unlink(missing_ok=True)
            settings = dataclasses.replace(
                PRESETS[args.preset].translation, model_dir=args.save_models, jobs=args.jobs,
                partial_file=str(partial), resume=args.resume, report_only=args.report_only, train_only=args.only,
                snapshot_dir=args.snapshot_dir or f"outputs/translation-snapshots/{args.preset}", device=args.device,
                previous_report=str(previous) if previous.exists() else None)
        results = run_experiment(name, args.preset, args.seeds, progress=not args.no_progress, settings=settings)
        if settings is not None:
            results["preset"] = args.preset  # the preset's settings, only run differently
            if results.get("complete"):
                partial.unlink(missing_ok=True)  # the report now holds every run
        paths = write_report(results, args.output, command=command.strip())
        held = sum(claim["held"] for claim in results["claims"])
        print(f"{name}: {held} of {len(results['claims'])} claims held in {results['seconds'] / 60:.1f} min; wrote "
              + ", ".join(str(path) for path in paths))
        for claim in results["claims"]:
            print(f"  [{'held' if claim['held'] else 'NOT held'}] {claim['claim']} ({claim['evidence']})")
    print(f"Done in {(time.perf_counter() - started) / 60:.1f} min.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
