"""Reflection tuning's annotation of one failed episode (UI-TARS section 4.5): where it went wrong
and the preference pairs that gives. No Kafka, no browser: the pages come from a ``ReplayEnv``.

The annotator walks the episode from its start, replaying the recorded actions, and at every
state asks the scripted solver (producers.scripted, the cold start's annotators) what it would
do. ``tau`` is the first step whose recorded action does not match that choice
(``same_action``: the same type and arguments; a pointer anywhere inside the element the solver
aims at). That gives two pairs:

- error correction: the state before tau; chosen = the solver's action, rejected = the agent's;
- post reflection: the agent's wrong action is applied, and at the state it produced the solver's
  action is the recovery (a stateless solver reads the page: it unticks the wrong box, clears
  the focus it needs); chosen = that recovery, rejected = what the agent did next, or none when
  the episode stopped there. No post-reflection pair when the wrong action ended the episode,
  or when the agent's own next action was already the recovery.

Guarantee: a pair is emitted only for a state the replay reached exactly as recorded (the same
instruction, and with ``verify_screens`` the same screenshot bytes); anything else raises
``ReplayDiverged``, a task without a solver raises ``NoSolver``, and the stage dead-letters both.
Pair ids are (episode, kind, annotator): annotating an episode again gives the same ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from producers import scripted
from schemas.events import Observation, PairSide, PreferencePair, Step, Trajectory

ANNOTATOR = "scripted-v1"
POINTER_TYPES = frozenset({"click", "left_double", "right_single", "long_press", "scroll"})
SLACK_PX = 1.0  # a pointer on the target's border still hits it


class NoSolver(ValueError):
    """No scripted solver knows this task: nobody can say which action was wrong."""


class ReplayDiverged(RuntimeError):
    """The replay did not reach the state the episode recorded: the recorded actions no longer apply."""


class ReplayEnv(Protocol):
    """A sandbox that replays an episode and shows the DOM the solvers read. One may also have
    ``looks_same(recorded: Observation) -> bool``: whether the screen it shows now is the recorded
    one up to rendering noise (producers.annotate.BrowserReplay); without it only the recorded
    screenshot's own bytes count as the same screen."""

    async def reset(self, task: Any) -> tuple[Observation, dict[str, Any]]: ...
    async def step(self, action: Any) -> tuple[Observation, dict[str, Any], bool]: ...


def looks_same_of(env: ReplayEnv) -> Callable[[Observation], bool] | None:
    """``env``'s own judge of rendering noise (a ReplayEnv's optional ``looks_same``), or None:
    then only the recorded screenshot's bytes count as the same screen."""
    return getattr(env, "looks_same", None)


@dataclass
class Annotation:
    """What the annotator made of one episode: its pairs, and in a word why there are not two."""

    pairs: list[PreferencePair] = field(default_factory=list)
    outcome: str = "pairs"  # pairs | no_error | solver_abstained | error_ended_episode | agent_recovered | ...
    tau: int | None = None


# ---------------------------------------------------------------- judging one state


def _pixels(action: Any, dom: dict[str, Any]) -> tuple[float, float]:
    return action.x * dom["width"], action.y * dom["height"]


def target_element(action: Any, dom: dict[str, Any]) -> dict[str, Any] | None:
    """The element a click at the pointer of ``action`` hits: of those whose box holds it, the last
    in document order (the probe lists them so), which is drawn on top: a child after its parent,
    a later sibling over an earlier one (click-test-2's TWO over ONE)."""
    px, py = _pixels(action, dom)
    hits = [el for el in dom["elements"]
            if el["x"] - SLACK_PX <= px <= el["x"] + el["w"] + SLACK_PX
            and el["y"] - SLACK_PX <= py <= el["y"] + el["h"] + SLACK_PX]
    return hits[-1] if hits else None


def same_action(want: Any, got: Any, dom: dict[str, Any]) -> bool:
    """Whether ``got`` does what ``want`` (the solver's choice) does on this page.

    Pointer actions: the same type (and scroll direction), and ``got``'s pointer hits the element
    ``want``'s hits (``target_element``: a point of that element's box covered by another element
    hits the other; with no element there, within ``SLACK_PX`` of the point). Typed text: the same
    text. Anything else: equal actions. An unparsed action (None) never matches.
    """
    if got is None or got.type != want.type:
        return False
    if want.type in POINTER_TYPES:
        if getattr(want, "direction", None) != getattr(got, "direction", None):
            return False
        target = target_element(want, dom)
        if target is None:
            (gx, gy), (wx, wy) = _pixels(got, dom), _pixels(want, dom)
            return abs(gx - wx) <= SLACK_PX and abs(gy - wy) <= SLACK_PX
        return target_element(got, dom) is target
    return want == got


Solve = Callable[[str, str, dict[str, Any]], Any]


def solver_choice(task_name: str, instruction: str, dom: dict[str, Any], solve: Solve = scripted.solve) -> Any | None:
    """The solver's action for this state, or None when it abstains (it waits: it does not know)."""
    action = solve(task_name, instruction, dom)
    return None if action is None or action.type == "wait" else action


# ---------------------------------------------------------------- the pairs


def side_of(step: Step) -> PairSide:
    """The agent's side of a pair: its action and the text the policy wrote."""
    return PairSide(action=step.action, thought=step.thought, raw_output=step.raw_output)


def error_correction_pair(traj: Trajectory, tau: int, chosen: Any, annotator: str, created_at: float,
                          thought: str = "") -> PreferencePair:
    step = traj.steps[tau]
    return PreferencePair(
        episode_id=traj.episode_id, kind="error_correction", task=traj.task, tau=tau, step_index=tau,
        observation=step.observation, history=list(traj.steps[:tau]), chosen=PairSide(action=chosen, thought=thought),
        rejected=side_of(step), annotator=annotator, policy=step.policy, policy_version=step.policy_version,
        created_at=created_at)


