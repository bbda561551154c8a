#!/usr/bin/env python
"""Render the documentation pages that are generated, never written by hand, and check that they are up to date.

    python scripts/render_docs.py            # rewrite the generated pages and README's results table
    python scripts/render_docs.py --check    # exit 1, naming each stale file, if any would change (CI runs this)

What it renders, each from its source of truth:

* docs/reference/configuration.md: every configuration field of the four families (default, presets' values and
  the comment or docstring line that documents it), read from the config classes;
* docs/reference/command-line.md: every flag of every recipe and script, read from their argument parsers;
* docs/reference/bad-inputs.md: the bad-input catalogue, read from the cases of tests/test_bad_inputs.py;
* docs/reference/data.md: the built-in corpora, their provenance, licences and caveats;
* docs/reference/api/*.md: one API page per module group, a mkdocstrings directive for each public module;
* the tables between `<!-- rendered: NAME -->` markers in any page (FRAGMENTS), from committed result files;
* with --figures, the tutorials' figures (docs/tutorials/figures), by running the tutorials;
* the results table of README.md and docs/index.md (between `<!-- results:begin -->` and `<!-- results:end -->`),
  every number read from a committed result file.
"""


from __future__ import annotations

import argparse
import sys
from pathlib import Path

from docgen import DOCS, ROOT  # scripts/docgen: one module per kind of page
from docgen.fragments import FRAGMENT, with_fragments
from docgen.reference import render_api, render_bad_inputs, render_command_line, render_configuration, render_data
from docgen.results import render_results, with_results
from docgen.tutorials import render_tutorial_figures

# Benchmark figures a page shows: copied from benchmarks/results into the site (docs/figures), byte for byte.
COPIED_FIGURES = ("time_to_quality_cpu.png", "time_to_quality_sweep_cpu.png")


def rendered() -> dict[Path, str | bytes]:
    """Every generated file (path -> its content: text, or the bytes of a copied figure)."""
    files = {
        DOCS / "reference" / "configuration.md": render_configuration(),
        DOCS / "reference" / "command-line.md": render_command_line(),
        DOCS / "reference" / "bad-inputs.md": render_bad_inputs(),
        DOCS / "reference" / "data.md": render_data(),
    }
    files.update({DOCS / path: text for path, text in render_api().items()})
    table = render_results()
    for path, prefix in ((ROOT / "README.md", "docs/"), (DOCS / "index.md", "")):
        files[path] = with_results(path.read_text(encoding="utf-8"), table, prefix)
    for path in sorted(DOCS.rglob("*.md")):
        text = files.get(path, path.read_text(encoding="utf-8"))
        if FRAGMENT.search(text):
            files[path] = with_fragments(text)
    for name in COPIED_FIGURES:
        files[DOCS / "figures" / name] = (ROOT / "benchmarks" / "results" / name).read_bytes()
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and name every generated file that is out of date")
    parser.add_argument("--figures", action="store_true",
                        help="also run every tutorial (a few minutes) and copy the figures it draws into "
                             "docs/tutorials/figures")
    args = parser.parse_args(argv)
    if args.figures and not args.check:
        for path in render_tutorial_figures():
            print(f"Drew {path.relative_to(ROOT).as_posix()}")
    stale = []
    for path, content in rendered().items():
        binary = isinstance(content, bytes)
        current = (path.read_bytes() if binary else path.read_text(encoding="utf-8")) if path.exists() else None
        if current == content:
            continue
        stale.append(path.relative_to(ROOT).as_posix())
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content) if binary else path.write_text(content, encoding="utf-8")
    if args.check and stale:
        print("Out of date (run python scripts/render_docs.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(("Would rewrite: " if args.check else "Rewrote: ") + (", ".join(stale) or "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
