"""benchmarks/urdu_adaptation.py: the study's summary (issue-shaped study.json, verdicts against the seed spread, the
recipe's default arm) on hand-made runs, and a --quick run end to end."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("urdu_adaptation", ROOT / "benchmarks" / "urdu_adaptation.py")
study_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study_module)
import urdu_study_arms as arms_module  # noqa: E402  (benchmarks/ is on sys.path once the study is loaded)
spec = importlib.util.spec_from_file_location("urdu_downstream_convergence",
                                              ROOT / "benchmarks" / "urdu_downstream_convergence.py")
convergence_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convergence_module)


def run_record(arm, seed, bpb, accuracy, english=2.0):
    return {"arm": arm, "seed": seed, "bpb_urdu": bpb, "bpb_urdu_word_l2r": bpb + 0.01, "bpb_english": english,
            "bpb_english_word_l2r": english, "fertility": 1.0, "single_character_word_share": 0.0,
            "unknown_share": 0.0, "tokens_per_byte": 0.2, "tokens_per_second": 100.0, "bytes_per_second": 500.0,
            "train_seconds": 1.0, "wall_seconds": 2.0, "cpu_seconds": 2.0, "steps": 10, "new_tokens": 5,
            "new_row_sources": None, "curve": [{"step": 0, "bits_per_byte": bpb + 1}, {"step": 10, "bits_per_byte": bpb}],
            "downstream_urdu": {"accuracy": accuracy, "macro_f1": accuracy / 2, "steps": 10, "best_step": 10},
            "majority_urdu": 0.2, "downstream_sizes": {"train": 10, "validation": 5, "test": 5}}


def test_summary_has_the_issue_shape_and_judges_against_twice_the_spread():
    records = [run_record("unadapted", s, 3.0 + 0.01 * s, 0.50 + 0.01 * s) for s in (1, 2, 3)]
    records += [run_record("mean", s, 1.0 + 0.01 * s, 0.60 + 0.01 * s, english=3.0) for s in (1, 2, 3)]
    records += [run_record("random", s, 1.5, 0.505 + 0.01 * s) for s in (1, 2, 3)]
    # The English task for some seeds of an arm only (as in the committed study): summarised over those seeds.
    records[-1]["downstream_english"] = {"accuracy": 0.8, "macro_f1": 0.7, "steps": 10, "best_step": 10}
    records[-1]["majority_english"] = 0.3
    study = study_module.summarise(records, "mean")
    assert study["random"]["downstream_english_accuracy"] == {"mean": 0.8, "std": None, "runs": [0.8]}
    assert study["random"]["majority_english"] == 0.3
    assert study["arms"] == ["unadapted", "random", "mean"]  # the documented order, not completion order
    assert study["default_arm"] == "mean"
    for arm in ("unadapted", "mean", "random"):
        entry = study[arm]
        assert isinstance(entry["bpb_urdu"], float) and isinstance(entry["bpb_english"], float)
        assert isinstance(entry["fertility"], float)
        assert set(entry["downstream_accuracy"]) == {"mean", "std", "runs"}
    assert study["mean"]["downstream_accuracy"]["mean"] == pytest.approx(0.62)
    assert study["mean"]["downstream_accuracy"]["std"] == pytest.approx(0.01)
    assert study["mean"]["bpb_urdu_std"] == pytest.approx(0.01)
    mean = study["comparisons"]["mean"]
    assert mean["bpb_urdu"]["gain"] == pytest.approx(2.0) and mean["downstream_accuracy"]["gain"] == pytest.approx(0.1)
    assert mean["target_met"] is True
    assert mean["bpb_english"]["verdict"] == "worse by more than the seed spread"
    # random: gain 0.005 against a spread of 0.01 -> within the spread
    assert study["comparisons"]["random"]["downstream_accuracy"]["verdict"] == "within the seed spread"
    assert study["comparisons"]["random"]["target_met"] is False


def test_one_seed_says_the_spread_is_unknown():
    records = [run_record("unadapted", 1, 3.0, 0.5), run_record("mean", 1, 1.0, 0.9)]
    study = study_module.summarise(records, "mean")
    assert study["mean"]["downstream_accuracy"]["std"] is None
    assert study["comparisons"]["mean"]["downstream_accuracy"]["verdict"] == "the seed spread is unknown (fewer than 2 seeds)"
    assert study["comparisons"]["mean"]["target_met"] is False
    text = study_module.markdown(study, {"command": "x", "when": "now", "machine": "m"})
    assert "spread unknown" in text and "spread is unknown" in text and "± 0.000" not in text


def test_checks_under_different_protocols_are_not_put_side_by_side():
    records = [run_record("unadapted", 1, 3.0, 0.5), run_record("mean", 1, 1.0, 0.9)]
    for r in records:
        r["downstream_protocol"] = {"epochs": 2.0, "precision": "no"}
    assert study_module.summarise(records, "mean")["downstream_protocol"] == {"epochs": 2.0, "precision": "no"}
    records[1]["downstream_protocol"] = {"epochs": 4.0, "precision": "bf16"}
    with pytest.raises(SystemExit, match="different protocols.*mean:1.*--redo-downstream"):
        study_module.summarise(records, "mean")
    del records[1]["downstream_protocol"]  # a record from before protocols were recorded is not silently mixed in
    with pytest.raises(SystemExit, match="unrecorded"):
        study_module.summarise(records, "mean")


def test_the_report_counts_early_stops_and_last_step_peaks():
    protocol = {"epochs": 2.0, "learning_rate": 2e-3, "batch_size": 5, "max_length": 64, "eval_steps": 1,
                "patience": 3, "stopping_metric": "eval_loss", "precision": "bf16", "attention_dropout": 0.0}
    records = [run_record("unadapted", 1, 3.0, 0.5), run_record("mean", 1, 1.0, 0.9)]
    records[0]["downstream_urdu"].update(steps=3, best_step=1)  # budget: 2 epochs x ceil(10 / 5) = 4 steps
    records[1]["downstream_urdu"].update(steps=4, best_step=4)
    for r in records:
        r["downstream_protocol"] = protocol
    study = study_module.summarise(records, "mean")
    text = study_module.markdown(study, {"command": "x", "when": "now", "machine": "m"}, records)
    assert "LoRA fine-tuning, at most 2 epochs (4 steps of 5)" in text and "bf16 autocast" in text  # no "mode": LoRA
    for r in records:
        r["downstream_protocol"] = dict(protocol, mode="full")
    text = study_module.markdown(study_module.summarise(records, "mean"), {"command": "x", "when": "now",
                                                                          "machine": "m"}, records)
    assert "Downstream: full fine-tuning on the 6-class" in text and "(every arm): full fine-tuning, at most" in text
    assert "Of 2 fine-tunes, 1 stopped early and 1 had their best validation at the last evaluation" in text


def test_the_study_protocol_is_the_recipes_flags_with_its_longer_full_fine_tuning():
    from transformer_zoo.training.adaptation.recipe import build_parser

    protocol = study_module.current_protocol("default")
    defaults = build_parser().parse_args([])
    # ... with the study's longer budget: at most 8 epochs, patience 5 (the recipe's default is 4 epochs, patience 3).
    assert (protocol["epochs"], protocol["patience"]) == (8.0, 5)
    assert (defaults.downstream_epochs, defaults.downstream_patience) == (4.0, 3)
    assert protocol["eval_steps"] == defaults.downstream_eval_steps
    # The study fine-tunes every weight (the recipe's default check is LoRA), at the recipe's rate for that mode.
    from transformer_zoo.training.adaptation.arguments import DOWNSTREAM_LEARNING_RATES

    assert protocol["mode"] == "full" and defaults.downstream_mode == "lora"
    assert protocol["learning_rate"] == DOWNSTREAM_LEARNING_RATES["full"]
    flags = study_module.task_flags("mean", 1, "default", False, 1)
    assert flags[-len(study_module.STUDY_DOWNSTREAM) - 2:-2] == study_module.STUDY_DOWNSTREAM
    assert protocol["stopping_metric"] == defaults.downstream_stopping_metric
    # The precision is fixed per arm, whatever this CPU multiplies natively: the committed seven as they ran (bf16),
    # the later arms and their references in fp32.
    assert protocol["precision"] == "bf16"
    assert flags[-2:] == ["--downstream_mixed_precision", "bf16"]
    for arm in ("unadapted-fp32", "lora-fp32", "from-scratch", "translate-test", "smollm2-unadapted", "smollm2-none",
                "lora-equal-text"):
        assert study_module.current_protocol("default", arm)["precision"] == "no"  # the recipe's name for fp32
        arm_flags = study_module.task_flags(arm, 1, "default", False, 1)
        assert arm_flags.count("--downstream_mixed_precision") == 1 and "bf16" not in arm_flags
    # A variant is its base arm's run with other downstream flags only.
    base, variant = (study_module.task_flags(arm, 2, "default", True, 1) for arm in ("lora", "lora-fp32"))
    assert base[:-1] == variant[:-1] and (base[-1], variant[-1]) == ("bf16", "no")
    assert study_module.budget_downstream_flags("quick")[:2] == ["--downstream_train_examples", "36"]


@pytest.mark.parametrize("budget", ["quick", "default", "full"])
def test_every_arm_passes_only_flags_its_run_reads(budget):
    """The recipe refuses a flag it would ignore (downstream settings with --downstream false, LoRA settings with
    --mode full): every arm's command line must pass that check, and parse."""
    from transformer_zoo.training.adaptation import arguments as adaptation_arguments
    from transformer_zoo.training.engine.cli import check_flags_apply

    for arm in [*study_module.ARMS, *study_module.VARIANT_ARMS]:
        for english_task in (False, True):
            parser = adaptation_arguments.build_parser()
            args = adaptation_arguments.apply_full_preset(
                parser, study_module.task_flags(arm, 1, budget, english_task, 1))
            defaults = {**parser.builtin_defaults, **(adaptation_arguments.FULL_PRESET if args.full else {})}
            check_flags_apply(parser, args, adaptation_arguments.FLAG_SCOPES, defaults)


