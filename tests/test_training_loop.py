"""The training module: optimiser groups and schedules, crash-safe checkpoints, bit-exact resume (also after a
SIGKILL), several processes under `accelerate launch`, evaluation, early stopping and the per-step work. Its outputs
(metrics log, curves, model card) and command-line parsing are in tests/test_training_reports_and_cli.py.
"""

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from training_helpers import collate, sequences, tiny_decoder, training_config

from transformer_zoo import ZooDecoderConfig, ZooEncoderConfig, ZooEncoderForMaskedLM
from transformer_zoo.training.data.data_order import epoch_order, micro_batch_stream
from transformer_zoo.training.engine import checkpointing
from transformer_zoo.training.engine.checkpointing import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from transformer_zoo.training.engine.devices import create_accelerator
from transformer_zoo.training.engine.evaluation import evaluate, make_loss_fn, shard_range
from transformer_zoo.training.engine.loop import train
from transformer_zoo.training.engine.optim import (
    build_optimizer,
    build_scheduler,
    no_decay_parameter_names,
    parameter_groups,
)
from transformer_zoo.training.reports.records import read_jsonl

TESTS = Path(__file__).parent
SCRIPT = TESTS / "training_script.py"
# Fields of a JSONL record that must match bit for bit between runs (timings are excluded).
TRAJECTORY_FIELDS = ("step", "loss", "lr", "grad_norm", "tokens_seen", "examples_seen", "eval_loss", "perplexity")


def _trajectory(path):
    return [{key: record.get(key) for key in TRAJECTORY_FIELDS} for record in read_jsonl(path)]


def _subprocess_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS.parent), env.get("PYTHONPATH")]))
    return env


# ================================================================================================ optimiser
def test_no_weight_decay_on_biases_and_norms():
    model = ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny"))
    excluded = no_decay_parameter_names(model)
    names = dict(model.named_parameters())
    assert all(name.endswith("bias") or "norm" in name for name in excluded)
    assert all(name in excluded for name in names if name.endswith(".bias"))
    assert all(name in excluded for name in names if "norm" in name.split(".")[-2])
    assert "model.embed_tokens.weight" not in excluded
    assert not any(name in excluded for name in names if name.endswith(("q_proj.weight", "up_proj.weight")))
    groups = parameter_groups(model, 0.1)
    assert [group["weight_decay"] for group in groups] == [0.1, 0.0]
    assert sum(len(group["params"]) for group in groups) == len(names)


def test_frozen_parameters_stay_out_of_the_optimizer():
    model = tiny_decoder()
    for parameter in model.model.parameters():
        parameter.requires_grad_(False)
    model.lm_head.weight.requires_grad_(False)  # tied to the embedding anyway
    with pytest.raises(ValueError, match="no trainable parameters"):
        parameter_groups(model, 0.01)
    model.model.norm.weight.requires_grad_(True)
    optimizer = build_optimizer(model, learning_rate=1e-3)
    assert [p for group in optimizer.param_groups for p in group["params"]] == [model.model.norm.weight]


