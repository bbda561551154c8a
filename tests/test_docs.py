"""The documentation cannot drift from the code: every Python code block of README.md and docs/ runs (Sybil; one
namespace per page, blocks in order, in a temporary folder), every command in a shell block names a script, config
file and flags that exist, the generated pages are up to date, and the site builds with strict link checking."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import render_docs  # scripts/ is not a package
from docgen import reference, results
from docgen.tutorials import FIGURE_LINK, run_page

# Run artefacts kept as evidence (the committed runs' model cards, mkdocs.yml's exclude_docs) are not pages: their
# usage snippets name the Hub repository the card was written for.
PAGES = sorted([ROOT / "README.md", *(page for page in (ROOT / "docs").rglob("*.md")
                                      if not page.relative_to(ROOT / "docs").as_posix().startswith("urdu/default-run"))])
PAGES_WITH_CODE = [page for page in PAGES if "```python" in page.read_text(encoding="utf-8")]
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.S)


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_page_id)
def test_every_python_block_of_the_page_runs(page, tmp_path):
    # In a fresh folder (a block that saves a model writes there) linked to docs/ and benchmarks/ (a block that
    # reads a committed result reads it as from the repository root).
    run_page(page, tmp_path)
    for figure in FIGURE_LINK.findall(page.read_text(encoding="utf-8")):
        assert (tmp_path / figure).is_file(), f"{page.name} shows figures/{figure} but did not draw it"
        assert (ROOT / "docs" / "tutorials" / "figures" / figure).is_file(), f"figures/{figure} is not committed"


def test_every_tutorial_draws_a_figure():
    tutorials = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]-*.md"))
    assert len(tutorials) >= 10
    assert [page.name for page in tutorials if not FIGURE_LINK.search(page.read_text())] == []


INLINE_COMMAND = re.compile(r"`((?:python|accelerate\s+launch|bash)\s[^`]+)`")
# Probes retired from benchmarks/: the speed page's table names each, with the commit where it can still be read.
RETIRED = set(re.findall(r"^\| `(\w+\.py)` \|", (ROOT / "docs" / "speed.md").read_text(encoding="utf-8"), re.M))


def _shell_commands(page: Path) -> list[list[str]]:
    """The commands of the page's shell blocks and of its inline code spans that run a command."""
    commands = []
    text = page.read_text(encoding="utf-8")
    spans = [" ".join(span.split()) for span in INLINE_COMMAND.findall(text)]  # a span may wrap across lines
    for block in SHELL_BLOCK.findall(text) + spans:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
                try:
                    commands.append(shlex.split(part))
                except ValueError:
                    commands.append(part.split())
    return commands


def _script_and_flags(words: list[str]) -> tuple[str, list[str]] | None:
    """(the repository script a command runs, the flags it passes), or None for other commands."""
    if words[:2] == ["accelerate", "launch"]:
        words = words[2:]
        while words and words[0].startswith("--"):  # accelerate's own options (and their values)
            words = words[2:] if len(words) > 1 and not words[1].startswith(("--", "recipes/")) else words[1:]
        script = next((word for word in words if word.endswith(".py")), None)
    elif words and words[0] in ("python", "bash") and len(words) > 1:
        script = words[1]
    else:
        return None
    if script is None or not script.startswith(("recipes/", "scripts/", "benchmarks/")):
        return None
    flags = [word.split("=", 1)[0] for word in words[words.index(script) + 1:] if word.startswith("--")]
    return script, flags


_PARSERS: dict[str, set[str]] = {}


def _known_flags(script: str) -> set[str]:
    if script not in _PARSERS:
        command = next((cmd for cmd in reference.COMMANDS if cmd.endswith(script)), None)
        target = reference.COMMANDS[command] if command else script
        parser = reference.command_parser(target)
        _PARSERS[script] = {option for action in parser._actions for option in action.option_strings}
    return _PARSERS[script]