def test_each_group_has_its_own_protocol_reference_and_comparisons():
    """The committed seven (bf16) against the unadapted model; the later arms (fp32) against the fp32 references,
    and from-scratch and translate-test against the default arm in fp32 too; the equal-text control within itself."""
    accuracies = {"unadapted": 0.55, "lora": 0.68, "unadapted-fp32": 0.56, "lora-fp32": 0.70, "from-scratch": 0.40,
                  "translate-test": 0.75, "unadapted-equal-text": 0.56, "lora-equal-text": 0.62}
    records = [run_record(arm, seed, 3.0 if "unadapted" in arm else 1.2, accuracy + 0.01 * seed)
               for arm, accuracy in accuracies.items() for seed in (1, 2)]
    for r in records:
        r["downstream_protocol"] = study_module.current_protocol("default", r["arm"])
        if r["arm"] == "translate-test":
            r["translation_quality"] = {"chrf": 41.23, "bleu": 19.87, "decoding": {"max_source_tokens": 256},
                                        "long_sources": {"over_limit": 40, "split": 38, "pieces": 97, "truncated": 2}}
    study = study_module.summarise(records, "lora")
    assert study["downstream_protocol"]["precision"] == "bf16"
    assert {group: p["precision"] for group, p in study["downstream_protocols"].items()} == {
        "bf16": "bf16", "fp32": "no", "equal-text": "no"}
    assert study["downstream_protocols"]["equal-text"]["max_words"] == arms_module.EQUAL_WORDS
    assert study["arms"] == ["unadapted", "lora", "unadapted-fp32", "lora-fp32", "from-scratch", "translate-test",
                             "unadapted-equal-text", "lora-equal-text"]
    against = {arm: c["against"] for arm, c in study["comparisons"].items()}
    assert against == {"lora": "unadapted", "lora-fp32": "unadapted-fp32", "from-scratch": "unadapted-fp32",
                       "translate-test": "unadapted-fp32", "lora-equal-text": "unadapted-equal-text"}
    gain = {arm: c["downstream_accuracy"]["gain"] for arm, c in study["comparisons"].items()}
    assert gain["lora"] == pytest.approx(0.13) and gain["lora-equal-text"] == pytest.approx(0.06)
    assert gain["from-scratch"] == pytest.approx(-0.16)
    with_default = study["comparisons_with_default"]
    assert with_default["translate-test"]["against"] == "lora-fp32"
    assert with_default["translate-test"]["downstream_accuracy"]["gain"] == pytest.approx(0.05)
    assert with_default["from-scratch"]["downstream_accuracy"]["gain"] == pytest.approx(-0.30)
    text = study_module.markdown(study, {"command": "x", "when": "now", "machine": "m"})
    assert "| translate-test | lora-fp32 |" in text and "| from-scratch | unadapted-fp32 |" in text
    # The findings say which part of the default arm's gain is more words in the window: fixed-budget gain (fp32)
    # 0.70 - 0.56 = +0.14, same-words gain +0.06, so +0.08 from the window.
    assert "gains +0.140 over the unadapted model (fp32)" in text and "So +0.080 of the gain" in text
    assert "translate-test** (is adapting better" in text and "+0.050" in text
    assert ("chrF 41.2, BLEU 19.9 against the hadith's own English; 40 paragraphs longer than the 256 tokens it "
            "trained on, 38 of them translated in 97 pieces of whole sentences, 2 cut)") in text

    # Checks of one group under two protocols are refused; across groups they are expected.
    records[2]["downstream_protocol"] = dict(records[2]["downstream_protocol"], precision="fp32")  # a lora run
    with pytest.raises(SystemExit, match="bf16 downstream checks used different protocols"):
        study_module.summarise(records, "lora")


