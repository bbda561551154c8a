"""transformer_zoo.analysis: every estimate, calibration and attention statistic checked against numbers worked out
by hand, plus the two scripts end to end."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transformer_zoo as tz
from transformer_zoo.analysis import (
    apply_temperature,
    attention_rollout,
    capture_attentions,
    cls_attention_map,
    expected_calibration_error,
    fit_temperature,
    head_entropy,
    head_similarity,
    head_statistics_table,
    kv_cache_bytes,
    mean_attention_distance,
    memory_estimate,
    non_embedding_parameters,
    plot_attention_map,
    plot_cls_attention_overlay,
    reliability_diagram,
    training_flops,
    training_time_seconds,
)
from transformer_zoo.analysis.attention import upsample_heatmap
from transformer_zoo.analysis.calibration import negative_log_likelihood

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG"


# ------------------------------------------------------------------------------------------------------ estimates
def test_training_flops_is_six_n_d():
    # 85M non-embedding parameters (GPT-2 small) on 10B tokens: 6 · 85e6 · 10e9 = 5.1e18.
    assert training_flops(85e6, 10e9) == pytest.approx(5.1e18)
    assert training_time_seconds(5.1e18, 1e14) == pytest.approx(51_000.0)


def test_non_embedding_parameters_of_gpt2():
    # GPT-2 small: 124,439,808 parameters, minus token (50257 × 768) and position (1024 × 768) embeddings; the LM
    # head is tied to the token embedding.
    config = tz.ZooDecoderConfig.from_preset("gpt2")
    assert non_embedding_parameters(config) == 124_439_808 - 50257 * 768 - 1024 * 768 == 85_056_000


def test_adamw_memory_is_sixteen_bytes_per_parameter():
    n = 1_000_000
    fp32 = memory_estimate(n, precision="fp32", optimizer="adamw")
    # 4 (weights) + 4 (gradients) + 2 × 4 (moments) = 16 bytes per parameter.
    assert (fp32["weights_bytes"], fp32["gradients_bytes"], fp32["optimizer_states_bytes"]) == (4 * n, 4 * n, 8 * n)
    assert fp32["total_bytes"] == 16 * n
    # Mixed precision (ZeRO's accounting): 2 + 2 + (4 master + 8 moments) = 16 as well.
    bf16 = memory_estimate(n, precision="bf16", optimizer="adamw")
    assert (bf16["weights_bytes"], bf16["gradients_bytes"], bf16["optimizer_states_bytes"]) == (2 * n, 2 * n, 12 * n)
    assert bf16["total_bytes"] == 16 * n
    assert memory_estimate(n, optimizer="sgd")["total_bytes"] == 12 * n
    # LoRA: all weights held, only 1% train: 4n + 0.01n × (4 + 8).
    lora = memory_estimate(n, optimizer="adamw", trainable_parameters=n // 100)
    assert lora["total_bytes"] == 4 * n + (n // 100) * 12


def test_kv_cache_bytes_by_hand_with_gqa():
    # Decoder, 2 layers, 4 query heads sharing 2 key/value heads of dim 64 / 4 = 16, batch 3, 10 tokens, fp16:
    # 2 (K, V) · 2 layers · 3 · 10 · 2 heads · 16 · 2 bytes = 7,680.
    config = tz.ZooDecoderConfig.from_preset("tiny", num_key_value_heads=2)
    assert kv_cache_bytes(config, batch_size=3, sequence_length=10, dtype="fp16") == 2 * 2 * 3 * 10 * 2 * 16 * 2
    assert kv_cache_bytes(config, 3, 10, torch.float32) == 2 * 2 * 3 * 10 * 2 * 16 * 4
    # Seq2seq: decoder self-attention over 10 target tokens plus cross-attention over 7 source tokens, 2 decoder
    # layers, MQA (1 key/value head).
    seq2seq = tz.ZooSeq2SeqConfig.from_preset("tiny", num_key_value_heads=1)
    assert kv_cache_bytes(seq2seq, 3, 10, "fp16", source_length=7) == 2 * 2 * 3 * (10 + 7) * 1 * 16 * 2
    with pytest.raises(ValueError, match="no key/value cache"):
        kv_cache_bytes(tz.ZooEncoderConfig.from_preset("tiny"), 1, 10)


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_kv_cache_bytes_equals_the_real_cache_of_a_pruned_model(family):
    """The estimate counts the key/value heads pruning removed: compare with the bytes a real forward caches."""
    from transformer_zoo.analysis.heads import prune_heads

    config_class, model_class = {
        "decoder": (tz.ZooDecoderConfig, tz.ZooDecoderForCausalLM),
        "seq2seq": (tz.ZooSeq2SeqConfig, tz.ZooSeq2SeqForConditionalGeneration),
    }[family]
    torch.manual_seed(0)
    model = model_class(config_class.from_preset("tiny", num_key_value_heads=2)).eval()
    # Query heads 0 and 1 form key/value group 0: pruning both removes that key/value head.
    prune_heads(model, {0: [0, 1]} if family == "decoder" else {"decoder.0": [0, 1], "cross.1": [2, 3]})
    ids = torch.randint(3, 100, (3, 10))
    source = torch.randint(3, 100, (3, 7))
    with torch.no_grad():
        if family == "decoder":
            cache = model(input_ids=ids, use_cache=True).past_key_values
            layers = cache.layers
        else:
            cache = model(input_ids=source, decoder_input_ids=ids, use_cache=True).past_key_values
            layers = cache.self_attention_cache.layers + cache.cross_attention_cache.layers
    real = sum(layer.keys.numel() * 4 + layer.values.numel() * 4 for layer in layers)
    estimate = kv_cache_bytes(model.config, 3, 10, torch.float32, source_length=7)
    assert estimate == real
    # One of the four (or eight) key/value-head slots is gone, so the unpruned estimate is larger.
    assert kv_cache_bytes(config_class.from_preset("tiny", num_key_value_heads=2), 3, 10, torch.float32,
                          source_length=7) > real


# ---------------------------------------------------------------------------------------------------- calibration
def binary_predictions(confidence: float, n: int, n_correct: int):
    """n examples predicted as class 0 with `confidence`, the first n_correct of which really are class 0."""
    probabilities = torch.tensor([[confidence, 1 - confidence]] * n, dtype=torch.float64)
    labels = torch.tensor([0] * n_correct + [1] * (n - n_correct))
    return probabilities, labels


def test_ece_of_a_perfectly_calibrated_predictor_is_zero():
    # Confidence c with accuracy exactly c, in five different bins of 15.
    parts = [binary_predictions(c, 100, round(100 * c)) for c in (0.55, 0.65, 0.75, 0.85, 0.95)]
    probabilities = torch.cat([p for p, _ in parts])
    labels = torch.cat([l for _, l in parts])
    assert expected_calibration_error(probabilities, labels) == pytest.approx(0.0, abs=1e-12)


def test_ece_of_an_overconfident_predictor_by_hand(tmp_path):
    # 100 examples at confidence 0.9 but 60% accuracy (gap 0.3), 100 at 0.7 with 70% accuracy (gap 0):
    # ECE = 100/200 · 0.3 + 100/200 · 0 = 0.15.
    over, over_labels = binary_predictions(0.9, 100, 60)
    fine, fine_labels = binary_predictions(0.7, 100, 70)
    probabilities, labels = torch.cat([over, fine]), torch.cat([over_labels, fine_labels])
    assert expected_calibration_error(probabilities, labels) == pytest.approx(0.15)
    path = reliability_diagram(probabilities.numpy(), labels.tolist(), tmp_path / "reliability.png")
    assert path.read_bytes()[:4] == PNG_MAGIC


@pytest.mark.parametrize("temperature", [2.5, 0.5])
def test_temperature_scaling_recovers_a_known_temperature(temperature):
    generator = torch.Generator().manual_seed(0)
    true_logits = 2.0 * torch.randn(20_000, 10, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(true_logits, -1), 1, generator=generator).squeeze(-1)
    # Miscalibrated logits: the true ones multiplied by T, so dividing by T restores the true distribution.
    logits = true_logits * temperature
    fitted = fit_temperature(logits, labels)
    assert fitted == pytest.approx(temperature, rel=0.05)
    assert negative_log_likelihood(logits, labels, fitted) < negative_log_likelihood(logits, labels)
    calibrated = apply_temperature(logits, fitted)
    assert torch.allclose(calibrated.sum(-1), torch.ones(len(labels), dtype=torch.float64))
    assert torch.equal(calibrated.argmax(-1), logits.argmax(-1))  # scaling never changes the prediction


# ------------------------------------------------------------------------------------------------------ attention
def test_entropy_of_uniform_and_one_hot_maps():
    n = 7
    uniform = torch.full((1, 1, 2, n, n), 1.0 / n)  # [layers, batch, heads, q, k]
    one_hot = torch.eye(n).expand(1, 1, 2, n, n)
    assert torch.allclose(head_entropy(uniform), torch.full((1, 2), math.log(n)))
    assert torch.allclose(head_entropy(one_hot), torch.zeros(1, 2))


def test_entropy_excludes_padded_keys_and_queries():
    # 5 positions, the last 2 padding: real queries spread uniformly over the 3 real keys -> log 3; the padded
    # queries' rows are garbage (uniform over 5) and must not count.
    weights = torch.full((1, 1, 1, 5, 5), 0.2)
    weights[..., :3, :] = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    assert head_entropy(weights, attention_mask=mask).item() == pytest.approx(math.log(3), rel=1e-6)


def test_mean_attention_distance_by_hand():
    diagonal = torch.eye(4).expand(2, 1, 3, 4, 4)
    assert torch.allclose(mean_attention_distance(diagonal), torch.zeros(2, 3))
    # Query 0 looks at key 1 (distance 1); query 1 splits between keys 0 and 2 (distance 1); query 2 looks at key 0
    # (distance 2): mean (1 + 1 + 2) / 3 = 4/3.
    known = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0]])[None, None, None]
    assert mean_attention_distance(known).item() == pytest.approx(4 / 3)


def test_head_similarity_of_identical_and_disjoint_heads():
    head = torch.softmax(torch.randn(2, 5, 5), -1)  # [batch, q, k]
    disjoint = torch.zeros(2, 5, 5)
    disjoint[..., 0] = 1.0
    head[..., 0] = 0.0  # head never attends to key 0, disjoint head only does
    attentions = torch.stack([head, head, disjoint], dim=1)[None]  # [1 layer, batch, 3 heads, q, k]
    similarity = head_similarity(attentions)[0]
    assert similarity[0, 1].item() == pytest.approx(1.0, abs=1e-6)
    assert similarity[0, 2].item() == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(similarity.diagonal(), torch.ones(3))
    rows = head_statistics_table(attentions)
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (0, 2)]
    assert rows[0]["max_similarity_to_other_head"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("family", ["decoder", "encoder", "seq2seq", "vit"])
def test_capture_attentions_restores_implementation_and_returns_distributions(family):
    torch.manual_seed(0)
    config_class, model_class = {
        "decoder": (tz.ZooDecoderConfig, tz.ZooDecoderForCausalLM),
        "encoder": (tz.ZooEncoderConfig, tz.ZooEncoderModel),
        "seq2seq": (tz.ZooSeq2SeqConfig, tz.ZooSeq2SeqForConditionalGeneration),
        "vit": (tz.ZooViTConfig, tz.ZooViTModel),
    }[family]
    model = model_class(config_class.from_preset("tiny", num_key_value_heads=2)).train()
    assert model.config._attn_implementation == "sdpa"  # the default, which returns no weights
    ids = torch.randint(3, 100, (2, 6))
    if family == "vit":
        c = model.config
        inputs = {"pixel_values": torch.randn(2, c.num_channels, c.image_size, c.image_size)}
    elif family == "seq2seq":
        inputs = {"input_ids": ids, "decoder_input_ids": ids[:, :4]}
    else:
        inputs = {"input_ids": ids}
    attentions = capture_attentions(model, inputs)
    assert model.config._attn_implementation == "sdpa"
    assert model.training  # mode restored too
    expected = {"seq2seq": {"encoder_self", "decoder_self", "cross"}}.get(family, {"self"})
    assert set(attentions) == expected
    for name, weights in attentions.items():
        assert weights.ndim == 5 and weights.shape[:3] == (2, 2, 4)  # layers, batch, heads (4 query heads)
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5), name
    if family == "seq2seq":
        assert attentions["cross"].shape[-2:] == (4, 6)


def test_plot_attention_map_writes_a_png(tmp_path):
    path = plot_attention_map(torch.softmax(torch.randn(3, 4), -1), ["a", "b", "c"], list("wxyz"),
                              tmp_path / "map.png")
    assert path.read_bytes()[:4] == PNG_MAGIC
    with pytest.raises(ValueError):
        plot_attention_map(torch.rand(3, 4), ["a"], ["b"], tmp_path / "bad.png")


# ------------------------------------------------------------------------------------------ ViT [CLS] attention
def test_rollout_of_one_layer_mixes_heads_and_residual_by_hand():
    # Two heads over 3 tokens, one uniform and one the identity: head mean = diag 2/3, off-diagonal 1/6; with the
    # residual 0.5·A + 0.5·I: diag 5/6, off-diagonal 1/12.
    heads = torch.stack([torch.full((3, 3), 1 / 3), torch.eye(3)])[None, None]  # [1 layer, 1 batch, 2, 3, 3]
    expected = torch.full((3, 3), 1 / 12) + torch.eye(3) * (5 / 6 - 1 / 12)
    assert torch.allclose(attention_rollout(heads)[0], expected)
    assert torch.allclose(attention_rollout(heads, residual=False)[0], torch.full((3, 3), 1 / 6) + torch.eye(3) / 2)


def test_rollout_multiplies_layers_bottom_up():
    # Layer 1: everyone attends to token 0; layer 2: everyone attends to token 2. With residuals
    # A1' row 0 = [1, 0, 0], row 2 = [0.5, 0, 0.5]; A2' row 0 = [0.5, 0, 0.5]. Rollout row 0 = A2'[0] @ A1' =
    # 0.5·[1, 0, 0] + 0.5·[0.5, 0, 0.5] = [0.75, 0, 0.25] (the other order would give [0.5, 0, 0.5]).
    to_first = torch.zeros(3, 3)
    to_first[:, 0] = 1
    to_last = torch.zeros(3, 3)
    to_last[:, 2] = 1
    attentions = torch.stack([to_first, to_last])[:, None, None]  # [2 layers, 1 batch, 1 head, 3, 3]
    rollout = attention_rollout(attentions)[0]
    assert torch.allclose(rollout[0], torch.tensor([0.75, 0.0, 0.25]))
    assert torch.allclose(rollout.sum(-1), torch.ones(3))


def test_cls_attention_map_drops_prefix_tokens_and_forms_the_grid(tmp_path):
    # Last layer, 2 heads: [CLS] row averages to [0.2 | 0.1, 0.2, 0.3, 0.2] -> 2x2 patch grid.
    last = torch.zeros(1, 1, 2, 5, 5)
    last[0, 0, 0, 0] = torch.tensor([0.3, 0.0, 0.2, 0.4, 0.1])
    last[0, 0, 1, 0] = torch.tensor([0.1, 0.2, 0.2, 0.2, 0.3])
    grid = cls_attention_map(last, num_prefix_tokens=1, method="last")
    assert torch.allclose(grid, torch.tensor([[[0.1, 0.2], [0.3, 0.2]]]))
    # A distillation token is a second prefix token: 4 patches remain out of 6 tokens. Two uniform layers U with
    # residuals: (0.5·U + 0.5·I)^2 = 0.75·U + 0.25·I (U² = U), so [CLS] puts 0.75 / 6 = 0.125 on every patch.
    uniform = torch.full((2, 1, 1, 6, 6), 1 / 6)
    rollout_grid = cls_attention_map(uniform, num_prefix_tokens=2)
    assert rollout_grid.shape == (1, 2, 2) and torch.allclose(rollout_grid, torch.full((1, 2, 2), 0.125))
    with pytest.raises(ValueError, match="square grid"):
        cls_attention_map(uniform, num_prefix_tokens=1)
    with pytest.raises(ValueError, match="rollout"):
        cls_attention_map(uniform, num_prefix_tokens=2, method="mean")
    # Bilinear upsampling of a constant map stays constant; the overlay is a PNG.
    assert torch.allclose(upsample_heatmap(torch.full((2, 2), 0.25), 32, 32), torch.full((32, 32), 0.25))
    path = plot_cls_attention_overlay(torch.rand(3, 32, 32), grid[0], tmp_path / "overlay.png")
    assert path.read_bytes()[:4] == PNG_MAGIC


# --------------------------------------------------------------------------------------------------------- scripts
def run_script(*args, cwd=ROOT):
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, check=True,
                          timeout=120)


def load_script(name):
    """Import a script as a module, to run its main() in this process (a second subprocess would pay the
    seconds-long `import transformer_zoo` again)."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "scripts" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", ["estimate.py", "attention_maps.py"])