@pytest.mark.parametrize("page", [page for page in PAGES if _shell_commands(page)], ids=_page_id)
def test_every_command_in_a_shell_block_names_what_exists(page):
    problems = []
    for words in _shell_commands(page):
        found = _script_and_flags(words)
        if found is None:
            continue
        script, flags = found
        if script.startswith("benchmarks/") and Path(script).name in RETIRED:
            continue
        if not (ROOT / script).is_file():
            problems.append(f"{' '.join(words)}: no file {script}")
            continue
        for position, word in enumerate(words):
            if word == "--config" and position + 1 < len(words) and not (ROOT / words[position + 1]).is_file():
                problems.append(f"{' '.join(words)}: no config file {words[position + 1]}")
        if script.endswith(".sh"):
            continue
        unknown = [flag for flag in flags if flag not in _known_flags(script)]
        if unknown:
            problems.append(f"{' '.join(words)}: {script} has no flag {', '.join(unknown)}")
    assert problems == []


def test_the_command_checker_catches_a_missing_flag_and_a_missing_script():
    assert _script_and_flags(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "recipes/pretrain.py",
                              "--max_steps", "50"]) == ("recipes/pretrain.py", ["--max_steps"])
    assert "--max_steps" in _known_flags("recipes/pretrain.py")
    assert "--max_stepz" not in _known_flags("recipes/pretrain.py")
    assert _script_and_flags(["git", "clone", "x"]) is None
    assert "allocators.py" in RETIRED and "compare_hf.py" not in RETIRED


# A test a page names for a claim: `tests/test_x.py::test_name`, or `tests/test_x.py -k EXPR` (quoted or one word,
# possibly wrapped across lines). Tests move between files as files are split; the pages must follow.
TEST_REFERENCE = re.compile(r"tests/(test_\w+\.py)(?:::(\w+))?(?:`?\s+-k\s+(\"[^\"]+\"|'[^']+'|\w+))?")


def _test_reference_problems(text: str) -> list[str]:
    """What a page's test references name that the tests do not have: a missing file, a `::` test that the file
    does not define, or a -k word that occurs nowhere in the file (a name, a class or a parametrize id)."""
    problems = []
    for match in TEST_REFERENCE.finditer(" ".join(text.split())):
        file_name, test_name, expression = match.groups()
        path = ROOT / "tests" / file_name
        if not path.is_file():
            if test_name or expression:  # a bare path may name transformers' own test files (contributing.md)
                problems.append(f"{match.group(0)}: no file tests/{file_name}")
            continue
        source = path.read_text(encoding="utf-8")
        if test_name and not re.search(rf"^def {test_name}\b", source, re.M):
            problems.append(f"{match.group(0)}: tests/{file_name} has no test {test_name}")
        words = re.split(r"[\s()]+", (expression or "").strip("\"'"))
        missing = [word for word in words if word and word not in ("and", "or", "not") and word not in source]
        # A file whose tests are generated (transformers' common tests) names them nowhere in its text: ask pytest.
        if missing and not _collects(path, expression.strip("\"'")):
            problems.append(f"{match.group(0)}: nothing in tests/{file_name} matches {', '.join(missing)}")
    return problems


def _collects(path: Path, expression: str) -> bool:
    """Whether `pytest -k expression` selects any test of `path` (collection only)."""
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                str(path), "-k", expression], cwd=ROOT, capture_output=True, text=True)
    return collected.returncode == 0


@pytest.mark.parametrize("page", [page for page in PAGES if "tests/test_" in page.read_text(encoding="utf-8")],
                         ids=_page_id)
def test_every_test_a_page_names_exists(page):
    assert _test_reference_problems(page.read_text(encoding="utf-8")) == []


def test_the_test_reference_checker_catches_a_moved_test():
    assert _test_reference_problems("(`pytest tests/test_docs.py -k readme_is_a_front_door`)") == []
    assert _test_reference_problems('`pytest tests/test_docs.py -k "front_door or\n  site_builds"`') == []
    assert _test_reference_problems("tests/test_modeling_common.py, from transformers") == []
    assert len(_test_reference_problems("`pytest tests/test_math.py -k no_such_test_name`")) == 1
    assert len(_test_reference_problems("`tests/test_docs.py::test_no_such_test`")) == 1
    assert len(_test_reference_problems("`pytest tests/test_gone.py -k anything`")) == 1


