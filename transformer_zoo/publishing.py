"""Publish a trained transformer-zoo folder to the Hugging Face Hub (`scripts/publish.py`, `--push_to_hub`).

    python scripts/publish.py runs/decoder alice/tiny-shakespeare-gpt --language en
    python scripts/publish.py runs/lora/adapter alice/minilm-hadith-lora --base_model alice/minilm-zoo

What goes up is an explicit set, never "the whole folder": the weights (safetensors only), config.json (whose
`auto_map` must name every class it lists), the modeling/configuration files that `trust_remote_code` loads, the
tokenizer or image processor, generation_config.json, the model card (README.md, its usage snippets pointed at the
repo), and the training curves and metrics log. A LoRA adapter folder (adapter_config.json) publishes as a PEFT
adapter whose `base_model_name_or_path` and card `base_model` name the base model's Hub id. Anything else in the
folder (resumable checkpoints, run_args.json and results.json, which hold local paths) is listed and left out.

Before anything is uploaded the folder is checked: the staged upload set loads with the Auto classes in a fresh
process where transformer_zoo cannot be imported; the card's metadata validates (`model_cards.validate_model_card`);
no pickle file (*.bin, *.pt, *.pkl, ...) is among the weights; no text file names a local path or holds a token.
The token comes from huggingface_hub's usual sources (HF_TOKEN, `hf auth login`); it is passed to the client and
never printed, logged or written. Authentication and permission failures, an existing repo and network failures end
with a `PublishError` whose message says what happened and what to do.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from transformers.utils import logging


logger = logging.get_logger(__name__)

# Files a model folder publishes (relative paths; shell patterns).
MODEL_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "model-*-of-*.safetensors", "configuration_zoo_*.py", "modeling_zoo_*.py", "image_processing_zoo_*.py",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "chat_template.jinja", "preprocessor_config.json", "processor_config.json",
    "README.md", "metrics.jsonl", "training_curves.png",
    # The run's flags and results, published with local paths rewritten (the card refers to run_args.json).
    "run_args.json", "results.json",
    # The LoRA adapters of a `--mode lora` run, beside the merged weights (PeftModel.from_pretrained(base, repo,
    # subfolder="adapter")); their PEFT-generated README is replaced by the adapter card the recipe writes.
    "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
)
ADAPTER_FILES = (
    "adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt",
    "preprocessor_config.json", "metrics.jsonl", "training_curves.png",
)
# Files the recipes write that stay home, with the reason shown by --dry-run.
LEFT_OUT_REASONS = {
    "checkpoints/*": "resumable training checkpoints (optimizer and RNG state), not part of the model",
    "best-model/*": "the loop's copy of the best model (the top-level weights are the published ones)",
    "summary.json": "the multi-seed summary, which names local paths (the card carries the numbers)",
    "tensorboard/*": "tracker logs (metrics.jsonl is published instead)",
    "adapter/README.md": "the adapter's own card; publish the adapter folder on its own to use it",
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")
TEXT_SUFFIXES = (".json", ".jsonl", ".md", ".py", ".txt", ".jinja", ".yaml", ".yml", ".model")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
# Run records whose local paths are rewritten (as in the card) rather than refused.
SCRUBBED_RECORDS = ("run_args.json", "results.json")


class PublishError(RuntimeError):
    """A problem that stops the upload, with a message saying what to do."""


@dataclass
class UploadPlan:
    folder: Path
    repo_id: str
    kind: str  # "model" or "adapter"
    files: dict[str, Path] = field(default_factory=dict)  # path in repo -> local file
    contents: dict[str, bytes] = field(default_factory=dict)  # path in repo -> bytes replacing the local file
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    problems: list[str] = field(default_factory=list)
    card_text: str = ""
    notes: list[str] = field(default_factory=list)  # what the plan did on the user's behalf (printed)

    def paths(self) -> list[str]:
        return sorted(set(self.files) | set(self.contents))

    def read(self, path_in_repo: str) -> bytes:
        return self.contents[path_in_repo] if path_in_repo in self.contents else self.files[path_in_repo].read_bytes()


# ================================================================================================ planning
def _matches(relative: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


def _is_hub_id(value) -> bool:
    if not isinstance(value, str) or value.count("/") != 1 or value.startswith((".", "/", "~")):
        return False
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return not Path(value).exists()


def plan_upload(folder: str | os.PathLike, repo_id: str, *, license: str | None = None,
                language: list[str] | None = None, base_model: str | None = None,
                known_tokens: tuple[str, ...] = ()) -> UploadPlan:
    """What would be uploaded from `folder` to `repo_id`, and every problem that must be fixed first (no network,
    no subprocess: `check_loading` does the load check)."""
    from .model_cards import finalize_for_repo, find_local_paths, find_tokens, validate_model_card

    folder = Path(folder)
    if not folder.is_dir():
        raise PublishError(f"{folder}: no such folder. Pass the --output_dir of a training run.")
    kind = "adapter" if (folder / "adapter_config.json").is_file() else "model"
    plan = UploadPlan(folder=folder, repo_id=repo_id, kind=kind)
    wanted = ADAPTER_FILES if kind == "adapter" else MODEL_FILES
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if _matches(relative, wanted):
            plan.files[relative] = path
        elif relative.endswith(PICKLE_SUFFIXES) and not relative.startswith(("checkpoints/", "best-model/")):
            plan.problems.append(
                f"{relative} is a pickle file, which can run code when loaded and is never published; save the "
                "weights as safetensors (model.save_pretrained(folder) writes model.safetensors) and remove it.")
        else:
            reason = next((why for pattern, why in LEFT_OUT_REASONS.items() if fnmatch.fnmatchcase(relative, pattern)),
                          "not one of the files a model repo needs")
            plan.left_out.append((relative, reason))

    for name in SCRUBBED_RECORDS:
        if name in plan.files:
            from .model_cards import scrub_local_paths

            plan.contents[name] = scrub_local_paths(plan.files[name].read_text(encoding="utf-8")).encode("utf-8")

    # ---------------------------------------------------------------- what must be there
    if kind == "model":
        _check_model_files(plan)
        if base_model is not None and not _is_hub_id(base_model):
            plan.problems.append(f"--base_model {base_model!r} is not a Hub id of the form user/name.")
    else:
        base_model = _check_adapter_files(plan, base_model)
    card_text, generated = None, False
    if "README.md" in plan.files:
        card_text = plan.files["README.md"].read_text(encoding="utf-8")
    elif kind == "model" and not plan.problems:
        card_text, generated = card_from_config(folder), True
        plan.notes.append(
            "README.md (the model card) was missing, so one was built from config.json: architecture, parameter "
            "count and how to load. It says that no results were measured; add them by training with the recipes, "
            "or write README.md yourself, before others rely on the model.")
    else:
        plan.problems.append("README.md (the model card) is missing; the recipes write it at the end of a run.")
    if card_text is not None:
        card = finalize_for_repo(card_text, repo_id, license=license, language=language, base_model=base_model)
        plan.card_text = str(card)
        plan.contents["README.md"] = plan.card_text.encode("utf-8")
        plan.problems += [f"model card: {problem}" for problem in
                          validate_model_card(plan.card_text, adapter=kind == "adapter", require_results=not generated)]

    # ---------------------------------------------------------------- nothing private in any text file
    for path_in_repo in plan.paths():
        if not path_in_repo.endswith(TEXT_SUFFIXES):
            continue
        text = plan.read(path_in_repo).decode("utf-8", errors="replace")
        paths = find_local_paths(text)
        if paths:
            plan.problems.append(f"{path_in_repo} names local paths ({', '.join(sorted(set(paths))[:3])}); remove "
                                 "them before publishing.")
        tokens = find_tokens(text, known_tokens)
        if tokens:
            plan.problems.append(f"{path_in_repo} contains what looks like an access token ({', '.join(tokens)}); "
                                 "remove it (and revoke the token) before publishing.")
    return plan


# The pipeline tag of each Auto class a zoo model registers with (vision classes where the family is ViT).
PIPELINE_TAGS = {
    "AutoModel": "feature-extraction", "AutoModelForCausalLM": "text-generation", "AutoModelForMaskedLM": "fill-mask",
    "AutoModelForSeq2SeqLM": "text2text-generation", "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForTokenClassification": "token-classification", "AutoModelForQuestionAnswering": "question-answering",
    "AutoModelForImageClassification": "image-classification",
}


def card_from_config(folder: Path) -> str:
    """A model card for a folder that `save_pretrained` wrote outside the recipes (no README.md): the architecture and
    parameter count from config.json and how to load it. No result is invented: the evaluation section says none
    was measured, and the card carries no model-index."""
    import torch

    from . import FAMILIES
    from .model_cards import render_model_card
    from .modeling_zoo_checks import read_model_config

    config = read_model_config(folder)
    if config.model_type not in FAMILIES:
        raise PublishError(f"{folder}/config.json is a {config.model_type!r} model, not a transformer-zoo one.")
    registered = FAMILIES[config.model_type][1]
    architecture = (config.architectures or [None])[0]
    auto_class, model_class = next(((auto, cls) for auto, cls in registered if cls.__name__ == architecture),
                                   registered[0])
    with torch.device("meta"):  # parameter counts only: no memory, no initialisation
        model = model_class(config)
    pipeline_tag = PIPELINE_TAGS[auto_class.__name__]
    if config.model_type == "zoo_vit" and pipeline_tag == "feature-extraction":
        pipeline_tag = "image-feature-extraction"
    return render_model_card({
        "title": f"{model_class.__name__} ({config.model_type})",
        "summary": (f"A transformer-zoo `{config.model_type}` model saved with `save_pretrained`. This card was built "
                    "from its config.json by scripts/publish.py: the training data, procedure and results were not "
                    "recorded."),
        "model": model, "auto_class": auto_class.__name__, "pipeline_tag": pipeline_tag,
        "evaluation_note": ("**Not measured.** No evaluation results were recorded with this model; none are "
                            "reported here."),
        "notes": ["Built from config.json alone: how this model was trained, on what, and how well it does are "
                  "unknown to this card."],
    })


def _check_remote_code(plan: UploadPlan) -> None:
    """The load check runs the folder's own configuration_zoo_*/modeling_zoo_*.py (trust_remote_code), and so does
    everyone who loads the published model without transformer-zoo: they must be exactly the installed package's
    files, never code that was edited or planted in the folder. Differences are shown, and the folder is refused."""
    import difflib

    package = Path(__file__).resolve().parent
    for relative in sorted(plan.files):
        name = Path(relative).name
        if "/" in relative or not (name.startswith(("configuration_zoo_", "modeling_zoo_")) and name.endswith(".py")):
            continue
        installed = package / name
        if not installed.is_file():
            plan.problems.append(f"{relative} is not a file of the installed transformer-zoo; remove it (remote code "
                                 "from the folder is never run or published unless it is the package's own).")
            continue
        ours, theirs = installed.read_bytes(), plan.files[relative].read_bytes()
        if ours != theirs:
            diff = list(difflib.unified_diff(ours.decode("utf-8", "replace").splitlines(),
                                             theirs.decode("utf-8", "replace").splitlines(),
                                             f"installed/{name}", f"folder/{relative}", lineterm="", n=1))
            shown = "\n      ".join(diff[:12]) + ("\n      ..." if len(diff) > 12 else "")
            plan.problems.append(
                f"{relative} differs from the installed transformer-zoo's {name} (the load check would run it): "
                f"re-save the model with this version (model.save_pretrained) or restore the file.\n      {shown}")


def _check_model_files(plan: UploadPlan) -> None:
    _check_remote_code(plan)
    files = plan.files
    if "config.json" not in files:
        plan.problems.append("config.json is missing: this is not a saved model folder (model.save_pretrained).")
        return
    if not any(name in files for name in WEIGHT_FILES):
        plan.problems.append("no safetensors weights (model.safetensors); save with model.save_pretrained(folder).")
    config = json.loads(files["config.json"].read_text(encoding="utf-8"))
    auto_map = config.get("auto_map") or {}
    architectures = config.get("architectures") or []
    if "AutoConfig" not in auto_map:
        plan.problems.append("config.json's auto_map has no AutoConfig entry: trust_remote_code could not load it.")
    mapped_classes = {str(value).rsplit(".", 1)[-1] for value in auto_map.values()}
    for architecture in architectures:
        if architecture not in mapped_classes:
            plan.problems.append(f"config.json's auto_map does not name {architecture} (listed in architectures): "
                                 "trust_remote_code could not build it. Re-save with a current transformer-zoo.")
    for value in auto_map.values():
        module = str(value).split("--")[-1].rsplit(".", 1)[0] + ".py"
        if module not in files:
            plan.problems.append(f"{module} (named by auto_map) is missing from the folder.")
    if "adapter/adapter_config.json" in files:
        adapter_config = json.loads(files["adapter/adapter_config.json"].read_text(encoding="utf-8"))
        recorded = adapter_config.get("base_model_name_or_path")
        if recorded and not _is_hub_id(recorded):
            # A local folder names nothing on the Hub (and would leak the layout); the card says what the base is.
            adapter_config["base_model_name_or_path"] = None
            plan.contents["adapter/adapter_config.json"] = \
                (json.dumps(adapter_config, indent=2, sort_keys=True) + "\n").encode()
    model_type = config.get("model_type")
    if model_type == "zoo_vit":
        if "preprocessor_config.json" not in files:
            plan.problems.append("preprocessor_config.json (the image processor) is missing.")
    elif "tokenizer_config.json" not in files:
        plan.problems.append("the tokenizer (tokenizer.json, tokenizer_config.json) is missing: a text model is "
                             "unusable without it. Save it beside the model: tokenizer.save_pretrained(folder).")
    if any(name.endswith(("ForCausalLM", "ForConditionalGeneration")) for name in architectures) and \
            "generation_config.json" not in files:
        plan.problems.append("generation_config.json is missing for a generating model.")


def _check_adapter_files(plan: UploadPlan, base_model: str | None) -> str | None:
    files = plan.files
    if "adapter_model.safetensors" not in files:
        plan.problems.append("adapter_model.safetensors is missing (PeftModel.save_pretrained writes it).")
    adapter_config = json.loads(files["adapter_config.json"].read_text(encoding="utf-8"))
    recorded = adapter_config.get("base_model_name_or_path")
    if base_model is None and _is_hub_id(recorded):
        base_model = recorded
    # Not taken from the card's `base_model`: that names where the weights came from (e.g. a transformers BERT
    # converted on the fly), while PEFT needs the zoo-format model the adapter modules were attached to.
    if base_model is None:
        plan.problems.append("the adapter's base model has no Hub id (adapter_config.json records "
                             f"{'nothing' if not recorded else 'a local path'}); publish the base model first and "
                             "pass its id with --base_model user/base-name.")
        return None
    if not _is_hub_id(base_model):
        plan.problems.append(f"--base_model {base_model!r} is not a Hub id of the form user/name.")
        return None
    adapter_config["base_model_name_or_path"] = base_model
    plan.contents["adapter_config.json"] = (json.dumps(adapter_config, indent=2, sort_keys=True) + "\n").encode()
    return base_model


# ================================================================================================ load check
# The check loads the user's own staged folder the way a downloader without transformer-zoo will, which is only
# possible with trust_remote_code=True. It runs in a separate process, on files the user asked to publish (the
# modeling files are ours, copied by save_pretrained); the user's own from_pretrained calls are never given it.
_LOAD_CHECK = r"""
import json, sys
sys.modules["transformer_zoo"] = None  # the check must pass without the plugin: `import transformer_zoo` fails
import transformers
folder, kind = sys.argv[1], sys.argv[2]
if kind == "adapter":
    from peft import PeftConfig
    from safetensors import safe_open
    config = PeftConfig.from_pretrained(folder)
    with safe_open(folder + "/adapter_model.safetensors", "pt") as handle:
        keys = list(handle.keys())
    assert any("lora_" in key for key in keys), "adapter_model.safetensors holds no LoRA weights"
    print(json.dumps({"adapter": config.peft_type, "tensors": len(keys)}))