def test_script_help(script):
    result = run_script(ROOT / "scripts" / script, "--help")
    assert "usage:" in result.stdout and "--" in result.stdout


def test_estimate_script_end_to_end(tmp_path, capsys):
    table = run_script(ROOT / "scripts" / "estimate.py", "zoo_decoder:gpt2", "--tokens", "10e9", "--throughput",
                       "1e14", "--precision", "bf16", "--batch-size", "8", "--sequence-length", "1024").stdout
    assert "85,056,000" in table and "training time" in table and "KV cache" in table
    # From a config.json, as JSON, with LoRA.
    config_path = tmp_path / "config.json"
    tz.ZooDecoderConfig.from_preset("tiny", num_key_value_heads=2).to_json_file(config_path)
    load_script("estimate.py").main([str(config_path), "--tokens", "1e6", "--lora-trainable-fraction", "0.5",
                                     "--batch-size", "3", "--sequence-length", "10", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["training_flops"] == 6 * result["non_embedding_parameters"] * 1e6
    assert result["kv_cache_bytes"] == 2 * 2 * 3 * 10 * 2 * 16 * 2
    assert result["memory"]["trainable_parameters"] == round(result["parameters"] * 0.5)


def test_attention_maps_script_end_to_end(tmp_path):
    # A saved folder (its own weights), explicit ids, only layer 1 drawn.
    folder = tmp_path / "model"
    tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("tiny")).save_pretrained(folder)
    out = tmp_path / "maps"
    run_script(ROOT / "scripts" / "attention_maps.py", folder, "--token-ids", "5,6,7,8", "--layers", "1",
               "--output-dir", out)
    assert sorted(p.name for p in out.glob("*.png")) == [f"self_layer1_head{h}.png" for h in range(4)]
    csv_lines = (out / "head_statistics.csv").read_text().splitlines()
    assert csv_lines[0] == "stack,layer,head,entropy,mean_distance,max_similarity_to_other_head"
    assert len(csv_lines) == 1 + 2 * 4  # statistics for every layer and head
    assert (out / "head_statistics.md").read_text().startswith("| stack |")
    # A fine-tuned classifier folder: loaded with its own class, so no weight is reported unexpected or missing.
    classifier = tmp_path / "classifier"
    tz.ZooEncoderForSequenceClassification(tz.ZooEncoderConfig.from_preset("tiny", num_labels=3)).save_pretrained(
        classifier)
    result = run_script(ROOT / "scripts" / "attention_maps.py", classifier, "--token-ids", "5,6,7", "--layers", "0",
                        "--output-dir", tmp_path / "classifier-maps")
    assert "UNEXPECTED" not in result.stdout + result.stderr and "MISSING" not in result.stdout + result.stderr
    assert len(list((tmp_path / "classifier-maps").glob("*.png"))) == 4
    # A seq2seq preset with random weights: three stacks.
    out = tmp_path / "seq2seq"
    load_script("attention_maps.py").main(["zoo_seq2seq:tiny", "--layers", "0", "--output-dir", str(out)])
    assert len(list(out.glob("cross_layer0_head*.png"))) == 4
    assert len(list(out.glob("*.png"))) == 3 * 4  # encoder self, decoder self, cross; layer 0 only
    assert len((out / "head_statistics.csv").read_text().splitlines()) == 1 + 3 * 2 * 4


def test_scripts_refuse_what_would_print_nothing_or_nonsense(tmp_path, capsys):
    """A batch of 0 or a negative length gave KV-cache sizes of 0 or below; --layers past the model drew no map."""
    estimate = load_script("estimate.py")
    for flag, value in (("--batch-size", "0"), ("--sequence-length", "-5"), ("--tokens", "nan")):
        with pytest.raises(SystemExit) as stop:
            estimate.main(["zoo_decoder:tiny", flag, value])
        assert stop.value.code == 2 and f"argument {flag}: must be > 0, got '{value}'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"--layers 1,7: the model has layers 0..1, not 7"):
        load_script("attention_maps.py").main(["zoo_encoder:tiny", "--token-ids", "5,6", "--layers", "1,7",
                                               "--output-dir", str(tmp_path / "maps")])
    # A folder without a tokenizer is named in one line, with what to pass instead.
    folder = tmp_path / "model"
    tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("tiny")).save_pretrained(folder)
    with pytest.raises(SystemExit, match=r"^the model folder '.*' has no tokenizer that loads \(.*\); pass "
                                         r"--tokenizer\.$"):
        load_script("attention_maps.py").main([str(folder), "--text", "hi", "--output-dir", str(tmp_path / "m")])


def test_attention_maps_script_overlays_vit_cls_attention(tmp_path):
    from PIL import Image

    image = tmp_path / "stripes.png"
    Image.fromarray((torch.arange(40 * 40).reshape(40, 40) % 40 < 20).to(torch.uint8).numpy() * 255).save(image)
    out = tmp_path / "vit"
    load_script("attention_maps.py").main(["zoo_vit:tiny", "--image", str(image), "--layers", "1",
                                           "--cls-method", "last", "--output-dir", str(out)])
    assert (out / "vit_cls_attention.png").read_bytes()[:4] == PNG_MAGIC
    assert len(list(out.glob("self_layer1_head*.png"))) == 4
