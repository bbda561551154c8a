"""Claim reproductions (transformer_zoo.analysis.reproduce, scripts/reproduce.py): the data generators, the
verdict logic on hand-made numbers, the evaluation on a model whose answers are known, and a micro end-to-end run
of every experiment that writes the report files."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from reproduce_helpers import load_script
from transformer_zoo.analysis import reproduce as rp



# ------------------------------------------------------------------------------------------------ data generators
def test_copy_batch_targets_are_copies_with_right_lengths():
    batch = rp.copy_batch(np.random.default_rng(0), batch_size=200, min_length=3, max_length=7)
    lengths = batch["attention_mask"].sum(1)
    assert int(lengths.min()) == 3 and int(lengths.max()) == 7  # 200 draws cover both ends
    assert batch["input_ids"].shape[1] == 7 and batch["labels"].shape[1] == 8  # room for EOS
    for row in range(200):
        n = int(lengths[row])
        source, labels = batch["input_ids"][row], batch["labels"][row]
        assert batch["attention_mask"][row, :n].all() and not batch["attention_mask"][row, n:].any()
        assert torch.equal(labels[:n], source[:n])  # the target really is the source
        assert int(labels[n]) == rp.COPY_EOS
        assert (labels[n + 1:] == rp.IGNORE_INDEX).all() and (source[n:] == rp.COPY_PAD).all()
        assert ((source[:n] >= rp.COPY_FIRST_DIGIT) & (source[:n] < rp.COPY_VOCAB_SIZE)).all()


def test_copy_batch_is_deterministic_and_rejects_bad_lengths():
    first = rp.copy_batch(np.random.default_rng(5), 4, 2, 6)
    second = rp.copy_batch(np.random.default_rng(5), 4, 2, 6)
    assert all(torch.equal(first[key], second[key]) for key in first)
    with pytest.raises(ValueError, match="min_length <= max_length"):
        rp.copy_batch(np.random.default_rng(0), 4, 5, 3)
    with pytest.raises(ValueError, match="batch_size"):
        rp.copy_batch(np.random.default_rng(0), 0, 1, 3)


def test_the_character_experiments_test_on_text_they_did_not_train_on():
    """The Shakespeare splits as text: once both were the whole corpus (a split's Arrow table is every row)."""
    from transformer_zoo.analysis.reproduce.characters import _shakespeare_texts

    train, test = _shakespeare_texts()
    assert len(train) / 10 < len(test) < len(train) / 5  # a tenth of the speeches against eight tenths
    assert test[:2000] not in train


def test_character_windows():
    corpus = rp.encode_characters("abcabcabd", "cab", "toy")
    assert corpus.alphabet == "abcd" and corpus.vocab_size == 4
    assert corpus.train.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 3] and corpus.test.tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="training text lacks"):
        rp.encode_characters("abc", "abz", "toy")

    ids = np.arange(100)
    windows = rp.random_windows(ids, np.random.default_rng(0), batch_size=50, length=16)
    assert windows.shape == (50, 16)
    assert (windows[:, 1:] - windows[:, :-1] == 1).all()  # consecutive slices of the text
    assert int(windows.max()) <= 99
    evaluation = rp.evaluation_windows(ids, length=10, count=3)
    assert evaluation.tolist() == [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]
    with pytest.raises(ValueError, match="fewer evaluation windows"):
        rp.evaluation_windows(ids, length=40, count=3)
    with pytest.raises(ValueError, match="fewer than one window"):
        rp.random_windows(ids[:5], np.random.default_rng(0), 2, 8)


