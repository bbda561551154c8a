"""The Urdu adaptation study's summary (study.json): per arm, means and spreads over seeds; each arm against its
group's reference, judged against the seed spread; the protocols of the downstream checks, one per group."""

from __future__ import annotations

import json
import statistics

from urdu_study_arms import CITATIONS, RECORD_ORDER, REFERENCES, protocol_group


def _mean_std(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None, "runs": []}
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "runs": values}


def summarise(records: list[dict], default_arm: str) -> dict:
    """study.json: per arm, the issue's fields (means over seeds) plus spreads and runs."""
    study: dict = {"arms": []}
    present = {r["arm"] for r in records}
    for arm in [a for a in RECORD_ORDER if a in present]:
        runs = sorted((r for r in records if r["arm"] == arm), key=lambda r: r["seed"])
        entry = {"seeds": [r["seed"] for r in runs], "description": CITATIONS[arm]}
        for key in ("bpb_urdu", "bpb_urdu_word_l2r", "bpb_english", "bpb_english_word_l2r", "fertility",
                    "single_character_word_share", "unknown_share", "tokens_per_byte", "tokens_per_second",
                    "bytes_per_second", "train_seconds", "wall_seconds", "cpu_seconds"):
            spread = _mean_std([r.get(key) for r in runs])
            entry[key] = spread["mean"]
            if key.startswith("bpb"):
                entry[f"{key}_std"] = spread["std"]
                entry[f"{key}_runs"] = spread["runs"]
        for language in ("urdu", "english"):
            name = "downstream_accuracy" if language == "urdu" else "downstream_english_accuracy"
            values = [r[f"downstream_{language}"]["accuracy"] for r in runs if f"downstream_{language}" in r]
            entry[name] = _mean_std(values) if values else None
            f1 = [r[f"downstream_{language}"]["macro_f1"] for r in runs if f"downstream_{language}" in r]
            entry[name.replace("accuracy", "macro_f1")] = _mean_std(f1) if f1 else None
            if values:  # from a run that has the check (an arm may have it for some seeds only)
                with_check = next(r for r in runs if f"downstream_{language}" in r)
                entry[f"majority_{language}"] = with_check[f"majority_{language}"]
                entry["downstream_sizes"] = with_check["downstream_sizes"]
        entry["curves"] = {r["seed"]: r["curve"] for r in runs}
        if any(r.get("translation_quality") for r in runs):
            entry["translation_quality"] = next(r["translation_quality"] for r in runs if r.get("translation_quality"))
        entry["new_row_sources"] = runs[0].get("new_row_sources")
        entry["steps"] = runs[0]["steps"]
        study[arm] = entry
        study["arms"].append(arm)
    study["default_arm"] = default_arm
    protocols = group_protocols(records)
    study["downstream_protocol"] = protocols.get("bf16")
    study["downstream_protocols"] = protocols
    study["arm_groups"] = {arm: protocol_group(arm) for arm in study["arms"]}
    # Each arm against the unadapted model checked the same way (its group's reference).
    study["comparisons"] = {}
    for arm in study["arms"]:
        reference = REFERENCES.get(protocol_group(arm)) if not arm.startswith("smollm2") else "smollm2-unadapted"
        if arm != reference and reference in study and arm != "smollm2-unadapted":
            study["comparisons"][arm] = dict(compare(study, arm, reference=reference), against=reference)
    # The later arms against the default arm checked the same way: does translating, or starting from random
    # weights, do better than adapting?
    default_fp32 = f"{default_arm}-fp32"
    study["comparisons_with_default"] = {
        arm: dict(compare(study, arm, reference=default_fp32), against=default_fp32)
        for arm in ("from-scratch", "translate-test") if arm in study and default_fp32 in study}
    return study


def group_protocols(records: list[dict]) -> dict[str, dict]:
    """Per protocol group (protocol_group), the downstream protocol its records' checks used; refuses a group whose
    records were checked under different protocols, which would put incomparable accuracies side by side
    (--redo-downstream repeats the checks under one)."""
    groups: dict[str, dict[str, list[str]]] = {}
    for r in records:
        if any(key.startswith("downstream_") and key not in ("downstream_protocol", "downstream_sizes")
               for key in r):
            protocols = groups.setdefault(protocol_group(r["arm"]), {})
            protocols.setdefault(json.dumps(r.get("downstream_protocol"), sort_keys=True), []).append(
                f"{r['arm']}:{r['seed']}")
    for group, protocols in groups.items():
        if len(protocols) > 1:
            lines = "; ".join(f"{json.loads(p) or 'unrecorded'} ({', '.join(runs)})" for p, runs in protocols.items())
            raise SystemExit(f"the study's {group} downstream checks used different protocols: {lines}. Run "
                             "--redo-downstream to repeat them under the recipe's current one.")
    return {group: json.loads(next(iter(protocols))) for group, protocols in groups.items()}


def compare(study: dict, arm: str, reference: str = "unadapted") -> dict:
    """The target of the study: better than the unadapted model by more than twice the larger seed spread, on Urdu
    bits per byte (lower is better) and on downstream accuracy. A spread from fewer than 2 seeds is unknown."""
    out = {}
    a, b = study[arm], study[reference]
    pairs = [("bpb_urdu", -1), ("bpb_urdu_word_l2r", -1), ("bpb_english", -1)]
    for key, sign in pairs:
        if a.get(key) is None or b.get(key) is None:
            continue
        stds = [a.get(f"{key}_std"), b.get(f"{key}_std")]
        out[key] = _verdict(sign * (a[key] - b[key]), None if None in stds else max(stds))
    for key in ("downstream_accuracy", "downstream_english_accuracy"):
        if a.get(key) and b.get(key) and a[key]["mean"] is not None:
            stds = [a[key]["std"], b[key]["std"]]
            out[key] = _verdict(a[key]["mean"] - b[key]["mean"], None if None in stds else max(stds))
    urdu = [out.get("bpb_urdu"), out.get("downstream_accuracy")]
    out["target_met"] = all(v is not None and v["verdict"] == "better by more than twice the seed spread"
                            for v in urdu)
    return out


def _verdict(gain: float, spread: float | None) -> dict:
    from transformer_zoo.training.adaptation.downstream import seed_spread_verdict

    return {"gain": gain, "spread": spread, "verdict": seed_spread_verdict(gain, spread)}


def recipe_default_arm() -> str:
    """The arm the recipe's no-argument default runs (MiniLM's tokenizer is poor on Urdu, so 'auto' extends)."""
    from transformer_zoo.training.adaptation.recipe import build_parser

    defaults = build_parser().parse_args([])
    if defaults.extend_vocab == "false":
        return "none"
    return "lora" if defaults.mode == "lora" else defaults.embedding_init


def latest_records(records: list[dict]) -> list[dict]:
    """One record per arm and seed: a later run of the same arm and seed (e.g. the decoder rerun with its
    downstream check) supersedes the earlier one, which stays in study.partial.jsonl for the record."""
    latest = {(r["arm"], r["seed"]): r for r in records}
    return [r for r in records if latest[(r["arm"], r["seed"])] is r]