def test_the_fused_adamw_makes_the_default_update():
    # build_optimizer picks PyTorch's fused kernel on CPU; ten steps with both weight-decay groups must match the
    # default (per-tensor) AdamW to float rounding, parameters and optimiser state alike. (A model with a parameter
    # whose exact gradient is zero, such as an attention key bias, would compare Adam's normalised rounding noise.)
    torch.manual_seed(0)

    def network():  # float64: both implementations' rounding is far below the tolerance on any CPU
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                   torch.nn.Linear(16, 4)).double()

    fused_model, plain_model = network(), network()
    plain_model.load_state_dict(fused_model.state_dict())
    initial = {name: value.clone() for name, value in fused_model.state_dict().items()}
    fused = build_optimizer(fused_model, learning_rate=1e-2, weight_decay=0.1)
    assert all(group["fused"] for group in fused.param_groups) and len(fused.param_groups) == 2
    plain = torch.optim.AdamW(parameter_groups(plain_model, 0.1), lr=1e-2, weight_decay=0.1)
    assert not any(group["fused"] for group in plain.param_groups)
    inputs, targets = torch.randn(32, 8, dtype=torch.float64), torch.randn(32, 4, dtype=torch.float64)
    for _ in range(10):
        for model, optimizer in ((fused_model, fused), (plain_model, plain)):
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            optimizer.step()
            optimizer.zero_grad()
    for (name, a), b in zip(fused_model.named_parameters(), plain_model.parameters()):
        assert (a - initial[name]).abs().max() > 1e-3, name  # trained, not compared at the start
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
    state = fused.state[next(fused_model.parameters())]["exp_avg_sq"]
    torch.testing.assert_close(state, plain.state[next(plain_model.parameters())]["exp_avg_sq"], rtol=1e-10, atol=1e-15)
    # Where the kernel does not apply, the default implementation is kept.
    from transformer_zoo.training.engine.optim import fused_adamw_applies

    assert not fused_adamw_applies([torch.nn.Parameter(torch.zeros(2, dtype=torch.float64).to_sparse())])
    assert not fused_adamw_applies([])


@pytest.mark.parametrize("name", ["linear", "cosine", "inverse_sqrt", "constant"])
def test_schedules_warm_up_then_decay(name):
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(optimizer, name, warmup_steps=10, total_steps=100)
    rates = []
    for _ in range(100):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] == 0.0 and rates[5] == pytest.approx(0.5) and rates[10] == pytest.approx(1.0)
    expected_at_40 = {"linear": 60 / 90, "cosine": 0.5 * (1 + math.cos(math.pi * 30 / 90)),
                      "inverse_sqrt": math.sqrt(10 / 40), "constant": 1.0}[name]
    assert rates[40] == pytest.approx(expected_at_40)
    with pytest.raises(ValueError, match="Unknown learning-rate schedule"):
        build_scheduler(optimizer, "triangle", warmup_steps=1, total_steps=10)


# ================================================================================================ data order
def test_micro_batches_are_deterministic_and_resumable():
    stream = micro_batch_stream(10, 3, seed=1, shuffle=True)
    first = [next(stream) for _ in range(7)]
    assert [(epoch, position) for epoch, position, _ in first] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2),
                                                                    (2, 0)]
    assert first[0][2] + first[1][2] + first[2][2] == epoch_order(10, 1, 0)[:9]
    resumed = micro_batch_stream(10, 3, seed=1, shuffle=True, start_epoch=1, start_micro_batch=1)
    assert [next(resumed) for _ in range(3)] == first[4:7]
    assert epoch_order(10, 1, 0) != epoch_order(10, 1, 1)
    assert sorted(i for rank in range(3) for i in shard_range(10, 3, rank)) == list(range(10))


