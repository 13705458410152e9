"""CPU time of this process and of the verifying processes it started, for the receive benchmarks.

On a shared VM the wall clock says how much CPU the others left us; CPU seconds say what the
work costs.  A worker's CPU is read from /proc while it runs (Linux): a child's own times
reach ``RUSAGE_CHILDREN`` only once it is reaped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

_TICK = os.sysconf("SC_CLK_TCK")


def of_pid(pid: int) -> float:
    """utime + stime of a live process, in seconds (0 when it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def total(pids: Iterable[int]) -> float:
    """This process's CPU seconds (every thread) plus those of ``pids``."""
    return time.process_time() + sum(of_pid(pid) for pid in pids)


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