else:
    config = json.load(open(folder + "/config.json"))
    architecture = config["architectures"][0]
    auto_name = next(key for key, value in config["auto_map"].items() if value.endswith("." + architecture))
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True)
    loaded = {"class": type(model).__name__, "module": type(model).__module__, "auto_class": auto_name}
    if config.get("model_type") == "zoo_vit":
        processor = transformers.AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
        loaded["processor"] = type(processor).__name__
    else:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        loaded["tokenizer"] = type(tokenizer).__name__
    assert "transformer_zoo" not in [name.split(".")[0] for name in sys.modules if sys.modules[name] is not None]
    print(json.dumps(loaded))
"""


def stage(plan: UploadPlan, target: Path) -> Path:
    """The upload set as a folder (links to the local files, the rewritten ones written out)."""
    for path_in_repo in plan.paths():
        destination = target / path_in_repo
        destination.parent.mkdir(parents=True, exist_ok=True)
        if path_in_repo in plan.contents:
            destination.write_bytes(plan.contents[path_in_repo])
        else:
            try:
                os.symlink(plan.files[path_in_repo].resolve(), destination)
            except OSError:  # file systems without symlinks
                shutil.copy2(plan.files[path_in_repo], destination)
    return target


def check_loading(plan: UploadPlan, *, timeout: float = 600) -> dict:
    """Load the staged upload set with the Auto classes (remote code) in a fresh process where transformer_zoo
    cannot be imported, offline; returns what loaded, raises PublishError with the child's error otherwise."""
    with tempfile.TemporaryDirectory(prefix="zoo-publish-check-") as temporary:
        staged = stage(plan, Path(temporary) / "staged")
        environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH",)}
        environment.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(Path(temporary) / "modules"),
                           TOKENIZERS_PARALLELISM="false")
        completed = subprocess.run(
            [sys.executable, "-c", _LOAD_CHECK, str(staged), plan.kind], capture_output=True, text=True,
            timeout=timeout, cwd=temporary, env=environment,
        )
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["(no error output)"])[-1]
        raise PublishError(f"The upload set does not load with the Auto classes without transformer_zoo "
                           f"(trust_remote_code=True, fresh process): {last}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# ================================================================================================ upload
def _describe_http_error(error, repo_id: str, endpoint: str) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    server = getattr(error, "server_message", None) or ""
    server = f" The Hub said: {server.strip()}" if server.strip() else ""
    if status == 401:
        return (f"The Hub at {endpoint} rejected the token (401 Unauthorized).{server} Log in again with `hf auth "
                "login` or set HF_TOKEN to a valid token with write access; nothing was uploaded.")
    if status == 403:
        return (f"Permission denied for {repo_id} (403 Forbidden).{server} Use a token with write access to the "
                f"namespace {repo_id.split('/')[0]!r}, or publish under your own user name.")
    if status == 404:
        return (f"{repo_id} was not found on {endpoint} (404), or the token may not see it.{server} Check the repo "
                "id and the token's permissions.")
    if status == 409:
        return (f"The repository {repo_id} already exists.{server} Pass --update to add a commit to it (files not in "
                "this upload stay), or choose another name.")
    return f"The Hub at {endpoint} answered {status or 'with an error'} for {repo_id}.{server}"


def _network_error(error: BaseException, endpoint: str) -> PublishError:
    return PublishError(f"Could not reach the Hub at {endpoint} ({type(error).__name__}: {error}). Check the network "
                        "connection (and HF_ENDPOINT if you set it); nothing was uploaded.")


def _is_network_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "NetworkError",
                         "ConnectionError", "RemoteProtocolError", "OfflineModeIsEnabled"})


