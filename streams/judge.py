"""Pluggable outcome reward model / judge (off by default).

A judge maps a trajectory to a score in [0, 1]. It sees only what a policy may see: the request
(``judge_request``) is the task's name, the instruction, each step's screenshot (its blob's
sha256, read from the blob store) and action, and the screenshot after the last step; never the
trajectory's success, rewards, outcome or score, which are the labels a learned judge is trained
and measured against (a judge that read them would score perfectly and mean nothing).

``HttpJudge`` POSTs ``{"request": judge_request(traj)}`` as JSON to a URL and reads
``{"score": float}`` back (`flywheel verifier serve` implements it); it retries a few times and
then raises ``JudgeError``, so the scorer's caller dead-letters the trajectory instead of scoring
it inconsistently (a replay of the DLQ scores it once the judge is back).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Protocol

from schemas.events import Step, Trajectory


class JudgeError(RuntimeError):
    """The judge could not score a trajectory."""


def _step_request(step: Step) -> dict:
    action = step.action.model_dump(mode="json") if step.action is not None else None
    return {"screenshot": step.observation.screenshot.sha256, "action": action}


def judge_request(traj: Trajectory) -> dict:
    """What a judge is shown of ``traj``: what the policy saw and did, no label. Every field is
    named here, so a new field of ``Trajectory`` reaches the judge only by an edit of this
    function (tests/unit/test_judge_request.py fails on a label)."""
    steps = traj.steps
    return {
        "task": traj.task.name,
        "instruction": steps[0].observation.instruction if steps else "",
        "steps": [_step_request(s) for s in steps],
        "final_screenshot": steps[-1].next_screenshot_sha256 if steps else None,
    }


class OutcomeJudge(Protocol):
    def judge(self, traj: Trajectory) -> float: ...


class HttpJudge:
    def __init__(self, url: str, timeout_s: float = 10.0, retries: int = 3) -> None:
        self.url, self.timeout_s, self.retries = url, timeout_s, retries

    def judge(self, traj: Trajectory) -> float:
        body = json.dumps({"request": judge_request(traj)}).encode()
        last: Exception | None = None
        for attempt in range(self.retries):
            req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    score = float(json.loads(resp.read())["score"])
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500:  # the judge refused this request: asking again cannot help
                    raise JudgeError(f"judge at {self.url} refused the request ({exc.code}): {_reason(exc)}") from exc
                last = exc
                time.sleep(0.2 * 2 ** attempt)
                continue
            except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
                last = exc
                time.sleep(0.2 * 2 ** attempt)
                continue
            if not 0.0 <= score <= 1.0:
                raise JudgeError(f"judge at {self.url} returned score {score} outside [0, 1]")
            return score
        raise JudgeError(f"judge at {self.url} failed {self.retries} times: {last}")


def _reason(exc: urllib.error.HTTPError) -> str:
    """The judge's own error message (``flywheel verifier serve`` answers ``{"error": ...}``), else the status text."""
    try:
        return str(json.loads(exc.read())["error"])[:300]
    except (OSError, ValueError, KeyError, TypeError):
        return str(exc.reason)


def make_judge(url: str, timeout_s: float = 10.0) -> OutcomeJudge | None:
    return HttpJudge(url, timeout_s) if url else None
