"""The two steps every analysis figure shares: a headless pyplot, and writing a finished figure to a PNG."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend: figures render without a display (CI, servers). Imported on first use so
    that importing the analysis modules stays cheap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path, *, dpi: int = 100) -> Path:
    """Lay out `figure`, write it to `path` (creating the folder), close it so it frees its memory; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path
