"""CPU time and peak memory of a process, read from /proc (Linux only).

Why /proc rather than psutil: the benchmark must need nothing beyond the project's
dependencies, and /proc gives exactly the two figures we report: utime+stime (CPU) and VmHWM
(peak resident set), for a worker subprocess as well as for this process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system, all threads) used so far by `pid` (default: this process)."""
    stat = Path(f"/proc/{pid or 'self'}/stat").read_text()
    # The command name (field 2) may hold spaces; everything after its ')' splits cleanly.
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS_PER_SECOND


def memory_kb(pid: int | None = None, field: str = "VmHWM") -> int:
    """A /proc/<pid>/status memory figure in KB: VmHWM is the peak RSS, VmRSS the current one."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise ValueError(f"/proc/{pid or 'self'}/status has no {field}")


def core_wait_seconds(pid: int | None = None) -> float:
    """Seconds `pid`'s threads spent runnable but waiting for a core (schedstat run_delay):
    the time the machine, not the process, was the limit."""
    total = 0.0
    for task in Path(f"/proc/{pid or 'self'}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[1]) / 1e9
    return total


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds of a few processes at one wall-clock moment, to diff against a later one."""

    wall: float
    cpu: dict[str, float]
    waiting: dict[str, float] = field(default_factory=dict)

    @classmethod
    def take(cls, pids: Mapping[str, Sequence[int | None]]) -> CpuSnapshot:
        """`pids` maps a role ("worker", "bench", "redis") to its pids (None: this process);
        a role's figure is the sum over its processes."""
        cpu = {role: sum(cpu_seconds(pid) for pid in group) for role, group in pids.items()}
        waiting = {
            role: sum(core_wait_seconds(pid) for pid in group) for role, group in pids.items()
        }
        return cls(time.perf_counter(), cpu, waiting)

    def since(self, earlier: CpuSnapshot) -> CpuUsage:
        return CpuUsage(
            wall=self.wall - earlier.wall,
            seconds={role: self.cpu[role] - earlier.cpu.get(role, 0.0) for role in self.cpu},
            waiting={
                role: self.waiting[role] - earlier.waiting.get(role, 0.0) for role in self.waiting
            },
        )


@dataclass(frozen=True)
class CpuUsage:
    """CPU seconds each role spent over `wall` seconds."""

    wall: float
    seconds: dict[str, float]
    #: Seconds each role was runnable but waiting for a core (all its threads).
    waiting: dict[str, float] = field(default_factory=dict)

    def percent(self, role: str) -> float:
        """Share of one core, so 100 means one core busy the whole time."""
        return 100.0 * self.seconds.get(role, 0.0) / self.wall if self.wall > 0 else 0.0

    def waiting_percent(self, role: str) -> float:
        """Time waiting for a core, as a share of the wall time (summed over processes)."""
        return 100.0 * self.waiting.get(role, 0.0) / self.wall if self.wall > 0 else 0.0
