"""Publishing end to end, offline: a Hub-API-compatible server on 127.0.0.1 (tests/hub_server.py) and the real
huggingface_hub client. A tiny decoder trained by the pretraining recipe is published with scripts/publish.py, loaded
back with `from_pretrained("alice/name")` in fresh processes (with the plugin, and without it through
trust_remote_code=True) and compared bit for bit with the local model; the card is read back and checked; LoRA
adapters publish as a PEFT adapter of the published base; the recipe's --push_to_hub publishes at the end of a run;
missing, wrong and foreign tokens, an existing repo and an unreachable Hub are refused with clear messages.

No test reaches the real Hub: the autouse fixture points huggingface_hub's endpoint at a closed local port, and
every subprocess gets HF_ENDPOINT of the local server (huggingface_hub reads it at import time).
"""

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, ModelCard, constants, hf_hub_download
import transformer_zoo as tz
from safetensors.torch import load_file

from hub_server import HubServer
from transformer_zoo.publishing import PublishError, plan_upload, publish
from transformer_zoo.training.pretrain import recipe as pretraining


ROOT = Path(__file__).resolve().parents[1]
ALICE, BOB = "hf_" + "A1" * 17, "hf_" + "B2" * 17
CLOSED_PORT = "http://127.0.0.1:9"  # discard port: nothing listens, connections are refused at once
INPUT_IDS = [[1, 5, 9, 13, 17, 21, 4, 8]]
TRAIN = ["--max_steps", "3", "--eval_steps", "3", "--save_steps", "3", "--per_device_batch_size", "4",
         "--progress_bar", "false", "--report_to", "none", "--vocab_size", "300", "--logging_steps", "1",
         "--cpu_threads", "none", "--context_length", "16", "--model_overrides", "", "--sample_tokens", "2",
         "--hub_language", "en"]