def test_token_count_micro_batches_keep_their_budget_and_resume(tmp_path):
    """max_tokens_per_batch: each micro-batch's padded size stays within the budget, the plan is a function of
    (seed, epoch) so a resumed run continues bit for bit, and resuming with another budget is refused."""
    import datasets

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, 20, (40,), generator=generator).tolist()
    data = datasets.Dataset.from_dict({"input_ids": [[3 + (i + j) % 900 for j in range(n)]
                                                     for i, n in enumerate(lengths)]})
    data = data.map(lambda row: {"labels": row["input_ids"]})
    shapes = []

    def collate(examples):
        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.zeros((len(examples), width), dtype=torch.long)
        labels = torch.full((len(examples), width), -100, dtype=torch.long)
        for row, e in enumerate(examples):
            ids[row, :len(e["input_ids"])] = torch.tensor(e["input_ids"])
            labels[row, :len(e["labels"])] = torch.tensor(e["labels"])
        shapes.append(tuple(ids.shape))
        return {"input_ids": ids, "labels": labels, "attention_mask": (labels != -100).long()}

    config = dict(max_steps=10, max_tokens_per_batch=64, save_steps=5)
    full = train(tiny_decoder(0.1), data, collate, training_config(tmp_path / "full", **config))
    assert shapes and all(rows * width <= 64 for rows, width in shapes)
    assert len({rows for rows, _ in shapes}) > 1  # the number of examples varies with their length
    partial = tmp_path / "partial"
    train(tiny_decoder(0.1), data, collate, training_config(partial, **config))
    resumed = train(tiny_decoder(0.1, seed=99), data, collate, training_config(partial, **config, resume=True))
    assert _trajectory(partial / "metrics.jsonl") == _trajectory(tmp_path / "full" / "metrics.jsonl")
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="token-count batches"):
        train(tiny_decoder(0.1), data, collate, training_config(partial, max_steps=12, max_tokens_per_batch=48,
                                                          save_steps=5, resume=True))
    with pytest.raises(ValueError, match="input_ids column"):
        train(tiny_decoder(0.1), sequences(8), collate, training_config(tmp_path / "x", max_tokens_per_batch=64))
    with pytest.raises(ValueError, match="max_tokens_per_batch must be"):
        training_config(tmp_path, max_tokens_per_batch=0)


# ================================================================================================ checkpoints
def _trained_objects(tmp_path, steps=3):
    accelerator = create_accelerator(training_config(tmp_path))
    model = tiny_decoder(dropout=0.1)
    optimizer = build_optimizer(model, learning_rate=1e-3)
    scheduler = build_scheduler(optimizer, "linear", warmup_steps=1, total_steps=10)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = collate(sequences(4))
    for _ in range(steps):
        model(**batch).loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return accelerator, model, optimizer, scheduler


def test_checkpoint_round_trip_restores_everything(tmp_path):
    accelerator, model, optimizer, scheduler = _trained_objects(tmp_path)
    torch.manual_seed(123)
    path = save_checkpoint(accelerator, tmp_path / "ckpt", 3, model=model, optimizer=optimizer, scheduler=scheduler,
                           trainer_state={"step": 3, "epoch": 0})
    expected_draw = torch.rand(3)
    assert {p.name for p in path.iterdir()} >= {"model.safetensors", "optimizer.safetensors", "optimizer.json",
                                                 "scheduler.json", "rng-rank0.safetensors", "trainer_state.json"}
    _, model2, optimizer2, scheduler2 = _trained_objects(tmp_path, steps=1)
    state = load_checkpoint(accelerator, path, model=model2, optimizer=optimizer2, scheduler=scheduler2)
    assert state["step"] == 3
    assert torch.equal(torch.rand(3), expected_draw)  # RNG restored to the moment of saving
    for (name, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), name
    assert scheduler2.state_dict() == scheduler.state_dict()
    saved, restored = optimizer.state_dict(), optimizer2.state_dict()
    assert saved["param_groups"] == restored["param_groups"]
    for index, values in saved["state"].items():
        for key, value in values.items():
            assert torch.equal(value, restored["state"][index][key])
    assert not any(p.suffix in (".pkl", ".bin", ".pt") for p in path.iterdir())  # no pickles


