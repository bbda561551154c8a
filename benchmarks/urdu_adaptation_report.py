"""The Urdu adaptation study's report: study.md (the table of arms, the downstream protocol in words, the comparison
with the unadapted model) and its two plots, from the summary that benchmarks/urdu_adaptation.py computes. Kept
apart from the study's runs and summary so each file reads as one thing."""

from __future__ import annotations

import math
import statistics
from pathlib import Path


def _fmt(value, spec=".4f") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _pm(entry: dict | None, spec=".3f") -> str:
    if not entry or entry.get("mean") is None:
        return "—"
    std = "spread unknown" if entry.get("std") is None else format(entry["std"], spec)
    return f"{format(entry['mean'], spec)} ± {std}"


def _bpb(entry: dict, key: str) -> str:
    if entry.get(key) is None:
        return "—"
    std = entry.get(f"{key}_std")
    return f"{entry[key]:.3f}" + ("" if std is None else f" ± {std:.3f}")


def markdown(study: dict, setup: dict, records: list[dict] = ()) -> str:
    from transformer_zoo.training.adaptation.report import fine_tuning_name

    lines = ["# Urdu adaptation study", "",
             f"`python benchmarks/urdu_adaptation.py {setup['command']}` — {setup['when']}; {setup['machine']}."
             + (f" {setup['note']}" if setup.get("note") else ""), "",
             "Bits per byte (lower is better) on the same held-out test-split sentences for every model; the "
             "masked-LM encoders' is the pseudo-log-likelihood (Salazar et al. 2020) and its word-l2r variant (Kauf & "
             "Ivanova 2023), the decoder's is exact. Downstream: "
             f"{fine_tuning_name(study.get('downstream_protocol'))} on the 6-class 'which collection' task, test "
             "accuracy, mean ± std over seeds. The recipe's default is marked ★.", "",
             "| arm | method | seeds | Urdu bpb | Urdu bpb (word-l2r) | English bpb | fertility | Urdu bytes/s | "
             "downstream accuracy (Urdu) | macro-F1 (Urdu) | accuracy (English task) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in study["arms"]:
        e = study[arm]
        star = " ★" if arm == study["default_arm"] else ""
        lines.append(f"| {arm}{star} | {e['description']} | {','.join(map(str, e['seeds']))} | {_bpb(e, 'bpb_urdu')} | {_bpb(e, 'bpb_urdu_word_l2r')} | "
                     f"{_bpb(e, 'bpb_english')} | {_fmt(e['fertility'], '.2f')} | "
                     f"{_fmt(e['bytes_per_second'], ',.0f')} | {_pm(e['downstream_accuracy'])} | "
                     f"{_pm(e['downstream_macro_f1'])} | {_pm(e['downstream_english_accuracy'])} |")
    majority = next((study[a].get("majority_urdu") for a in study["arms"] if study[a].get("majority_urdu")), None)
    sizes = next((study[a].get("downstream_sizes") for a in study["arms"] if study[a].get("downstream_sizes")), None)
    lines += ["", f"Majority-class accuracy: {_fmt(majority, '.3f')}"
              + (f"; {sizes['train']} training / {sizes['validation']} validation / {sizes['test']} test "
                 "paragraphs." if sizes else "."), "",
              *convergence_lines(study, records),
              "Forward throughput (bytes/s) was timed while the study's runs shared the cores, so it is noisy; the "
              "tokens per byte behind it (study.json) are exact. A seed sets both the adaptation and the downstream "
              "fine-tuning.", "", "## Against the unadapted model", "",
              "| arm | Urdu bpb gain | downstream accuracy gain | English bpb gain | target met |", "|---|---|---|---|---|"]
    for arm, comparison in study["comparisons"].items():
        cells = []
        for key in ("bpb_urdu", "downstream_accuracy", "bpb_english"):
            value = comparison.get(key)
            cells.append("—" if value is None else f"{value['gain']:+.3f} ({value['verdict']})")
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {'yes' if comparison['target_met'] else 'no'} |")
    lines += ["", "Gains are signed so that positive is better (bits per byte: unadapted minus arm). The target: "
              "better on Urdu bits per byte and on downstream accuracy by more than twice the larger seed standard "
              "deviation."]
    return "\n".join(lines) + "\n"


def convergence_lines(study: dict, records: list[dict]) -> list[str]:
    """The downstream protocol in words, and how often its fine-tunes stopped early or peaked at the last evaluation."""
    from transformer_zoo.training.adaptation.report import fine_tuning_name

    protocol, sizes = study.get("downstream_protocol"), None
    for arm in study["arms"]:
        sizes = sizes or study[arm].get("downstream_sizes")
    if not protocol or not sizes:
        return []
    steps_per_epoch = math.ceil(sizes["train"] / protocol["batch_size"])
    budget = math.ceil(protocol["epochs"] * steps_per_epoch)
    runs = [r[key] for r in records for key in ("downstream_urdu", "downstream_english") if key in r]
    stopped = sum(run["steps"] < budget for run in runs)
    at_end = sum(run["best_step"] == run["steps"] for run in runs)
    precision = "bf16 autocast (fp32 weights)" if protocol["precision"] == "bf16" else "fp32"
    return [f"Downstream protocol (every arm): {fine_tuning_name(protocol)}, at most {protocol['epochs']:g} epochs "
            f"({budget} steps of {protocol['batch_size']}) at peak rate {protocol['learning_rate']:g} decaying linearly, {precision}, "
            f"validation every {protocol['eval_steps']} steps, early stopping on validation "
            f"{protocol['stopping_metric']} after {protocol['patience']} evaluations without improvement, the best "
            f"validation model tested. Of {len(runs)} fine-tunes, {stopped} stopped early and {at_end} had their best "
            "validation at the last evaluation (a fine-tune still improving when its budget ran out); the "
            "convergence-*.md files compare earlier protocols with longer budgets.", ""]


def plots(study: dict, folder: Path) -> None:
    import matplotlib

    from transformer_zoo.training.adaptation.report import fine_tuning_name

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for arm in study["arms"]:
        curves = list(study[arm]["curves"].values())
        if not curves or len(curves[0]) < 2:
            continue
        steps = [point["step"] for point in curves[0]]
        means = [statistics.mean(c[i]["bits_per_byte"] for c in curves if i < len(c)) for i in range(len(steps))]
        axis.plot(steps, means, "o-", markersize=3, label=arm)
    for arm in ("unadapted", "smollm2-unadapted"):
        if arm in study:
            values = [c[0]["bits_per_byte"] for c in study[arm]["curves"].values() if c and c[0]["bits_per_byte"]]
            if values:
                axis.axhline(statistics.mean(values), linestyle="--", color="grey" if arm == "unadapted" else "black",
                             label=f"{arm} (own tokenizer)")
    axis.set_xlabel("continued-pretraining step")
    axis.set_ylabel("validation bits per byte (lower is better)")
    axis.set_title("Held-out Urdu bits per byte during adaptation (mean over seeds)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(folder / "bits_per_byte.png", dpi=120)
    plt.close(figure)

    arms = [a for a in study["arms"] if study[a].get("downstream_accuracy")]
    if not arms:
        return
    figure, axis = plt.subplots(figsize=(8, 4.5))
    means = [study[a]["downstream_accuracy"]["mean"] for a in arms]
    stds = [study[a]["downstream_accuracy"]["std"] or 0.0 for a in arms]
    colours = ["tab:orange" if a == study["default_arm"] else "tab:grey" if a == "unadapted" else "tab:blue"
               for a in arms]
    axis.bar(range(len(arms)), means, yerr=stds, capsize=4, color=colours)
    for index, arm in enumerate(arms):
        for value in study[arm]["downstream_accuracy"]["runs"]:
            axis.plot(index, value, "k.", markersize=4)
    majority = study[arms[0]].get("majority_urdu")
    if majority:
        axis.axhline(majority, linestyle=":", color="black", label="majority class")
        axis.legend(fontsize=8)
    axis.set_xticks(range(len(arms)), arms, rotation=20)
    axis.set_ylabel("test accuracy (mean ± std over seeds)")
    axis.set_title(f"Urdu 'which collection' task after {fine_tuning_name(study.get('downstream_protocol'))}")
    figure.tight_layout()
    figure.savefig(folder / "downstream.png", dpi=120)
    plt.close(figure)