def publish(folder: str | os.PathLike, repo_id: str, *, private: bool = False, dry_run: bool = False,
            revision: str | None = None, update: bool = False, license: str | None = None,
            language: list[str] | None = None, base_model: str | None = None, commit_message: str | None = None,
            token: str | None = None, endpoint: str | None = None, load_check: bool = True,
            echo=print) -> str | None:
    """Check `folder` and upload it to `repo_id` (see the module docstring). Returns the repo URL (None for a dry
    run). `token=None` takes the token from huggingface_hub's usual sources; `endpoint=None` uses HF_ENDPOINT."""
    from huggingface_hub import CommitOperationAdd, HfApi, constants, get_token
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise PublishError(f"{repo_id!r} is not a repo id: {error}") from None
    if repo_id.count("/") != 1:
        raise PublishError(f"{repo_id!r}: give the repo as namespace/name (your user or organisation, a slash, the "
                           "model's name), e.g. alice/tiny-gpt.")
    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    token = token if token is not None else get_token()
    if not dry_run and not token:  # before the checks, which take a while: say it at once
        raise PublishError("No Hugging Face token found: log in with `hf auth login` or set HF_TOKEN to a token with "
                           "write access; nothing was uploaded.")
    plan = plan_upload(folder, repo_id, license=license, language=language, base_model=base_model,
                       known_tokens=(token,) if token else ())
    loaded = None
    if load_check and not plan.problems:
        loaded = check_loading(plan)
    if dry_run:
        echo(format_plan(plan, loaded))
        if plan.problems:
            raise PublishError(_problems_message(plan))
        return None
    if plan.problems:
        raise PublishError(_problems_message(plan))

    api = HfApi(endpoint=endpoint, token=token)
    namespace = repo_id.split("/")[0]
    try:
        identity = api.whoami()
        names = {identity.get("name")} | {org.get("name") for org in identity.get("orgs") or []}
        role = ((identity.get("auth") or {}).get("accessToken") or {}).get("role")
        if role == "read":
            raise PublishError("The token is read-only; create a token with write access and log in with it "
                               "(`hf auth login`). Nothing was uploaded.")
        if namespace not in names:
            raise PublishError(f"The token belongs to {identity.get('name')!r}, who cannot write to the namespace "
                               f"{namespace!r} (member of: {', '.join(sorted(n for n in names if n)) or 'none'}). "
                               f"Publish as {identity.get('name')}/{repo_id.split('/')[1]} or use a token of "
                               f"{namespace!r}. Nothing was uploaded.")
        try:
            url = api.create_repo(repo_id, private=private, exist_ok=False, repo_type="model")
        except HfHubHTTPError as error:
            if getattr(error.response, "status_code", None) != 409 or not update:
                raise
            url = f"{endpoint}/{repo_id}"
            echo(f"{repo_id} exists; adding a commit to it (--update).")
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        operations = [CommitOperationAdd(path_in_repo=path,
                                         path_or_fileobj=plan.contents[path] if path in plan.contents
                                         else str(plan.files[path]))
                      for path in plan.paths()]
        info = api.create_commit(repo_id, operations, revision=revision,
                                 commit_message=commit_message or f"Upload {plan.kind} with transformer-zoo "
                                                                  "scripts/publish.py")
    except PublishError:
        raise
    except HfHubHTTPError as error:
        raise PublishError(_describe_http_error(error, repo_id, endpoint)) from None
    except Exception as error:  # noqa: BLE001 - network failures come from several libraries
        if _is_network_error(error):
            raise _network_error(error, endpoint) from None
        raise
    echo(f"Published {len(operations)} files to {url} (commit {info.oid[:10]}"
         + (f", branch {revision}" if revision else "") + ").")
    return str(url)


