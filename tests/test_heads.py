"""Attention-head masking, importance and physical pruning (transformer_zoo.analysis.heads) on every family, checked
against numbers: an all-ones mask changes nothing, a fully masked layer equals a block whose attention adds only its
output bias, pruned == masked with exactly the expected parameter count, importance matches finite differences, and
save/reload (also through trust_remote_code in a fresh process) is bit-identical."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import transformer_zoo as tz
from integration_helpers import build_tokenizer, run_fresh_python
from transformer_zoo.analysis.heads import (
    attention_modules,
    evaluate,
    gradient_importance,
    head_counts,
    iterative_pruning,
    loss_change_importance,
    masked_heads,
    masks_without,
    ones_masks,
    plot_pruning_curve,
    prune_heads,
)

ROOT = Path(__file__).resolve().parents[1]
# Pruned against masked models, compared in float64 (see test_pruned_model_equals_masked_model_with_fewer_parameters).
PRUNED_ATOL = 1e-12
HEAD_MODELS = {
    "decoder": tz.ZooDecoderForCausalLM,
    "encoder": tz.ZooEncoderForMaskedLM,
    "seq2seq": tz.ZooSeq2SeqForConditionalGeneration,
    "vit": tz.ZooViTForImageClassification,
}


def batch_for(family, seed=0, batch=3, length=7):
    generator = torch.Generator().manual_seed(seed)
    if family == "vit":
        return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=generator),
                "labels": torch.randint(0, 2, (batch,), generator=generator)}
    ids = torch.randint(5, 1000, (batch, length), generator=generator)
    if family == "seq2seq":
        return {"input_ids": ids, "labels": torch.randint(5, 1000, (batch, 5), generator=generator)}
    return {"input_ids": ids, "labels": ids.clone()}


def tiny_model(make_config, make_model, family, **overrides):
    return make_model(HEAD_MODELS[family], make_config(family, **overrides))


def logits(model, batch, masks=None):
    with torch.no_grad(), masked_heads(model, masks or {}):
        return model(**batch).logits


# ----------------------------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("family", list(HEAD_MODELS))
def test_all_ones_mask_is_identity_and_hooks_are_removed(family, make_config, make_model):
    model = tiny_model(make_config, make_model, family)
    batch = batch_for(family)
    reference = logits(model, batch)
    if family == "vit":
        # The masks are forward pre-hooks, and a hook in the last layer makes a [CLS]-pooled classifier compute
        # every row there (run_stack), which rounds differently from its leading-rows path: compare like with like.
        handle = model.vit.layers[-1].register_forward_hook(lambda *args: None)
        every_row = logits(model, batch)
        handle.remove()
        torch.testing.assert_close(every_row, reference, atol=2e-5, rtol=1e-4)
        reference = every_row
    assert torch.equal(logits(model, batch, ones_masks(model)), reference)
    masked = logits(model, batch, masks_without(model, {key: [0] for key in head_counts(model)}))
    assert (masked - reference).abs().max() > 1e-3  # masking does something...
    # ...and leaves no hook behind (for the ViT: its leading-rows path, to rounding, is back).
    if family == "vit":
        torch.testing.assert_close(logits(model, batch), reference, atol=2e-5, rtol=1e-4)
        assert not any(module._forward_pre_hooks for module in model.modules())
    else:
        assert torch.equal(logits(model, batch), reference)
    if family == "seq2seq":
        assert list(head_counts(model)) == ["encoder.0", "encoder.1", "decoder.0", "cross.0", "decoder.1", "cross.1"]


@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("family,key,attribute", [("decoder", 1, "self_attn"), ("seq2seq", "cross.0", "cross_attn")])
def test_masking_every_head_equals_a_block_whose_attention_adds_only_its_bias(
        family, key, attribute, attention_bias, make_config, make_model):
    model = tiny_model(make_config, make_model, family, attention_bias=attention_bias)
    batch = batch_for(family)
    module = attention_modules(model)[key]
    masked = logits(model, batch, {key: torch.zeros(module.num_heads)})

    # Reference: the same model with that attention's output replaced by o_proj's bias (zero without biases).
    def replace_output(_, __, output):
        bias = module.o_proj.bias if module.o_proj.bias is not None else torch.zeros(module.o_proj.out_features)
        return (bias.expand_as(output[0]).clone(), output[1])

    handle = module.register_forward_hook(replace_output)
    try:
        expected = logits(model, batch)
    finally:
        handle.remove()
    layers = model.model.decoder.layers if family == "seq2seq" else model.model.layers
    assert getattr(layers[int(str(key)[-1])], attribute) is module
    torch.testing.assert_close(masked, expected, rtol=0, atol=1e-6)
    assert (masked - logits(model, batch)).abs().max() > 1e-3


def test_mask_errors_name_the_problem(make_config, make_model):
    model = tiny_model(make_config, make_model, "decoder")
    with pytest.raises(ValueError, match="Unknown attention 7"):
        with masked_heads(model, {7: torch.ones(4)}):
            pass
    with pytest.raises(ValueError, match=r"one value per head: \(4,\)"):
        with masked_heads(model, {0: torch.ones(3)}):
            pass


# ------------------------------------------------------------------------------------------------------ importance
def test_gradient_importance_matches_finite_differences_and_is_normalised(make_config, make_model):
    model = tiny_model(make_config, make_model, "decoder")
    batches = [batch_for("decoder", seed=s) for s in range(2)]
    raw = gradient_importance(model, batches, normalise=False)
    eps = 1e-3
    for key, head in [(0, 1), (1, 3)]:
        expected = 0.0
        for batch in batches:
            plus, minus = ones_masks(model), ones_masks(model)
            plus[key][head], minus[key][head] = 1 + eps, 1 - eps
            with torch.no_grad(), masked_heads(model, plus):
                loss_plus = model(**batch).loss.double()
            with torch.no_grad(), masked_heads(model, minus):
                loss_minus = model(**batch).loss.double()
            expected += abs(float(loss_plus - loss_minus) / (2 * eps))  # |dL/dxi| per batch, summed
        assert raw[key][head].item() == pytest.approx(expected, rel=2e-2, abs=1e-4)
    normalised = gradient_importance(model, batches)
    for key in raw:
        assert normalised[key].norm().item() == pytest.approx(1.0, abs=1e-6)
        torch.testing.assert_close(normalised[key], raw[key] / raw[key].norm())
    assert all(p.requires_grad for p in model.parameters()) and not model.training  # state restored


def test_a_dead_head_has_zero_importance_by_both_measures(make_config, make_model):
    model = tiny_model(make_config, make_model, "encoder")
    module = attention_modules(model)[1]
    with torch.no_grad():  # head 2 of layer 1 writes nothing: its o_proj columns are zero
        module.o_proj.weight[:, 2 * module.head_dim:3 * module.head_dim] = 0.0
    batches = [batch_for("encoder")]
    gradient = gradient_importance(model, batches, normalise=False)
    loss_change = loss_change_importance(model, batches)
    assert gradient[1][2].item() == 0.0 and loss_change[1][2].item() == 0.0
    assert (gradient[1][[0, 1, 3]] > 0).all() and (loss_change[1][[0, 1, 3]] != 0).all()
    # Loss change by hand for another head: loss with head (0, 3) masked minus the plain loss.
    baseline = evaluate(model, batches)["loss"]
    masked = evaluate(model, batches, masks_without(model, {0: [3]}))["loss"]
    assert loss_change[0][3].item() == pytest.approx(masked - baseline, abs=1e-6)
    # Already-masked heads are not scored again.
    assert torch.isnan(loss_change_importance(model, batches, masks_without(model, {0: [1]}))[0][1])


# -------------------------------------------------------------------------------------------------------- pruning
def removed_parameters(config, query_heads: int, key_value_heads: int) -> int:
    """Parameters that go with pruned heads: q and o rows/columns per query head, k and v rows per key/value head
    (each projection hidden x head_dim, plus head_dim biases for q, k and v; o keeps its bias)."""
    d, h, bias = config.attention_head_dim, config.hidden_size, int(config.attention_bias)
    return query_heads * (2 * h * d + bias * d) + key_value_heads * 2 * (h * d + bias * d)


@pytest.mark.parametrize("family", list(HEAD_MODELS))
def test_pruned_model_equals_masked_model_with_fewer_parameters(family, make_config, make_model):
    # float64: the pruned model multiplies smaller matrices than the masked one, so float32 sums differ in order and
    # by ~1e-6 depending on the machine and thread count; in float64 a mapping error still shows as > 1e-3 and
    # rounding stays below 1e-12.
    model = tiny_model(make_config, make_model, family).double()
    batch = batch_for(family)
    heads = {key: [1, 3] if i % 2 == 0 else [0] for i, key in enumerate(head_counts(model))}
    masked = logits(model, batch, masks_without(model, heads))
    before = model.num_parameters()
    assert prune_heads(model, heads) == heads
    removed_heads = sum(len(v) for v in heads.values())
    assert before - model.num_parameters() == removed_parameters(model.config, removed_heads, removed_heads)
    torch.testing.assert_close(logits(model, batch), masked, rtol=0, atol=PRUNED_ATOL)
    # Prune again: the second call names original indices, and the model equals the one masked at both.
    more = {key: [2] for key in heads}
    masks = ones_masks(model)
    for key in more:  # original head 2 sits at position kept_heads.index(2) now
        masks[key][attention_modules(model)[key].kept_heads.index(2)] = 0.0
    masked_again = logits(model, batch, masks)
    prune_heads(model, more)
    torch.testing.assert_close(logits(model, batch), masked_again, rtol=0, atol=PRUNED_ATOL)
    assert model.config.pruned_heads == {key: sorted(heads[key] + [2]) for key in heads}


def test_grouped_query_pruning_removes_whole_groups_or_equal_shares(make_config, make_model):
    # tiny-llama: 4 query heads in 2 key/value groups of 2 (heads 0,1 -> kv 0; heads 2,3 -> kv 1), no biases.
    model = tiny_model(make_config, make_model, "decoder", preset="tiny-llama").double()  # float64: see above
    batch = batch_for("decoder")
    heads = {0: [0, 1], 1: [1, 3]}  # layer 0: the whole first group; layer 1: one head from each group
    masked = logits(model, batch, masks_without(model, heads))
    before = model.num_parameters()
    prune_heads(model, heads)
    config = model.config
    assert before - model.num_parameters() == removed_parameters(config, 2, 1) + removed_parameters(config, 2, 0)
    modules = attention_modules(model)
    assert (modules[0].num_heads, modules[0].num_key_value_heads, modules[0].num_key_value_groups) == (2, 1, 2)
    assert (modules[1].num_heads, modules[1].num_key_value_heads, modules[1].num_key_value_groups) == (2, 2, 1)
    torch.testing.assert_close(logits(model, batch), masked, rtol=0, atol=PRUNED_ATOL)
    with pytest.raises(ValueError, match="unequal size"):
        prune_heads(tiny_model(make_config, make_model, "decoder", preset="tiny-llama"), {0: [0]})
    # MQA: one key/value head shared by all, any query heads but the last may go and the k/v head stays.
    mqa = tiny_model(make_config, make_model, "decoder", preset="tiny-llama", num_key_value_heads=1).double()
    masked = logits(mqa, batch, masks_without(mqa, {1: [0, 2, 3]}))
    before = mqa.num_parameters()
    prune_heads(mqa, {1: [0, 2, 3]})
    assert before - mqa.num_parameters() == removed_parameters(mqa.config, 3, 0)
    torch.testing.assert_close(logits(mqa, batch), masked, rtol=0, atol=PRUNED_ATOL)


def test_pruning_refusals_are_clear(make_config, make_model):
    model = tiny_model(make_config, make_model, "decoder")
    prune_heads(model, {0: [1]})
    with pytest.raises(ValueError, match=r"Heads \[1\] of attention 0 are pruned already"):
        prune_heads(model, {0: [1, 2]})
    with pytest.raises(ValueError, match="removes all 4 heads"):
        prune_heads(model, {0: [0, 2, 3]})
    with pytest.raises(ValueError, match="Unknown attention 'encoder.0'"):
        prune_heads(model, {"encoder.0": [0]})
    assert model.config.pruned_heads == {0: [1]}  # a refused request changes nothing
    alibi = tiny_model(make_config, make_model, "decoder", position_embedding_type="alibi")
    with pytest.raises(ValueError, match="score bias"):
        prune_heads(alibi, {0: [0]})
    windowed = tiny_model(make_config, make_model, "decoder", attention_variant="sliding_window")
    with pytest.raises(ValueError, match="physical pruning supports exact attention only"):
        prune_heads(windowed, {0: [0]})
    relative = tiny_model(make_config, make_model, "seq2seq", position_embedding_type="relative")
    prune_heads(relative, {"cross.1": [0]})  # cross-attention takes no position bias: allowed
    # At construction the validator's error arrives wrapped by huggingface_hub (not a ValueError subclass).
    with pytest.raises(StrictDataclassError, match="unknown attention 0"):
        tz.ZooSeq2SeqConfig.from_preset("tiny", pruned_heads={0: [1]})


def test_pruned_heads_survive_json_and_save_reload_bit_identical(make_config, make_model, tmp_path):
    config = make_config("decoder", pruned_heads={"1": [0, 2], 0: [3]})
    assert config.pruned_heads == {0: [3], 1: [0, 2]}  # JSON-style string keys back to ints, sorted
    model = tiny_model(make_config, make_model, "seq2seq")
    prune_heads(model, {"encoder.1": [0, 1], "cross.0": [3]})
    folder = tmp_path / "pruned"
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())["pruned_heads"]
    assert saved == {"encoder.1": [0, 1], "cross.0": [3]}
    # Same kernel as the fixture's model (eager), so the comparison can be bit-exact.
    reloaded = tz.ZooSeq2SeqForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    batch = batch_for("seq2seq")
    assert torch.equal(logits(reloaded, batch), logits(model, batch))
    assert reloaded.num_parameters() == model.num_parameters()


def test_pruned_model_reloads_with_trust_remote_code_in_a_fresh_process(make_config, make_model, tmp_path):
    model = tiny_model(make_config, make_model, "decoder")
    prune_heads(model, {0: [0, 3], 1: [2]})
    folder = tmp_path / "pruned"
    model.save_pretrained(folder)
    batch = batch_for("decoder")
    expected = logits(model, batch)
    torch.save({"input_ids": batch["input_ids"]}, tmp_path / "inputs.pt")
    result = run_fresh_python(r"""
        import transformers
        model = transformers.AutoModelForCausalLM.from_pretrained(
            ARGS["folder"], trust_remote_code=True, attn_implementation="eager").eval()
        inputs = torch.load(ARGS["inputs"], weights_only=True)
        with torch.no_grad():
            logits = model(**inputs).logits
        emit({"logits": logits.tolist(), "pruned_heads": {str(k): v for k, v in model.config.pruned_heads.items()},
              "parameters": model.num_parameters(), "module": type(model).__module__,
              "q_rows": [layer.self_attn.q_proj.out_features for layer in model.model.layers]})
        """, cwd=tmp_path, args={"folder": str(folder), "inputs": str(tmp_path / "inputs.pt")})
    assert result["module"].startswith("transformers_modules")
    assert result["pruned_heads"] == {"0": [0, 3], "1": [2]}
    assert result["q_rows"] == [2 * 16, 3 * 16] and result["parameters"] == model.num_parameters()
    assert torch.equal(torch.tensor(result["logits"]), expected)


# ---------------------------------------------------------------------------------------------- iterative pruning
def test_iterative_pruning_removes_dead_heads_first_and_reaches_the_target(make_config, make_model, tmp_path):
    model = tiny_model(make_config, make_model, "decoder")
    modules = attention_modules(model)
    with torch.no_grad():  # heads (0, 2) and (1, 0) contribute nothing
        modules[0].o_proj.weight[:, 32:48] = 0.0
        modules[1].o_proj.weight[:, 0:16] = 0.0
    batches = [batch_for("decoder", seed=s) for s in range(2)]
    rows = iterative_pruning(model, batches, method="gradient", step_fraction=0.25, progress=False)
    assert [r["heads_removed"] for r in rows] == [0, 2, 4, 6, 8]
    assert rows[1]["pruned_heads"] == {0: [2], 1: [0]}  # the dead heads go first...
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], abs=1e-6)  # ...at no cost
    assert rows[-1]["fraction_removed"] == 1.0
    # With keep_one_head every step stays physically prunable, and pruning reproduces the masked quality.
    rows = iterative_pruning(model, batches, method="loss", step_fraction=0.25, keep_one_head=True, progress=False)
    assert rows[-1]["heads_removed"] == 6 and all(len(v) == 3 for v in rows[-1]["pruned_heads"].values())
    random_rows = iterative_pruning(model, batches, method="random", step_fraction=0.5, progress=False, seed=1)
    assert [r["heads_removed"] for r in random_rows] == [0, 4, 8]
    prune_heads(model, rows[2]["pruned_heads"])
    assert evaluate(model, batches)["loss"] == pytest.approx(rows[2]["loss"], abs=1e-5)
    path = plot_pruning_curve(rows + random_rows, tmp_path / "curve.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_evaluate_accuracy_by_hand(make_config, make_model):
    # A causal LM predicts token t+1 at position t: accuracy compares logits[:, :-1] with labels[:, 1:].
    model = tiny_model(make_config, make_model, "decoder")
    batch = batch_for("decoder")
    with torch.no_grad():
        output = model(**batch)
    expected = (output.logits[:, :-1].argmax(-1) == batch["input_ids"][:, 1:]).float().mean().item()
    quality = evaluate(model, [batch])
    assert quality["accuracy"] == pytest.approx(expected)
    assert quality["loss"] == pytest.approx(output.loss.item())


# ---------------------------------------------------------------------------------------------------------- script
def load_script(name):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "scripts" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prune_heads_script_end_to_end(make_config, make_model, tmp_path, capsys):
    script = load_script("prune_heads.py")
    with pytest.raises(SystemExit) as help_exit:
        script.main(["--help"])
    assert help_exit.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--dataset", "--methods", "--step-fraction", "--save-pruned", "--corpus-seed", "--keep-one-head"):
        assert flag in help_text
    folder = tmp_path / "model"
    tiny_model(make_config, make_model, "decoder").save_pretrained(folder)
    build_tokenizer(with_template=False).save_pretrained(folder)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "park"]
    lines = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(4 + i % 5)) + f" w{i}" for i in range(60)]
    (tmp_path / "data.txt").write_text("\n".join(lines))
    out, pruned = tmp_path / "out", tmp_path / "pruned"
    script.main([str(folder), "--dataset", str(tmp_path / "data.txt"), "--corpus-max-examples", "0",
                 "--importance-examples", "6", "--eval-examples", "6", "--batch-size", "3", "--step-fraction", "0.25",
                 "--methods", "gradient,random", "--save-pruned", str(pruned), "--save-fraction", "0.5",
                 "--output-dir", str(out)])
    report = json.loads((out / "pruning.json").read_text())
    gradient_rows = [r for r in report["rows"] if r["method"] == "gradient"]
    assert [r["heads_removed"] for r in gradient_rows] == [0, 2, 4, 6]  # --save-pruned keeps one head per layer
    saved = report["saved"]
    assert saved["fraction_removed"] == 0.5
    assert saved["parameters_before"] - saved["parameters_after"] == removed_parameters(make_config("decoder"), 4, 4)
    assert saved["reloaded_loss"] == pytest.approx(saved["masked_loss"], abs=1e-5)
    assert (out / "pruning.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "importance.csv").read_text().splitlines()) == 1 + 8
    assert (out / "pruning.md").read_text().startswith("# Head pruning")
    # A --save-fraction below the first step (2 of 8 heads = 25 %) would save an unpruned copy: refused up front,
    # before any importance is computed or anything is written.
    refused_out = tmp_path / "refused"
    with pytest.raises(SystemExit, match="--save-fraction 0.2 is below the first pruning step.*25%"):
        script.main([str(folder), "--dataset", str(tmp_path / "data.txt"), "--corpus-max-examples", "0",
                     "--step-fraction", "0.25", "--save-pruned", str(tmp_path / "never"), "--save-fraction", "0.2",
                     "--output-dir", str(refused_out)])
    assert not refused_out.exists() and not (tmp_path / "never").exists()