def post_reflection_pair(traj: Trajectory, tau: int, after: Observation, chosen: Any, annotator: str,
                         created_at: float, thought: str = "") -> PreferencePair:
    """At the state step ``tau``'s wrong action produced: ``after`` (as recorded on step tau + 1,
    or as replayed when the episode stopped at tau)."""
    nxt = traj.steps[tau + 1] if tau + 1 < len(traj.steps) else None
    actor = nxt or traj.steps[tau]
    return PreferencePair(
        episode_id=traj.episode_id, kind="post_reflection", task=traj.task, tau=tau, step_index=tau + 1,
        observation=after, history=list(traj.steps[:tau + 1]), chosen=PairSide(action=chosen, thought=thought),
        rejected=side_of(nxt) if nxt is not None else None, annotator=annotator, policy=actor.policy,
        policy_version=actor.policy_version, created_at=created_at)


# ---------------------------------------------------------------- the walk


def check_replayable(traj: Trajectory, knows: Callable[[str], bool] = scripted.has_solver,
                     who: str = "scripted solver") -> None:
    """ReplayDiverged unless the recording is a whole episode from its first step (NoSolver first:
    ``who`` judges the steps and ``knows`` the tasks it can)."""
    if not knows(traj.task.name):
        raise NoSolver(f"no {who} for task {traj.task.name!r} (suite {traj.task.suite})")
    if traj.missing_steps or [s.step_index for s in traj.steps] != list(range(len(traj.steps))):
        raise ReplayDiverged(f"episode {traj.episode_id} has gaps (missing steps {list(traj.missing_steps)}): "
                             "its actions cannot be replayed in order")


def verify(index: int, replayed: Observation, recorded: Observation, screens: bool,
           looks_same: Callable[[Observation], bool] | None = None) -> None:
    """ReplayDiverged unless the replay shows the recorded state of step ``index``: the same
    instruction and (``screens``) the same screenshot, or one ``looks_same`` accepts."""
    if replayed.instruction != recorded.instruction:
        raise ReplayDiverged(f"step {index}: replayed instruction {replayed.instruction!r} != recorded "
                             f"{recorded.instruction!r} (another seed, data mode or task version)")
    if screens and replayed.screenshot.sha256 != recorded.screenshot.sha256 and not (
            looks_same is not None and looks_same(recorded)):
        raise ReplayDiverged(f"step {index}: replayed screen {replayed.screenshot.sha256[:12]} != recorded "
                             f"{recorded.screenshot.sha256[:12]} (another step_ms, browser or page version?)")


async def annotate(traj: Trajectory, env: ReplayEnv, *, annotator: str = ANNOTATOR, verify_screens: bool = True,
                   solve: Solve = scripted.solve, clock: Callable[[], float] = time.time,
                   thought: Callable[[Any], str] = scripted.thought,
                   knows: Callable[[str], bool] = scripted.has_solver, who: str = "scripted solver",
                   after_error: bool = True) -> Annotation:
    """Replay ``traj`` in ``env`` up to its first wrong step and the state after it; its pairs.
    The annotator's sides carry ``thought(action)``: the scripted solvers' Thought, as on their
    demonstrations (without it a language policy's DPO learns to stop writing a Thought, not where
    to click). ``solve``, ``knows`` and ``who``: the judge of each state, the tasks it knows and its
    name (the scripted solvers by default; app.ui.correct's person reads the screen instead).
    ``after_error`` False: stop at the first wrong step, with its error-correction pair only (outcome
    "error_found"; the state after it is neither replayed nor judged)."""
    check_replayable(traj, knows, who)
    steps, name, looks = traj.steps, traj.task.name, looks_same_of(env)
    obs, dom = await env.reset(traj.task)
    for i, step in enumerate(steps):
        verify(i, obs, step.observation, verify_screens, looks)
        want = solver_choice(name, obs.instruction, dom, solve)
        if want is None:
            return Annotation(outcome="solver_abstained")
        if not same_action(want, step.action, dom):
            if not after_error:
                return Annotation([error_correction_pair(traj, i, want, annotator, clock(), thought(want))], "error_found", i)
            return await _after_error(traj, i, want, env, annotator, verify_screens, solve, clock(), thought)
        obs, dom, done = await env.step(step.action)
        if done != (i + 1 == len(steps) and step.done):
            raise ReplayDiverged(f"step {i}: the replay {'ended' if done else 'went on'}, the episode did not")
    return Annotation(outcome="no_error")


async def _after_error(traj: Trajectory, tau: int, want: Any, env: ReplayEnv, annotator: str, verify_screens: bool,
                       solve: Solve, created_at: float, thought: Callable[[Any], str]) -> Annotation:
    pairs = [error_correction_pair(traj, tau, want, annotator, created_at, thought(want))]
    after, dom, done = await env.step(traj.steps[tau].action)
    if done:
        return Annotation(pairs, "error_ended_episode", tau)
    nxt = traj.steps[tau + 1] if tau + 1 < len(traj.steps) else None
    if nxt is not None:
        verify(tau + 1, after, nxt.observation, verify_screens, looks_same_of(env))
    recovery = solver_choice(traj.task.name, after.instruction, dom, solve)
    if recovery is None:
        return Annotation(pairs, "solver_abstained_after_error", tau)
    if nxt is not None and same_action(recovery, nxt.action, dom):
        return Annotation(pairs, "agent_recovered", tau)
    recorded = nxt.observation if nxt is not None else after
    pairs.append(post_reflection_pair(traj, tau, recorded, recovery, annotator, created_at, thought(recovery)))
    return Annotation(pairs, "pairs", tau)