def _problems_message(plan: UploadPlan) -> str:
    return (f"{plan.folder} cannot be published yet; nothing was uploaded. Fix:\n"
            + "\n".join(f"  - {problem}" for problem in plan.problems))


def format_plan(plan: UploadPlan, loaded: dict | None) -> str:
    lines = [f"Would upload {len(plan.paths())} files from {plan.folder} to {plan.repo_id} ({plan.kind}):"]
    for path in plan.paths():
        size = len(plan.contents[path]) if path in plan.contents else plan.files[path].stat().st_size
        rewritten = " (rewritten for the repo)" if path in plan.contents else ""
        lines.append(f"  {path:<45} {size:>12,} bytes{rewritten}")
    if plan.left_out:
        lines.append("Left out:")
        lines += [f"  {path:<45} {reason}" for path, reason in plan.left_out]
    if loaded:
        lines.append(f"Load check (fresh process, no transformer_zoo, trust_remote_code=True): {json.dumps(loaded)}")
    if plan.notes:
        lines.append("Notes:")
        lines += [f"  - {note}" for note in plan.notes]
    if plan.problems:
        lines.append("Problems:")
        lines += [f"  - {problem}" for problem in plan.problems]
    else:
        lines.append("All checks passed.")
    from .model_cards import mask_secrets

    lines += ["", "Model card (README.md) as it would be published:", "", plan.card_text]
    # Whatever the checks found, nothing secret is ever printed whole (the upload is refused anyway).
    return mask_secrets("\n".join(lines))


