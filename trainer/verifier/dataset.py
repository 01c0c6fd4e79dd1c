"""What the verifier learns from: per episode, what the policy saw and did, and the page's verdict.

An ``Example`` holds exactly what a judge request carries (streams.judge.judge_request: the task's
name, the instruction, each step's screenshot sha256 and action, the screenshot after the last
step) plus the label. Training rows and served requests both become ``Example``s here, so the
model reads the same input at training and at serving, and a label cannot reach it at serving
(the request has none). ``examples_from_rows`` builds them from the log's ``trajectories`` and
``steps`` tables (one SQL query, ``EPISODES_SQL``); the screenshots stay in the blob store and are
read when featurised.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SHA = re.compile(r"^[0-9a-f]{64}$")

# Episodes judged at their end by the page (no game), ended (not aborted), with every step: what
# the verifier can be trained on, each step a row, in order.
EPISODES_SQL = """SELECT t.episode_id, t.task_name, t.success, s.step_index, s.instruction,
    s.screenshot_sha256, s.action, s.next_screenshot_sha256
FROM (SELECT episode_id, task_name, success FROM trajectories FINAL
      WHERE status = 'ended' AND NOT infra_failure AND isNull(normalised_score) AND num_steps > 0
          AND empty(missing_steps)) AS t
INNER JOIN (SELECT episode_id, step_index, instruction, screenshot_sha256, action, next_screenshot_sha256
            FROM steps FINAL) AS s USING (episode_id)
ORDER BY t.episode_id, s.step_index"""


@dataclass(frozen=True)
class Example:
    episode_id: str
    task: str
    instruction: str
    screenshots: tuple[str, ...]  # each step's screenshot sha256, in step order
    actions: tuple[dict | None, ...]  # each step's action (None: the output did not parse)
    final_screenshot: str | None  # the screen after the last step, when recorded
    label: int | None = None  # the page's verdict (1: success); None for a served request


def examples_from_rows(rows: Iterable[Sequence]) -> list[Example]:
    """``EPISODES_SQL``'s rows (ordered by episode and step) -> one Example per episode. A step
    whose screenshot is missing drops its episode (it cannot be shown to the model)."""
    out: list[Example] = []
    current: list[Sequence] = []
    for row in rows:
        if current and row[0] != current[0][0]:
            out += _example(current)
            current = []
        current.append(row)
    if current:
        out += _example(current)
    return out


def _example(rows: list[Sequence]) -> list[Example]:
    episode_id, task, success = rows[0][0], rows[0][1], rows[0][2]
    screenshots = tuple(r[5] for r in rows)
    if not all(isinstance(s, str) and _SHA.match(s) for s in screenshots):
        return []
    final = rows[-1][7] if isinstance(rows[-1][7], str) and _SHA.match(rows[-1][7]) else None
    return [Example(episode_id=episode_id, task=task, instruction=rows[0][4] or "", screenshots=screenshots,
                    actions=tuple(json.loads(r[6]) if r[6] else None for r in rows), final_screenshot=final,
                    label=int(bool(success)))]


def example_from_request(request: object) -> Example:
    """A judge request (streams.judge.judge_request) -> an unlabelled Example; ValueError saying
    what is wrong with a malformed one (the server answers it with a 400)."""
    if not isinstance(request, dict):
        raise ValueError("the body must be a JSON object {\"request\": {...}}")
    missing = {"task", "instruction", "steps"} - set(request)
    if missing:
        raise ValueError(f"the request lacks {', '.join(sorted(missing))}")
    task, instruction, steps = request["task"], request["instruction"], request["steps"]
    if not isinstance(task, str) or not isinstance(instruction, str):
        raise ValueError("task and instruction must be strings")
    if not isinstance(steps, list) or not steps:
        raise ValueError("steps must be a non-empty list of {\"screenshot\": sha256, \"action\": {...}}")
    screenshots, actions = [], []
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not _is_sha(step.get("screenshot")):
            raise ValueError(f"step {i}: screenshot must be a sha256 hex digest")
        action = step.get("action")
        if action is not None and not (isinstance(action, dict) and isinstance(action.get("type"), str)):
            raise ValueError(f"step {i}: action must be null or an object with a type")
        screenshots.append(step["screenshot"])
        actions.append(action)
    final = request.get("final_screenshot")
    if final is not None and not _is_sha(final):
        raise ValueError("final_screenshot must be null or a sha256 hex digest")
    return Example(episode_id="", task=task, instruction=instruction, screenshots=tuple(screenshots),
                   actions=tuple(actions), final_screenshot=final)


def _is_sha(value: object) -> bool:
    return isinstance(value, str) and bool(_SHA.match(value))


def split_by_task(examples: Sequence[Example], holdout: Iterable[str]) -> tuple[list[Example], list[Example]]:
    """(training examples, held-out examples): whole tasks held out, so the held-out scores say
    how the verifier does on tasks it never saw."""
    held = set(holdout)
    return [e for e in examples if e.task not in held], [e for e in examples if e.task in held]


def calibration_split(examples: Sequence[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(fit, calibrate): a random ``fraction`` of the training tasks' episodes kept out of the fit,
    to choose the threshold on scores the model did not train on."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    n_cal = int(round(len(order) * fraction))
    return order[n_cal:], order[:n_cal]
