"""Worker processes end with the process that started them (transformer_zoo/training/engine/workers.py): a pool
worker and a subprocess child each outlive a SIGKILLed parent without it, and end within seconds with it."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc and relies on prctl(PR_SET_PDEATHSIG), both Linux-only")

# The parent: starts one child (a pool worker or a subprocess) that writes its pid and sleeps, then sleeps itself
# until the test kills it.
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    sys.path.insert(0, {root!r})
    from transformer_zoo.training.engine.workers import ends_with_parent, worker_pool


    def sleep_in_worker(pid_file):
        with open(pid_file + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(pid_file + ".tmp", pid_file)
        time.sleep(300)


    if __name__ == "__main__":
        kind, pid_file = sys.argv[1], sys.argv[2]
        if kind in ("pool", "plain pool"):
            import concurrent.futures, multiprocessing
            pool = worker_pool(1) if kind == "pool" else concurrent.futures.ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"))
            pool.submit(sleep_in_worker, pid_file)
        else:
            options = ends_with_parent() if kind == "subprocess" else {{}}
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], **options)
            with open(pid_file, "w") as handle:
                handle.write(str(child.pid))
            child.wait()
        time.sleep(300)
""")


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, ended but not yet reaped by its new parent, counts as ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def _child_after_parent_killed(tmp_path: Path, kind: str) -> tuple[int, bool]:
    """Start the parent, SIGKILL it once its child is running; the child's pid and whether it still runs 10 s on."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(root=str(ROOT)))
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, str(script), kind, str(pid_file)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.is_file() or not pid_file.read_text():
            assert parent.poll() is None, f"the parent script ended early (exit {parent.returncode})"
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.2)
        child = int(pid_file.read_text())
        assert _running(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    still_running = _running(child)
    if still_running:
        os.kill(child, signal.SIGKILL)
    return child, still_running


@pytest.mark.parametrize("kind, control", [("pool", "plain pool"), ("subprocess", "plain subprocess")])
def test_a_child_ends_with_its_killed_parent_and_would_not_without_the_helper(tmp_path, kind, control):
    for folder in ("control", "helper"):
        (tmp_path / folder).mkdir()
    _, orphan_survives = _child_after_parent_killed(tmp_path / "control", control)
    assert orphan_survives, f"a {control} child should outlive its parent: the test would prove nothing"
    child, survives = _child_after_parent_killed(tmp_path / "helper", kind)
    assert not survives, f"the {kind} child {child} still ran 10 s after its parent was killed"
