"""The local evaluate modules (transformer_zoo/metrics/<name>/<name>.py), the baseline and the seed statistics.

Each metric is checked against a number worked out by hand and against the underlying library called directly.
"""

import ast
import math
import os
import subprocess
import sys
import textwrap

import pytest
import sacrebleu
from seqeval.metrics import f1_score as seqeval_f1
from sklearn.metrics import f1_score

from transformer_zoo.metrics import LOCAL_METRICS, METRICS_DIR, load_metric, majority_baseline, mean_std


@pytest.fixture(scope="module")
def metrics():
    return {name: load_metric(name) for name in LOCAL_METRICS}


def test_every_metric_is_a_folder_with_its_script():
    for name in LOCAL_METRICS:
        assert (METRICS_DIR / name / f"{name}.py").is_file()


def test_accuracy(metrics):
    result = metrics["accuracy"].compute(predictions=[0, 1, 1, 2], references=[0, 1, 2, 2])
    assert result == {"accuracy": 0.75}  # 3 of 4 correct
    assert metrics["accuracy"].compute(predictions=[0, 1], references=[0, 0], normalize=False)["accuracy"] == 1


def test_macro_f1_by_hand(metrics):
    predictions, references = [0, 1, 1, 2], [0, 1, 2, 2]
    # class 0: P = R = 1, F1 = 1; class 1: P = 1/2, R = 1, F1 = 2/3; class 2: P = 1, R = 1/2, F1 = 2/3.
    by_hand = (1 + 2 / 3 + 2 / 3) / 3
    result = metrics["f1"].compute(predictions=predictions, references=references)["f1"]
    assert result == pytest.approx(by_hand, abs=1e-12)
    assert result == pytest.approx(f1_score(references, predictions, average="macro"), abs=1e-12)
    per_class = metrics["f1"].compute(predictions=predictions, references=references, average=None)["f1"]
    assert per_class == pytest.approx([1.0, 2 / 3, 2 / 3], abs=1e-12)


