"""What a training run leaves behind for people: a JSONL metrics file, Accelerate trackers (TensorBoard when it is
installed), a PNG of the loss and learning-rate curves, and a README.md model card.

The JSONL file is the reference record: one JSON object per line, `{"step": …, "loss": …, "lr": …}` for training
and `{"step": …, "split": "validation", "eval_loss": …, …}` for evaluations. On resume it is cut back to the
checkpoint's step, so a resumed run's file matches an uninterrupted run's line for line (timings aside).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
from pathlib import Path

import torch
from transformers.utils import logging

# count_parameters and training_compute_flops are re-exported: the recipes and users read them from the run reports.
from ...model_cards.model_facts import count_parameters, format_number, training_compute_flops  # noqa: F401

logger = logging.get_logger(__name__)

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "training_curves.png"


# ================================================================================================ JSONL
class MetricsLog:
    """Appends JSON records to `<output_dir>/metrics.jsonl` (main process only; other processes hold a no-op)."""

    def __init__(self, path: str | os.PathLike, *, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            # One write per line, flushed: a process killed mid-run loses at most the line being written.
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()

    def truncate_after(self, step: int) -> None:
        """Drop the records of steps > `step` (written by a run that died after its last checkpoint)."""
        if not self.enabled or not self.path.exists():
            return
        kept = [record for record in read_jsonl(self.path) if record.get("step", 0) <= step]
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, sort_keys=True) + "\n" for record in kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of a JSONL file; a truncated last line (a crash mid-write) is skipped."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning(f"Skipping an incomplete line in {path}: {line[:80]!r}")
    return records


# ================================================================================================ trackers
def tracker_names(report_to: str) -> list[str]:
    """Accelerate tracker names for `--report_to`: "auto" = TensorBoard when installed, "none", or a comma list."""
    if report_to in ("none", "", None):
        return []
    if report_to == "auto":
        available = importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX")
        return ["tensorboard"] if available else []
    return [name.strip() for name in report_to.split(",") if name.strip()]


def flat_hyperparameters(values: dict) -> dict:
    """Tracker-friendly hyper-parameters: only int/float/str/bool values (others are turned into strings)."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, (bool, int, float, str)):
            flat[key] = value
        elif value is not None:
            flat[key] = str(value)
    return flat


# ================================================================================================ PNG
def plot_training_curves(metrics_path: str | os.PathLike, png_path: str | os.PathLike, *, title: str = "") -> Path:
    """Loss (training and evaluation) and learning rate against the optimiser step, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; a GUI backend would fail on a server
    import matplotlib.pyplot as plt

    records = read_jsonl(metrics_path)
    train = [r for r in records if "loss" in r and "split" not in r]
    evals = [r for r in records if "eval_loss" in r]
    figure, (loss_axis, lr_axis) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    # A line through one point draws nothing (a 10-step run logs once): mark the points of short curves.
    marker = {"marker": "o", "markersize": 4} if len(train) < 30 else {}
    if train:
        loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="training loss", lw=1, **marker)
    else:
        loss_axis.text(0.5, 0.5, "no training loss was logged (logging_steps larger than the run?)",
                       ha="center", va="center", transform=loss_axis.transAxes)
    if evals:
        loss_axis.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="validation loss")
    loss_axis.set_ylabel("loss")
    loss_axis.grid(alpha=0.3)
    if train or evals:
        loss_axis.legend()
    if train:
        lr_axis.plot([r["step"] for r in train], [r["lr"] for r in train], color="tab:green", lw=1, **marker)
    lr_axis.set_ylabel("learning rate")
    lr_axis.set_xlabel("optimizer step")
    lr_axis.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    png_path = Path(png_path)
    figure.savefig(png_path, dpi=110)
    plt.close(figure)
    return png_path


# ================================================================================================ model card
def hardware_summary(accelerator=None) -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if accelerator is not None:
        info.update(
            device=str(accelerator.device), processes=accelerator.num_processes,
            distributed=str(accelerator.distributed_type), mixed_precision=accelerator.mixed_precision,
        )
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _table(rows: list[tuple], header: tuple[str, str] = ("field", "value")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | {format_number(value)} |" for key, value in rows]
    return "\n".join(lines)


def render_model_card(card: dict) -> str:
    """A README.md for a trained model, rendered from the family's template in `transformer_zoo.model_cards`.

    `card` keys (all but title/model optional): title, summary, model (the trained model), auto_class (e.g.
    "AutoModelForCausalLM"), pipeline_tag, base_model (a Hub id), provenance (list of lines about where the starting
    weights came from), data (corpus_card_info dict), tokenizer (str), hyperparameters (dict), hardware (dict),
    training (dict: optimizer steps, tokens, examples, training time (s), ...), evaluation (dict split -> metrics),
    baseline (dict of metrics; `baseline_name` / `baseline_note` describe it), notes (list of lines), tags (list),
    extra_sections (list of (heading, markdown body) pairs, rendered as sections of their own), license (Hub
    licence id), language (code or list of codes), trainable_parameters (the count the run trained, e.g. before a
    LoRA merge), adapter (True for a PEFT adapter card), repo_id (where the usage snippets point).
    Local paths in any value are rewritten without the directory layout.
    """
    from ...model_cards import render_model_card as render

    return render(card)


def write_model_card(output_dir: str | os.PathLike, card: dict) -> Path:
    path = Path(output_dir) / "README.md"
    path.write_text(render_model_card(card), encoding="utf-8")
    return path


def format_metrics(metrics: dict, baseline: dict | None = None) -> str:
    """One line per metric, with the majority-class baseline beside it when given (for printing)."""
    lines = []
    for name, value in metrics.items():
        if isinstance(value, float) and math.isnan(value):
            continue
        line = f"  {name:<18} {format_number(value)}"
        if baseline and name in baseline:
            line += f"   (majority-class baseline {format_number(baseline[name])})"
        lines.append(line)
    return "\n".join(lines)
