"""The runner: presets, seeds, running one experiment and writing its report (markdown, PNG, JSON) and the index.

Experiments are modules of this package listed in `EXPERIMENT_MODULES`, each defining `EXPERIMENT` (a
`common.Experiment`). Adding one is a new file and a line here.
"""

from __future__ import annotations

import importlib
import json
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .common import Experiment, json_ready

EXPERIMENT_MODULES = ("copy_task", "extrapolation", "norm", "translation")
PRESET_NAMES = ("tiny", "quick", "default", "full")
# name -> (description, seeds): an experiment may use other seeds for a preset (Experiment.seeds).
PRESET_SEEDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "tiny": ("tests only (seconds; numbers meaningless)", (0, 1)),
    "quick": ("a first look: 2 seeds, fewer steps", (0, 1)),
    "default": ("the committed report in docs/reproduce: 3 seeds", (0, 1, 2)),
    "full": ("5 seeds, more steps and larger settings (a GPU or a long night)", (0, 1, 2, 3, 4)),
}


def _load() -> dict[str, Experiment]:
    registry = {}
    for module_name in EXPERIMENT_MODULES:
        experiment = importlib.import_module(f".{module_name}", __package__).EXPERIMENT
        missing = [preset for preset in PRESET_NAMES if preset not in experiment.settings]
        if missing:
            raise AssertionError(f"Experiment {experiment.name!r} has no settings for presets {missing}.")
        registry[experiment.name] = experiment
    return registry


REGISTRY: dict[str, Experiment] = _load()
EXPERIMENTS: tuple[str, ...] = tuple(REGISTRY)
TITLES = {name: experiment.title for name, experiment in REGISTRY.items()}


class Preset:
    """A preset's settings for every experiment, as attributes (`PRESETS["tiny"].copy`), its seeds and description."""

    def __init__(self, name: str):
        self.name = name
        self.description, self.seeds = PRESET_SEEDS[name]

    def __getattr__(self, experiment: str):
        if experiment in REGISTRY:
            return REGISTRY[experiment].settings[self.name]
        raise AttributeError(experiment)

    def seeds_for(self, experiment: str) -> tuple[int, ...]:
        return REGISTRY[experiment].seeds.get(self.name, self.seeds)


PRESETS: dict[str, Preset] = {name: Preset(name) for name in PRESET_NAMES}


def run_experiment(name: str, preset: str, seeds: Sequence[int] | None = None, *, progress: bool = True,
                   settings: Any = None) -> dict[str, Any]:
    """Run one experiment with a preset's settings (or `settings` given directly) and seeds (unless `seeds` is
    given); returns the results dict that `write_report` turns into files (raw numbers, claims and their verdicts,
    timing)."""
    if name not in REGISTRY:
        raise ValueError(f"Unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}.")
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; choose one of {', '.join(PRESETS)}.")
    experiment = REGISTRY[name]
    seeds = list(PRESETS[preset].seeds_for(name) if seeds is None else seeds)
    if not seeds:
        raise ValueError("Give at least one seed (two or more to measure a spread).")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"Seeds must be distinct, got {seeds}.")
    started, cpu_started = time.perf_counter(), time.process_time()
    results = experiment.run(settings if settings is not None else experiment.settings[preset], seeds,
                             progress=progress)
    results.update(
        # CPU seconds of this process and of any worker processes it ran (reported by the experiment): on a shared
        # machine wall time depends on the neighbours, this does not.
        preset=preset if settings is None else "custom", seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started + results.pop("worker_cpu_seconds", 0.0),
        environment={"torch": torch.__version__, "threads": torch.get_num_threads(), "python":
                     platform.python_version(), "machine": platform.machine(), "system": platform.system()},
    )
    return results


def write_report(results: Mapping[str, Any], output_dir: str | Path, *, command: str | None = None) -> list[Path]:
    """Write `<experiment>.md`, `<experiment>.png` and `<experiment>.json` into `output_dir`, then rebuild the
    folder's `README.md` index from every experiment JSON found there. Returns the paths written."""
    name = results["experiment"]
    experiment = REGISTRY[name]
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    record = dict(results, command=command)
    json_path = output_dir / f"{name}.json"
    json_path.write_text(json.dumps(json_ready(record), indent=1, allow_nan=False, ensure_ascii=False) + "\n")
    markdown_path = output_dir / f"{name}.md"
    markdown_path.write_text(experiment.markdown(results) + (f"\nCommand: `{command}`\n" if command else ""))
    png_path = experiment.plot(results, output_dir / f"{name}.png")
    return [markdown_path, png_path, json_path, write_index(output_dir)]


def write_index(output_dir: str | Path) -> Path:
    """`README.md` of a report folder: every experiment found there, its claims and verdicts, links to details."""
    output_dir = Path(output_dir)
    lines = ["# Reproducing classic transformer claims", "",
             "Written by `scripts/reproduce.py` (library: `transformer_zoo/analysis/reproduce/`, one module per "
             "experiment). Each verdict is computed from the measured numbers by the criterion stated next to it; "
             "see each experiment's page for the setup, the table (mean ± std over seeds) and the plot. Wall time "
             "depends on what else the machine runs; CPU minutes are the experiment process's own.", ""]
    for name in EXPERIMENTS:
        path = output_dir / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        held = sum(claim["held"] for claim in record["claims"])
        cpu = f" ({record['cpu_seconds'] / 60:.1f} min CPU)" if record.get("cpu_seconds") is not None else ""
        cost = f"{record['seconds'] / 60:.1f} min wall{cpu}"
        study = record.get("study")
        if study:  # runs finished by several processes: this one's time (a render, a resume) is not the study's
            cost = (f"{study['runs']} of {study['of']} runs finished, {study['training_hours']:.1f} h of training "
                    "(the page has the study's CPU and wall time)")
        lines += [f"## [{TITLES[name]}]({name}.md)", "",
                  f"Preset `{record['preset']}`, {len(record['seeds'])} seeds, {cost}; {held} of "
                  f"{len(record['claims'])} claims held.", ""]
        lines += [f"- {'held' if claim['held'] else '**not held**'}: {claim['claim']} ({claim['evidence']})"
                  for claim in record["claims"]]
        if record.get("command"):
            lines += ["", f"Command: `{record['command']}`"]
        lines.append("")
    index = output_dir / "README.md"
    index.write_text("\n".join(lines))
    return index
