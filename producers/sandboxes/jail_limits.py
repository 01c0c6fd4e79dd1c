"""Resource limits for jailed commands: a cgroup per command (processes, memory) plus rlimits.

RLIMIT_NPROC cannot stop a fork bomb here: the jail runs as root's uid outside its user
namespace, and the kernel never applies RLIMIT_NPROC to root. A cgroup's ``pids`` and
``memory`` controllers do, whatever the uid: ``Cgroup.create`` makes one per command (cgroup v2
``pids.max`` / ``memory.max``, or v1 ``pids`` and ``memory`` hierarchies), the child joins it
between fork and exec, and ``remove`` deletes it once everything in it is dead. Where no
controller is writable, ``available()`` is False and the jail refuses to run (fails closed)
unless weak isolation was explicitly allowed.
"""

from __future__ import annotations

import os
import resource
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    pids: int = 64  # processes and threads alive at once
    memory_bytes: int = 512 << 20
    cpu_seconds: int = 20  # CPU time of each process (RLIMIT_CPU)
    file_bytes: int = 1 << 20  # largest file it may write (RLIMIT_FSIZE)
    tmp_bytes: int = 16 << 20  # size of its private /tmp


def _v2_dir() -> Path | None:
    return ROOT if (ROOT / "cgroup.controllers").exists() else None


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def available() -> bool:
    """Can this process create cgroups that limit processes and memory?"""
    v2 = _v2_dir()
    if v2 is not None:
        controllers = (v2 / "cgroup.subtree_control").read_text().split() if (v2 / "cgroup.subtree_control").exists() else []
        return _writable(v2) and {"pids", "memory"} <= set(controllers)
    return _writable(ROOT / "pids") and _writable(ROOT / "memory")


@dataclass
class Cgroup:
    dirs: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, limits: Limits) -> "Cgroup":
        name = f"flywheel-jail-{uuid.uuid4().hex[:12]}"
        v2 = _v2_dir()
        if v2 is not None:
            d = v2 / name
            d.mkdir()
            (d / "pids.max").write_text(str(limits.pids))
            (d / "memory.max").write_text(str(limits.memory_bytes))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            return cls([d])
        pids, mem = ROOT / "pids" / name, ROOT / "memory" / name
        pids.mkdir()
        mem.mkdir()
        (pids / "pids.max").write_text(str(limits.pids))
        (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        swap = mem / "memory.memsw.limit_in_bytes"
        if swap.exists():
            try:
                swap.write_text(str(limits.memory_bytes))
            except OSError:
                pass  # swap accounting off: the memory limit alone
        return cls([pids, mem])

    def join(self) -> None:
        """Called in the child between fork and exec: everything it starts stays inside."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def kill_all(self) -> None:
        """SIGKILL whatever is still inside (a setsid survivor included)."""
        import signal

        for d in self.dirs:
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remaining(self) -> int:
        try:
            return len((self.dirs[0] / "cgroup.procs").read_text().split()) if self.dirs else 0
        except OSError:
            return 0

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass  # still busy: the kernel frees it once the last process is reaped


def set_rlimits(limits: Limits) -> None:
    """In the child between fork and exec: per-process caps the cgroup does not give."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
