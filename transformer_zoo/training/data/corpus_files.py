"""Reading a corpus the user names: a local file or folder (`datasets.load_dataset` with the builder its suffix or
contents call for, after checking that text files decode), or a Hugging Face Hub data set id where the Hub can be
reached, with one-line errors for every way that fails."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import datasets

from .builtin_corpora import _BUILTINS

_SUFFIX_TO_BUILDER = {
    ".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".tsv": "csv",
    ".parquet": "parquet",
}
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
_SPLIT_ALIASES = {"train": "train", "validation": "validation", "valid": "validation", "val": "validation",
                  "dev": "validation", "test": "test"}


def _looks_like_path(source: str) -> bool:
    return (
        os.sep in source and not _is_hub_id(source)
        or source.startswith((".", "~", "/"))
        or Path(source).suffix.lower() in _SUFFIX_TO_BUILDER | dict.fromkeys(_IMAGE_SUFFIXES)
    )


def _is_hub_id(source: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", source) is not None and ".." not in source


def _offline() -> bool:
    truthy = {"1", "on", "yes", "true"}
    return (
        os.environ.get("HF_HUB_OFFLINE", "").lower() in truthy
        or os.environ.get("HF_DATASETS_OFFLINE", "").lower() in truthy
        or bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))
    )


def _hub_unreachable() -> bool:
    """True when the Hub's host name does not even resolve (no network), checked only without a proxy."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return False
    try:
        from huggingface_hub import constants

        host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
        socket.getaddrinfo(host, 443)
    except OSError:
        return True
    except Exception:  # noqa: BLE001 - never block a load on this heuristic
        return False
    return False


# Builders that read text files, and so take an encoding.
_TEXT_BUILDERS = ("text", "csv", "json")


def _check_decodes(path: Path, encoding: str) -> None:
    """Refuse a text file that is not valid `encoding`, naming the file, the byte offset and the flag to add
    (datasets would fail deep inside its generator with no hint of where)."""
    import codecs

    try:
        decoder = codecs.getincrementaldecoder(encoding)()
    except LookupError:
        raise ValueError(f"--encoding {encoding!r} is not a text encoding Python knows (e.g. utf-8, latin-1, "
                         "cp1252, utf-16).") from None
    offset = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path} is not valid {encoding} text: byte {offset + error.start} (0x{chunk[error.start]:02x}) "
                    f"cannot be decoded. Pass the file's real encoding, e.g. --encoding latin-1 or --encoding cp1252, "
                    "or convert it to UTF-8 (iconv -f latin1 -t utf-8).") from None
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ValueError(f"{path} ends in the middle of a {encoding} character (a truncated file?).") from None


def _load_local(path: Path, *, sample_by: str, cache_dir: str | None, encoding: str = "utf-8") -> datasets.DatasetDict:
    if path.is_file():
        if path.stat().st_size == 0:
            raise ValueError(f"The data file {path} is empty; pass a file with at least a few examples.")
        suffix = path.suffix.lower()
        if suffix not in _SUFFIX_TO_BUILDER:
            raise ValueError(
                f"Cannot read {path}: unsupported file type {suffix or '(none)'!r}. Use one of "
                f"{', '.join(sorted(_SUFFIX_TO_BUILDER))}, or a folder of images in one sub-folder per class."
            )
        builder = _SUFFIX_TO_BUILDER[suffix]
        kwargs: dict[str, Any] = {"data_files": {"train": str(path)}, "cache_dir": cache_dir}
        if builder == "text":
            kwargs["sample_by"] = sample_by
        if suffix == ".tsv":
            kwargs["sep"] = "\t"
        if builder in _TEXT_BUILDERS:
            _check_decodes(path, encoding)
            kwargs["encoding"] = encoding
        if builder == "csv":
            with open(path, encoding=encoding) as handle:
                rows = [line for _, line in zip(range(2), (line for line in handle if line.strip()))]
            if len(rows) < 2:
                raise ValueError(f"{path} has a header line ({rows[0].strip()[:80]!r}) but no data rows; add one "
                                 "example per line below it.")
        try:
            loaded = datasets.load_dataset(builder, **kwargs)
        except Exception as error:
            raise ValueError(f"Could not read {path} as {builder}: {type(error).__name__}: {error}") from error
        if builder in ("csv", "json") and len(loaded["train"]) == 0:
            raise ValueError(f"{path} has no examples: a header or an empty structure but no rows. Add data rows "
                             f"(columns found: {', '.join(loaded['train'].column_names) or 'none'}).")
        return loaded
    files = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
    if not files:
        raise ValueError(f"The folder {path} contains no files; put data files or images in it.")
    if all(p.stat().st_size == 0 for p in files):
        raise ValueError(f"Every file in {path} is empty.")
    kwargs = {"cache_dir": cache_dir}
    if any(p.suffix.lower() in _IMAGE_SUFFIXES for p in files):
        kwargs["data_dir"] = str(path)
        target = "imagefolder"
    else:
        target = str(path)
        if all(p.suffix.lower() in (".txt", ".text") for p in files):
            kwargs["sample_by"] = sample_by
        text_files = [p for p in files if _SUFFIX_TO_BUILDER.get(p.suffix.lower()) in _TEXT_BUILDERS]
        for text_file in text_files:
            _check_decodes(text_file, encoding)
        if text_files:
            kwargs["encoding"] = encoding
    try:
        return datasets.load_dataset(target, **kwargs)
    except Exception as error:
        raise ValueError(
            f"Could not load the folder {path} with datasets.load_dataset: {type(error).__name__}: {error}. "
            "Use files of one type (txt/json/jsonl/csv/parquet), optionally named train.*, validation.*, test.*, "
            "or images in one sub-folder per class."
        ) from error


def _load_hub(source: str, *, config_name: str | None, cache_dir: str | None) -> datasets.DatasetDict:
    builtins = ", ".join(sorted(_BUILTINS))
    close = difflib.get_close_matches(source, list(_BUILTINS), n=1)
    hint = f" Did you mean the built-in corpus {close[0]!r}?" if close else ""
    offline = _offline()
    if offline or _hub_unreachable():
        why = "offline here (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)" if offline else "unreachable (no network)"
        raise ValueError(
            f"{source!r} is neither a built-in corpus nor an existing local path, and the Hugging Face Hub is "
            f"{why}, so it cannot be downloaded.{hint} Use a built-in "
            f"corpus ({builtins}) or a local file or folder (txt/json/jsonl/csv/parquet, or an image folder)."
        )
    try:
        loaded = datasets.load_dataset(source, config_name, cache_dir=cache_dir)
    except Exception as error:
        raise ValueError(
            f"Could not load {source!r}: it is not a built-in corpus ({builtins}), not an existing local path, and "
            f"loading it from the Hugging Face Hub failed ({type(error).__name__}: {error}).{hint} Check the "
            "spelling or the path, or pass a local file; without a network only built-ins and local files work."
        ) from error
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded
