"""The training module's outputs and command line: the metrics log, the curves PNG and model card, the TensorBoard
tracker, config files as defaults that flags override, and --help for every flag."""

import json
import math

import numpy as np
import pytest
import torch
from training_helpers import collate, sequences, tiny_decoder, training_config

from transformer_zoo.training.engine.cli import RecipeArgumentParser, add_training_arguments, training_config_from_args
from transformer_zoo.training.engine.loop import train
from transformer_zoo.training.reports.records import (
    MetricsLog,
    count_parameters,
    plot_training_curves,
    read_jsonl,
    render_model_card,
)


# ================================================================================================ reporting
def test_metrics_log_truncates_a_dead_runs_tail(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for step in range(1, 6):
        log.append({"step": step, "loss": 1.0 / step})
    with open(tmp_path / "m.jsonl", "a") as handle:
        handle.write('{"step": 6, "lo')  # a line cut by a crash
    log.truncate_after(3)
    assert [r["step"] for r in read_jsonl(tmp_path / "m.jsonl")] == [1, 2, 3]


def _coloured_pixels(png, rgb, tolerance=40) -> int:
    from PIL import Image

    # (height, width, 3) -> one row per pixel; np.asarray rather than Image.getdata, deprecated in Pillow 12.
    pixels = torch.from_numpy(np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3).astype(np.int64))
    return int(((pixels - torch.tensor(rgb)).abs().max(dim=1).values < tolerance).sum())


def test_curves_of_a_run_that_logged_once_are_drawn(tmp_path):
    """A 10-step run logs its training loss once; a line through one point drew nothing (blank PNG)."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 10, "loss": 2.5, "lr": 0.001}\n')
    png = plot_training_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png")
    assert _coloured_pixels(png, (31, 119, 180)) > 10  # matplotlib's first colour (training loss)
    assert _coloured_pixels(png, (44, 160, 44)) > 10  # tab:green (learning rate)


def test_curves_png_and_model_card(tmp_path):
    result = train(tiny_decoder(), sequences(32), collate,
                   training_config(tmp_path, max_steps=4, eval_steps=2),
                   eval_fn=lambda model: {"eval_loss": 2.0, "perplexity": math.exp(2.0)})
    png = plot_training_curves(tmp_path / "metrics.jsonl", tmp_path / "curves.png", title="tiny")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = count_parameters(result.model)
    assert counts["total"] == sum(p.numel() for p in result.model.parameters())
    card = render_model_card({
        "title": "tiny decoder", "model": result.model, "auto_class": "AutoModelForCausalLM",
        "data": {"name": "synthetic", "licence": "n/a"}, "hyperparameters": {"learning_rate": 1e-3},
        "training": {"steps": 4, "tokens": 1000}, "evaluation": {"validation": {"accuracy": 0.8}},
        "baseline": {"accuracy": 0.25},
    })
    assert card.startswith("---\n") and "\nlibrary_name: transformers\n" in card.split("\n---\n", 1)[0]
    assert "| hidden_size | 64 |" in card and "| num_hidden_layers | 2 |" in card
    assert f"{6.0 * counts['non_embedding'] * 1000:.3e}" in card
    assert "| accuracy | 0.8 | 0.25 |" in card
    assert "trust_remote_code=True" in card


def test_tensorboard_tracker_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    train(tiny_decoder(), sequences(16), collate, training_config(tmp_path, max_steps=2, report_to="auto"))
    assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


# ================================================================================================ CLI
def _parser():
    parser = RecipeArgumentParser(description="test")
    parser.add_argument("--family", choices=["decoder", "encoder"], default="decoder", help="Model family.")
    add_training_arguments(parser, learning_rate=3e-4)
    return parser


def test_config_file_values_are_defaults_that_flags_override(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 1e-4\nmax-steps: 7\nfamily: encoder\nmax_grad_norm: none\n")
    args = _parser().parse_args(["--config", str(config), "--max_steps", "9"])
    assert args.learning_rate == 1e-4 and isinstance(args.learning_rate, float)
    assert args.max_steps == 9 and args.family == "encoder" and args.max_grad_norm is None
    assert _parser().parse_args([]).learning_rate == 3e-4
    json_config = tmp_path / "run.json"
    json_config.write_text(json.dumps({"lr_scheduler": "cosine", "seed": 3}))
    training = training_config_from_args(_parser().parse_args(["--config", str(json_config)]))
    assert training.lr_scheduler == "cosine" and training.seed == 3


@pytest.mark.parametrize("content, message", [
    ("learning_rat: 0.1\n", "did you mean 'learning_rate'"),
    ("lr_scheduler: triangle\n", "invalid choice"),
    ("seed: many\n", "seed"),
    ("- a list\n", "expected a mapping"),
])
def test_bad_config_files_fail_early(tmp_path, capsys, content, message):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--config", str(config)])
    assert message in capsys.readouterr().err


def test_every_flag_has_help():
    assert _parser().undocumented_flags() == []
