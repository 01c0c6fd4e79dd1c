"""Pluggable outcome reward model / judge (off by default).

A judge maps a trajectory to a score in [0, 1]. ``HttpJudge`` POSTs the trajectory as JSON
(``{"trajectory": {...}}``) to a URL and reads ``{"score": float}`` back; it retries a few times
and then raises ``JudgeError``, so the scorer's caller dead-letters the trajectory instead of
scoring it inconsistently (a replay of the DLQ scores it once the judge is back).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Protocol

from schemas.codec import to_dict
from schemas.events import Trajectory


class JudgeError(RuntimeError):
    """The judge could not score a trajectory."""


class OutcomeJudge(Protocol):
    def judge(self, traj: Trajectory) -> float: ...


class HttpJudge:
    def __init__(self, url: str, timeout_s: float = 10.0, retries: int = 3) -> None:
        self.url, self.timeout_s, self.retries = url, timeout_s, retries

    def judge(self, traj: Trajectory) -> float:
        body = json.dumps({"trajectory": to_dict(traj)}).encode()
        last: Exception | None = None
        for attempt in range(self.retries):
            req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    score = float(json.loads(resp.read())["score"])
            except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
                last = exc
                time.sleep(0.2 * 2 ** attempt)
                continue
            if not 0.0 <= score <= 1.0:
                raise JudgeError(f"judge at {self.url} returned score {score} outside [0, 1]")
            return score
        raise JudgeError(f"judge at {self.url} failed {self.retries} times: {last}")


def make_judge(url: str, timeout_s: float = 10.0) -> OutcomeJudge | None:
    return HttpJudge(url, timeout_s) if url else None
