"""A recipe's output folder: never reused by accident, never written by two runs at once.

* A new run (no --resume) refuses a folder that already holds files, unless --overwrite_output_dir is given; then
  the old run's files are moved aside first, so the folder never mixes an old model with a new tokenizer, and are
  deleted when the new run ends well or moved back when it fails: the folder is the old run or the new one.
* While a run writes, it holds an exclusive lock on `<output_dir>/.zoo-run.lock` (fcntl.flock, released by the
  operating system when the process ends, however it ends; the file is removed at a normal end). A second run on the
  same folder is refused with the holder's process id.

Only the main process of a multi-process launch checks and locks (the others write into the same folder by design).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

LOCK_NAME = ".zoo-run.lock"


def _is_main_process() -> bool:
    return os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) == "0"


def _contents(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if entry.name != LOCK_NAME)


def check_output_dir(output_dir: str | os.PathLike, *, resume, overwrite: bool) -> None:
    """Raise ValueError (one line, naming the fix) when `output_dir` cannot take this run."""
    if not _is_main_process():
        return
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--output_dir {folder} is a file, not a folder; pass a folder path.")
    existing = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("."))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--output_dir {folder}: {existing} is not writable; choose a folder you can write to.")
    if folder.is_dir() and not resume and not overwrite:
        contents = _contents(folder)
        if contents:
            shown = ", ".join(contents[:5]) + (", ..." if len(contents) > 5 else "")
            raise ValueError(
                f"--output_dir {folder} already holds files ({shown}). Pass --resume to continue that run, "
                "--overwrite_output_dir to replace it, or choose another --output_dir.")


class RunStopped(Exception):
    """A run stopped on request with its state saved (Ctrl-C): it stands as the folder's run, to be resumed."""


def _move_aside(folder: Path) -> Path | None:
    """Move the old run's files into a hidden sibling folder (same file system: renames, no copies)."""
    names = _contents(folder)
    if not names:
        return None
    aside = folder.parent / f".{folder.name}.replaced-{os.getpid()}"
    if aside.exists():
        shutil.rmtree(aside)
    aside.mkdir()
    for name in names:
        os.rename(folder / name, aside / name)
    return aside


def _restore(folder: Path, aside: Path) -> None:
    for name in _contents(folder):
        path = folder / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    for path in aside.iterdir():
        os.rename(path, folder / path.name)
    aside.rmdir()


@contextlib.contextmanager
def claim_output_dir(output_dir: str | os.PathLike, *, overwrite: bool = False):
    """Hold the folder's run lock for the duration of the block; with `overwrite`, move the old run aside first
    (deleted at a normal end, restored when the block raises)."""
    if not _is_main_process():
        yield
        return
    import fcntl

    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK_NAME, "a+", encoding="utf-8")
    locked = False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ValueError(f"--output_dir {folder} is in use by another run (process {holder}); wait for it to "
                             "finish, or choose another --output_dir.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        replaced = _move_aside(folder) if overwrite else None
        locked = True
        try:
            yield
        except RunStopped:
            if replaced is not None:
                shutil.rmtree(replaced, ignore_errors=True)  # the new run was checkpointed: it replaces the old
            raise
        except BaseException:
            if replaced is not None:
                _restore(folder, replaced)  # the run failed: the folder is the old run again, not half of each
            raise
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    finally:
        if locked:
            # Removed while still held: a run that opened the old file before this fails to lock it, one that opens
            # the path afterwards creates a new file, so two runs can never both hold a lock.
            with contextlib.suppress(OSError):
                (folder / LOCK_NAME).unlink()
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
