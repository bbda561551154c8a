#!/usr/bin/env python
"""Step time of the committed translation study's default model (docs/reproduce/translation.md), one thread
against two, on the same token-count batches: what the study's one-thread training time (two runs side by side)
says about one run with the whole 2-core machine.

    python benchmarks/translation_step_time.py --steps 30 --output benchmarks/results/translation_step_time_cpu.json

Each setting trains a fresh copy of the model for `--warmup` + `--steps` steps (Adam, label smoothing, the study's
training loop) and reports the median step time of the timed steps, the projected time for the study's 1,250
steps, and the load average before and after.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="Timed steps per setting (default 30).")
    parser.add_argument("--warmup", type=int, default=5, help="Untimed steps first (default 5).")
    parser.add_argument("--threads", default="1,2", help="Comma-separated torch thread counts (default 1,2).")
    parser.add_argument("--output", default="benchmarks/results/translation_step_time_cpu.json",
                        help="Where to write the JSON.")
    args = parser.parse_args(argv)
    from transformers.models.bart.modeling_bart import shift_tokens_right

    from transformer_zoo.analysis.reproduce.runner import PRESETS
    from transformer_zoo.analysis.reproduce.translation import build_model, load_pair

    report = json.loads((Path(__file__).resolve().parent.parent / "docs/reproduce/translation.json").read_text())
    study_steps = report["pairs"]["bible-en-es"]["steps"]
    study_minutes = report["pairs"]["bible-en-es"]["train_seconds"] / 60

    settings = PRESETS["default"].translation
    pair = load_pair("bible-en-es", settings)
    batches = pair.train.token_batches(settings.max_tokens, seed=0)[: args.warmup + args.steps]
    results = {"load_before": os.getloadavg(), "study_steps": study_steps,
               "study_training_minutes_one_thread_beside_a_second_worker": study_minutes,
               "settings": {"max_tokens": settings.max_tokens,
                                                             "model": settings.model.__dict__}, "rows": []}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        model = build_model(settings.model, pair.tokenizer, settings.max_length, seed=0).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        times = []
        for index, rows in enumerate(batches):
            batch = pair.train.batch(rows)
            started = time.perf_counter()
            decoder_input_ids = shift_tokens_right(batch["labels"], model.config.pad_token_id,
                                                   model.config.decoder_start_token_id)
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           decoder_input_ids=decoder_input_ids).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                                                     ignore_index=-100, label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if index >= args.warmup:
                times.append(time.perf_counter() - started)
        median = statistics.median(times)
        results["rows"].append({"threads": threads, "median_step_seconds": median, "steps_timed": len(times),
                                "projected_minutes_for_study_steps": median * study_steps / 60})
        print(f"{threads} thread(s): median step {median:.3f} s -> {study_steps} steps "
              f"{median * study_steps / 60:.1f} min")
    results["load_after"] = os.getloadavg()
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