# ------------------------------------------------------------------------------------------------ statistics, verdicts
def test_mean_std_and_clearly_better_on_hand_numbers():
    assert rp.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert rp.mean_std([4.0]) == (4.0, 0.0)
    assert rp.format_mean_std([1.0, 2.0, 3.0]) == "2.000 ± 1.000"
    assert rp.format_mean_std([2.5]) == "2.500"  # one seed: no spread to show, not "± 0.000"
    # losses 1.0 +- 0.1 vs 2.0 +- 0.1: difference 1.0 > hypot(0.1, 0.1) = 0.141
    held, evidence = rp.clearly_better([0.9, 1.0, 1.1], [1.9, 2.0, 2.1], lower_is_better=True, min_difference=0.0)
    assert held and "+1.000" in evidence
    # same means, different noise: not better
    assert not rp.clearly_better([0.5, 1.5], [1.0, 1.0], lower_is_better=True, min_difference=0.0)[0]
    # difference 0.3 but spread hypot(0.5, 0.5) = 0.707: inside the noise
    assert not rp.clearly_better([0.5, 1.5], [0.8, 1.8], lower_is_better=True, min_difference=0.0)[0]
    # higher is better, and the minimum difference applies when the spread is zero
    assert rp.clearly_better([0.9], [0.8], lower_is_better=False, min_difference=0.05)[0]
    assert not rp.clearly_better([0.9], [0.88], lower_is_better=False, min_difference=0.05)[0]
    # context-free baseline: training counts [2, 1, 0] + 1 -> p = [3, 2, 1] / 6
    assert rp.unigram_loss(np.array([0, 0, 1]), np.array([0, 2]), 3) == pytest.approx(
        -(math.log(3 / 6) + math.log(1 / 6)) / 2)


def copy_numbers(reference=1.0, no_positions=0.0, one_head_loss=0.5, no_warmup_loss=0.5):
    return {
        "reference": {"accuracy": [reference] * 3, "eval_loss": [0.10, 0.11, 0.12]},
        "no_positions": {"accuracy": [no_positions] * 3, "eval_loss": [1.5, 1.5, 1.5]},
        "one_head": {"accuracy": [0.9] * 3, "eval_loss": [one_head_loss] * 3},
        "no_warmup": {"accuracy": [0.5] * 3, "eval_loss": [no_warmup_loss] * 3},
    }


def test_copy_claims_follow_the_numbers():
    uniform = math.log(13)
    assert [c["held"] for c in rp.copy_claims(copy_numbers(), uniform)] == [True, True, True, True]
    # reference copies badly; NoPE copies well; one head and no warmup as good as the reference
    claims = rp.copy_claims(copy_numbers(reference=0.85, no_positions=0.8, one_head_loss=0.11,
                                         no_warmup_loss=0.11), uniform)
    assert [c["held"] for c in claims] == [False, False, False, False]
    # NoPE at 0.2 fails the "<= 0.10" part even though the gap to the reference is large
    assert not rp.copy_claims(copy_numbers(no_positions=0.2), uniform)[1]["held"]


def extrapolation_numbers(alibi=(1.0, 0.99), sinusoidal=(1.5, 3.0), rope=(1.1, 1.4), learned_refused=True):
    lengths = (64, 128)
    ratios = {"alibi": {32: [1.0, 1.0]}, "sinusoidal": {32: [1.0, 1.0]}, "rope": {32: [1.0, 1.0]},
              "learned": {32: [1.0, 1.0]}}
    for name, values in (("alibi", alibi), ("sinusoidal", sinusoidal), ("rope", rope)):
        for length, value in zip(lengths, values):
            ratios[name][length] = [value - 0.001, value + 0.001]
    for length in lengths:
        ratios["learned"][length] = None if learned_refused else [1.0, 1.0]
    return ratios


def test_extrapolation_claims_follow_the_numbers():
    claims = rp.extrapolation_claims(extrapolation_numbers(), train_length=32)
    assert [c["held"] for c in claims] == [True, True, True, True, True]
    assert "L=64: 1.000" in claims[0]["evidence"]
    claims = rp.extrapolation_claims(
        extrapolation_numbers(alibi=(1.0, 1.5), sinusoidal=(1.0, 1.01), rope=(1.0, 1.2), learned_refused=False),
        train_length=32)
    # ALiBi degrades at 128; sinusoidal is within 2%; RoPE (1.2) is worse than sinusoidal (1.01); ALiBi (1.5)
    # worse than RoPE; the learned model ran.
    assert [c["held"] for c in claims] == [False, False, False, False, False]


def test_norm_claims_follow_the_numbers():
    uniform = math.log(80)
    good = {"pre": {2: [2.0, 2.02], 12: [1.8, 1.82]}, "post": {2: [2.0, 2.02], 12: [uniform, uniform]}}
    assert [c["held"] for c in rp.norm_claims(good, uniform)] == [True, True, True]
    equal = {"pre": {2: [2.0, 2.02], 12: [2.3, 2.32]}, "post": {2: [2.0, 2.02], 12: [2.3, 2.32]}}
    assert [c["held"] for c in rp.norm_claims(equal, uniform)] == [False, False, False]


