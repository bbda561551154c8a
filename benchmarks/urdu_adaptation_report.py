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
             "accuracy, mean ± std over seeds. The recipe's default is marked ★. The group says how an arm's "
             "downstream check ran: the committed seven under bf16 autocast (on a CPU with native bf16), the later "
             "arms in fp32 beside fp32 references (unadapted-fp32, lora-fp32), the equal-text control on the same "
             "words per paragraph; accuracies are compared within a group only.", "",
             "| arm | method | group | seeds | Urdu bpb | Urdu bpb (word-l2r) | English bpb | fertility | Urdu bytes/s | "
             "downstream accuracy (Urdu) | macro-F1 (Urdu) | accuracy (English task) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in study["arms"]:
        e = study[arm]
        star = " ★" if arm == study["default_arm"] else ""
        group = study.get("arm_groups", {}).get(arm, "—")
        lines.append(f"| {arm}{star} | {e['description']} | {group} | {','.join(map(str, e['seeds']))} | "
                     f"{_bpb(e, 'bpb_urdu')} | {_bpb(e, 'bpb_urdu_word_l2r')} | "
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
              "| arm | against | Urdu bpb gain | downstream accuracy gain | English bpb gain | target met |",
              "|---|---|---|---|---|---|"]
    comparisons = [*study["comparisons"].items(), *study.get("comparisons_with_default", {}).items()]
    for arm, comparison in comparisons:
        cells = []
        for key in ("bpb_urdu", "downstream_accuracy", "bpb_english"):
            value = comparison.get(key)
            cells.append("—" if value is None else f"{value['gain']:+.3f} ({value['verdict']})")
        lines.append(f"| {arm} | {comparison.get('against', 'unadapted')} | " + " | ".join(cells)
                     + f" | {'yes' if comparison['target_met'] else 'no'} |")
    lines += ["", "Gains are signed so that positive is better (bits per byte: the reference minus the arm). The "
              "target: better on Urdu bits per byte and on downstream accuracy by more than twice the larger seed "
              "standard deviation.", "", "## What the rows show", "", *findings_lines(study)]
    return "\n".join(lines) + "\n"


# The arms that add Urdu pieces to the vocabulary, with the adapted encoder's weights (not from scratch).
NEW_PIECE_ARMS = ("random", "mean", "focus", "trans-tokenization", "lora")


def _accuracy(study: dict, arm: str) -> dict | None:
    entry = study.get(arm, {}).get("downstream_accuracy")
    return entry if entry and entry.get("mean") is not None else None


def _apart(study: dict, arm: str, other: str) -> str:
    """How two arms' downstream accuracies compare against their seed spreads, in words."""
    from transformer_zoo.training.adaptation.downstream import seed_spread_verdict

    a, b = _accuracy(study, arm), _accuracy(study, other)
    spread = None if a["std"] is None or b["std"] is None else max(a["std"], b["std"])
    return f"{a['mean'] - b['mean']:+.3f}, {seed_spread_verdict(a['mean'] - b['mean'], spread)}"



def _long_paragraphs(quality: dict) -> str:
    """How translate-test's translator read the paragraphs longer than its training length (from the model folder's
    translation_decoding.json); nothing for translations made before it was recorded."""
    counts, decoding = quality.get("long_sources") or {}, quality.get("decoding") or {}
    if not counts.get("over_limit"):
        return ""
    return (f"; {counts['over_limit']} paragraphs longer than the {decoding.get('max_source_tokens')} tokens it "
            f"trained on, {counts['split']} of them translated in {counts['pieces']} pieces of whole sentences, "
            f"{counts['truncated']} cut")