def test_the_generated_pages_are_up_to_date():
    stale = [path.relative_to(ROOT).as_posix() for path, content in render_docs.rendered().items()
             if not path.exists() or (path.read_bytes() if isinstance(content, bytes)
                                      else path.read_text(encoding="utf-8")) != content]
    assert stale == [], "run python scripts/render_docs.py"


def test_the_results_table_quotes_the_committed_files():
    table = results.render_results()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table.replace("LINK/", "docs/") in readme
    translation = json.loads((ROOT / "docs/reproduce/translation.json").read_text())
    assert f"{translation['pairs']['bible-en-es']['test_bleu']:.2f}" in table


def test_the_urdu_row_compares_controls_within_their_precision_group():
    """The README's Urdu row quotes the fp32 controls against the default arm checked in fp32, never against the
    bf16 headline, and says nothing of a control until it has run."""
    accuracy = lambda mean, std: {"downstream_accuracy": {"mean": mean, "std": std, "runs": [mean] * 3}}
    study = {"default_arm": "lora", "lora-fp32": accuracy(0.691, 0.023), "from-scratch": accuracy(0.436, 0.194)}
    clause = results.fp32_control_clause(study)
    assert clause == ("; checked in fp32, the same encoder from scratch on the same text 0.436 ± 0.194 against the "
                      "default arm's 0.691 ± 0.023")
    study["translate-test"] = accuracy(0.8, 0.01)
    assert "translate-test 0.800 ± 0.010 against" in results.fp32_control_clause(study)
    assert results.fp32_control_clause({"default_arm": "lora", "from-scratch": accuracy(0.4, 0.1)}) == ""
    assert results.fp32_control_clause({"default_arm": "lora", "lora-fp32": accuracy(0.7, 0.0)}) == ""


def test_the_decoder_row_waits_for_both_checks_and_counts_seeds():
    """The README's decoder row appears once both SmolLM2 arms have their downstream check, and says how many seeds
    each number stands on (a single seed has no spread)."""
    def arm(bpb, *runs):
        mean = sum(runs) / len(runs)
        std = (sum((r - mean) ** 2 for r in runs) / (len(runs) - 1)) ** 0.5 if len(runs) > 1 else None
        return {"bpb_urdu": bpb, "downstream_accuracy": {"mean": mean, "std": std, "runs": list(runs)}}

    assert results.decoder_rows({"smollm2-unadapted": arm(3.2341, 0.54, 0.53)}) == []
    study = {"smollm2-unadapted": arm(3.2341, 0.5433, 0.5367), "smollm2-none": arm(1.8365, 0.5517)}
    [(what, result, link)] = results.decoder_rows(study)
    assert result == ("Urdu bits per byte **1.837** against 3.234 unadapted; downstream accuracy 0.552 (1 seed) "
                      "against 0.540 ± 0.005 (2 seeds)")
    assert link == "urdu/study.md"