def test_a_crash_mid_write_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    accelerator, model, optimizer, scheduler = _trained_objects(tmp_path)
    directory = tmp_path / "ckpt"
    kwargs = dict(model=model, optimizer=optimizer, scheduler=scheduler)
    good = save_checkpoint(accelerator, directory, 2, trainer_state={"step": 2}, **kwargs)

    real_writer = checkpointing.state_dict_to_files

    def crash_after_model_write(state, tensors_path, json_path):
        if tensors_path.name == "optimizer.safetensors":
            raise OSError("simulated crash: disk full while writing the optimizer state")
        return real_writer(state, tensors_path, json_path)

    monkeypatch.setattr(checkpointing, "state_dict_to_files", crash_after_model_write)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(accelerator, directory, 4, trainer_state={"step": 4}, **kwargs)
    # The half-written checkpoint exists only under its temporary name; the last good one is what resume finds.
    assert (directory / ".tmp-checkpoint-00000004" / "model.safetensors").exists()
    assert latest_checkpoint(directory) == good
    _, model2, optimizer2, scheduler2 = _trained_objects(tmp_path, steps=1)
    assert load_checkpoint(accelerator, good, model=model2, optimizer=optimizer2, scheduler=scheduler2)["step"] == 2

    # The next save cleans the stale temporary folder; keep_last prunes old checkpoints.
    monkeypatch.setattr(checkpointing, "state_dict_to_files", real_writer)
    for step in (6, 8):
        save_checkpoint(accelerator, directory, step, trainer_state={"step": step}, keep_last=2, **kwargs)
    assert [p.name for p in list_checkpoints(directory)] == ["checkpoint-00000006", "checkpoint-00000008"]
    assert not list(directory.glob(".tmp-*"))


def test_resume_in_process_continues_bit_for_bit(tmp_path):
    data = sequences(32)
    full = train(tiny_decoder(0.1), data, collate, training_config(tmp_path / "full", max_steps=12, save_steps=4))
    # The "interrupted" run: same command, stopped after its checkpoint at step 8 (state of an aborted process).
    partial = tmp_path / "partial"
    train(tiny_decoder(0.1), data, collate, training_config(partial, max_steps=12, save_steps=4))
    for name in ("checkpoint-00000008",):
        assert (partial / "checkpoints" / name).is_dir()
    # Pretend it died at step 10: drop what came after the step-8 checkpoint, except stale log lines.
    resumed = train(tiny_decoder(0.1, seed=99), data, collate,
                    training_config(partial, max_steps=12, save_steps=4, resume=True))
    assert resumed.progress.step == 12
    assert _trajectory(partial / "metrics.jsonl") == _trajectory(tmp_path / "full" / "metrics.jsonl")
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def test_resume_after_sigkill_matches_an_uninterrupted_run_bit_for_bit(tmp_path):
    """Kill a real training process (SIGKILL, no chance to clean up) right after a checkpoint appears, resume it,
    and compare the whole JSONL loss trajectory and the final weights with a run that was never interrupted.
    """
    env = _subprocess_env()
    common = ["--max_steps", "60", "--save_steps", "5", "--length", "64"]
    reference = tmp_path / "reference"
    subprocess.run([sys.executable, str(SCRIPT), str(reference), *common], check=True, env=env, timeout=300)

    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(killed), *common], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if (killed / "checkpoints" / "checkpoint-00000010").is_dir():
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "weights-rank0.txt").exists()
    steps_logged = len(read_jsonl(killed / "metrics.jsonl"))
    assert steps_logged < 60

    subprocess.run([sys.executable, str(SCRIPT), str(killed), *common, "--resume"], check=True, env=env,
                   timeout=300)
    assert _trajectory(killed / "metrics.jsonl") == _trajectory(reference / "metrics.jsonl")
    assert (killed / "weights-rank0.txt").read_text() == (reference / "weights-rank0.txt").read_text()


