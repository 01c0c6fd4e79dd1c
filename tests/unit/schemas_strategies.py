"""Hypothesis strategies for every schemas model, field by field from the models' constraints.

Shared by the schemas tests (and usable by anyone who needs valid random events):
``ACTIONS``, ``STEPS``, ``EVENTS[name]`` for each entry of ``schemas.events.EVENT_TYPES``.
"""

from __future__ import annotations

import base64

from hypothesis import strategies as st

from schemas import actions as A
from schemas import events as E

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
unit = st.floats(0.0, 1.0)
nonneg = st.floats(0.0, 1e9, allow_nan=False)
ts = st.floats(0.0, 4e9, allow_nan=False)
ids = st.from_regex(r"[A-Za-z0-9_.:/-]{1,24}", fullmatch=True)
names = st.text(min_size=1, max_size=16)
texts = st.text(max_size=40)
sha = st.text("0123456789abcdef", min_size=64, max_size=64)
json_scalar = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | finite | st.text(max_size=10)
json_value = st.recursive(json_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                          max_leaves=8)
json_dict = st.dictionaries(st.text(max_size=8), json_value, max_size=4)
metric_dict = st.dictionaries(st.text(max_size=8), finite, max_size=4)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _point(cls):
    return st.builds(cls, x=unit, y=unit)


ACTIONS = st.one_of(
    _point(A.Click), _point(A.LeftDouble), _point(A.RightSingle), _point(A.LongPress),
    st.builds(A.Drag, x1=unit, y1=unit, x2=unit, y2=unit),
    st.builds(A.Scroll, x=unit, y=unit, direction=st.sampled_from(["up", "down", "left", "right"])),
    st.builds(A.Type, content=texts), st.builds(A.Hotkey, key=st.text(min_size=1, max_size=20)),
    st.builds(A.Wait), st.builds(A.Finished, content=texts), st.builds(A.CallUser),
    st.builds(A.PressBack), st.builds(A.PressHome), st.builds(A.PressEnter),
    st.builds(A.OpenApp, app_name=st.text(min_size=1, max_size=20)),
    st.builds(A.Shell, command=texts), st.builds(A.FileRead, path=st.text(min_size=1, max_size=30)),
    st.builds(A.FileWrite, path=st.text(min_size=1, max_size=30), content=texts),
)

BLOBS = st.builds(E.BlobRef, sha256=sha, uri=st.text(min_size=1, max_size=40),
                  media_type=st.sampled_from(["image/png", "image/jpeg", "application/octet-stream"]),
                  width=st.integers(0, 4096), height=st.integers(0, 4096), size_bytes=st.integers(0, 2**40))
OBSERVATIONS = st.builds(E.Observation, screenshot=BLOBS, screen_width=st.integers(1, 16384),
                         screen_height=st.integers(1, 16384), instruction=texts, url=texts, window_title=texts)
TASKS = st.builds(E.TaskSpec, task_id=ids, suite=st.sampled_from(["miniwob", "desktop", "games"]), name=names,
                  seed=st.integers(-(2**63), 2**63 - 1), max_steps=st.integers(1, 1000),
                  timeout_s=st.floats(0.001, 3600), params=json_dict, submitted_at=ts)
STARTED = st.builds(E.EpisodeStarted, episode_id=ids, ts=ts, task=TASKS, sandbox=names, worker_id=names,
                    policy=names, policy_version=st.integers(0, 2**31))


def steps(episode_id=ids, step_index=st.integers(0, 1000)):
    return st.builds(
        E.Step, episode_id=episode_id, ts=ts, step_index=step_index, started_at=ts, observation=OBSERVATIONS,
        thought=texts, action=st.none() | ACTIONS, raw_output=texts, parse_error=st.none() | texts,
        policy=names, policy_version=st.integers(0, 2**31), logprob=st.floats(-1e6, 0.0), value=st.none() | finite,
        reward=finite, sampled=st.booleans(), done=st.booleans(), latency_policy_ms=nonneg, latency_env_ms=nonneg,
        error=st.none() | texts, next_screenshot_sha256=st.none() | sha)


