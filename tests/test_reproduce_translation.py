"""The translation study (transformer_zoo.analysis.reproduce.translation*, `scripts/reproduce.py --experiment
translation`): table 3's verdicts on hand-made numbers, its rows, the data splits, the study's runner (devices,
presets, resume, shorter budgets, costs) and the quick preset end to end."""

import dataclasses
import json

import pytest
import torch

from reproduce_helpers import load_script
from transformer_zoo.analysis import reproduce as rp


# ------------------------------------------------------------------------------------------------ table 3's verdicts
def _row(bleu, loss, spread=0.1):
    return {"test_bleu": [bleu - spread, bleu + spread], "dev_bleu": [bleu - spread, bleu + spread],
            "dev_loss": [loss - spread / 20, loss + spread / 20]}


PAPER_LIKE = {"base": _row(25.8, 1.60), "heads_1": _row(24.9, 1.62), "heads_8": _row(25.9, 1.59),
              "heads_16": _row(25.2, 1.61), "small_dk": _row(25.1, 1.66), "narrow": _row(24.0, 1.75),
              "wide": _row(26.2, 1.55), "layers_2": _row(24.5, 1.70), "layers_4": _row(26.0, 1.56),
              "no_dropout": _row(24.6, 1.72), "no_smoothing": _row(25.1, 1.55), "learned_positions": _row(25.7, 1.60)}


def test_table3_claims_follow_the_numbers():
    claims = {claim["key"]: claim for claim in rp.table3_claims(PAPER_LIKE)}
    assert set(claims) == {claim.key for claim in rp.CLAIMS}
    assert all(claim["held"] for claim in claims.values()), [c["evidence"] for c in claims.values() if not c["held"]]
    # A1: the best multi-head row (heads_8, 25.9) against 1 head (24.9): 1.0 BLEU > max(0.5, spread 0.14)
    assert "heads_8 25.900, heads_1 24.900; difference +1.000 vs threshold 0.500" in claims["A1"]["evidence"]
    flat = {name: _row(20.0, 3.0) for name in PAPER_LIKE}
    flat_claims = {claim["key"]: claim for claim in rp.table3_claims(flat)}
    assert flat_claims["base"]["held"] and flat_claims["E"]["held"]  # identical rows are "nearly identical"
    assert not any(flat_claims[key]["held"] for key in ("A1", "A2", "B", "C1", "C2", "C3", "C4", "D1", "D2", "D3"))
    # A difference inside the seed spread does not count, however large its mean
    noisy = dict(flat, heads_8={"test_bleu": [18.0, 24.0], "dev_bleu": [21.0, 21.0], "dev_loss": [3.0, 3.0]})
    a1 = next(claim for claim in rp.table3_claims(noisy) if claim["key"] == "A1")
    assert not a1["held"] and "threshold 4.245" in a1["evidence"]  # hypot(4.243, 0.141) > the 1.0 difference
    # 16 heads being the best row refutes A2 outright
    best16 = dict(flat, heads_16=_row(22.0, 3.0))
    assert "heads_16 is the best row" in next(c for c in rp.table3_claims(best16) if c["key"] == "A2")["evidence"]
    # the base must translate
    assert not next(c for c in rp.table3_claims(dict(flat, base=_row(19.0, 3.0))) if c["key"] == "base")["held"]
    # learned positions: same BLEU, clearly lower loss is not "nearly identical"
    learned = dict(flat, learned_positions=_row(20.0, 2.9))
    assert not next(c for c in rp.table3_claims(learned) if c["key"] == "E")["held"]
    pairs = {"x": {"language_pair": "X-Y", "test_bleu": 20.0, "retrieval_bleu": 16.0, "copy_bleu": 0.1,
                   "test_chrf": 45.0, "retrieval_chrf": 40.0, "copy_chrf": 18.0}}
    assert rp.default_model_claims(pairs)[0]["held"]
    assert not rp.default_model_claims({"x": dict(pairs["x"], test_bleu=16.5)})[0]["held"]  # not by a clear margin
    assert not rp.default_model_claims({"x": dict(pairs["x"], test_chrf=41.0)})[0]["held"]  # chrF counts too
    assert not rp.default_model_claims({"x": dict(pairs["x"], copy_chrf=44.0)})[0]["held"]  # and copying
    # The docs' tables use the same rule: clear, level (past both baselines, not by both margins) or below.
    from transformer_zoo.analysis.reproduce.translation import against_baselines

    assert against_baselines(pairs["x"]) == "clear"
    assert against_baselines(dict(pairs["x"], test_bleu=16.5)) == "level"
    assert against_baselines(dict(pairs["x"], copy_chrf=44.0)) == "level"  # the better baseline, whichever it is
    assert against_baselines(dict(pairs["x"], test_chrf=39.0)) == "below"
    assert against_baselines(dict(pairs["x"], copy_bleu=20.0)) == "below"


