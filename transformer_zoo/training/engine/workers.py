"""Worker processes for runs side by side (the translation study's trainings, the downstream check's fine-tunes).

`worker_pool` is a `concurrent.futures.ProcessPoolExecutor` with two differences that long runs need:

* spawn, not fork: a forked child would inherit the parent's OpenMP thread pool and torch state mid-run;
* its workers end when the process that started them ends, however it ends. A plain pool's worker runs its current
  task to the end when its parent is killed (`kill PID`, a machine's job limit, an out-of-memory kill): for a study
  that is up to an hour of training as an orphan, competing with the study started again in its place for the same
  cores and writing to the same snapshot files, and its result has nowhere to go. The standard library has no option
  for this (`ProcessPoolExecutor` workers are not daemons one can reap, and a signal handler in the parent does not run
  on SIGKILL), so each worker watches its parent's sentinel itself.

`ends_with_parent()` gives a `subprocess` child (a study's recipe run) the same property on Linux, where the kernel
can send a child a signal when its parent ends (prctl PR_SET_PDEATHSIG); elsewhere it is empty and the child runs on.
"""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

# The exit status of a worker whose parent ended (what the shell reports for SIGHUP: its session is gone).
PARENT_GONE_STATUS = 129


def _exit_when_parent_ends() -> None:
    """A worker's initializer: a daemon thread that waits on the parent's sentinel (ready once the parent has ended)
    and then ends this process at once, without running its task's cleanup (there is no one left to report to)."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not started by multiprocessing: nothing to watch
        return

    def watch() -> None:
        parent.join()
        os._exit(PARENT_GONE_STATUS)

    threading.Thread(target=watch, name="exit-when-parent-ends", daemon=True).start()


def worker_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of `workers` spawned processes that end with this one (see the module docstring)."""
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_exit_when_parent_ends)


def _signal_when_parent_ends(prctl, parent_pid: int) -> None:
    """Runs in the child between fork and exec: SIGTERM this process when the thread that started it ends (the
    recipe then stops as it would on a kill, its checkpoints kept for --resume). Only a C call and os functions here:
    an import after fork could wait forever on a lock another thread of the parent held."""
    prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG (<linux/prctl.h>)
    if os.getppid() != parent_pid:  # the parent ended before the request was in place
        os._exit(PARENT_GONE_STATUS)


def ends_with_parent() -> dict[str, Any]:
    """Keyword arguments for `subprocess.Popen` / `run` that end the child with the thread that starts it (Linux; the
    thread must wait for the child, as `run` and `wait` do). Empty elsewhere."""
    if not sys.platform.startswith("linux"):
        return {}
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, in the parent (see above)
    return {"preexec_fn": functools.partial(_signal_when_parent_ends, prctl, os.getpid())}