# ------------------------------------------------------------------------------------------------ evaluation
class KnownAnswers(torch.nn.Module):
    """Predicts the label at every position except where `wrong` says (row, position): logits are one-hot."""

    def __init__(self, wrong=()):
        super().__init__()
        self.wrong = set(wrong)

    def forward(self, input_ids, attention_mask, labels):
        targets = labels.clamp(min=0).clone()
        for row, position in self.wrong:
            targets[row, position] = (targets[row, position] + 1) % rp.COPY_VOCAB_SIZE
        logits = torch.nn.functional.one_hot(targets, rp.COPY_VOCAB_SIZE).float() * 50.0

        class Output:
            pass

        output = Output()
        output.logits = logits
        return output


def test_copy_evaluate_counts_exact_matches():
    batch = rp.copy_batch(np.random.default_rng(1), 4, 3, 3)  # 4 sequences, 3 digits + EOS = 16 target tokens
    perfect = rp.copy_evaluate(KnownAnswers(), [batch])
    assert perfect["accuracy"] == 1.0 and perfect["token_accuracy"] == 1.0
    assert perfect["eval_loss"] < 1e-6
    one_wrong = rp.copy_evaluate(KnownAnswers(wrong=[(0, 1), (0, 2), (2, 3)]), [batch])
    assert one_wrong["accuracy"] == 0.5  # rows 0 and 2 have mistakes (row 2: its EOS)
    assert one_wrong["token_accuracy"] == 13 / 16
    assert one_wrong["eval_loss"] == pytest.approx(3 * 50.0 / 16, rel=1e-4)  # each mistake costs a 50-logit gap