def test_a_decoder_run_without_its_downstream_check_is_run_again_and_superseded():
    old = run_record("smollm2-none", 1, 1.8, 0.0)
    del old["downstream_urdu"]  # recorded before the decoder arms had the check
    new = run_record("smollm2-none", 1, 1.7, 0.4)
    encoder = run_record("mean", 1, 1.0, 0.6)
    assert not study_module._finished(old) and study_module._finished(new) and study_module._finished(encoder)
    latest = study_module.latest_records([old, encoder, new])
    assert latest == [encoder, new]  # one record per arm and seed, the later one
    assert study_module.summarise(latest, "mean")["smollm2-none"]["bpb_urdu"] == 1.7


def test_the_decoder_arms_are_two_runs_each_with_one_fine_tune():
    """The unadapted and the adapted decoder are separate runs (each fine-tune takes hours of a core: one run must fit
    a working session), measured alike; 'smollm2' names both in --tasks and --arms."""
    def value(flags, flag):
        return flags[len(flags) - 1 - flags[::-1].index(flag) + 1]

    unadapted, adapted = (study_module.task_flags(arm, 1, "default", False, 1)
                          for arm in ("smollm2-unadapted", "smollm2-none"))
    assert value(unadapted, "--adapt") == "false" and value(unadapted, "--downstream_models") == "unadapted"
    assert "--adapt" not in adapted and value(adapted, "--measure_unadapted") == "false"
    assert value(adapted, "--downstream_models") == "adapted" and value(adapted, "--max_steps") == "40"
    # Every adapting arm names its mode: the recipe's default (LoRA since the decoder's first run) must not decide it.
    for arm in study_module.ARMS:
        flags = study_module.task_flags(arm, 1, "default", False, 1)
        assert "--mode" in flags or value(flags, "--adapt") == "false", arm
    for flag in ("--bpb_sentences", "--per_device_batch_size", "--model", "--seed", "--downstream_seeds"):
        assert value(unadapted, flag) == value(adapted, flag)
    assert study_module.current_protocol("default", "smollm2-unadapted") == \
        study_module.current_protocol("default", "smollm2-none")
    assert study_module._parse_tasks("smollm2:2,mean:1", None) == [("smollm2-unadapted", 2), ("smollm2-none", 2),
                                                                    ("mean", 1)]
    results = {"unadapted": {"urdu": {"bits_per_byte": 1.0, "fertility": 1.0, "single_character_word_share": 0.0,
                                      "unknown_share": 0.0, "tokens_per_byte": 0.3}},
               "steps": 0, "new_tokens": 0, "train_seconds": 0.0, "curve": [], "downstream": None}
    assert study_module.record("smollm2-unadapted", results, "unadapted", {"seed": 1})["arm"] == "smollm2-unadapted"