@pytest.fixture(autouse=True)
def never_the_real_hub(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", CLOSED_PORT)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        CLOSED_PORT + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="module")
def hub():
    with HubServer({ALICE: "alice", BOB: "bob"}) as server:
        yield server


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny decoder trained for 3 steps by the pretraining recipe (its real output folder)."""
    from accelerate.state import AcceleratorState

    folder = tmp_path_factory.mktemp("run") / "decoder"
    text = folder.parent / "text.txt"
    words = "the king queen lord lady speak love night day sword crown heart".split()
    rng = random.Random(0)
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) for _ in range(200))
                    + "\n")
    AcceleratorState._reset_state(reset_partial_state=True)
    results = pretraining.main([str(a) for a in ["--dataset", text, "--output_dir", folder, *TRAIN]])
    AcceleratorState._reset_state(reset_partial_state=True)
    return folder, results


def _env(hub, tmp_path, token=ALICE, plugin=True) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("HUGGINGFACE_CO_STAGING", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf_home"), PYTHONPATH=str(ROOT) if plugin else "",
               HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
    if token:
        env["HF_TOKEN"] = token
    return env


def _run(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True, timeout=300)


LOAD_AND_RUN = """
import sys, torch
torch.set_num_threads(1)
plugin = sys.argv[1] == "plugin"
if plugin:
    import transformer_zoo  # registers the zoo classes with the Auto classes
else:
    sys.modules["transformer_zoo"] = None  # `import transformer_zoo` fails: only the repo's code can be used
from transformers import AutoModelForCausalLM
from safetensors.torch import save_file
kwargs = {} if plugin else {"trust_remote_code": True}
model = AutoModelForCausalLM.from_pretrained(sys.argv[2], **kwargs).eval()
with torch.no_grad():
    logits = model(torch.tensor(%s)).logits
save_file({"logits": logits.contiguous()}, sys.argv[3])
print(type(model).__module__)
""" % INPUT_IDS


def _local_logits(folder):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(torch.tensor(INPUT_IDS)).logits


# ================================================================================================ end to end
def test_publish_download_and_compare_bit_for_bit(hub, trained, tmp_path, monkeypatch, capsys):
    from transformer_zoo.publishing import main

    folder, results = trained
    # scripts/publish.py's main() in this process (its load check still runs in a fresh one); the token comes from
    # HF_TOKEN and the endpoint from huggingface_hub's default, as on a user's machine.
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", ALICE)
    main([str(folder), "alice/tiny-gpt"])
    monkeypatch.setattr(constants, "ENDPOINT", CLOSED_PORT)  # back to "never the real Hub" for the calls below
    printed = capsys.readouterr()
    assert "Published" in printed.out and "alice/tiny-gpt" in printed.out
    assert ALICE not in printed.out + printed.err  # the token is never printed

    uploaded = set(hub.files("alice/tiny-gpt"))
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "README.md", "modeling_zoo_decoder.py", "configuration_zoo_decoder.py", "metrics.jsonl",
            "training_curves.png"} <= uploaded
    assert not any(name.startswith("checkpoints/") or name.endswith((".bin", ".pt", ".pkl")) for name in uploaded)
    # The run's records go up with local paths rewritten, as in the card.
    published_args = json.loads(hub.files("alice/tiny-gpt")["run_args.json"])
    assert published_args["dataset"] == "`text.txt` (a local path)" and published_args["max_steps"] == 3
    assert str(folder.parent) not in hub.files("alice/tiny-gpt")["results.json"].decode()

    reference = _local_logits(folder)
    for mode in ("plugin", "remote-code"):
        out = tmp_path / f"{mode}.safetensors"
        run_env = _env(hub, tmp_path, plugin=mode == "plugin")
        run_env["HF_HOME"] = str(tmp_path / f"hf_home_{mode}")  # a fresh cache: the files come from the server
        loaded = _run(["-c", LOAD_AND_RUN, mode, "alice/tiny-gpt", str(out)], run_env, tmp_path)
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        module = loaded.stdout.strip().splitlines()[-1]
        assert module.startswith("transformer_zoo." if mode == "plugin" else "transformers_modules."), module
        assert torch.equal(load_file(out)["logits"], reference), mode

    # The card as the Hub serves it: metadata and the measured results.
    api = HfApi(endpoint=hub.url, token=ALICE)
    info = api.model_info("alice/tiny-gpt")
    assert info.card_data["library_name"] == "transformers" and info.card_data["license"] == "apache-2.0"
    card = ModelCard.load(hf_hub_download("alice/tiny-gpt", "README.md", endpoint=hub.url, token=ALICE,
                                          cache_dir=tmp_path / "card"))
    data = card.data
    assert data.language == ["en"] and data.pipeline_tag == "text-generation" and data.base_model is None
    assert {"transformer-zoo", "zoo_decoder"} <= set(data.tags) and data.datasets == ["text.txt"]
    assert "perplexity" in data.metrics
    measured = {(r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results}
    assert measured[("test", "perplexity")] == pytest.approx(results["test"]["perplexity"], rel=1e-6)
    assert measured[("validation", "loss")] == pytest.approx(results["validation"]["eval_loss"], rel=1e-6)
    text = card.text
    assert 'from_pretrained("alice/tiny-gpt", trust_remote_code=True)' in text
    assert "path/to/this/folder" not in text and str(folder.parent) not in str(card)
    # Baseline beside the results: uniform guessing over the vocabulary (perplexity = vocabulary size).
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    assert f"| perplexity | {results['validation']['perplexity']:.4g} | {results['test']['perplexity']:.4g} | " \
           f"{float(vocab):.4g} |" in text


def test_lora_adapter_publishes_as_peft_adapter_of_the_base(hub, trained, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from transformer_zoo.training.reports.records import write_model_card

    folder, _ = trained
    if "alice/tiny-gpt-base" not in hub.state.repos:
        publish(folder, "alice/tiny-gpt-base", token=ALICE, endpoint=hub.url, load_check=False, echo=lambda *_: None)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(folder)
    # init_lora_weights=False: B is random, so the adapters change the outputs and the comparison has power.
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False, task_type="CAUSAL_LM")).eval()
    adapter_dir = tmp_path / "adapter"
    lora.save_pretrained(adapter_dir)
    with torch.no_grad():
        reference = lora(torch.tensor(INPUT_IDS)).logits
        loss = float(lora(torch.tensor(INPUT_IDS), labels=torch.tensor(INPUT_IDS)).loss)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    write_model_card(adapter_dir, {
        "title": "LoRA adapters for tiny-gpt", "model": lora.base_model.model, "adapter": True,
        "auto_class": "AutoModelForCausalLM", "pipeline_tag": "text-generation", "language": ["en"],
        "data": {"name": "text.txt"}, "trainable_parameters": trainable,
        "evaluation": {"test": {"eval_loss": loss, "perplexity": math.exp(loss)}},
    })
    with pytest.raises(PublishError, match="--base_model"):  # the adapter's base has no Hub id yet
        publish(adapter_dir, "alice/tiny-gpt-lora", token=ALICE, endpoint=hub.url, load_check=False)
    # (load_check=False: the fresh-process PEFT load below is the stronger check.)
    publish(adapter_dir, "alice/tiny-gpt-lora", base_model="alice/tiny-gpt-base", token=ALICE, endpoint=hub.url,
            load_check=False, echo=lambda *_: None)
    files = hub.files("alice/tiny-gpt-lora")
    assert set(files) >= {"adapter_config.json", "adapter_model.safetensors", "README.md"}
    assert json.loads(files["adapter_config.json"])["base_model_name_or_path"] == "alice/tiny-gpt-base"
    card = ModelCard(files["README.md"].decode())
    assert card.data.library_name == "peft" and card.data.base_model == "alice/tiny-gpt-base"
    assert f"| parameters trained in this run | {trainable:,} |" in card.text
    assert 'PeftModel.from_pretrained(base, "alice/tiny-gpt-lora")' in card.text

    code = ("import sys, torch; torch.set_num_threads(1); sys.modules['transformer_zoo'] = None\n"
            "from transformers import AutoModelForCausalLM; from peft import PeftModel\n"
            "from safetensors.torch import save_file\n"
            "base = AutoModelForCausalLM.from_pretrained('alice/tiny-gpt-base', trust_remote_code=True)\n"
            "model = PeftModel.from_pretrained(base, 'alice/tiny-gpt-lora').eval()\n"
            f"with torch.no_grad(): logits = model(torch.tensor({INPUT_IDS})).logits\n"
            "save_file({'logits': logits.contiguous()}, sys.argv[1])\n")
    out = tmp_path / "peft.safetensors"
    loaded = _run(["-c", code, str(out)], _env(hub, tmp_path, plugin=False), tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert torch.equal(load_file(out)["logits"], reference)


def test_recipe_push_to_hub_at_the_end_of_a_run(hub, tmp_path, monkeypatch, trained):
    from accelerate.state import AcceleratorState

    import transformer_zoo.publishing as publishing

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # the recipe publishes through huggingface_hub's default
    monkeypatch.setenv("HF_TOKEN", ALICE)
    # The fresh-process load check is exercised by the first test; here it is recorded, not run (saves ~12 s).
    checked = []
    monkeypatch.setattr(publishing, "check_loading", lambda plan: checked.append(plan.paths()) or {})
    folder, _ = trained
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        pretraining.main([str(a) for a in ["--dataset", folder.parent / "text.txt", "--output_dir", tmp_path / "out",
                                           *TRAIN, "--push_to_hub", "alice/recipe-gpt"]])
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    files = hub.files("alice/recipe-gpt")
    assert len(checked) == 1 and sorted(files) == sorted(checked[0] + [".gitattributes"])
    assert files["model.safetensors"] == (tmp_path / "out" / "model.safetensors").read_bytes()
    assert ModelCard(files["README.md"].decode()).data.language == ["en"]


# ================================================================================================ refusals
def test_refused_without_token_with_a_clear_message(hub, trained, monkeypatch, capsys):
    import huggingface_hub

    from transformer_zoo.publishing import main

    folder, _ = trained
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # no HF_TOKEN and no saved login
    with pytest.raises(SystemExit) as exited:
        main([str(folder), "alice/no-token"])
    assert exited.value.code == 1
    message = capsys.readouterr().err
    assert "No Hugging Face token found" in message and "hf auth login" in message
    assert "alice/no-token" not in hub.state.repos


def test_refused_with_a_wrong_token_or_in_another_namespace(hub, trained):
    folder, _ = trained
    wrong = "hf_" + "Z9" * 17
    with pytest.raises(PublishError, match=r"rejected the token \(401") as error:
        publish(folder, "alice/wrong-token", token=wrong, endpoint=hub.url, load_check=False)
    assert wrong not in str(error.value)
    with pytest.raises(PublishError, match="belongs to 'alice', who cannot write to the namespace 'bob'"):
        publish(folder, "bob/not-alices", token=ALICE, endpoint=hub.url, load_check=False)
    assert not {"alice/wrong-token", "bob/not-alices"} & set(hub.state.repos)
    # The server refuses too (not only the client's check): a direct create in bob's namespace is a 403.
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as refused:
        HfApi(endpoint=hub.url, token=ALICE).create_repo("bob/not-alices")
    assert refused.value.response.status_code == 403


def test_existing_repo_and_unreachable_hub(hub, trained):
    folder, _ = trained
    publish(folder, "alice/twice", token=ALICE, endpoint=hub.url, load_check=False, echo=lambda *_: None)
    first = hub.state.repos["alice/twice"].branches["main"]
    with pytest.raises(PublishError, match="already exists.*--update"):
        publish(folder, "alice/twice", token=ALICE, endpoint=hub.url, load_check=False)
    assert hub.state.repos["alice/twice"].branches["main"] == first
    # --update with a changed card adds a commit; --revision puts it on a branch.
    publish(folder, "alice/twice", token=ALICE, endpoint=hub.url, load_check=False, update=True, license="mit",
            revision="v2", echo=lambda *_: None)
    repo = hub.state.repos["alice/twice"]
    assert repo.branches["main"] == first and repo.branches["v2"] != first
    assert ModelCard(repo.commits[repo.branches["v2"]]["README.md"].decode()).data.license == "mit"
    with pytest.raises(PublishError, match="Could not reach the Hub at http://127.0.0.1:9"):
        publish(folder, "alice/offline", token=ALICE, endpoint=CLOSED_PORT, load_check=False)


# ================================================================================================ checks
def test_checks_before_upload(trained, tmp_path, capsys):
    import shutil

    folder, _ = trained
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "notes.txt").write_text("my notes")
    plan = plan_upload(copy, "alice/x")
    assert plan.problems == [] and plan.kind == "model"
    left_out = dict(plan.left_out)
    assert left_out.pop("notes.txt") == "not one of the files a model repo needs"
    assert all(path.startswith("checkpoints/") for path in left_out)
    assert str(folder) in (copy / "run_args.json").read_text()  # the run's record names its folder ...
    assert str(folder.parent) not in plan.read("run_args.json").decode()  # ... the published copy does not
    torch.save({"w": torch.zeros(1)}, copy / "pytorch_model.bin")
    (copy / "tokenizer_config.json").write_text(
        (copy / "tokenizer_config.json").read_text().replace("{", '{"note": "from /home/someone/data/x.txt", ', 1))
    (copy / "generation_config.json").write_text(
        (copy / "generation_config.json").read_text().replace("{", '{"secret": "' + ALICE + '", ', 1))
    card = (copy / "README.md").read_text()
    (copy / "README.md").write_text(card.replace("language:\n- en\n", ""))
    problems = "\n".join(plan_upload(copy, "alice/x", known_tokens=(ALICE,)).problems)
    assert "pytorch_model.bin is a pickle file" in problems
    assert "tokenizer_config.json names local paths (/home/someone/data/x.txt)" in problems
    assert "generation_config.json contains what looks like an access token (hf_A1…)" in problems
    assert ALICE not in problems
    assert "no language for a text model" in problems
    # --dry-run prints the plan and the card, runs the load check, uploads nothing; the problems end it.
    with pytest.raises(PublishError, match="cannot be published yet"):
        publish(copy, "alice/x", dry_run=True, load_check=False)
    shown = capsys.readouterr().out
    assert "Would upload" in shown and "Left out:" in shown and "# ZooDecoderForCausalLM" in shown
    assert "Problems:" in shown and "pytorch_model.bin" in shown


def test_folder_from_save_pretrained_gets_a_card_built_from_its_config(tmp_path, capsys):
    """A user who trained with their own loop has config, weights and tokenizer, but no card (issue 11, point 11)."""
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = tz.ZooDecoderConfig.from_preset("tiny")
    model = tz.ZooDecoderForCausalLM(config)
    folder = tmp_path / "own-loop"
    model.save_pretrained(folder)
    plan = plan_upload(folder, "alice/own")
    assert "tokenizer.save_pretrained(folder)" in "\n".join(plan.problems)  # a text model still needs one

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(folder)
    plan = plan_upload(folder, "alice/own", language=["en"])
    assert plan.problems == [], plan.problems
    assert "README.md" in plan.contents and "built from config.json" in plan.notes[0]
    card = ModelCard(plan.card_text)
    assert card.data.pipeline_tag == "text-generation" and "zoo_decoder" in card.data.tags
    assert not card.data.eval_results  # nothing invented
    assert "**Not measured.**" in card.text
    assert f"{model.num_parameters():,}" in card.text
    assert 'AutoModelForCausalLM.from_pretrained("alice/own", trust_remote_code=True)' in card.text
    assert "pip install transformer-zoo" not in card.text and "not on PyPI yet" in card.text
    with pytest.raises(PublishError, match="cannot be published yet"):
        publish(folder, "alice/own", dry_run=True, load_check=False)  # no language given: the card check says so
    assert "Notes:" in capsys.readouterr().out


def test_publish_help_explains_every_flag():
    from transformer_zoo.publishing import build_parser

    parser = build_parser()
    assert all((action.help or "").strip() for action in parser._actions)
    assert {"--private", "--dry-run", "--revision", "--update", "--base_model"} <= \
        {option for action in parser._actions for option in action.option_strings}