def test_seqeval_on_a_bio_example(metrics):
    references = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
    predictions = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "I-ORG"]]
    # Entities: true {PER, LOC, ORG}, predicted {PER, ORG(wrong span type), ORG}: 2 of 3 correct both ways.
    result = metrics["seqeval"].compute(predictions=predictions, references=references)
    assert result["overall_precision"] == pytest.approx(2 / 3)
    assert result["overall_recall"] == pytest.approx(2 / 3)
    assert result["overall_f1"] == pytest.approx(2 / 3)
    assert result["overall_f1"] == pytest.approx(seqeval_f1(references, predictions))
    assert result["overall_accuracy"] == pytest.approx(6 / 7)  # one wrong tag out of seven
    assert result["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "number": 1}
    assert result["LOC"]["recall"] == 0.0
    with pytest.raises(ValueError, match="3 tags but its reference has 4"):
        metrics["seqeval"].compute(predictions=[["O", "O", "O"]], references=[["O", "O", "O", "O"]])


def test_sacrebleu(metrics):
    identical = metrics["sacrebleu"].compute(
        predictions=["the cat sat on the mat", "a dog ran to the park"],
        references=[["the cat sat on the mat"], ["a dog ran to the park"]],
    )
    assert identical["score"] == pytest.approx(100.0)
    assert "tok:13a" in identical["signature"]
    predictions = ["the cat sat on a mat", "a dog ran in the park today"]
    references = [["the cat sat on the mat"], ["a dog ran to the park"]]
    ours = metrics["sacrebleu"].compute(predictions=predictions, references=references)
    theirs = sacrebleu.corpus_bleu(predictions, [[r[0] for r in references]])
    assert ours["score"] == pytest.approx(theirs.score, abs=1e-12) and 0 < ours["score"] < 100
    flat = metrics["sacrebleu"].compute(predictions=predictions, references=[r[0] for r in references])
    assert flat["score"] == pytest.approx(theirs.score, abs=1e-12)  # one reference per line, no nesting


def test_chrf(metrics):
    assert metrics["chrf"].compute(predictions=["یہ ایک جملہ ہے"], references=[["یہ ایک جملہ ہے"]])["score"] == (
        pytest.approx(100.0)
    )
    predictions, references = ["the cat sat on the mat"], [["the cat sat on a mat"]]
    ours = metrics["chrf"].compute(predictions=predictions, references=references)
    assert ours["score"] == pytest.approx(sacrebleu.corpus_chrf(predictions, [["the cat sat on a mat"]]).score)
    plus = metrics["chrf"].compute(predictions=predictions, references=references, word_order=2)
    assert plus["score"] == pytest.approx(
        sacrebleu.CHRF(word_order=2).corpus_score(predictions, [["the cat sat on a mat"]]).score
    )


def test_perplexity_is_exp_of_the_mean_loss(metrics):
    assert metrics["perplexity"].compute(losses=[2.3])["perplexity"] == pytest.approx(math.exp(2.3))
    result = metrics["perplexity"].compute(losses=[2.0, 3.0])
    assert result["perplexity"] == pytest.approx(math.exp(2.5)) and result["mean_loss"] == pytest.approx(2.5)
    assert result["bits_per_token"] == pytest.approx(2.5 / math.log(2))
    weighted = metrics["perplexity"].compute(losses=[2.0, 3.0], num_tokens=[1, 3])  # (2 + 9) / 4 = 2.75
    assert weighted["perplexity"] == pytest.approx(math.exp(2.75))
    with pytest.raises(ValueError, match="NaN or infinite"):
        metrics["perplexity"].compute(losses=[float("nan")])


def test_majority_baseline_by_hand():
    result = majority_baseline([0, 0, 1, 2], [0, 1, 1, 2])
    # Always predict 0: 1 of 4 correct. F1: class 0 P = 1/4, R = 1 -> 2/5; classes 1 and 2 -> 0. Macro = 2/15.
    assert result["majority_label"] == 0
    assert result["accuracy"] == pytest.approx(0.25)
    assert result["macro_f1"] == pytest.approx(2 / 15)
    assert majority_baseline([2, 1, 2, 1], [1])["majority_label"] == 1  # tie: the smallest label
    assert majority_baseline([1, 1], [0, 1], labels=[0, 1, 2])["macro_f1"] == pytest.approx((0 + 2 / 3 + 0) / 3)
    with pytest.raises(ValueError, match="non-empty"):
        majority_baseline([], [1])


def test_mean_std():
    mean, std = mean_std([1.0, 2.0, 3.0, 4.0])
    assert mean == pytest.approx(2.5) and std == pytest.approx(math.sqrt(5 / 3))  # sample std (n - 1)
    assert mean_std([0.7]) == (0.7, 0.0)
    with pytest.raises(ValueError, match="at least one value"):
        mean_std([])


def test_load_metric_errors_name_the_alternatives(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="not one of the local metrics.*accuracy"):
        load_metric("no-such-metric-anywhere/xyz")
    with pytest.raises(ValueError, match="non-empty string"):
        load_metric("")


def test_metrics_load_by_path_offline_without_network(tmp_path):
    """A fresh process, HF_HUB_OFFLINE=1, an empty HF cache and a dead proxy: evaluate.load(<path>) still works."""
    script = textwrap.dedent(
        f"""
        import evaluate
        base = {str(METRICS_DIR)!r}
        results = {{
            "accuracy": evaluate.load(base + "/accuracy").compute(predictions=[1, 0], references=[1, 1])["accuracy"],
            "f1": evaluate.load(base + "/f1").compute(predictions=[1, 0], references=[1, 1])["f1"],
            "seqeval": evaluate.load(base + "/seqeval").compute(
                predictions=[["B-X"]], references=[["B-X"]])["overall_f1"],
            "sacrebleu": evaluate.load(base + "/sacrebleu").compute(
                predictions=["a b c d"], references=[["a b c d"]])["score"],
            "chrf": evaluate.load(base + "/chrf").compute(predictions=["abc"], references=[["abc"]])["score"],
            "perplexity": evaluate.load(base + "/perplexity").compute(losses=[0.0])["perplexity"],
        }}
        print(results)
        """
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert results["accuracy"] == 0.5 and results["f1"] == pytest.approx(1 / 3)
    assert results["seqeval"] == 1.0 and results["perplexity"] == 1.0
    assert results["sacrebleu"] == pytest.approx(100.0) and results["chrf"] == pytest.approx(100.0)
