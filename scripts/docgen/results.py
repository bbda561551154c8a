"""README's and the docs index's results table (between `<!-- results:begin -->` and `<!-- results:end -->`),
every number read from a committed result file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import DOCS, ROOT
from .translation import planned_text, retrieval_margins

RESULTS_BEGIN, RESULTS_END = "<!-- results:begin -->", "<!-- results:end -->"


def _finetune_default() -> dict:
    text = (DOCS / "runs" / "finetune-default-a08d8d1.txt").read_text()
    test = text.split("Test:", 1)[1]
    accuracy = re.search(r"accuracy\s+([\d.]+)\s+\(majority-class baseline ([\d.]+)\)", test)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)", text)
    return {"accuracy": float(accuracy.group(1)), "baseline": float(accuracy.group(2)),
            "minutes": int(wall.group(1)) + float(wall.group(2)) / 60}


def spread(entry: dict) -> str:
    """A study.json summary ({mean, std, runs}) as "mean ± std"; one seed's value alone (its std is None)."""
    text = f"{entry['mean']:.3f}"
    return text if entry["std"] is None else f"{text} ± {entry['std']:.3f}"


def equal_text_clause(study: dict) -> str:
    """The equal-text control beside the study's headline, once both of its arms have run: what is left of the
    default arm's gain when both models read the same words of every paragraph."""
    default_arm = study["default_arm"]
    ours, theirs = study.get(f"{default_arm}-equal-text"), study.get("unadapted-equal-text")
    if not (ours and theirs and ours.get("downstream_accuracy") and theirs.get("downstream_accuracy")):
        return ""
    ours, theirs = ours["downstream_accuracy"], theirs["downstream_accuracy"]
    return (f"; on the same first words of each paragraph (the equal-text control, {len(ours['runs'])} seeds) "
            f"{spread(ours)} against {spread(theirs)}")


def fp32_control_clause(study: dict) -> str:
    """The controls checked in fp32 (from scratch; translate-test once it has run), each against the default arm
    checked the same way (its fp32 reference), so that the row never compares across precision groups."""
    reference = study.get(f"{study['default_arm']}-fp32")
    if not (reference and reference.get("downstream_accuracy")):
        return ""
    names = {"from-scratch": "the same encoder from scratch on the same text", "translate-test": "translate-test"}
    found = [(names[arm], study[arm]["downstream_accuracy"]) for arm in names
             if study.get(arm) and study[arm].get("downstream_accuracy")]
    if not found:
        return ""
    ours = reference["downstream_accuracy"]
    return ("; checked in fp32, " + ", ".join(f"{name} {spread(a)}" for name, a in found)
            + f" against the default arm's {spread(ours)}")


def decoder_rows(study: dict) -> list[tuple[str, str, str]]:
    """The decoder arms (SmolLM2-135M) once both have their downstream check: continued pretraining's gain in Urdu
    bits per byte beside what it does to the downstream task, each with its number of seeds (one seed has no spread
    to show)."""
    unadapted, adapted = study.get("smollm2-unadapted"), study.get("smollm2-none")
    if not (unadapted and adapted and unadapted.get("downstream_accuracy") and adapted.get("downstream_accuracy")):
        return []

    def accuracy(entry):
        check = entry["downstream_accuracy"]
        seeds = len(check["runs"])
        return f"{spread(check)} ({seeds} seed{'s' if seeds > 1 else ''})"

    return [("Urdu adaptation of SmolLM2-135M (decoder): continued pretraining of every weight",
             f"Urdu bits per byte **{adapted['bpb_urdu']:.3f}** against {unadapted['bpb_urdu']:.3f} unadapted; "
             f"downstream accuracy {accuracy(adapted)} against {accuracy(unadapted)}", "urdu/study.md")]


def urdu_translation_rows(record: dict) -> list[tuple[str, str, str]]:
    """A row per Urdu translator in the committed report, chrF first (the primary score for Urdu), against retrieval,
    and said plainly when it does not clear it; a pair still training at a raised budget shows its last finished
    budget, and says so."""
    from transformer_zoo.analysis.reproduce.translation import (against_baselines, earlier_settings_text,
                                                                 scores_below_baselines)

    rows = []
    budgets = record.get("shorter_budgets") or {}
    for name in record["settings"]["pairs"]:
        if "urdu" not in name:
            continue
        if name in record["pairs"]:
            pair, note = record["pairs"][name], ""
        elif budgets.get(name):
            pair = budgets[name][-1]
            note = f"; its run at {planned_text(record, name)} is not finished"
        else:
            continue
        below = scores_below_baselines(pair)
        standing = {"clear": "", "level": f"; **not clear of retrieval** (margins {retrieval_margins()})",
                    "below": f"; **below retrieval**{' on ' + below[0] if len(below) == 1 else ''}"
                    }[against_baselines(pair)]
        rows.append((f"The same Transformer, {pair['language_pair']}, "
                     f"{earlier_settings_text(pair).replace(', ', ' in ')} on CPU",
                     f"test chrF **{pair['test_chrf']:.2f}**, BLEU {pair['test_bleu']:.2f} (retrieval "
                     f"{pair['retrieval_chrf']:.2f} / {pair['retrieval_bleu']:.2f})" + standing + note,
                     "reproduce/translation.md"))
    return rows