# ------------------------------------------------------------------------------------------------ end to end
def test_script_runs_every_experiment_and_writes_reports(tmp_path, capsys):
    script = load_script()
    assert script.main(["--preset", "tiny", "--output", str(tmp_path), "--no-progress",
                        "--snapshot-dir", str(tmp_path / "snapshots"), "--save-models", str(tmp_path / "models")]) == 0
    # Each saved translator says how its test decode read long sources (translate.py and translate-test follow it).
    from transformer_zoo.analysis.reproduce.translation_setup import for_pair
    from transformer_zoo.translation import load_decoding_defaults

    tiny = rp.PRESETS["tiny"].translation
    for pair, splitter in (("bible-en-es", "english"), ("urdu-translation-ur-en", "urdu")):
        saved = load_decoding_defaults(tmp_path / "models" / pair)["names"]
        assert saved == {"max_source_tokens": for_pair(tiny, pair).max_length, "source_sentences": splitter}
    for name in ("copy", "extrapolation", "norm", "translation"):
        markdown = (tmp_path / f"{name}.md").read_text()
        assert "| claim | criterion" in markdown and "± " in markdown
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        record = json.loads((tmp_path / f"{name}.json").read_text())
        assert record["preset"] == "tiny" and record["seeds"] == [0, 1]
        assert all(isinstance(claim["held"], bool) for claim in record["claims"]) and record["claims"]
    index = (tmp_path / "README.md").read_text()
    assert all(f"({name}.md)" in index for name in ("copy", "extrapolation", "norm", "translation"))
    # learned positions are refused past their 8-row table, and the report says so instead of showing a number
    extrapolation = json.loads((tmp_path / "extrapolation.json").read_text())
    learned = [run for run in extrapolation["runs"] if run["arm"] == "learned"]
    assert learned and all("16" in run["metrics"]["refused"] and "8" in run["metrics"]["eval_loss"]
                           for run in learned)
    assert "max_position_embeddings=8" in learned[0]["metrics"]["refused"]["16"]
    assert "| learned | " in (tmp_path / "extrapolation.md").read_text()
    assert "refused" in (tmp_path / "extrapolation.md").read_text()
    norm = json.loads((tmp_path / "norm.json").read_text())
    assert len(norm["runs"]) == 2 * 2 * 2  # pre/post x depths 1, 2 x seeds 0, 1
    translation = json.loads((tmp_path / "translation.json").read_text())
    for pair in ("bible-en-es", "urdu-translation-ur-en"):
        numbers = translation["pairs"][pair]
        for key in ("test_bleu", "test_chrf", "copy_bleu", "retrieval_bleu"):
            assert isinstance(numbers[key], float) and 0.0 <= numbers[key] <= 100.0
        assert numbers["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
        assert numbers["checkpoints_averaged"] == 2  # the tiny preset averages the last 2
    assert len(translation["runs"]) == len(rp.TABLE3_ROWS) * 2  # every table-3 row x seeds 0, 1
    assert translation["complete"] and not translation["missing"]
    assert all(set(run["metrics"]) >= {"dev_bleu", "dev_bleu_last", "test_bleu", "test_chrf", "dev_perplexity"}
               for run in translation["runs"])
    assert (tmp_path / "translation-table3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {claim["claim"][:3] for claim in translation["claims"]} >= {"(A)", "(B)", "(C)", "(D)", "(E)"}
    assert "| English-Spanish (Bible) |" in (tmp_path / "translation.md").read_text()
    # every run says where it ran, and the report counts them per machine
    assert {numbers["device"] for numbers in translation["pairs"].values()} == {"cpu"}
    assert {run["device"] for run in translation["runs"]} == {"cpu"}
    assert [len(runs) for runs in translation["study"]["machines"].values()] == [2 + len(rp.TABLE3_ROWS) * 2]
    assert f"where they ran: {2 + len(rp.TABLE3_ROWS) * 2} on cpu, 1 thread(s)" in (tmp_path / "translation.md").read_text()
    assert "(translation.md)" in index or "(translation.md)" in (tmp_path / "README.md").read_text()
    assert "claims held" in capsys.readouterr().out


def test_runs_are_deterministic_per_seed():
    settings = rp.PRESETS["tiny"].copy

    def one_run(seed):
        model = rp.copy_model(settings, seed)
        rng = rp.data_rng(seed, 0)
        curve, diverged, steps = rp.train_steps(
            model, lambda: rp.copy_batch(rng, 8, 1, 5), steps=5, learning_rate=1e-2, warmup_steps=2,
            description="determinism", log_every=1, progress=False)
        assert not diverged and steps == 5
        return curve, rp.copy_evaluate(model, [rp.copy_batch(rp.data_rng(seed, 1), 16, 1, 5)])

    first, second, other = one_run(3), one_run(3), one_run(4)
    assert first == second  # bit for bit: same weights, batches and evaluation data
    assert first[0] != other[0]


def test_bad_inputs_are_refused_with_a_clear_message(capsys):
    script = load_script()
    with pytest.raises(SystemExit):
        script.main(["--seeds", "0,x"])
    assert "comma-separated integers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--seeds", "1,1"])
    assert "distinct" in capsys.readouterr().err
    assert script.main(["--experiment", "copy", "--only", "table3"]) == 2  # --only picks translation runs
    assert "apply to the translation study" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--experiment", "translation", "--only", "rows"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="train_only takes 'defaults' or 'table3'"):
        rp.run_translation(dataclasses.replace(rp.PRESETS["tiny"].translation, train_only="rows"), [0])
    with pytest.raises(ValueError, match="Unknown experiment"):
        rp.run_experiment("nope", "tiny")
    with pytest.raises(ValueError, match="Unknown preset"):
        rp.run_experiment("copy", "huge")


def test_report_index_gives_a_study_its_own_cost_not_the_render_time(tmp_path):
    """A study assembled from runs of several processes (rendered with --report-only, or resumed) is indexed by
    its runs and training hours; a one-process experiment by that process's wall and CPU time."""
    claim = {"claim": "a claim", "held": True, "evidence": "numbers"}
    (tmp_path / "norm.json").write_text(json.dumps(
        {"preset": "default", "seeds": [0, 1, 2], "seconds": 378.0, "cpu_seconds": 360.0, "claims": [claim]}))
    (tmp_path / "translation.json").write_text(json.dumps(
        {"preset": "default", "seeds": [0, 1], "seconds": 0.8, "cpu_seconds": 0.6, "claims": [claim, claim],
         "study": {"runs": 12, "of": 27, "training_hours": 17.14}}))
    index = rp.write_index(tmp_path).read_text()
    assert "Preset `default`, 3 seeds, 6.3 min wall (6.0 min CPU); 1 of 1 claims held." in index
    assert ("Preset `default`, 2 seeds, 12 of 27 runs finished, 17.1 h of training (the page has the study's CPU "
            "and wall time); 2 of 2 claims held.") in index
    assert "0.0 min wall" not in index
