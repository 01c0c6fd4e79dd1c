"""A consume-loop process the crash test kills (run as a script, never imported by the suite).

    python loop_child.py BOOTSTRAP PREFIX GROUP TOPIC OUT_FILE MARKER_FILE CHECKPOINT_FILE|-

Its stage appends the offsets it flushes to OUT_FILE (fsynced); on its second flush it writes
MARKER_FILE and waits, so the parent can SIGKILL it after a flush and before its commit.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import BaseModel  # noqa: E402

from infra.runtime.consume_loop import CheckpointFile, ConsumeLoop, LoopConfig  # noqa: E402
from infra.runtime.settings import load_settings  # noqa: E402


class State(BaseModel):
    flushes: int = 0


class OffsetWriter:
    """Flushes the offsets it was given to a file; ``hang_on`` stalls that flush's commit."""

    def __init__(self, out: Path, marker: Path | None, hang_on: int, ready_at: int = 10) -> None:
        self.out, self.marker, self.hang_on, self.ready_at = out, marker, hang_on, ready_at
        self.buffer: list[int] = []
        self.flushes = 0

    def add(self, record, dlq) -> None:
        self.buffer.append(record.offset())

    def ready(self) -> bool:
        return len(self.buffer) >= self.ready_at

    def flush(self, dlq) -> None:
        with open(self.out, "a") as fh:
            fh.write("".join(f"{o}\n" for o in self.buffer))
            fh.flush()
            os.fsync(fh.fileno())
        self.buffer = []
        self.flushes += 1
        if self.flushes == self.hang_on and self.marker is not None:
            self.marker.write_text("flushed, not committed")
            time.sleep(120)  # the parent kills us here: between the flush and the commit


def run(bootstrap: str, prefix: str, group: str, topic: str, out: Path, marker: Path | None, ckpt: str,
        hang_on: int, stop: threading.Event) -> None:
    settings = load_settings({"kafka_bootstrap": bootstrap, "topic_prefix": prefix})
    commit = CheckpointFile(Path(ckpt), State) if ckpt != "-" else None
    cfg = LoopConfig(poll_messages=5, flush_interval_s=3600, exit_when_idle_s=2.0)
    # a short session: the restart need not wait 45 s for the killed member to leave the group
    ConsumeLoop.create(settings, group, [topic], OffsetWriter(out, marker, hang_on), "crash-test", cfg, commit,
                       **{"session.timeout.ms": 6000}).run(stop)


if __name__ == "__main__":
    b, p, g, t, o, m, c = sys.argv[1:8]
    run(b, p, g, t, Path(o), Path(m), c, hang_on=2, stop=threading.Event())