def test_redo_downstream_follows_the_order_of_tasks(tmp_path, monkeypatch):
    records = [run_record(arm, seed, 1.0, 0.5) for arm in ("unadapted", "mean") for seed in (1, 2)]
    done = []

    def fake_redo(entry, budget, threads, work, english_task):
        done.append((entry["arm"], entry["seed"]))
        return dict(entry, downstream_protocol=study_module.current_protocol(budget, entry["arm"]),
                    downstream_redo_seconds=0.0)

    monkeypatch.setattr(study_module, "redo_task", fake_redo)
    parser = study_module.argparse.ArgumentParser()
    args = parser.parse_args([])
    args.tasks, args.jobs = "mean:2,unadapted:1,mean:1", 1
    result = study_module.redo_downstream(records, args, "quick", 1, tmp_path, tmp_path, tmp_path / "partial.jsonl",
                                          {"when": "now", "command": "x"}, parser, set())
    assert done == [("mean", 2), ("unadapted", 1), ("mean", 1)]
    assert result is None  # unadapted seed 2 still has the old protocol: no outputs that mix them
    assert len((tmp_path / "partial.jsonl").read_text().splitlines()) == 4


def test_the_study_names_the_recipe_default():
    from transformer_zoo.training.adaptation.recipe import build_parser

    defaults = build_parser().parse_args([])
    assert defaults.mode == "lora" and defaults.extend_vocab == "auto" and defaults.embedding_init == "mean"
    assert study_module.recipe_default_arm() == "lora"
    # The arm's own flags give the recipe's defaults, so the study's "lora" arm is what the default runs.
    flags = study_module.ARMS["lora"]
    assert build_parser().parse_args(flags).learning_rate == defaults.learning_rate
    for arm in ("none", "random", "mean", "focus", "trans-tokenization"):
        assert build_parser().parse_args(study_module.ARMS[arm]).mode == "full"


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        study_module.main(["--arms", "unadapted,magic", "--output-dir", "/tmp/never"])
    assert "unknown arm(s) magic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        study_module.main(["--seeds", "one", "--output-dir", "/tmp/never"])
    assert "comma-separated integers" in capsys.readouterr().err