# ================================================================================================ command line
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="publish.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 2)[0] + "\n\n" + __doc__.split("\n\n", 2)[1],
    )
    parser.add_argument("folder", help="The trained folder (a recipe's --output_dir, or its adapter/ subfolder).")
    parser.add_argument("repo_id", help="Where to publish: namespace/name (your user or an organisation you can "
                        "write to).")
    parser.add_argument("--private", action="store_true", help="Create the repo private (only you can see it).")
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                        help="Run every check, print what would be uploaded and the card, upload nothing (no token "
                        "needed).")
    parser.add_argument("--revision", default=None, help="Upload to this branch (created from main if missing) "
                        "instead of main.")
    parser.add_argument("--update", action="store_true", help="Allow publishing into a repo that already exists "
                        "(adds a commit; files not in this upload stay).")
    parser.add_argument("--license", default=None, help="Hub licence id for the card (e.g. apache-2.0, mit, "
                        "cc-by-4.0); default: the one the run recorded.")
    parser.add_argument("--language", default=None, help="Comma-separated language codes of the training text "
                        "(e.g. en or en,ur); needed when the run used user data whose language is unknown.")
    parser.add_argument("--base_model", default=None, help="Hub id of the base model of a LoRA adapter (publish "
                        "the base first; also written into the uploaded adapter_config.json), or of the model a "
                        "fine-tuned model started from when the run could not record it (a local checkpoint).")
    parser.add_argument("--commit_message", default=None, help="Commit message (default: 'Upload model with "
                        "transformer-zoo scripts/publish.py').")
    return parser


def main(argv=None) -> str | None:
    parser = build_parser()
    args = parser.parse_args(argv)
    language = [code.strip() for code in args.language.split(",") if code.strip()] if args.language else None
    try:
        return publish(args.folder, args.repo_id, private=args.private, dry_run=args.dry_run,
                       revision=args.revision, update=args.update, license=args.license, language=language,
                       base_model=args.base_model, commit_message=args.commit_message)
    except PublishError as error:
        parser.exit(1, f"publish.py: error: {error}\n")