def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` on CPUs (gloo): both ranks end with identical weights, and
    the loss matches a single process that takes the same global batch (8 = 2 x 4), up to float reduction order.
    """
    env = _subprocess_env()
    common = ["--max_steps", "8", "--dropout", "0", "--length", "32"]
    single, double = tmp_path / "single", tmp_path / "double"
    subprocess.run([sys.executable, str(SCRIPT), str(single), *common, "--per_device_batch_size", "8"], check=True,
                   env=env, timeout=300)
    subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), str(double),
         *common, "--per_device_batch_size", "4"],
        check=True, env=env, timeout=300,
    )
    assert (double / "weights-rank0.txt").read_text() == (double / "weights-rank1.txt").read_text()
    one, two = read_jsonl(single / "metrics.jsonl"), read_jsonl(double / "metrics.jsonl")
    train_one = [r for r in one if "loss" in r and "split" not in r]
    train_two = [r for r in two if "loss" in r and "split" not in r]
    assert len(train_one) == len(train_two) == 8
    for a, b in zip(train_one, train_two):
        assert a["tokens_seen"] == b["tokens_seen"] and a["examples_seen"] == b["examples_seen"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-4)
    assert train_two[-1]["loss"] < train_two[0]["loss"]
    eval_one = [r for r in one if r.get("split") == "validation"][-1]
    eval_two = [r for r in two if r.get("split") == "validation"][-1]
    assert eval_two["eval_loss"] == pytest.approx(eval_one["eval_loss"], rel=1e-3)


# ================================================================================================ loop behaviour
def test_gradient_accumulation_matches_a_larger_batch(tmp_path):
    data = sequences(32)
    big = train(tiny_decoder(), data, collate, training_config(tmp_path / "a", per_device_batch_size=8, max_steps=4))
    small = train(tiny_decoder(), data, collate,
                  training_config(tmp_path / "b", per_device_batch_size=4, gradient_accumulation_steps=2, max_steps=4))
    for a, b in zip(read_jsonl(tmp_path / "a" / "metrics.jsonl"), read_jsonl(tmp_path / "b" / "metrics.jsonl")):
        assert a["examples_seen"] == b["examples_seen"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    for a, b in zip(big.model.parameters(), small.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_step_that_makes_the_weights_non_finite_stops_the_run(tmp_path):
    """A NaN gradient (here injected at the 5th micro-batch) would be applied, and every later step, evaluation and
    checkpoint would be of a NaN model; the run stops at that step, naming the last checkpoint that is intact."""
    from transformer_zoo.training.engine.loop import TrainingDiverged

    calls = []

    def poisoned_loss(model, batch):
        calls.append(1)
        loss = model(**batch).loss
        return loss * float("nan") if len(calls) == 5 else loss

    with pytest.raises(TrainingDiverged, match=r"Training diverged at step 5: the gradient norm is nan \(mean loss "
                       r"nan\) and the update made the weights non-finite, so the run stops; .*checkpoint-00000004 "
                       r"\(the last checkpoint\) holds finite weights\. Lower --learning_rate \(this step used "):
        train(tiny_decoder(), sequences(32), collate, training_config(tmp_path, max_steps=8, save_steps=2),
              loss_fn=poisoned_loss)
    assert [path.name for path in list_checkpoints(tmp_path / "checkpoints")][-1] == "checkpoint-00000004"
    from safetensors.torch import load_file

    # The newest checkpoint's weights are finite.
    for tensor in load_file(next((tmp_path / "checkpoints" / "checkpoint-00000004").rglob("*.safetensors"))).values():
        assert torch.isfinite(tensor).all()
    assert max(record["step"] for record in read_jsonl(tmp_path / "metrics.jsonl")) == 4  # nothing logged after


def test_a_batch_without_labels_does_not_count_as_divergence(tmp_path):
    """The token-mean loss of a batch without a labelled token is NaN (0/0, as PyTorch's mean) with a zero gradient:
    the weights stay finite and training goes on. (The zoo's models refuse such labels unless num_items_in_batch is
    given; a loss function of the caller's may not.)"""
    from transformer_zoo.modeling_zoo_losses import token_cross_entropy

    def loss_fn(model, batch):
        labels = batch["labels"].clone()
        if int(batch["input_ids"][0, 0]) % 2:  # about half the batches have no labelled token
            labels.fill_(-100)
        return token_cross_entropy(model(input_ids=batch["input_ids"]).logits, labels, shift=True)

    result = train(tiny_decoder(), sequences(32), collate, training_config(tmp_path, max_steps=6), loss_fn=loss_fn)
    losses = [record["loss"] for record in read_jsonl(tmp_path / "metrics.jsonl") if "loss" in record]
    assert result.progress.step == 6 and any(math.isnan(loss) for loss in losses)
    assert all(torch.isfinite(parameter).all() for parameter in result.model.parameters())


def test_early_stopping_keeps_and_reloads_the_best_model(tmp_path):
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.9])
    snapshots = {}

    def eval_fn(model):
        step = len(snapshots) + 1
        snapshots[step] = {k: v.clone() for k, v in model.state_dict().items()}
        return {"eval_loss": 1.0, "accuracy": next(scores)}

    config = training_config(tmp_path, max_steps=10, eval_steps=2, early_stopping_metric="accuracy",
                     early_stopping_patience=2)
    result = train(tiny_decoder(), sequences(32), collate, config, eval_fn=eval_fn)
    assert result.progress.stopped_early and result.progress.step == 8
    assert result.progress.best_step == 4 and result.progress.best_metric == 0.7
    assert result.best_metrics["accuracy"] == 0.7
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, snapshots[2][name]), name
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["accuracy"] for r in records if r.get("split") == "validation"] == [0.5, 0.7, 0.6, 0.65]


def test_a_best_final_evaluation_is_kept_in_memory_not_written_and_read_back(tmp_path, monkeypatch):
    import transformer_zoo.training.engine.loop as loop

    scores = iter([0.5, 0.9])  # the last evaluation is the best
    calls = {"save": 0, "load": 0}
    save, load = loop.save_best_model, loop.load_best_model
    monkeypatch.setattr(loop, "save_best_model", lambda *a, **k: (calls.__setitem__("save", calls["save"] + 1), save(*a, **k)))
    monkeypatch.setattr(loop, "load_best_model", lambda *a, **k: (calls.__setitem__("load", calls["load"] + 1), load(*a, **k))[1])
    config = training_config(tmp_path, max_steps=4, eval_steps=2, early_stopping_metric="accuracy")
    result = train(tiny_decoder(), sequences(32), collate, config,
                   eval_fn=lambda model: {"eval_loss": 1.0, "accuracy": next(scores)})
    assert calls == {"save": 1, "load": 0}  # step 2 was saved as the best so far; step 4 is the model in memory
    assert result.best_metrics == {"step": 4, "eval_loss": 1.0, "accuracy": 0.9}
    assert not (tmp_path / loop.BEST_MODEL_DIR).exists()  # the step-2 copy is stale, and gone


def test_label_smoothing_loss():
    model = tiny_decoder().eval()
    batch = collate(sequences(2))
    assert make_loss_fn("causal_lm", 0.0)(model, batch) == model(**batch).loss
    smoothed = make_loss_fn("causal_lm", 0.1)(model, batch)
    logits = model(**batch).logits[:, :-1].reshape(-1, 1000)
    expected = torch.nn.functional.cross_entropy(logits, batch["labels"][:, 1:].reshape(-1), label_smoothing=0.1)
    torch.testing.assert_close(smoothed, expected)
    unsmoothed = make_loss_fn("causal_lm", 1e-12)(model, batch)
    torch.testing.assert_close(unsmoothed, model(**batch).loss)


def test_evaluate_weights_loss_and_gathers_predictions(tmp_path):
    accelerator = create_accelerator(training_config(tmp_path))
    model = tiny_decoder().eval()
    data = sequences(10)

    def predict_step(model, batch):
        return {"first": batch["input_ids"][:, 0].tolist()}

    metrics = evaluate(model, data, collate, accelerator=accelerator, batch_size=4, perplexity=True,
                       predict_step=predict_step, compute_metrics=lambda out: {"count": len(out["first"])})
    with torch.no_grad():
        expected = model(**collate(data)).loss.item()
    assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    assert metrics["count"] == 10


def test_evaluation_runs_each_batch_once_when_the_predict_step_reads_the_outputs():
    """Loss and predictions of a classifier from one forward per batch, with the same numbers as two forwards."""
    from accelerate import Accelerator

    from transformer_zoo import ZooEncoderForSequenceClassification
    from transformer_zoo.training.engine.evaluation import evaluate
    from transformer_zoo.training.engine.tasks import classification_metrics, classification_predict_step

    torch.manual_seed(0)
    model = ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny", num_labels=3)).eval()
    data = [{"input_ids": torch.randint(3, 1000, (8,)), "labels": torch.tensor(i % 3)} for i in range(10)]

    def collate(examples):
        return {"input_ids": torch.stack([e["input_ids"] for e in examples]),
                "labels": torch.stack([e["labels"] for e in examples])}

    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    accelerator = Accelerator(cpu=True)
    shared = evaluate(model, data, collate, accelerator=accelerator, batch_size=4,
                      predict_step=classification_predict_step, compute_metrics=classification_metrics())
    assert len(calls) == 3  # 10 examples in batches of 4: one forward each
    calls.clear()
    separate = evaluate(model, data, collate, accelerator=accelerator, batch_size=4,
                        predict_step=lambda m, b: classification_predict_step(m, b),
                        compute_metrics=classification_metrics())
    assert len(calls) == 6
    assert shared == pytest.approx(separate)


# ================================================================================================ per-step work
def test_the_training_forward_builds_no_cache_and_trains_as_with_one(tmp_path, monkeypatch):
    """A training step reads no key/value cache: the loop passes use_cache=False to a model that takes it and whose
    config turns it on, and the run is the one where the model builds and drops its cache. Compared to float32
    rounding, not to the bit: with a cache the attention reads keys and values copied into the cache's contiguous
    buffer, without one it reads them as strided views, and a CPU's SDPA kernel may sum in another order for another
    layout (here the two agree to the bit)."""
    from transformer_zoo.training.engine.loop import training_forward_inputs

    assert training_forward_inputs(tiny_decoder()) == {"use_cache": False}
    without_cache = tiny_decoder()
    without_cache.config.use_cache = False
    assert training_forward_inputs(without_cache) == {}

    class NoUseCache(torch.nn.Module):  # a forward without the keyword gets nothing it may not take
        config = ZooDecoderConfig.from_preset("tiny")

        def forward(self, input_ids, labels=None):
            return input_ids

    assert training_forward_inputs(NoUseCache()) == {}

    seen = []

    def recording_loss(model, batch):
        seen.append(batch.get("use_cache"))
        return model(**batch).loss

    data = sequences(16)
    cached = train(tiny_decoder(), data, collate, training_config(tmp_path / "a", max_steps=3),
                   loss_fn=lambda model, batch: model(**{**batch, "use_cache": True}).loss)
    plain = train(tiny_decoder(), data, collate, training_config(tmp_path / "b", max_steps=3), loss_fn=recording_loss)
    assert seen == [False, False, False]
    for a, b in zip(_trajectory(tmp_path / "a" / "metrics.jsonl"), _trajectory(tmp_path / "b" / "metrics.jsonl")):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in a if a[k] is not None)
    for a, b in zip(cached.model.state_dict().values(), plain.model.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_examples_are_fetched_in_one_query_in_the_order_asked():
    import datasets

    from transformer_zoo.training.data.data_order import fetch_examples

    rows = [{"input_ids": list(range(i + 1)), "n": i} for i in range(6)]
    table = datasets.Dataset.from_list(rows)
    for indices in ([4, 0, 4, 2], np.array([5, 1]), range(2, 4)):
        assert fetch_examples(table, indices) == [table[int(i)] for i in indices]
        assert fetch_examples(rows, indices) == [rows[int(i)] for i in indices]