STEPS = steps()
ENDED = st.builds(E.EpisodeEnded, episode_id=ids, ts=ts, num_steps=st.integers(0, 1000), outcome_reward=finite,
                  success=st.booleans(), reason=st.sampled_from(["done", "step_budget", "timeout"]),
                  score=st.none() | finite, normalised_score=st.none() | finite)
ABORTED = st.builds(E.EpisodeAborted, episode_id=ids, ts=ts, num_steps=st.integers(0, 1000), reason=texts,
                    infra_failure=st.booleans())
EPISODE_EVENTS = st.one_of(STARTED, STEPS, ENDED, ABORTED)
TRAJECTORIES = st.builds(
    E.Trajectory, episode_id=ids, task=TASKS, sandbox=names, worker_id=names, policy=names,
    steps=st.lists(STEPS, max_size=3), status=st.sampled_from(["ended", "aborted"]), outcome_reward=finite,
    success=st.booleans(), end_reason=texts, infra_failure=st.booleans(), started_at=ts, ended_at=ts,
    duplicates_dropped=st.integers(0, 100), missing_steps=st.lists(st.integers(0, 1000), max_size=3),
    score=st.none() | finite, normalised_score=st.none() | finite)
SCORED = st.builds(
    E.ScoredTrajectory, trajectory=TRAJECTORIES, scorer=names, scorer_version=names, reward=finite,
    components=metric_dict, verdict=st.sampled_from([0, 1]), rl_eligible=st.booleans(),
    routes=st.lists(st.sampled_from(["sft", "ct", "rl"]), max_size=3, unique=True),
    route_reasons=st.lists(texts, max_size=3), anomalies=st.lists(texts, max_size=3), scored_at=ts)
POLICIES = st.builds(E.PolicyVersion, policy=names, version=st.integers(0, 2**31), kind=st.sampled_from(["pixel", "lm"]),
                     uri=st.text(min_size=1, max_size=40), sha256=sha, parent=st.none() | st.integers(0, 2**31),
                     created_at=ts, metrics=metric_dict, config=json_dict)
METRICS = st.builds(E.TrainerMetrics, run_id=ids, update=st.integers(0, 2**31), policy=names,
                    policy_version=st.integers(0, 2**31), ts=ts, metrics=metric_dict)
DEAD_LETTERS = st.builds(E.DeadLetter, stage=names, error_type=names, message=texts, source_topic=names,
                         source_partition=st.integers(-1, 1000), source_offset=st.integers(-1001, 2**62),
                         original_key=st.none() | st.binary(max_size=20).map(_b64),
                         original_value=st.binary(max_size=40).map(_b64),
                         ts=ts)


@st.composite
def preference_pairs(draw):
    kind = draw(st.sampled_from(["error_correction", "post_reflection"]))
    tau = draw(st.integers(0, 2))
    index = tau + (kind == "post_reflection")
    side = st.builds(E.PairSide, action=st.none() | ACTIONS, thought=texts, raw_output=texts)
    rejected = side if kind == "error_correction" else st.none() | side
    return E.PreferencePair(
        episode_id=draw(ids), kind=kind, task=draw(TASKS), tau=tau, step_index=index,
        observation=draw(OBSERVATIONS), history=draw(st.lists(STEPS, min_size=index, max_size=index)),
        chosen=E.PairSide(action=draw(ACTIONS), thought=draw(texts)), rejected=draw(rejected),
        annotator=draw(names), policy=draw(names), policy_version=draw(st.integers(0, 2**31)), created_at=draw(ts))


PAIRS = preference_pairs()

EVENTS = {
    "TaskSpec": TASKS,
    "EpisodeEvent": EPISODE_EVENTS,
    "Trajectory": TRAJECTORIES,
    "ScoredTrajectory": SCORED,
    "PolicyVersion": POLICIES,
    "TrainerMetrics": METRICS,
    "DeadLetter": DEAD_LETTERS,
    "PreferencePair": PAIRS,
}
