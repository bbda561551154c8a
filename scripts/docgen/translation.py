"""The translation page's tables and notes, from docs/reproduce/translation.json and the step-time measurement."""

from __future__ import annotations

import json

from . import DOCS, ROOT


def retrieval_margins() -> str:
    """The study's margins for 'clear of retrieval', as the docs say them."""
    from transformer_zoo.analysis.reproduce.translation import BLEU_MARGIN, CHRF_MARGIN

    return f"{CHRF_MARGIN:g} chrF, {BLEU_MARGIN:g} BLEU"


def planned_text(record: dict, name: str) -> str:
    """The budget (and training precision, where not fp32) a pair still training runs at."""
    from transformer_zoo.analysis.reproduce.translation import planned_text as settings_text

    return settings_text(record["settings"], name)


def translation_table() -> str:
    record = json.loads((DOCS / "reproduce" / "translation.json").read_text())
    from transformer_zoo.analysis.reproduce.translation import against_baselines, earlier_budget_row
    from transformer_zoo.analysis.reproduce.translation_setup import LANGUAGE_PAIRS

    lines = ["| pair | test sentences | model BLEU | model chrF | retrieval BLEU / chrF | copy BLEU / chrF | training |",
             "|---|---|---|---|---|---|---|"]
    budgets = record.get("shorter_budgets") or {}
    for name in record["settings"]["pairs"]:
        if name not in record["pairs"]:  # a partial report: the study is still running
            lines.append(f"| {LANGUAGE_PAIRS.get(name, name)}, {planned_text(record, name)} | — | not finished yet | | "
                         "| | |")
        runs = [record["pairs"][name]] if name in record["pairs"] else []
        # The runs of a pair under earlier settings (a shorter budget, another precision) stay in the table, labelled.
        runs += [earlier_budget_row(run) for run in reversed(budgets.get(name, []))]
        for pair in runs:
            clear = against_baselines(pair) == "clear"
            bleu, chrf = (f"**{pair['test_bleu']:.2f}**", f"**{pair['test_chrf']:.2f}**") if clear else (
                f"{pair['test_bleu']:.2f}", f"{pair['test_chrf']:.2f}")  # bold only where it clears retrieval
            sentences = pair.get("test_sentences")
            lines.append(f"| {pair['language_pair']} | {f'{sentences:,}' if sentences else '—'} | {bleu} | {chrf} | "
                         f"{pair['retrieval_bleu']:.2f} / {pair['retrieval_chrf']:.2f} | "
                         f"{pair['copy_bleu']:.2f} / {pair['copy_chrf']:.2f} | {pair['steps']:,} steps, "
                         f"{pair['train_seconds'] / 60:.1f} min |")
    return "\n".join(lines) + "\n"


def translation_notes() -> str:
    """What the default models' numbers say, from docs/reproduce/translation.json and the step-time measurement."""
    from transformer_zoo.analysis.reproduce.translation import (against_baselines, earlier_settings_text,
                                                                 scores_below_baselines)

    record = json.loads((DOCS / "reproduce" / "translation.json").read_text())
    timing = json.loads((ROOT / "benchmarks" / "results" / "translation_step_time_cpu.json").read_text())
    threads = {row["threads"]: row for row in timing["rows"]}
    lines = [f"Training times are one torch thread each, with the study's second worker on the other core. With the "
             f"machine to itself, the default model's training step took a median "
             f"{threads[2]['median_step_seconds']:.3f} s on two threads and {threads[1]['median_step_seconds']:.3f} s "
             f"on one (load average {timing['load_before'][0]:.1f} before, {timing['load_after'][0]:.1f} after; "
             "`benchmarks/results/translation_step_time_cpu.json`): the "
             f"{timing['study_steps']:,} steps alone are {threads[2]['projected_minutes_for_study_steps']:.0f} min "
             "on two threads.", ""]
    budgets = record.get("shorter_budgets") or {}
    shown = [(name, dict(run, language_pair=f"{run['language_pair']} at {earlier_settings_text(run)}"))
             for name in record["settings"]["pairs"]
             for run in ([record["pairs"][name]] if name in record["pairs"] else budgets.get(name, [])[-1:])]
    for name, pair in shown:
        before = [e for e in pair["dev_evaluations"] if e.get("averaged") == 1 and e["step"] == pair["steps"]]
        after = [e for e in pair["dev_evaluations"] if e.get("averaged", 0) > 1]
        margin_bleu = pair["test_bleu"] - pair["retrieval_bleu"]
        margin_chrf = pair["test_chrf"] - pair["retrieval_chrf"]
        standing = against_baselines(pair)
        if standing == "clear":
            head = (f"- **{pair['language_pair']}** beats the retrieval baseline by {margin_bleu:.1f} BLEU and "
                    f"{margin_chrf:.1f} chrF")
        elif standing == "level":
            head = (f"- **{pair['language_pair']} is level with retrieval**, not clear of it by the study's margins "
                    f"({retrieval_margins()}): {margin_bleu:+.2f} BLEU and {margin_chrf:+.2f} chrF after "
                    f"{pair['steps']:,} optimizer steps")
        elif len(below := scores_below_baselines(pair)) == 1:  # above retrieval on one score, under on the other
            head = (f"- **{pair['language_pair']} is below retrieval on {below[0]}**: "
                    f"{margin_bleu:+.2f} BLEU and {margin_chrf:+.2f} chrF against it after {pair['steps']:,} "
                    "optimizer steps")
        else:
            head = (f"- **{pair['language_pair']} does not translate at this budget**: {pair['steps']:,} optimizer "
                    f"steps; retrieval is better by {-margin_bleu:.1f} BLEU and {-margin_chrf:.1f} chrF")
        if name not in record["pairs"]:
            planned = planned_text(record, name)
            if planned.startswith(f"{pair['epochs']:g} epochs,"):  # the same budget, retrained in another precision
                head += f" (the pair now trains at {planned}, to fit one sitting; that run is not finished)"
            else:
                # The longer run continues this one's final state only where its snapshot survived on the machine
                # that trains it; the schedule has no horizon, so a run from the start repeats these steps (seeded).
                head += (f" (its budget is raised to {planned}: that run repeats these {pair['steps']:,} steps, or "
                         f"continues from them where their snapshot is kept, and goes on; it is not finished)")
        if before and after:
            head += (f"; averaging the last {pair['checkpoints_averaged']} checkpoints moved the dev split's greedy "
                     f"BLEU from {before[0]['greedy_bleu']:.2f} to {after[0]['greedy_bleu']:.2f} and its loss from "
                     f"{before[0]['loss']:.2f} to {after[0]['loss']:.2f}")
        curve = [e for e in pair["dev_evaluations"] if e.get("averaged") == 1 and e["step"] < pair["steps"]]
        if len(curve) >= 3:
            head += ("; dev greedy BLEU during training: "
                     + ", ".join(f"{e['greedy_bleu']:.1f} (step {e['step']:,})" for e in curve[-3:]))
        lines.append(head + ".")
    return "\n".join(lines) + "\n"


def translation_table3() -> str:
    """Table 3 as the study's own report renders it (transformer_zoo.analysis.reproduce.translation_table3)."""
    from transformer_zoo.analysis.reproduce.translation_table3 import table3_markdown

    record = json.loads((DOCS / "reproduce" / "translation.json").read_text())
    return "\n".join(table3_markdown(record)[2:]).strip() + "\n"