def table3_row(record: dict) -> tuple[str, str, str]:
    """Table 3 on the front page: the base's dev BLEU (the budget check), how many of its runs are finished, and the
    claims decided so far (a claim waits until every row it compares has its runs)."""
    from transformer_zoo.analysis.reproduce.common import format_mean_std

    base = record["summary"]["base"]["dev_bleu"]
    rows = record["table3_rows"]
    finished = sum(len(record["summary"][row]["dev_bleu"]) for row in rows)
    seeds = len(record["seeds"])
    decided = [claim for claim in record["table3_claims"] if claim["key"] != "base" and claim["held"] is not None]
    waiting = len(record["table3_claims"]) - 1 - len(decided)
    result = (f"base dev BLEU **{format_mean_std(base, 2)}** ({len(base)} seeds; the rows need at least 20); "
              f"{finished} of {len(rows) * seeds} runs finished, "
              + (f"{sum(c['held'] for c in decided)} of {len(decided)} decided claims held, " if decided else "")
              + (f"{waiting} claims waiting for their rows" if waiting != 1 else "1 claim waiting for its rows"))
    return (f"Vaswani et al.'s Table 3 (heads, d_k, size, dropout, smoothing, positions) on Bible en-es, {seeds} "
            "seeds a row", result, "reproduce/translation.md")


def render_results() -> str:
    finetune = _finetune_default()
    translation_record = json.loads((DOCS / "reproduce" / "translation.json").read_text())
    translation = translation_record["pairs"]["bible-en-es"]
    study = json.loads((DOCS / "urdu" / "study.json").read_text())
    unadapted, default_arm = study["unadapted"], study[study["default_arm"]]
    speed = json.loads((ROOT / "benchmarks" / "results" / "compare_hf_kept_memory_cpu.json").read_text())
    sdpa = {row["family"]: row["train"]["speedup"] for row in speed["rows"]
            if row["attn"] == "sdpa" and not row["compile"] and row["family"] != "nanogpt"}
    claims = {name: json.loads((DOCS / "reproduce" / f"{name}.json").read_text())["claims"]
              for name in ("copy", "extrapolation", "norm")}
    held = sum(claim["held"] for group in claims.values() for claim in group)
    total = sum(len(group) for group in claims.values())

    rows = [
        ("The main job: LoRA fine-tune of all-MiniLM-L6-v2, 6-class hadith task (2 CPU cores)",
         (f"test accuracy **{finetune['accuracy']:.3f}** (majority class {finetune['baseline']:.3f}), "
         f"{finetune['minutes']:.0f} min"), "runs/finetune-default-a08d8d1.txt"),
        ("Original Transformer, English→Spanish (Bible), from scratch on CPU",
         (f"test BLEU **{translation['test_bleu']:.2f}**, chrF {translation['test_chrf']:.2f} "
         f"(nearest-training-pair retrieval {translation['retrieval_bleu']:.2f} BLEU)"), "reproduce/translation.md"),
        *urdu_translation_rows(translation_record),
        table3_row(translation_record),
        ("Urdu adaptation of all-MiniLM-L6-v2 (default arm), downstream accuracy over 3 seeds",
         (f"**{spread(default_arm['downstream_accuracy'])}** against {spread(unadapted['downstream_accuracy'])} "
         f"unadapted" + equal_text_clause(study) + fp32_control_clause(study)), "urdu/study.md"),
        *decoder_rows(study),
        ("Training step against transformers' own models (sdpa, same weights, 2 threads)",
         ", ".join(f"{family} **{value:.2f}×**" for family, value in sdpa.items()), "speed.md"),
        ("Classic claims (copy task, length extrapolation, pre- vs post-norm), 3 seeds",
         f"**{held} of {total}** held by their stated criteria", "reproduce/README.md"),
    ]
    lines = ["| what | result | report |", "|---|---|---|"]
    lines += [f"| {what} | {result} | [{Path(link).stem}](LINK/{link}) |" for what, result, link in rows]
    return "\n".join(lines) + "\n"


def with_results(text: str, table: str, link_prefix: str) -> str:
    begin, end = text.index(RESULTS_BEGIN) + len(RESULTS_BEGIN), text.index(RESULTS_END)
    return text[:begin] + "\n" + table.replace("LINK/", link_prefix) + text[end:]