def test_quick_study_end_to_end(tmp_path):
    """Two arms, one seed, the --quick budget: real recipe runs in their own processes, then the outputs; a rerun
    skips what is done."""
    out = tmp_path / "study"
    # Two runs at a time, as the study runs on this machine (each process pays ~7 s of imports).
    study = study_module.main(["--quick", "--jobs", "2", "--arms", "unadapted,mean", "--seeds", "1", "--output-dir",
                               str(out), "--english-task-arms", "none"])
    assert study["arms"] == ["unadapted", "mean"]
    on_disk = json.loads((out / "study.json").read_text())
    for arm in ("unadapted", "mean"):
        assert math.isfinite(on_disk[arm]["bpb_urdu"]) and math.isfinite(on_disk[arm]["bpb_english"])
        assert on_disk[arm]["downstream_accuracy"]["runs"] and on_disk[arm]["downstream_accuracy"]["std"] is None
    assert on_disk["mean"]["fertility"] < on_disk["unadapted"]["fertility"] / 1.5
    assert len(on_disk["mean"]["curves"]["1"]) >= 2
    for name in ("study.md", "bits_per_byte.png", "downstream.png", "study.partial.jsonl"):
        assert (out / name).is_file(), name
    lines = (out / "study.partial.jsonl").read_text().splitlines()
    again = study_module.main(["--quick", "--arms", "unadapted,mean", "--seeds", "1", "--output-dir", str(out)])
    assert (out / "study.partial.jsonl").read_text().splitlines() == lines  # nothing was rerun
    assert again["mean"]["bpb_urdu"] == study["mean"]["bpb_urdu"]

    # --redo-downstream repeats only the checks whose protocol differs from the current one, on the saved models.
    records = [json.loads(line) for line in lines]
    for r in records:
        r["downstream_protocol"] = {"epochs": 0.5}  # pretend an older protocol
    (out / "study.partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    redone = study_module.main(["--quick", "--redo-downstream", "--tasks", "mean:1", "--output-dir", str(out)])
    after = [json.loads(line) for line in (out / "study.partial.jsonl").read_text().splitlines()]
    assert [r["arm"] for r in after] == [r["arm"] for r in records]
    mean = next(r for r in after if r["arm"] == "mean")
    assert mean["downstream_protocol"] == study_module.current_protocol("quick") and "downstream_redo_seconds" in mean
    assert mean["bpb_urdu"] == study["mean"]["bpb_urdu"]  # the adaptation was not repeated
    results = json.loads((out / "runs" / "mean" / "seed-1" / "results.json").read_text())
    assert results["downstream_superseded"][0]["downstream"]["urdu"]["adapted"]["runs"]
    assert redone is None  # the unadapted record still has the old protocol: no outputs that mix them
    with pytest.raises(SystemExit, match="different protocols"):
        study_module.main(["--quick", "--report-only", "--output-dir", str(out)])
    study_module.main(["--quick", "--redo-downstream", "--output-dir", str(out)])  # the rest
    assert json.loads((out / "study.json").read_text())["downstream_protocol"] == study_module.current_protocol("quick")

    # The convergence check on the same runs: the protocol, twice the epochs, fp32; results.json untouched.
    before = (out / "runs" / "mean" / "seed-1" / "results.json").read_text()
    report = convergence_module.main(["--quick", "--work-dir", str(out / "runs"), "--arms", "mean",
                                      "--threads", "1", "--output-dir", str(out)])
    assert (out / "runs" / "mean" / "seed-1" / "results.json").read_text() == before
    mean = report["arms"]["mean"]
    assert mean["protocol"]["accuracy"] == results_after(out)["downstream"]["urdu"]["adapted"]["runs"][0]["accuracy"]
    assert mean["long"]["protocol"]["epochs"] == 2 * mean["protocol"]["protocol"]["epochs"]
    assert mean["fp32"]["protocol"]["precision"] == "no" and mean["long"]["steps"] > mean["protocol"]["steps"]
    assert mean["long"]["curve"] and (out / "convergence.png").is_file()
    assert "long − protocol" in (out / "convergence.md").read_text()


def results_after(out):
    return json.loads((out / "runs" / "mean" / "seed-1" / "results.json").read_text())


def test_the_convergence_table_without_the_fp32_variant():
    entry = {"accuracy": 0.5, "macro_f1": 0.4, "steps": 10, "best_step": 8, "train_seconds": 1.0, "protocol": None,
             "curve": [{"step": 5, "eval_loss": 1.0, "accuracy": 0.45}, {"step": 10, "eval_loss": 0.9, "accuracy": 0.5}]}
    report = {"command": "x", "when": "now", "machine": "m", "load_average_start": [1.0], "protocol_epochs": 4.0,
              "long_epochs": 8.0, "precision": "bf16", "mode": "full",
              "arms": {"unadapted": {"protocol": entry, "long": dict(entry, accuracy=0.52, steps=20)}}}
    text = convergence_module.markdown(report, "convergence")
    assert "full fine-tuning, at most 4 epochs" in text and "fp32" not in text
    assert "| unadapted | 0.500 (8 / 10) | 0.520 (8 / 20) | +0.020 | 0.500 (10) |" in text
    report["arms"]["unadapted"]["fp32"] = dict(entry, accuracy=0.49)
    assert "| 0.490 (8 / 10) | -0.010 |" in convergence_module.markdown(report)


def test_the_protocol_line_names_each_groups_precision_and_text():
    """Arms checked in fp32 and the equal-text control are not described as bf16 at 64 tokens: the line names what
    each group's recorded protocol did."""
    protocol = {"epochs": 2.0, "learning_rate": 2e-3, "batch_size": 5, "max_length": 64, "eval_steps": 1,
                "patience": 3, "stopping_metric": "eval_loss", "precision": "bf16", "attention_dropout": 0.0,
                "mode": "full"}
    records = [run_record("unadapted", 1, 3.0, 0.5), run_record("unadapted-fp32", 1, 3.0, 0.5),
               run_record("lora-equal-text", 1, 1.0, 0.9)]
    records[0]["downstream_protocol"] = protocol
    records[1]["downstream_protocol"] = dict(protocol, precision="no")
    records[2]["downstream_protocol"] = dict(protocol, precision="no", max_length=128, max_words=20)
    text = study_module.markdown(study_module.summarise(records, "unadapted"),
                                 {"command": "x", "when": "now", "machine": "m"}, records)
    line = next(row for row in text.splitlines() if row.startswith("Downstream protocol"))
    assert "bf16: bf16 autocast (fp32 weights), 64 tokens per paragraph" in line
    assert "fp32: fp32, 64 tokens per paragraph" in line
    assert "equal-text: fp32, the first 20 words in at most 128 tokens per paragraph" in line


def test_the_help_states_the_equal_text_controls_real_budget():
    """--help (the module docstring) says how many words and tokens the control gives each model, as the code does."""
    doc = " ".join(study_module.__doc__.split())
    assert f"first {arms_module.EQUAL_WORDS} words of every paragraph, in {arms_module.EQUAL_TEXT[-1]} tokens" in doc


def test_a_cut_off_run_is_resumed_with_the_flags_it_began_with(tmp_path):
    """The study counts the attempts of each run beside its folder: a second attempt with the same flags, whose
    folder the first left behind, continues it (--resume instead of --overwrite_output_dir); other flags, or no
    folder, start afresh. Every run checkpoints its fine-tunes, so a resumed run loses at most 50 steps."""
    flags = study_module.task_flags("smollm2-none", 1, "default", False, 1)
    assert flags.count("--overwrite_output_dir") == 1 and "--resume" not in flags
    assert flags[flags.index("--downstream_save_steps") + 1] == "50"
    out = tmp_path / "smollm2" / "seed-1"
    out.parent.mkdir(parents=True)
    assert study_module.start_attempt(out, flags) == 1  # nothing there yet
    assert study_module.start_attempt(out, flags) == 1  # the first attempt died before making its folder
    out.mkdir()
    assert study_module.start_attempt(out, flags) == 2
    assert study_module.start_attempt(out, flags) == 3
    assert study_module.start_attempt(out, study_module.task_flags("smollm2-none", 1, "quick", False, 1)) == 1
    # ... and the record of a resumed run says so (its times are the last attempt's).
    results = {"unadapted": {"urdu": {"bits_per_byte": 1.0, "fertility": 1.0, "single_character_word_share": 0.0,
                                      "unknown_share": 0.0, "tokens_per_byte": 0.3}},
               "steps": 0, "new_tokens": 0, "train_seconds": 0.0, "curve": [], "downstream": None}
    entry = study_module.record("unadapted", results, "unadapted", {"seed": 1, "attempts": 2})
    assert entry["attempts"] == 2
