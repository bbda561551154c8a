"""The domain-adaptation recipe's downstream check (transformer_zoo/training/adaptation/downstream.py): precision,
launched runs (two processes, bf16), fine-tunes in parallel processes against one at a time, the label-stratified
subsets, and a cut-off check that resumes to the numbers of an uncut one."""

import json
from pathlib import Path

import pytest
import torch
from adaptation_helpers import (
    save_english_mlm,
    tiny_adaptation_flags,
    write_labelled_urdu,
    write_urdu_text,
)

from transformer_zoo.training.adaptation.recipe import main
from transformer_zoo.training.data.corpora import load_corpus



def test_downstream_precision_resolves_auto_and_refuses_a_contradiction(monkeypatch):
    from types import SimpleNamespace

    from transformer_zoo.training.adaptation import downstream

    plain = SimpleNamespace(mixed_precision="no", device=torch.device("cpu"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert downstream.downstream_precision("auto", plain) == "bf16"
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert downstream.downstream_precision("auto", plain) == "no"  # emulated bf16 would be slower than fp32
    assert downstream.downstream_precision("bf16", plain) == "bf16"  # asked for explicitly
    whole_run = SimpleNamespace(mixed_precision="bf16", device=torch.device("cpu"))
    assert downstream.downstream_precision("auto", whole_run) == "bf16"
    with pytest.raises(ValueError, match="cannot undo --mixed_precision bf16"):
        downstream.downstream_precision("no", whole_run)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with downstream.precision_context("bf16", plain):
        assert (a @ b).dtype == torch.bfloat16
    with downstream.precision_context("no", plain):
        assert (a @ b).dtype == torch.float32
    with downstream.precision_context("bf16", whole_run):  # the run's accelerator applies its own autocast
        assert (a @ b).dtype == torch.float32
    # Training inside one context that spans many steps: every forward sees the updated weights (autocast's weight
    # cache would otherwise keep the first step's bf16 copy for the whole fine-tune).
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    with downstream.precision_context("bf16", plain):
        outputs = []
        for _ in range(3):
            out = layer(a)
            outputs.append(out.detach().float())
            out.square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        # The current weights, in bf16: inputs and weights rounded to 8 significant bits differ from the fp32 product
        # by about 8 terms x |a||w| x 2^-8 (~0.01 here), so 0.05 separates "current weights" from "first step's".
        expected = (a @ layer.weight.detach().T + layer.bias.detach()).to(torch.bfloat16).float()
        assert torch.allclose(layer(a).float(), expected, atol=0.05, rtol=0.02)
    assert not torch.allclose(outputs[0], outputs[-1])


@pytest.mark.parametrize("launch", ["two_processes", "bf16"])
def test_launched_adaptation_with_downstream_check(launch, tmp_path, english_wordpiece):
    """`accelerate launch --multi_gpu --num_processes 2` (gloo on CPUs), or one process under bf16 autocast: the whole
    recipe, downstream check included, ends with one adapted folder whose held-out loss fell."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 160)
    output_dir = tmp_path / "adapted"
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch",
         *(["--multi_gpu", "--num_processes", "2"] if launch == "two_processes" else ["--num_processes", "1", "--cpu"]),
         "--num_machines", "1", "--mixed_precision", "no" if launch == "two_processes" else "bf16", "--dynamo_backend",
         "no", str(root / "recipes" / "domain_adapt.py"), "--mixed_precision", "no" if launch == "two_processes" else
         "bf16",
         "--model", str(model_dir), "--dataset", str(data_file), "--output_dir", str(output_dir),
         "--max_train_paragraphs", "none", "--eval_paragraphs", "16", "--urdu_vocab_size", "200", "--min_frequency",
         "1", "--context_length", "32", "--per_device_batch_size", "4", "--max_steps", "8", "--learning_rate", "3e-3",
         "--eval_steps", "8", "--save_steps", "none", "--head_warmup_steps", "0", "--downstream_seeds", "1",
         "--downstream_train_examples", "32", "--downstream_validation_examples", "8", "--downstream_test_examples",
         "16", "--downstream_epochs", "1", "--downstream_eval_steps", "4", "--downstream_max_length", "32",
         "--downstream_batch_size", "4", "--bpb_sentences", "4", "--curve_sentences", "3", "--english_dataset",
         "none", "--progress_bar", "false", "--report_to", "none"],
        check=True, env=env, timeout=600,
    )
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    assert results["curve"][-1]["bits_per_byte"] < results["curve"][0]["bits_per_byte"]
    assert results["downstream"]["urdu"]["adapted"]["runs"][0]["seed"] == 1
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "README.md").is_file()


def test_downstream_fine_tunes_in_parallel_processes_match_one_at_a_time(tmp_path, english_wordpiece):
    """--downstream_jobs 2 runs the fine-tunes two at a time, one thread each, in spawned processes; each seeds
    itself, so they give exactly what one-thread fine-tunes give one after the other."""
    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 160)
    common = [
        "--model", str(model_dir), "--dataset", str(data_file), "--adapt", "false", "--measure_unadapted", "false",
        "--downstream_models", "unadapted", "--downstream_seeds", "1,2", "--downstream_train_examples", "48",
        "--downstream_validation_examples", "12", "--downstream_test_examples", "24", "--downstream_epochs", "1",
        "--downstream_eval_steps", "3", "--downstream_max_length", "32", "--downstream_batch_size", "8",
        "--bpb_sentences", "8", "--curve_sentences", "6", "--english_dataset", "none", "--progress_bar", "false",
        "--report_to", "none",
    ]
    threads = torch.get_num_threads()
    try:
        parallel = main(common + ["--output_dir", str(tmp_path / "parallel"), "--cpu_threads", "2",
                                  "--downstream_jobs", "2"])["downstream"]["urdu"]
        serial = main(common + ["--output_dir", str(tmp_path / "serial"), "--cpu_threads", "1",
                                "--downstream_jobs", "auto"])["downstream"]["urdu"]
    finally:
        torch.set_num_threads(threads)
    assert parallel["execution"] == {"fine_tunes_at_once": 2, "threads_per_fine_tune": 1}
    assert serial["execution"] == {"fine_tunes_at_once": 1, "threads_per_fine_tune": 1}  # auto: one thread, serial
    keys = ("seed", "steps", "best_step", "accuracy", "macro_f1")
    assert [{k: run[k] for k in keys} for run in parallel["unadapted"]["runs"]] == \
        [{k: run[k] for k in keys} for run in serial["unadapted"]["runs"]]
    assert [run["seed"] for run in parallel["unadapted"]["runs"]] == [1, 2]
    for seed in (1, 2):  # each worker wrote its own run's folder
        assert (tmp_path / "parallel" / "downstream" / "urdu" / "unadapted" / f"seed-{seed}" / "results.json").is_file()


def test_downstream_jobs_flag_refuses_nonsense():
    from transformer_zoo.training.adaptation.arguments import build_parser as adaptation_parser

    with pytest.raises(SystemExit):
        adaptation_parser().parse_args(["--downstream_jobs", "0"])
    assert adaptation_parser().parse_args(["--downstream_jobs", "3"]).downstream_jobs == 3


@pytest.mark.parametrize("count, seed", [(36, 1), (500, 0), (12, 7)])
def test_stratified_subset_is_datasets_own_stratified_split_row_for_row(count, seed):
    """stratified_subset reads the labels in one batch instead of datasets' row-at-a-time read; the rows drawn must be
    train_test_split's, also on a dataset reordered by an indices mapping."""
    import datasets

    from transformer_zoo.training.adaptation.data import stratified_subset

    corpus = load_corpus("hadith-ur", seed=0)
    for dataset in (corpus["validation"], corpus["validation"].shuffle(seed=5).select(range(2000))):
        reference = dataset.train_test_split(test_size=count, stratify_by_column="label", seed=seed)["test"]
        subset = stratified_subset(dataset, count, seed)
        assert subset["text"] == reference["text"] and subset["label"] == reference["label"]
    assert stratified_subset(corpus["validation"], None, seed) is corpus["validation"]
    lonely = datasets.Dataset.from_dict({"text": list("abcde"), "label": [0, 0, 1, 1, 2]},
                                        features=datasets.Features({"text": datasets.Value("string"),
                                                                    "label": datasets.ClassLabel(num_classes=3)}))
    with pytest.raises(ValueError, match="at least 2 rows of every label"):
        stratified_subset(lonely, 3, seed)
    with pytest.raises(ValueError, match="ClassLabel"):
        stratified_subset(lonely.cast_column("label", datasets.Value("int64")), 3, seed)


# ------------------------------------------------------------------------------------------------ resuming a check
def _resumable_check_flags(model_dir, data_file, output_dir) -> list[str]:
    return tiny_adaptation_flags(model_dir, data_file, output_dir, {
        "--max_steps": "6", "--save_steps": "3", "--head_warmup_steps": "0", "--downstream": "true",
        "--downstream_seeds": "1,2", "--downstream_jobs": "1", "--downstream_train_examples": "48",
        "--downstream_validation_examples": "12", "--downstream_test_examples": "24", "--downstream_epochs": "2",
        "--downstream_eval_steps": "2", "--downstream_patience": "10", "--downstream_save_steps": "2",
        "--downstream_max_length": "32", "--downstream_batch_size": "8"})


def test_a_cut_off_downstream_check_resumes_to_the_numbers_of_an_uncut_one(tmp_path, english_wordpiece, monkeypatch):
    """--downstream_save_steps checkpoints every fine-tune; a run cut off in its third fine-tune (as a kill would
    leave it: a checkpoint, a best model, metrics past the checkpoint) and resumed reads the two finished
    fine-tunes back, continues the third from its checkpoint and runs the fourth: the numbers are the uncut run's."""
    from transformer_zoo.training.finetune import recipe as finetuning

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 240)
    uncut = main(_resumable_check_flags(model_dir, data_file, tmp_path / "uncut"))["downstream"]["urdu"]

    class Cut(Exception):
        pass

    real_train, started = finetuning.train, []

    def train_cut_in_the_third(model, train_set, collate, config, eval_fn=None, **kwargs):
        started.append(config.output_dir)
        if len(started) != 3:
            return real_train(model, train_set, collate, config, eval_fn=eval_fn, **kwargs)
        evaluations = []

        def evaluate_until_the_cut(current):
            evaluations.append(1)
            if len(evaluations) == 4:  # step 8: after the step-6 checkpoint, before the step-8 one
                raise Cut
            return eval_fn(current)

        return real_train(model, train_set, collate, config, eval_fn=evaluate_until_the_cut, **kwargs)

    cut_dir = tmp_path / "cut"
    monkeypatch.setattr(finetuning, "train", train_cut_in_the_third)
    with pytest.raises(Cut):
        main(_resumable_check_flags(model_dir, data_file, cut_dir))
    monkeypatch.setattr(finetuning, "train", real_train)
    third = cut_dir / "downstream" / "urdu" / "adapted" / "seed-1"
    assert [path.name for path in (third / "checkpoints").iterdir()] == ["checkpoint-00000006"]
    assert not (third / "results.json").exists()
    finished = {name: (cut_dir / "downstream" / "urdu" / "unadapted" / name / "results.json").stat().st_mtime_ns
                for name in ("seed-1", "seed-2")}
    before_the_cut = [line for line in (third / "metrics.jsonl").read_text().splitlines()
                      if json.loads(line)["step"] <= 6]

    evaluated = {}  # fine-tune folder -> evaluations made in the resumed run

    def train_counting_evaluations(model, train_set, collate, config, eval_fn=None, **kwargs):
        folder = (Path(config.output_dir).parent.name, Path(config.output_dir).name)

        def counted(current):
            evaluated[folder] = evaluated.get(folder, 0) + 1
            return eval_fn(current)

        return real_train(model, train_set, collate, config, eval_fn=counted, **kwargs)

    monkeypatch.setattr(finetuning, "train", train_counting_evaluations)
    resumed = main([*_resumable_check_flags(model_dir, data_file, cut_dir), "--resume"])["downstream"]["urdu"]
    # The third went on from step 6 (evaluations at 8, 10, 12 of 12 steps); the fourth ran whole.
    assert evaluated == {("adapted", "seed-1"): 3, ("adapted", "seed-2"): 6}
    for name, written in finished.items():  # read back, not fine-tuned again
        assert (cut_dir / "downstream" / "urdu" / "unadapted" / name / "results.json").stat().st_mtime_ns == written
    steps_logged = [json.loads(line)["step"] for line in (third / "metrics.jsonl").read_text().splitlines()
                    if '"split"' in line]
    assert steps_logged == sorted(set(steps_logged))  # continued from step 6: no evaluation logged twice
    # The records up to the checkpoint are the cut attempt's own (wall-clock times included): not a fresh start.
    assert (third / "metrics.jsonl").read_text().splitlines()[:len(before_the_cut)] == before_the_cut
    for name in ("unadapted", "adapted"):
        assert resumed[name]["runs"] == [
            {**run, "train_seconds": resumed_run["train_seconds"]}
            for run, resumed_run in zip(uncut[name]["runs"], resumed[name]["runs"])], name
        assert resumed[name]["accuracy"] == uncut[name]["accuracy"]


def test_resuming_a_fine_tune_made_with_other_flags_is_refused(tmp_path):
    from types import SimpleNamespace

    from transformer_zoo.training.adaptation.downstream import finished_fine_tunes

    def job(rate, progress_bar=True):
        return ("adapted", SimpleNamespace(learning_rate=rate, num_epochs=8.0, progress_bar=progress_bar,
                                           save_steps=50, resume=False), 1)

    assert finished_fine_tunes([job(1e-4)], tmp_path, resume=False, write=True) == {}
    recorded = tmp_path / "adapted" / "seed-1" / "fine_tune_args.json"
    assert json.loads(recorded.read_text())["learning_rate"] == 1e-4
    # Not finished: resumed (flags that do not change the numbers may differ).
    assert finished_fine_tunes([job(1e-4, progress_bar=False)], tmp_path, resume=True, write=True) == {}
    (tmp_path / "adapted" / "seed-1" / "results.json").write_text('{"seed": 1}')
    assert finished_fine_tunes([job(1e-4)], tmp_path, resume=True, write=True) == {0: {"seed": 1}}
    with pytest.raises(ValueError, match="learning_rate: 0.0001 then, 0.0002 now"):
        finished_fine_tunes([job(2e-4)], tmp_path, resume=True, write=True)
    assert finished_fine_tunes([job(2e-4)], tmp_path, resume=False, write=True) == {}  # a fresh start overwrites


def test_a_resume_before_the_first_checkpoint_fits_the_new_head_again(tmp_path, english_wordpiece):
    """A checkpoint without an MLM head (a sentence-embedding BERT) gets its head fitted first. A run cut off before
    its first adaptation checkpoint has no fitted head to resume: --resume must fit it again, or the adapted model
    would differ from an uncut run's."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    backbone_dir = tmp_path / "bert-backbone"
    BertModel(BertConfig(vocab_size=len(english_wordpiece), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
              ).save_pretrained(backbone_dir)
    english_wordpiece.save_pretrained(backbone_dir)
    data_file = write_urdu_text(tmp_path / "urdu.txt", 60)
    output_dir = tmp_path / "run"
    common = tiny_adaptation_flags(backbone_dir, data_file, output_dir,
                                   {"--max_steps": "4", "--save_steps": "none", "--head_warmup_steps": "3"})
    uncut = main(common)
    expected = load_file(output_dir / "model.safetensors")
    resumed = main([*common, "--resume"])  # no checkpoint was ever written (--save_steps none)
    actual = load_file(output_dir / "model.safetensors")
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    assert resumed["adapted"]["urdu"]["bits_per_byte"] == uncut["adapted"]["urdu"]["bits_per_byte"]
