"""Linear probing (transformer_zoo.analysis.probing) and scripts/probe.py: numbers on inputs where the answer is known."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import transformer_zoo as tz
from transformer_zoo.analysis.probing import (
    control_labels,
    extract_layer_features,
    majority_baseline,
    plot_probe_accuracy,
    train_probe,
)

REPO = Path(__file__).resolve().parents[1]
MARKER_TOKEN = 7  # the label is "does token 7 appear in the input"


def tiny_encoder(seed=0):
    torch.manual_seed(seed)
    return tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("tiny"))


def marker_task(n_examples=400, seed=0, marker_share=0.3):
    """Right-padded token batches whose label is 1 exactly when MARKER_TOKEN occurs among the real tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 13, size=n_examples)
    labels = (rng.random(n_examples) < marker_share).astype(int)
    input_ids = torch.zeros(n_examples, 12, dtype=torch.long)  # pad id 0
    attention_mask = torch.zeros(n_examples, 12, dtype=torch.long)
    for row, (length, label) in enumerate(zip(lengths, labels)):
        tokens = rng.integers(10, 30, size=length)  # distractors never include the marker
        if label:
            tokens[rng.integers(0, length)] = MARKER_TOKEN
        input_ids[row, :length] = torch.from_numpy(tokens)
        attention_mask[row, :length] = 1
    return input_ids, attention_mask, labels


def batches_of(input_ids, attention_mask, size=64):
    return [{"input_ids": input_ids[i:i + size], "attention_mask": attention_mask[i:i + size]}
            for i in range(0, len(input_ids), size)]


def test_embedding_probe_finds_marker_token_while_control_stays_at_chance():
    model = tiny_encoder()
    input_ids, attention_mask, labels = marker_task()
    features = extract_layer_features(model, batches_of(input_ids, attention_mask), pooling="mean")
    train_idx, test_idx = np.arange(300), np.arange(300, 400)

    probe_accuracy = train_probe(features[0], labels, train_idx=train_idx, test_idx=test_idx, seed=0)
    control = control_labels(labels, seed=0)
    control_accuracy = train_probe(features[0], control, train_idx=train_idx, test_idx=test_idx, seed=0)
    majority = majority_baseline(labels, train_idx=train_idx, test_idx=test_idx)

    assert probe_accuracy >= 0.95
    # Control labels are unrelated to the input: a held-out probe can only guess (chance for a 30/70 task is at
    # most 0.7 if it always says "absent", ~0.58 if it guesses in proportion).
    assert 0.45 <= control_accuracy <= 0.75
    assert probe_accuracy - control_accuracy >= 0.2
    # Hand computation: the training majority class is 0 (marker absent); its share among the test labels.
    assert np.bincount(labels[train_idx]).argmax() == 0
    assert majority == pytest.approx(np.sum(labels[test_idx] == 0) / len(test_idx))