def test_table3_claims_wait_for_missing_rows_and_show_every_criterion_version(monkeypatch):
    partial = {row: PAPER_LIKE[row] for row in ("base", "heads_1")}
    claims = {claim["key"]: claim for claim in rp.table3_claims(partial)}
    assert claims["base"]["held"] is True
    assert claims["A1"]["held"] is None and "waiting for heads_16, heads_8" in claims["A1"]["evidence"]
    # A row with a seed still to run decides nothing yet, though its finished seed has numbers.
    partial = {row: PAPER_LIKE[row] for row in ("base", "heads_1", "heads_8", "heads_16")}
    assert next(c for c in rp.table3_claims(partial) if c["key"] == "A1")["held"] is not None
    waiting = next(c for c in rp.table3_claims(partial, pending={"heads_8"}) if c["key"] == "A1")
    assert waiting["held"] is None and waiting["evidence"] == "waiting for heads_8"
    # A criterion revised after seeing numbers: both versions are decided and shown; the latest is the verdict.
    d1 = next(claim for claim in rp.CLAIMS if claim.key == "D1")
    revised = rp.Criterion("better", ("test_bleu",), ("base",), "no_dropout", (5.0,),
                           written="after the runs: a test of the revision")
    monkeypatch.setattr(rp.translation_table3, "CLAIMS", tuple(
        rp.Claim(c.key, c.text, c.paper, c.criteria + (revised,)) if c is d1 else c for c in rp.CLAIMS))
    claim = next(c for c in rp.table3_claims(PAPER_LIKE) if c["key"] == "D1")
    assert [version["held"] for version in claim["versions"]] == [True, False]  # 1.2 BLEU is not > 5
    assert claim["held"] is False and claim["versions"][1]["written"].startswith("after the runs")


def test_table3_rows_change_only_what_they_name():
    base = rp.ModelShape()
    assert rp.row_shape(base, "base") == base
    assert rp.row_shape(base, "heads_16").heads == 16 and rp.row_shape(base, "heads_16").hidden_size == 256
    assert rp.row_shape(base, "small_dk").head_dim == 16
    assert (rp.row_shape(base, "narrow").hidden_size, rp.row_shape(base, "narrow").intermediate_size) == (128, 512)
    assert (rp.row_shape(base, "wide").hidden_size, rp.row_shape(base, "wide").intermediate_size) == (384, 1536)
    assert rp.row_shape(base, "layers_4").layers == 4
    assert rp.row_shape(base, "learned_positions").position_embedding_type == "learned"
    assert rp.row_shape(base, "no_smoothing").label_smoothing == 0.0 and rp.row_shape(base, "no_dropout").dropout == 0