def test_the_urdu_translators_rows_lead_with_chrf_and_say_when_retrieval_wins():
    pair = lambda chrf, bleu, epochs=12.0: {"language_pair": "Urdu-English (hadith + Quran)", "epochs": epochs,
                                            "test_chrf": chrf, "test_bleu": bleu, "retrieval_chrf": 39.94,
                                            "retrieval_bleu": 19.45, "copy_chrf": 0.84, "copy_bleu": 0.01}
    settings = {"pairs": ["bible-en-es", "urdu-translation-ur-en"],
                "pair_overrides": {"urdu-translation-ur-en": {"epochs": 18.0}}}
    record = lambda pairs, budgets=None: {"settings": settings, "pairs": pairs, "shorter_budgets": budgets or {}}
    rows = results.urdu_translation_rows(record({"bible-en-es": pair(60.0, 30.0),
                                                      "urdu-translation-ur-en": pair(43.1, 21.0)}))
    assert rows == [("The same Transformer, Urdu-English (hadith + Quran), 12 epochs on CPU",
                     "test chrF **43.10**, BLEU 21.00 (retrieval 39.94 / 19.45)", "reproduce/translation.md")]
    below = results.urdu_translation_rows(record({"urdu-translation-ur-en": pair(41.0, 19.0)}))
    assert below[0][1].endswith("; **below retrieval** on BLEU")  # a loss on either score is said, and which
    both = results.urdu_translation_rows(record({"urdu-translation-ur-en": pair(39.0, 19.0)}))
    assert both[0][1].endswith("; **below retrieval**")
    level = results.urdu_translation_rows(record({"urdu-translation-ur-en": pair(40.82, 19.48)}))
    assert "**not clear of retrieval** (margins 2 chrF, 1 BLEU)" in level[0][1]  # above, but within the margins
    # Still training at a raised budget: the last finished budget stands on the front page, and says so.
    training = results.urdu_translation_rows(record({}, {"urdu-translation-ur-en": [pair(27.3, 11.5, 2.0),
                                                                                         pair(40.82, 19.48)]}))
    assert training[0][0].endswith("12 epochs on CPU") and training[0][1].endswith("its run at 18 epochs is not finished")
    settings["pair_overrides"]["urdu-translation-ur-en"] = {"epochs": 12.0, "precision": "bf16"}
    retrained = results.urdu_translation_rows(record({}, {"urdu-translation-ur-en": [
        dict(pair(40.82, 19.48), precision="fp32")]}))
    assert retrained[0][0].endswith("12 epochs in fp32 on CPU")
    assert retrained[0][1].endswith("its run at 12 epochs, bf16 is not finished")


def test_the_table3_row_counts_finished_runs_and_decided_claims():
    empty = {"dev_bleu": []}
    record = {"seeds": [0, 1], "table3_rows": ["base", "heads_1", "heads_8"],
              "summary": {"base": {"dev_bleu": [25.0, 26.0]}, "heads_1": {"dev_bleu": [20.0]}, "heads_8": empty},
              "table3_claims": [{"key": "base", "held": True}, {"key": "A1", "held": False},
                                {"key": "A2", "held": None}, {"key": "B", "held": True}]}
    what, result, link = results.table3_row(record)
    assert what.endswith("Bible en-es, 2 seeds a row") and link == "reproduce/translation.md"
    assert result == ("base dev BLEU **25.50 ± 0.71** (2 seeds; the rows need at least 20); 3 of 6 runs finished, "
                      "1 of 2 decided claims held, 1 claim waiting for its rows")


def test_the_site_builds_with_strict_link_and_anchor_checks(tmp_path):
    environment = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, env=environment)
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and warnings == [], "\n".join(warnings) or result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "models" / "index.html").is_file()


def test_the_api_reference_lists_every_public_module():
    pages = "".join((ROOT / "docs" / "reference" / "api").joinpath(name).read_text() for name in
                    os.listdir(ROOT / "docs" / "reference" / "api"))
    missing = [module for module in reference.public_modules() if f"::: {module}\n" not in pages]
    assert missing == []


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "bash scripts/install.sh && accelerate launch recipes/finetune.py" in readme
    assert "bash scripts/test.sh" in readme
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    for page in ("getting-started.md", "recipes.md", "urdu-adaptation.md", "translation.md", "analysis.md",
                 "efficient-attention.md", "deploy.md", "publishing.md", "speed.md", "reliability.md", "design.md",
                 "contributing.md", "families.md"):
        assert f"docs/{page}" in linked, page
    assert all((ROOT / link).exists() for link in linked)


def test_every_result_file_the_pages_cite_is_committed():
    """A page that quotes a number names the result file it comes from; that file must exist."""
    cited = {(page, match) for page in PAGES for match in re.findall(  # (a command's --output is not a citation)
        r"(?<!--output )((?:benchmarks/results|docs/(?:reproduce|urdu|runs))/[\w./-]+\.(?:jsonl|json|png|txt|md))\b",
        " ".join(page.read_text(encoding="utf-8").split()))}
    assert len(cited) > 20
    assert sorted(f"{_page_id(page)}: {path}" for page, path in cited if not (ROOT / path).exists()) == []
    # The speed page names its result files by their name alone, in code spans: each is in benchmarks/results.
    speed = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.-]+\.(?:json|png|txt))`", speed))
    assert len(named) > 30
    assert sorted(name for name in named if not (ROOT / "benchmarks" / "results" / name).exists()) == []