def test_features_have_one_array_per_layer_and_masked_mean_matches_hand_computation():
    model = tiny_encoder()
    input_ids = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    features = extract_layer_features(model, [{"input_ids": input_ids, "attention_mask": attention_mask}])
    assert len(features) == model.config.num_hidden_layers + 1
    assert all(layer.shape == (2, model.config.hidden_size) and layer.dtype == np.float32 for layer in features)

    with torch.no_grad():
        hidden_states = model.eval()(input_ids=input_ids, attention_mask=attention_mask,
                                     output_hidden_states=True).hidden_states
    for layer, hidden in enumerate(hidden_states):
        # The padded example: the mean over its 3 real tokens only, not over all 5 positions.
        expected = hidden[1, :3].mean(dim=0).numpy()
        np.testing.assert_allclose(features[layer][1], expected, rtol=1e-5, atol=1e-6)
        assert not np.allclose(features[layer][1], hidden[1].mean(dim=0).numpy(), atol=1e-4)

    first = extract_layer_features(model, [{"input_ids": input_ids, "attention_mask": attention_mask}],
                                   pooling="first")
    last = extract_layer_features(model, [{"input_ids": input_ids, "attention_mask": attention_mask}],
                                  pooling="last")
    np.testing.assert_allclose(first[2][1], hidden_states[2][1, 0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last[2][1], hidden_states[2][1, 2].numpy(), rtol=1e-5, atol=1e-6)  # last real
    np.testing.assert_allclose(last[2][0], hidden_states[2][0, 4].numpy(), rtol=1e-5, atol=1e-6)


def test_feature_extraction_covers_decoder_seq2seq_encoder_and_vit():
    torch.manual_seed(0)
    ids = torch.randint(3, 100, (3, 6))
    mask = torch.ones_like(ids)
    decoder = tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny"))
    seq2seq = tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset("tiny"))
    vit_config = tz.ZooViTConfig.from_preset("tiny")
    vit = tz.ZooViTModel(vit_config)
    for model, batch, layers in (
        (decoder, {"input_ids": ids, "attention_mask": mask}, decoder.config.num_hidden_layers + 1),
        (seq2seq, {"input_ids": ids, "attention_mask": mask}, seq2seq.config.encoder_layers + 1),
        (vit, {"pixel_values": torch.randn(3, vit_config.num_channels, vit_config.image_size,
                                           vit_config.image_size)}, vit_config.num_hidden_layers + 1),
    ):
        model.train()
        features = extract_layer_features(model, [batch], pooling="last")
        assert len(features) == layers
        assert all(layer.shape == (3, model.config.hidden_size) for layer in features)
        assert model.training  # the caller's mode is restored


def test_control_labels_keep_distribution_and_are_consistent():
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    control = control_labels(labels, seed=3)
    np.testing.assert_array_equal(np.bincount(control, minlength=3), [50, 30, 20])
    np.testing.assert_array_equal(control, control_labels(labels, seed=3))  # same seed, same relabelling
    assert not np.array_equal(control, labels)
    assert np.mean(control == labels) < 0.6  # unrelated to the real labels (independent agreement ~0.38)


def test_plot_writes_png(tmp_path):
    rows = [{"layer": i, "probe_accuracy": 0.5 + 0.1 * i, "control_accuracy": 0.3, "selectivity": 0.2 + 0.1 * i,
             "majority_baseline": 0.25} for i in range(3)]
    path = plot_probe_accuracy(rows, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def run_script(*args):
    return subprocess.run([sys.executable, str(REPO / "scripts" / "probe.py"), *args], capture_output=True, check=False,
                          text=True, timeout=120, cwd=REPO)


def test_script_help_explains_every_flag():
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--model", "--dataset", "--max-examples", "--pooling", "--seed", "--output-dir", "--max-length",
                 "--batch-size"):
        assert flag in result.stdout
    assert "Hewitt & Liang" in result.stdout


def test_script_runs_end_to_end_on_a_tiny_random_model(tmp_path):
    rng = np.random.default_rng(0)
    words = ["river", "stone", "cloud", "bread", "lamp", "road", "window", "garden", "music", "paper"]
    data = tmp_path / "animals.csv"
    with data.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for row in range(80):
            sentence = list(rng.choice(words, size=6))
            label = "zebra" if row % 2 else "none"
            if label == "zebra":
                sentence[rng.integers(0, 6)] = "zebra"
            writer.writerow([" ".join(sentence), label])
    out = tmp_path / "out"
    result = run_script("--model", "zoo_encoder:tiny", "--dataset", str(data), "--max-examples", "80",
                        "--output-dir", str(out), "--seed", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| 0 (embeddings) |" in result.stdout
    table = (out / "probe.md").read_text()
    assert table.count("\n| ") == 1 + 3  # header + embedding output + 2 blocks
    assert (out / "probe.png").read_bytes()[:4] == b"\x89PNG"
    rows = json.loads((out / "probe.json").read_text())["rows"]
    assert [row["layer"] for row in rows] == [0, 1, 2]
    # "zebra" is one token of the trained tokenizer, so the embedding-layer probe should find it.
    assert rows[0]["probe_accuracy"] >= 0.9
    assert rows[0]["majority_baseline"] == pytest.approx(0.5)
    for row in rows:
        assert row["selectivity"] == pytest.approx(row["probe_accuracy"] - row["control_accuracy"])
