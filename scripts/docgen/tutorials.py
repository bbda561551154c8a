"""The tutorials run as code: every Python block of a page, in order, and the figures they draw."""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import DOCS, ROOT

FIGURE_LINK = re.compile(r"\]\(figures/([\w.-]+\.png)\)")


def run_page(page: Path, folder: Path) -> None:
    """Run every Python block of a Markdown page, in order and in one namespace, with `folder` as the working
    directory. The folder gets links to docs/ and benchmarks/, so a page reads committed results as it would from
    the repository root while whatever it writes lands in the folder."""
    from sybil import Sybil
    from sybil.parsers.markdown import PythonCodeBlockParser

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("docs", "benchmarks"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name, target_is_directory=True)
    previous = Path.cwd()
    os.chdir(folder)
    try:
        for example in Sybil(parsers=[PythonCodeBlockParser()]).parse(page).examples():
            example.evaluate()
    finally:
        os.chdir(previous)
        import matplotlib.pyplot as plt

        plt.close("all")


def render_tutorial_figures(pages: list[Path] | None = None) -> list[Path]:
    """Run the tutorials and copy the figures they draw into docs/tutorials/figures (committed, shown by the site).
    Not part of --check: the figures of pages that train are numbers of this machine, not of every machine."""
    import shutil
    import tempfile

    written = []
    for page in pages or sorted((DOCS / "tutorials").glob("[0-9][0-9]-*.md")):
        with tempfile.TemporaryDirectory() as folder:
            run_page(page, Path(folder))
            for name in FIGURE_LINK.findall(page.read_text(encoding="utf-8")):
                target = DOCS / "tutorials" / "figures" / name
                shutil.copyfile(Path(folder) / name, target)
                written.append(target)
    return written
