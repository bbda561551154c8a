"""The Urdu page's tables: the study's own report (docs/urdu/study.md), the downstream protocol checks and every
committed run of the recipe's default command."""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import DOCS


def markdown_tables(text: str) -> list[str]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append("\n".join(current))
            current = []
    return tables + (["\n".join(current)] if current else [])


URDU = DOCS / "urdu"


def urdu_findings() -> str:
    """The study report's own findings (benchmarks/urdu_adaptation_report.findings_lines, computed from study.json)."""
    text = (URDU / "study.md").read_text()
    return text[text.index("## What the rows show") + len("## What the rows show"):].strip() + "\n"


def urdu_convergence() -> str:
    """Each earlier downstream protocol against twice the epochs, on the same saved model and seed."""
    lines = ["| protocol | arm | protocol: accuracy (best step / steps) | 8 epochs: accuracy (best step / steps) | "
             "difference |", "|---|---|---|---|---|"]
    for name in ("convergence-full-4epochs", "convergence-lora"):
        record = json.loads((URDU / f"{name}.json").read_text())
        for arm, runs in record["arms"].items():
            if "long" not in runs:
                continue
            short, long = runs["protocol"], runs["long"]
            protocol = short["protocol"]
            label = (f"{'LoRA' if protocol.get('mode', 'lora') == 'lora' else 'full fine-tuning'}, "
                     f"{protocol['learning_rate']:g}, {protocol['epochs']:g} epochs (`docs/urdu/{name}.md`)")
            lines.append(f"| {label} | {arm} | {short['accuracy']:.3f} ({short['best_step']} / {short['steps']}) | "
                         f"{long['accuracy']:.3f} ({long['best_step']} / {long['steps']}) | "
                         f"{long['accuracy'] - short['accuracy']:+.3f} |")
    lora = json.loads((URDU / "convergence-lora.json").read_text())["arms"]
    changes = [f"{arm} {runs['fp32']['accuracy'] - runs['protocol']['accuracy']:+.3f}"
               for arm, runs in lora.items() if "fp32" in runs]
    lines += ["", "The same LoRA fine-tunes in fp32 instead of bf16 autocast (seed 1, `docs/urdu/convergence-lora.md`), "
              "accuracy fp32 minus bf16: " + ", ".join(changes) + "."]
    return "\n".join(lines) + "\n"


def urdu_protocol_change() -> str:
    """The study's arms under the 4-epoch protocol against the current one, same saved models and seeds."""
    old = json.loads((URDU / "study-full-4epochs.json").read_text())
    new = json.loads((URDU / "study.json").read_text())
    lines = ["| arm | 4 epochs, patience 3 | 8 epochs, patience 5 (the study) | difference |", "|---|---|---|---|"]
    for arm in old["arms"]:
        before, after = old[arm].get("downstream_accuracy"), new.get(arm, {}).get("downstream_accuracy")
        if not before or not after or before.get("std") is None or after.get("std") is None:
            continue
        lines.append(f"| {arm} | {before['mean']:.3f} ± {before['std']:.3f} | {after['mean']:.3f} ± "
                     f"{after['std']:.3f} | {after['mean'] - before['mean']:+.3f} |")
    return "\n".join(lines) + "\n"


def _gnu_time(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        if ":" in line:
            key, _, value = line.strip().rpartition(": ")
            fields[key] = value
    return fields


URDU_PHASES = ("data", "unadapted_measures", "vocabulary_extension", "continued_pretraining", "adapted_measures",
               "downstream")


def _one_minute_loads(text: str) -> list[float]:
    """The 1-minute load averages a load.txt logged: `uptime` lines, or a sampler's `start HH:MM:SS load a b c` and
    `HH:MM:SS a b c` lines."""
    found = [float(value) for value in re.findall(r"load average: ([\d.]+)", text)]
    return found or [float(match) for match in re.findall(r"^(?:start )?[\d:]+ (?:load )?([\d.]+) [\d.]+ [\d.]+$",
                                                          text, flags=re.M)]


def urdu_default_runs() -> str:
    """Every committed run of the recipe's default command: wall time under /usr/bin/time, load, phases, numbers."""
    lines = ["| run folder | wall time | load average at start, end | unadapted / adapted accuracy | Urdu bits per "
             "byte, unadapted / adapted | phases (s) |", "|---|---|---|---|---|---|"]
    for folder in sorted(URDU.glob("default-run*")):
        results = json.loads((folder / "results.json").read_text())
        timing = _gnu_time(folder / "time.txt")
        loads = _one_minute_loads((folder / "load.txt").read_text())
        check = results["downstream"]["urdu"]
        accuracy = " / ".join(f"{check[m]['accuracy']['mean']:.3f} ± {check[m]['accuracy']['std']:.3f}"
                              for m in ("unadapted", "adapted"))
        bits = f"{results['unadapted']['urdu']['bits_per_byte']:.3f} / {results['adapted']['urdu']['bits_per_byte']:.3f}"
        recorded = results.get("phase_seconds") or {}
        phases = ", ".join(f"{name.replace('_', ' ')} {recorded[name]:.0f}" for name in URDU_PHASES if name in recorded)
        mode = check["protocol"].get("mode", "lora")
        lines.append(f"| `docs/urdu/{folder.name}/` ({mode} downstream) | "
                     f"{timing['Elapsed (wall clock) time (h:mm:ss or m:ss)']} | {loads[0]:.2f}, {loads[-1]:.2f} | {accuracy} | "
                     f"{bits} | {phases or 'not recorded'} |")
    return "\n".join(lines) + "\n"