# ------------------------------------------------------------------------------------------------ the study's runner
def test_the_translation_device_is_checked_before_any_work(monkeypatch, capsys):
    """A device this machine lacks is one line on stderr and exit code 2, before any corpus is read."""
    from transformer_zoo.analysis.reproduce import translation as study

    script = load_script()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(study, "_run_task", lambda *_: pytest.fail("nothing may run"))
    assert script.main(["--experiment", "translation", "--preset", "tiny", "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU here" in capsys.readouterr().err
    assert script.main(["--experiment", "translation", "--preset", "tiny", "--device", "tpu"]) == 2
    assert "device must be 'cpu' or 'cuda'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no CUDA GPU"):
        rp.run_translation(dataclasses.replace(rp.PRESETS["tiny"].translation, device="cuda"), (0,))
    assert study.device_name("cpu") == "cpu"


def test_the_report_names_the_runs_of_each_machine_when_there_were_several():
    from transformer_zoo.analysis.reproduce.translation import where_runs_ran

    assert where_runs_ran({"cpu, 1 thread(s)": ["bible-en-es", "base seed 0"]}) == "2 on cpu, 1 thread(s)"
    assert where_runs_ran({"cpu, 1 thread(s)": ["base seed 0"], "cuda: NVIDIA H100, 1 thread(s)": ["wide seed 1"]}) \
        == "1 on cpu, 1 thread(s) (base seed 0); 1 on cuda: NVIDIA H100, 1 thread(s) (wide seed 1)"


def test_the_study_cpu_total_counts_every_attempt_and_says_which_runs_it_covers_in_full():
    """A resumed run's CPU time is its last attempt's plus the earlier attempts' training (carried by its snapshot);
    runs recorded before that was carried (no field, or None from an older snapshot) are summed apart and the
    report calls the total a lower bound."""
    from transformer_zoo.analysis.reproduce.translation import study_cost_text
    from transformer_zoo.analysis.reproduce.translation_runs import study_totals

    hour = 3600.0
    base = {"seconds": 1.0 * hour, "train_seconds": 1.0 * hour, "device": "cpu", "threads": 1}
    done = {("ablation", "p", "base", 0): dict(base, cpu_seconds=0.5 * hour, earlier_attempts_cpu_seconds=0.25 * hour),
            ("ablation", "p", "base", 1): dict(base, cpu_seconds=1.0 * hour, earlier_attempts_cpu_seconds=0.0),
            ("ablation", "p", "wide", 0): dict(base, cpu_seconds=0.5 * hour, earlier_attempts_cpu_seconds=None),
            ("ablation", "p", "wide", 1): dict(base, cpu_seconds=0.25 * hour)}  # recorded before the field
    tasks = [*done, ("ablation", "p", "narrow", 0)]
    totals = study_totals(tasks, done)
    assert (totals["runs"], totals["of"]) == (4, 5)
    assert totals["cpu_hours_every_attempt"] == 1.75 and totals["runs_with_every_attempt_cpu"] == 2
    assert totals["cpu_hours_last_attempt_only"] == 0.75 and totals["runs_with_last_attempt_cpu_only"] == 2
    assert totals["training_hours"] == 4.0 and totals["machines"] == {"cpu, 1 thread(s)": [
        "base seed 0", "base seed 1", "wide seed 0", "wide seed 1"]}
    text = study_cost_text(totals)
    assert "1.8 CPU hours over the 2 runs measured in every attempt" in text
    assert "0.8 CPU hours over the 2 runs recorded before" in text and "at least 2.5 hours" in text
    whole = study_totals(tasks[:2], done)
    assert "at least" not in study_cost_text(whole) and whole["runs_with_last_attempt_cpu_only"] == 0


def test_each_preset_keeps_its_snapshots_in_its_own_folder(monkeypatch, tmp_path):
    """A quick or tiny run (a test, a first look) never replaces the snapshots of a default study in progress."""
    import transformer_zoo.analysis.reproduce as package

    script = load_script()
    seen = []

    def record(name, preset, seeds, progress, settings):
        seen.append(settings.snapshot_dir)
        raise SystemExit(0)

    monkeypatch.setattr(package, "run_experiment", record)
    for preset in ("quick", "default"):
        with pytest.raises(SystemExit):
            script.main(["--experiment", "translation", "--preset", preset, "--output", str(tmp_path)])
    with pytest.raises(SystemExit):
        script.main(["--experiment", "translation", "--output", str(tmp_path), "--snapshot-dir", str(tmp_path)])
    assert seen == ["outputs/translation-snapshots/quick", "outputs/translation-snapshots/default", str(tmp_path)]


def test_the_report_names_each_pairs_own_budget():
    from transformer_zoo.analysis.reproduce.translation import pair_override_text

    text = pair_override_text({"urdu-translation-ur-en": {"max_length": 256, "split_long_paragraphs": True,
                                                          "epochs": 12.0}})
    assert text == " Other budgets: Urdu-English (hadith + Quran): 256 tokens a side, long paragraphs split, 12 epochs."
    assert pair_override_text({}) == ""


def test_translation_quick_preset_end_to_end(tmp_path):
    """The translation experiment's quick preset (seconds): real Bible and Quran pairs, every table-3 row, the report
    files, and numbers that behave as they must even at this size."""
    script = load_script()
    # Two worker processes, as the preset runs on this machine: the rows are independent runs.
    assert script.main(["--experiment", "translation", "--preset", "quick", "--output", str(tmp_path), "--jobs", "2",
                        "--snapshot-dir", str(tmp_path / "snapshots"),
                        "--no-progress"]) == 0
    record = json.loads((tmp_path / "translation.json").read_text())
    assert record["preset"] == "quick" and record["seeds"] == [0, 1]
    for pair, numbers in record["pairs"].items():
        # Retrieving a training target shares words with the reference; copying English into Spanish/Urdu barely.
        assert numbers["retrieval_bleu"] > numbers["copy_bleu"], pair
        assert numbers["checkpoints_averaged"] == 3 and numbers["decoding"]["extra_length"] == 10
        curve = [loss for _, loss in numbers["loss_curve"]]
        assert curve[-1] < curve[0] - 0.5  # it trained
        assert len(numbers["samples"]) == 3 and all(sample["reference"] for sample in numbers["samples"])
        long_sources = numbers["decoding"]["long_sources"]
        if pair.startswith("urdu"):  # paragraphs past the 96-token training length: translated in sentence pieces
            assert long_sources["split"] >= 1 and long_sources["pieces"] > long_sources["split"], pair
            assert long_sources["over_limit"] >= long_sources["split"]
    assert {run["arm"] for run in record["runs"]} == set(rp.TABLE3_ROWS)
    assert not (tmp_path / "translation.partial.jsonl").exists()  # folded into the report
    markdown = (tmp_path / "translation.md").read_text()
    assert "## Table 3" in markdown and "| A | 1 head" in markdown and "Partial report" not in markdown
    assert "pieces of whole sentences, joined" in markdown
    # The differences from the paper are this preset's own: its small base and budget, not the default study's.
    base = record["settings"]["ablation_model"]
    base_run = next(run for run in record["runs"] if run["arm"] == "base")
    assert (f"a {base['layers']}+{base['layers']}-layer, width-{base['hidden_size']} base of about "
            f"{base_run['parameters'] / 1e6:.1f} M parameters") in markdown
    assert f"about {base_run['steps_done']:,} steps" in markdown and "7.6 M" not in markdown
    for run in record["runs"]:  # the dev curve during training, and the end: last weights, then the average
        assert [e["averaged"] for e in run["dev_curve"]][-2:] == [1, 3] and "greedy_bleu" in run["dev_curve"][0]


def test_translation_study_resumes_after_a_kill_and_reports_what_is_finished(tmp_path, monkeypatch, capsys):
    """A study cut off mid-way: --report-only renders what is finished and marks the rest; --resume runs only the
    missing runs (and a line cut off mid-write), keeping every finished run's numbers as they were."""
    from transformer_zoo.analysis.reproduce import translation as study

    script = load_script()
    arguments = ["--experiment", "translation", "--preset", "tiny", "--output", str(tmp_path), "--no-progress",
                 "--snapshot-dir", str(tmp_path / "snapshots")]
    assert script.main(arguments) == 0
    complete = json.loads((tmp_path / "translation.json").read_text())
    # The kill: the report was never written; the partial file holds 5 finished runs and half of a sixth line.
    tasks = [("default", "bible-en-es", None, 0), ("default", "urdu-translation-ur-en", None, 0),
             ("ablation", "bible-en-es", "base", 0), ("ablation", "bible-en-es", "base", 1),
             ("ablation", "bible-en-es", "heads_1", 0)]
    outputs = {("default", name, None, 0): complete["pairs"][name] for name in complete["pairs"]}
    outputs.update({("ablation", "bible-en-es", run["arm"], run["seed"]): run for run in complete["runs"]})
    lines = [json.dumps({"task": list(task), "output": outputs[task]}) for task in tasks]
    (tmp_path / "translation.json").unlink()
    (tmp_path / "translation.partial.jsonl").write_text("\n".join(lines) + "\n" + lines[-1][:40])
    assert script.main(arguments + ["--report-only"]) == 0
    partial = json.loads((tmp_path / "translation.json").read_text())
    assert not partial["complete"] and len(partial["runs"]) == 3 and len(partial["missing"]) == 2 * 12 - 3
    markdown = (tmp_path / "translation.md").read_text()
    assert "**Partial report: 21 of 24 runs not finished**" in markdown and "heads_8 seed 0" in markdown
    assert "| 0/2 |" in markdown and "waiting" in markdown  # rows without a run, claims without their rows
    # heads_1 has seed 0 of 2: a claim that needs it waits for it too, while the base (both seeds) is decided.
    claims = {claim["key"]: claim for claim in partial["table3_claims"]}
    assert claims["A1"]["evidence"] == "waiting for heads_1, heads_16, heads_8" and claims["base"]["held"] is not None
    assert (tmp_path / "translation.partial.jsonl").exists()  # a partial report keeps the runs file
    # A default model still training has its row in the pairs' table, marked.
    waiting = dict(partial, pairs={"bible-en-es": partial["pairs"]["bible-en-es"]},
                   missing=[["default", "urdu-translation-ur-en", None, 0], *partial["missing"]])
    assert "| Urdu-English (hadith + Quran) | not finished (1 epochs) |" in study.translation_markdown(waiting)
    assert "not finished |" not in markdown.split("## Table 3")[0]
    ran = []
    original = study._run_task
    monkeypatch.setattr(study, "_run_task", lambda task, *rest: ran.append(tuple(task)) or original(task, *rest))
    # --only picks which of the missing runs train this time: both default models are finished, so 'defaults' has
    # nothing to do and the report stays partial; 'table3' runs every missing row.
    assert script.main(arguments + ["--resume", "--only", "defaults"]) == 0
    assert ran == [] and not json.loads((tmp_path / "translation.json").read_text())["complete"]
    assert script.main(arguments + ["--resume", "--only", "table3"]) == 0
    assert len(ran) == 2 * 12 - 3 and not set(ran) & set(tasks)  # only the missing runs
    assert {task[0] for task in ran} == {"ablation"}
    resumed = json.loads((tmp_path / "translation.json").read_text())
    assert resumed["complete"] and not (tmp_path / "translation.partial.jsonl").exists()
    assert resumed["pairs"] == complete["pairs"]
    # every run is deterministic for its seed: the resumed study has the uninterrupted one's numbers
    metrics = lambda record: {(run["arm"], run["seed"]): run["metrics"] for run in record["runs"]}
    assert metrics(resumed) == metrics(complete)
    # a run recorded with other settings does not count as finished
    settings = dataclasses.replace(rp.PRESETS["tiny"].translation, ablation_epochs=1.0, resume=True,
                                   previous_report=str(tmp_path / "translation.json"))
    found = rp.finished_runs(settings, [("ablation", "bible-en-es", "base", 0), ("default", "bible-en-es", None, 0)])
    assert list(found) == [("default", "bible-en-es", None, 0)]


@pytest.mark.parametrize("max_examples, corpus_size, loads", [
    (None, 30_000, 2),  # a whole corpus is counted first (the default study; 1,000 dev and test pairs)
    (2_000, 30_000, 1),  # a subset is its own size: one load
    (2_000, 1_500, 3),  # a subset larger than the corpus: the guess, then counted and split like a whole one
])
def test_translation_pair_splits_hold_out_the_same_share_of_whole_corpora_and_subsets(monkeypatch, max_examples,
                                                                                    corpus_size, loads):
    from transformer_zoo.analysis.reproduce.translation_setup import load_pair_splits
    from transformer_zoo.training.data import corpora

    calls = []

    def fake_load_corpus(name, *, max_examples=None, validation_fraction, test_fraction, seed=0):
        calls.append(validation_fraction)
        size = min(max_examples or corpus_size, corpus_size)
        held = [round(size * validation_fraction), round(size * test_fraction)]
        return {"train": range(size - sum(held)), "validation": range(held[0]), "test": range(held[1])}

    monkeypatch.setattr(corpora, "load_corpus", fake_load_corpus)
    splits = load_pair_splits("bible-en-es", 1000, max_examples)
    size = min(max_examples or corpus_size, corpus_size)
    expected = min(1000, round(0.05 * size))  # at most 5 % of the pairs
    assert len(calls) == loads
    assert len(splits["validation"]) == len(splits["test"]) == expected
    assert sum(len(part) for part in splits.values()) == size


def test_a_decoding_length_limit_other_than_the_papers_is_part_of_a_runs_settings(tmp_path):
    """The quick preset decodes to the source + 10 tokens, the paper to + 50: a run decoded one way does not count as
    finished for a study decoding the other; runs recorded before the limit was a setting (all at + 50, without the
    key) still count, so a default study in progress resumes; the report names a limit other than the paper's."""
    from transformer_zoo.analysis.reproduce import translation as study
    from transformer_zoo.analysis.reproduce.translation_table3 import row_settings

    paper = dataclasses.replace(rp.PRESETS["tiny"].translation, partial_file=str(tmp_path / "runs.jsonl"), resume=True)
    assert paper.decode_extra_length == 50 and rp.PRESETS["quick"].translation.decode_extra_length == 10
    shorter = dataclasses.replace(paper, decode_extra_length=10)
    tasks = [("default", "bible-en-es", None, 0), ("ablation", "bible-en-es", "base", 0)]
    recorded_before = {"default": study.default_settings(paper, "bible-en-es"),
                       "ablation": row_settings(paper, "base")}
    assert "decode_extra_length" not in recorded_before["default"] | recorded_before["ablation"]
    assert study.default_settings(shorter, "bible-en-es")["decode_extra_length"] == 10
    assert row_settings(shorter, "base")["decode_extra_length"] == 10
    key = {"default": "task_settings", "ablation": "row_settings"}
    lines = [json.dumps({"task": list(task), "output": {key[task[0]]: recorded_before[task[0]], "arm": "base"}})
             for task in tasks]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    assert set(study.finished_runs(paper, tasks)) == set(tasks)
    assert study.finished_runs(shorter, tasks) == {}
    assert study.decoding_limit_text({"num_beams": 4}) == ""  # a report written before the setting
    assert study.decoding_limit_text({"decode_extra_length": 10}) == (
        ", outputs up to the longest source + 10 tokens (the paper: + 50)")


def test_a_raised_budget_keeps_the_shorter_runs_numbers_and_verdict_in_the_report(tmp_path):
    """A pair whose epochs were raised after its run finished: the finished run no longer counts as the pair's result
    (the longer run continues it), but the report shows it beside the pair, labelled, with its own verdict; a run
    with other settings (not just fewer epochs), or more epochs, is not an earlier budget."""
    from transformer_zoo.analysis.reproduce import translation as study

    name = "urdu-translation-ur-en"
    settings = dataclasses.replace(rp.PRESETS["tiny"].translation, partial_file=str(tmp_path / "runs.jsonl"),
                                   pair_overrides={name: {"max_length": 64, "split_long_paragraphs": True,
                                                          "epochs": 3.0}})
    task = ("default", name, None, 0)

    def run(epochs, **changes):
        recorded = dict(study.default_settings(dataclasses.replace(settings, pair_overrides={
            name: {"max_length": 64, "split_long_paragraphs": True, "epochs": epochs}}), name), **changes)
        output = {"pair": name, "language_pair": "Urdu-English (hadith + Quran)", "epochs": epochs, "steps": 10,
                  "task_settings": recorded, "test_bleu": 19.5 + epochs, "test_chrf": 40.0 + epochs, "retrieval_bleu": 19.45,
                  "retrieval_chrf": 39.94, "copy_bleu": 0.0, "copy_chrf": 0.8, "train_seconds": 60.0,
                  "dev_evaluations": [], "test_sentences": 20, "samples": [{"source": "s"}]}
        return json.dumps(study.json_ready({"task": list(task), "output": output}))

    lines = [run(1.0), run(2.0), run(2.0, vocab_size=123), run(4.0), "{cut off"]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    budgets = study.shorter_budgets(settings, [task])
    assert [r["epochs"] for r in budgets[name]] == [1.0, 2.0]  # fewest first; other settings and 4 epochs left out
    assert budgets[name][1]["test_bleu"] == 21.5 and "samples" not in budgets[name][1]
    assert study.finished_runs(settings, [task]) == {}  # none of them is the 3-epoch result
    claims = study.budget_claims(budgets)
    assert [claim["held"] for claim in claims] == [False, True]  # 1 epoch: BLEU +1.05, but chrF only +1.06
    assert claims[0]["claim"].endswith("at 1 epochs, fp32 (earlier settings, since changed).")
    results = {"settings": dataclasses.asdict(dataclasses.replace(settings, report_only=True)), "seeds": [0],
               "pairs": {}, "missing": [list(task)],
               "shorter_budgets": budgets, "claims": claims, "runs": [], "table3_rows": [], "summary": {},
               "table3_claims": [], "ablation_pair": "bible-en-es", "ablation_data": "bible"}
    markdown = study.translation_markdown(results).split("## Table 3")[0]
    rows = [line for line in markdown.splitlines() if line.startswith("| Urdu-English")]
    assert rows[0].startswith("| Urdu-English (hadith + Quran) | not finished (3 epochs) |")
    # Bold only where a run clears its baselines: 1 epoch is level (chrF +1.06), 2 epochs clear.
    assert rows[1].startswith("| Urdu-English (hadith + Quran), 1 epochs, fp32 (earlier settings) | 20.50 | 41.00 |")
    assert rows[2].startswith(
        "| Urdu-English (hadith + Quran), 2 epochs, fp32 (earlier settings) | **21.50** | **42.00** |")


def test_a_pair_retrained_in_bf16_keeps_its_fp32_runs_in_the_report_and_fp32_runs_keep_counting(tmp_path):
    """A pair moved to bf16 training (to fit a sitting): its fp32 run at the same budget, and at shorter ones, stay in
    the report as earlier settings, labelled with their precision; they are not the pair's result. fp32 leaves the
    settings fingerprint as it was before precision was a setting, so every run recorded before it still counts."""
    from transformer_zoo.analysis.reproduce import translation as study
    from transformer_zoo.analysis.reproduce.translation_table3 import row_settings

    name = "urdu-translation-ur-en"
    base = dataclasses.replace(rp.PRESETS["tiny"].translation, partial_file=str(tmp_path / "runs.jsonl"))
    assert "precision" not in study.default_settings(base, name) | row_settings(base, "base")
    pair = {"max_length": 64, "split_long_paragraphs": True, "epochs": 3.0}
    settings = dataclasses.replace(base, pair_overrides={name: dict(pair, precision="bf16")})
    assert study.default_settings(settings, name)["precision"] == "bf16"
    assert row_settings(dataclasses.replace(base, precision="bf16"), "base")["precision"] == "bf16"
    task = ("default", name, None, 0)

    def run(epochs, precision):
        changes = dict(pair, epochs=epochs, **({} if precision == "fp32" else {"precision": precision}))
        recorded = study.default_settings(dataclasses.replace(base, pair_overrides={name: changes}), name)
        output = {"pair": name, "language_pair": "Urdu-English (hadith + Quran)", "epochs": epochs, "steps": 10,
                  "task_settings": recorded, "test_bleu": 21.0 + epochs, "test_chrf": 42.0 + epochs,
                  "retrieval_bleu": 19.45, "retrieval_chrf": 39.94, "copy_bleu": 0.0, "copy_chrf": 0.8,
                  "train_seconds": 60.0, "dev_evaluations": [], "test_sentences": 20}
        return json.dumps(study.json_ready({"task": list(task), "output": output}))

    lines = [run(2.0, "fp32"), run(3.0, "fp32"), run(4.0, "fp32"), run(2.0, "bf16")]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    assert study.finished_runs(settings, [task]) == {}
    budgets = study.shorter_budgets(settings, [task])[name]
    # fewest epochs first; a shorter bf16 run is an earlier budget too; fp32 past the current budget is not shown
    assert [(r["epochs"], r["precision"]) for r in budgets] == [(2.0, "bf16"), (2.0, "fp32"), (3.0, "fp32")]
    assert study.earlier_budget_row(budgets[2])["language_pair"] == (
        "Urdu-English (hadith + Quran), 3 epochs, fp32 (earlier settings)")
    (tmp_path / "runs.jsonl").write_text("\n".join(lines + [run(3.0, "bf16")]) + "\n")
    assert study.finished_runs(settings, [task])[task]["test_bleu"] == 24.0  # the bf16 run at 3 epochs
    assert study.finished_runs(dataclasses.replace(settings, pair_overrides={name: pair}), [task])[task][
        "task_settings"].get("precision") is None  # and fp32 settings find the fp32 run
    with pytest.raises(ValueError, match=r"\['precision'\] must be one of fp32, bf16, got 'fp16'"):
        study.run_translation(dataclasses.replace(settings, pair_overrides={name: dict(pair, precision="fp16")}),
                              seeds=[0])


def test_the_report_says_whether_the_row_without_dropout_had_begun_to_over_fit():
    from transformer_zoo.analysis.reproduce.translation_table3 import over_fitting_text

    def run(*losses):
        curve = [{"step": 100 * (i + 1), "averaged": 1, "loss": loss} for i, loss in enumerate(losses)]
        return {"arm": "no_dropout", "dev_curve": curve + [{"step": 100 * len(losses), "averaged": 5, "loss": 0.1}]}

    assert over_fitting_text({"runs": [{"arm": "base", "dev_curve": []}]}) == ""
    falling = over_fitting_text({"runs": [run(3.0, 2.5, 2.4), run(3.1, 2.6)]})
    assert falling.startswith(" Without dropout the dev loss was still falling at the end in every seed (2.500 at "
                              "step 200 -> 2.400 at step 300; 3.100 at step 100 -> 2.600 at step 200)")
    rising = over_fitting_text({"runs": [run(3.0, 2.5, 2.6), run(3.1, 2.6)]})
    assert rising.startswith(" Without dropout the dev loss rose between its last two points in 1 of 2 seeds")


def test_the_table3_loss_curve_reaches_the_last_step_and_the_greedy_bleu_curve_does_not(monkeypatch, tmp_path):
    """The dev loss at the end (last weights, before averaging) is the curve's own measure, so it ends the curve; the
    end's BLEU is beam search on the whole dev split, another measure, so the greedy-BLEU curve stops before it."""
    from transformer_zoo.analysis import figures

    curve = [{"step": 200, "averaged": 1, "loss": 3.0, "greedy_bleu": 10.0},
             {"step": 400, "averaged": 1, "loss": 2.5, "greedy_bleu": 15.0},
             {"step": 500, "averaged": 1, "loss": 2.4, "beam_bleu": 20.0},
             {"step": 500, "averaged": 5, "loss": 2.3, "beam_bleu": 21.0}]
    runs = [{"arm": "base", "seed": seed, "dev_curve": curve, "metrics": {"test_bleu": 20.0 + seed}} for seed in (0, 1)]
    drawn = {}

    def keep(figure, path, dpi=100):
        bleu_axes, loss_axes, _ = figure.axes
        drawn.update(bleu=list(bleu_axes.lines[0].get_xdata()), loss=list(loss_axes.lines[0].get_ydata()),
                     loss_steps=list(loss_axes.lines[0].get_xdata()))
        return path

    monkeypatch.setattr(figures, "save_figure", keep)
    from transformer_zoo.analysis.reproduce.translation_table3 import plot_table3

    plot_table3({"table3_rows": ["base"], "runs": runs}, tmp_path / "t.png")
    assert drawn == {"bleu": [200, 400], "loss": [3.0, 2.5, 2.4], "loss_steps": [200, 400, 500]}