def findings_lines(study: dict) -> list[str]:
    """The study's findings in sentences, every number and every comparison computed from study.json, so that the
    words cannot drift from the table. Rows that have not run yet are said to be missing."""
    lines: list[str] = []
    base = _accuracy(study, "unadapted")
    if base is None:
        return ["The unadapted model has no downstream result yet; nothing to compare against."]
    default = study["default_arm"]
    added = [arm for arm in NEW_PIECE_ARMS if _accuracy(study, arm)]
    met = [arm for arm in added if study["comparisons"].get(arm, {}).get("target_met")]
    if added:
        accuracies = [_accuracy(study, arm)["mean"] for arm in added]
        bpbs = [study[arm]["bpb_urdu"] for arm in added]
        lines.append(f"- **New Urdu pieces.** {len(met)} of {len(added)} arms that add Urdu pieces meet the target "
                     f"({', '.join(met) or 'none'}): held-out Urdu bits per byte {study['unadapted']['bpb_urdu']:.3f} "
                     f"unadapted against {min(bpbs):.3f}-{max(bpbs):.3f}, downstream accuracy {_pm(base)} against "
                     f"{min(accuracies):.3f}-{max(accuracies):.3f}.")
        best = max(added, key=lambda arm: _accuracy(study, arm)["mean"])
        others = [f"{arm} ({_apart(study, arm, best)})" for arm in added if arm != best]
        if others:
            lines.append(f"- **The best downstream arm is {best}** ({_accuracy(study, best)['mean']:.3f}); against "
                         "it: " + "; ".join(others) + ".")
    if _accuracy(study, "none"):
        english = study["none"].get("bpb_english")
        lines.append(f"- **Continued pretraining without new pieces** (none): Urdu bits per byte "
                     f"{study['none']['bpb_urdu']:.3f}, downstream {_apart(study, 'none', 'unadapted')} against the "
                     f"unadapted model" + (f"; English bits per byte {english:.3f}." if english else "."))
    # The later arms were checked in fp32: they are compared with the fp32 references only.
    fp32_base, fp32_default = "unadapted-fp32", f"{default}-fp32"
    references = [arm for arm in (fp32_base, fp32_default) if _accuracy(study, arm)]
    if references:
        lines.append("- **The fp32 references** (the later arms' downstream checks ran in fp32; see the group column): "
                     + "; ".join(f"{arm} {_pm(_accuracy(study, arm))}" for arm in references)
                     + (f"; the default arm's gain in fp32 {_apart(study, fp32_default, fp32_base)}."
                        if len(references) == 2 else "."))
    for arm, question in (("from-scratch", "is the English pretraining worth anything?"),
                          ("translate-test", "is adapting better than translating the test set into English?")):
        if not _accuracy(study, arm):
            lines.append(f"- **{arm}** ({question}): not run yet"
                         + (" (it needs the translation study's Urdu-English model)." if arm == "translate-test"
                            else "."))
            continue
        entry = study[arm]
        against = [f"{_apart(study, arm, ref)} against {ref}" for ref in references]
        detail = ""
        if arm == "from-scratch":
            detail = (f" (the adapted arms' architecture and tokenizer from random weights, the same text and "
                      f"{entry.get('steps')} steps; Urdu bits per byte {entry['bpb_urdu']:.3f})")
        else:
            quality = entry.get("translation_quality") or {}
            if quality:
                detail = (f" (our Urdu-English model on these paragraphs: chrF {quality['chrf']:.1f}, BLEU "
                          f"{quality['bleu']:.1f} against the hadith's own English{_long_paragraphs(quality)})")
        accuracy = _accuracy(study, arm)
        lines.append(f"- **{arm}** ({question}){detail}: {_pm(accuracy)}; "
                     + ("; ".join(against) if against else "no fp32 reference yet") + ".")
    equal = study["comparisons"].get(f"{default}-equal-text", {}).get("downstream_accuracy")
    fixed = study["comparisons"].get(fp32_default, {}).get("downstream_accuracy")
    if equal and fixed:
        words = _accuracy(study, f"{default}-equal-text")["mean"] - _accuracy(study, fp32_default)["mean"]
        lines.append(f"- **Equal text.** In the 64-token window the default arm gains {fixed['gain']:+.3f} over the "
                     f"unadapted model (fp32); when both read the same first words of every paragraph it gains "
                     f"{equal['gain']:+.3f} ({equal['verdict']}). So {fixed['gain'] - equal['gain']:+.3f} of the gain "
                     f"comes from fitting more words into the window, and {equal['gain']:+.3f} remains with the same "
                     f"text; cut to the same words, the default arm itself changes by {words:+.3f}.")
    else:
        lines.append("- **Equal text**: not run yet (or its fp32 references are missing).")
    decoder = [arm for arm in ("smollm2-unadapted", "smollm2-none") if arm in study]
    if decoder:
        parts = []
        for arm in decoder:
            accuracy = _accuracy(study, arm)
            parts.append(f"{arm} {study[arm]['bpb_urdu']:.3f} bits per byte (seeds "
                         f"{','.join(map(str, study[arm]['seeds']))}), downstream "
                         + (_pm(accuracy) if accuracy else "not run"))
        lines.append("- **The decoder** (SmolLM2-135M): " + "; ".join(parts) + ".")
    return lines


def group_differences(protocols: dict) -> str:
    """What differs between the arm groups' downstream checks (precision, and the text each example is cut to), in
    words: the rest of the protocol is the same for every group."""
    parts = []
    for group, protocol in protocols.items():
        precision = "bf16 autocast (fp32 weights)" if protocol.get("precision") == "bf16" else "fp32"
        text = f"{protocol['max_length']} tokens"
        if protocol.get("max_words"):
            text = f"the first {protocol['max_words']} words in at most {text}"
        parts.append(f"{group}: {precision}, {text} per paragraph")
    return "; ".join(parts)


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
    return [f"Downstream protocol (every arm): {fine_tuning_name(protocol)}, at most {protocol['epochs']:g} epochs "
            f"({budget} steps of {protocol['batch_size']}) at peak rate {protocol['learning_rate']:g} decaying linearly, "
            f"validation every {protocol['eval_steps']} steps, early stopping on validation "
            f"{protocol['stopping_metric']} after {protocol['patience']} evaluations without improvement, the best "
            f"validation model tested. The groups differ only in precision and text per example ("
            f"{group_differences(study.get('downstream_protocols') or {'bf16': protocol})}). Of {len(runs)} fine-tunes, {stopped} stopped early and {at_end} had their best "
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
