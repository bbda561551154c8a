#!/usr/bin/env python
"""Re-run only the downstream check of a finished recipes/domain_adapt.py run, under the recipe's current downstream
settings, on the models that run saved for it (RUN/downstream-start/unadapted and .../adapted).

The study (benchmarks/urdu_adaptation.py --redo-downstream) uses it when the downstream protocol changes but the
adaptation does not: the adapted weights are the ones the run trained, so only the fine-tunes are repeated. The run's
results.json gets the new "downstream" entry; the old one is kept under "downstream_superseded" with the date, and
adaptation_report.md is rewritten from the updated results. The run's model card (README.md) is not rewritten.

    python benchmarks/urdu_downstream_rerun.py RUN_DIR [--downstream_... flags of recipes/domain_adapt.py]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Flags of the finished run that the re-run keeps: which models and seeds it fine-tunes, and whether the English
# task is included. Every other downstream_* flag takes the recipe's current default unless given here.
KEPT = ("downstream_models", "downstream_seeds", "english_downstream")


def rerun(run_dir: Path, overrides: list[str], *, folder: str = "downstream", update_results: bool = True) -> dict:
    """The new downstream entry (per language). `folder`: where under RUN the fine-tunes go; `update_results`: whether
    it replaces the run's own (False for a side experiment such as benchmarks/urdu_downstream_convergence.py)."""
    from transformer_zoo.training.adaptation.data import load_english_data, load_urdu_data
    from transformer_zoo.training.adaptation.downstream import downstream_check
    from transformer_zoo.training.adaptation.report import report_tables
    from transformer_zoo.training.data.corpora import corpus_card_info
    from transformer_zoo.training.adaptation.recipe import _train_config, build_parser
    from transformer_zoo.training.engine.devices import create_accelerator
    from transformer_zoo.training.engine.tasks import write_results

    bad = [flag for flag in overrides if flag.startswith("--") and not flag.startswith(("--downstream",
                                                                                       "--english_downstream",
                                                                                       "--cpu_threads"))]
    if bad:
        raise SystemExit(f"only downstream flags (and --cpu_threads) can change in a re-run, got {', '.join(bad)}; "
                         "anything else changes the adaptation: rerun the recipe instead.")
    results_file, arguments_file = run_dir / "results.json", run_dir / "run_args.json"
    for needed in (results_file, arguments_file, run_dir / "downstream-start"):
        if not needed.exists():
            raise SystemExit(f"{run_dir} is not a finished domain-adaptation run with a downstream check: {needed} "
                             "is missing.")
    saved = json.loads(arguments_file.read_text(encoding="utf-8"))
    kept = {key: value for key, value in saved.items()
            if not (key.startswith("downstream_") or key == "english_downstream") or key in KEPT}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(kept, handle)
    # --resume: the folder is a finished run and stays as it is, apart from the files named above.
    args = build_parser().parse_args(["--config", handle.name, "--output_dir", str(run_dir), "--resume", "true",
                                      *overrides])
    Path(handle.name).unlink()
    accelerator = create_accelerator(_train_config(args, run_dir))
    specs = {name: str(run_dir / "downstream-start" / name) for name in args.downstream_models
             if (run_dir / "downstream-start" / name / "config.json").is_file()}
    if not specs:
        raise SystemExit(f"{run_dir}/downstream-start has none of {', '.join(args.downstream_models)}.")
    data = load_urdu_data(args)
    downstream = {"urdu": downstream_check(args, data.corpus, data.options, data.card, specs, accelerator,
                                           run_dir / folder / "urdu", args.dataset)}
    if args.english_downstream:
        english = load_english_data(args)
        if english is not None:
            downstream["english"] = downstream_check(args, english.corpus, None, corpus_card_info(english.corpus),
                                                     specs, accelerator, run_dir / folder / "english",
                                                     args.english_dataset)
    if not update_results:
        return downstream
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results.setdefault("downstream_superseded", []).append(
        {"replaced": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "downstream": results.get("downstream")})
    results["downstream"] = downstream
    write_results(run_dir, results)
    tables = report_tables(results)
    (run_dir / "adaptation_report.md").write_text("\n\n".join(f"## {h}\n\n{b}" for h, b in tables) + "\n",
                                                  encoding="utf-8")
    return downstream


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="the finished run's --output_dir")
    known, overrides = parser.parse_known_args(argv)
    return rerun(known.run_dir, overrides)


if __name__ == "__main__":
    main()
