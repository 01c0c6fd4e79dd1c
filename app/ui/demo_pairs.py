"""Preference pairs from demonstrations recorded through the UI: where a policy would leave the
person's path, the person's action is preferred to the policy's.

A correction (app.ui.correct) is one pair at the first wrong step of the policy's own failed
episode. A demonstration holds no wrong step, so it gives its pair where the policy, put in the
person's place, would first do something else: at each state of the demonstration, in order, the
policy's greedy action (what it would do there) is judged against the person's recorded action by
the same rule the corrections' walk uses (``producers.reflection.same_action`` on the replayed
page: a click hits the element the person's hits). The first state where they differ gives one
error-correction pair: chosen the person's action, rejected the policy's. The states and the page
come from a replay of the demonstration in a browser sandbox of this process (its task and seed,
the person's actions in order, each state checked against the recorded screenshot), as the
corrector replays a failed episode. A demonstration the policy follows to its end gives none.

So a demonstration and a correction each give at most one pair of one kind, which `flywheel dpo`
reads alike (app.ablation.corrections compares what each is worth). The pairs go to
flywheel.pairs.v1 under the demonstrator's own name (``human:<name>``, the demonstrations' policy).

    python -m app.ui.demo_pairs --policy pixel-x --version 147 --demonstrator alice --per-task 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from app.phases import human_demonstrations
from app.ui.corrections import publish_pair
from infra.runtime import versions
from infra.runtime.config import add_arguments
from infra.runtime.policy import load_policy_version, screen, state_at
from infra.runtime.settings import Settings, load_settings
from producers.annotate import BrowserReplay
from producers.human import human_policy
from producers.reflection import ReplayDiverged, looks_same_of, same_action, side_of, verify
from schemas.blobs import BlobStore
from schemas.events import PairSide, PreferencePair, Trajectory

STEP_MS = 100  # the Annotate view's page time per step (app.ui.annotate.STEP_MS): a replay needs the same
REPLAY_TIMEOUT_S = 120.0  # one demonstration's replay


@dataclass
class Probed:
    """What the policy made of one demonstration."""

    episode_id: str
    task: str
    outcome: str  # paired | follows (the policy does what the person did at every state) | diverged | error
    tau: int | None = None  # the first state where the policy would leave the person's path
    pair: str = ""  # the pair's id
    why: str = ""


def inputs_of(traj: Trajectory, store) -> list[Any]:
    """Each state of ``traj`` as a policy's ``act`` takes it: screenshot, instruction, earlier steps."""
    return [state_at(traj.steps, i, screen(store, step.observation.screenshot)) for i, step in enumerate(traj.steps)]


async def first_departure(traj: Trajectory, wanted: list[Any], env) -> int | None:
    """The first state of ``traj`` (replayed in ``env``) where ``wanted[i]``, the policy's action
    there, does not do what the person's recorded action does; None when it follows them to the end.
    ReplayDiverged when the replay does not show the recorded states."""
    obs, dom = await env.reset(traj.task)
    for i, step in enumerate(traj.steps):
        verify(i, obs, step.observation, True, looks_same_of(env))
        if not same_action(step.action, wanted[i], dom):
            return i
        obs, dom, done = await env.step(step.action)
        if done != (i + 1 == len(traj.steps) and step.done):
            raise ReplayDiverged(f"step {i}: the replay {'ended' if done else 'went on'}, the demonstration did not")
    return None


def departure_pair(traj: Trajectory, tau: int, rejected: PairSide, policy: str, version: int,
                   created_at: float) -> PreferencePair:
    """The error-correction pair at state ``tau`` of a demonstration: the person's action chosen,
    the policy's (``rejected``, of ``policy`` v``version``) not; annotated by the demonstrator."""
    step = traj.steps[tau]
    return PreferencePair(
        episode_id=traj.episode_id, kind="error_correction", task=traj.task, tau=tau, step_index=tau,
        observation=step.observation, history=list(traj.steps[:tau]), chosen=side_of(step), rejected=rejected,
        annotator=traj.policy, policy=policy, policy_version=version, created_at=created_at)


def pick_demonstrations(demos: list[Trajectory], per_task: dict[str, int]) -> dict[str, list[Trajectory]]:
    """Each task's demonstrations in the order they were recorded (their task seed), for the walk
    to take until ``per_task[task]`` have given a pair; tasks not named are left out."""
    out: dict[str, list[Trajectory]] = {t: [] for t, n in per_task.items() if n > 0}
    seen = set()
    for d in sorted(demos, key=lambda d: (d.task.name, d.task.seed, d.episode_id)):
        if d.task.name in out and d.episode_id not in seen:  # a demonstration routed twice is walked once
            seen.add(d.episode_id)
            out[d.task.name].append(d)
    return out


def pair_demonstrations(settings: Settings, demos: dict[str, list[Trajectory]], per_task: dict[str, int],
                        policy_name: str, version: int, say=print, step_ms: int = STEP_MS) -> list[Probed]:
    """Walk each task's demonstrations until ``per_task`` of them gave a pair, publishing each pair
    (acknowledged) to flywheel.pairs.v1; -> what each walked demonstration gave."""
    store = BlobStore(settings.blob_root)
    pv = versions.history(settings, policy_name, [version])[version]
    policy = load_policy_version(pv, store).eval()
    env, done, loop = BrowserReplay(store, step_ms), [], asyncio.new_event_loop()
    try:
        loop.run_until_complete(env.start())
        for task, trajs in demos.items():
            paired = 0
            for traj in trajs:
                if paired >= per_task[task]:
                    break
                p = _one(loop, env, policy, store, traj, pv, lambda pair: publish_pair(settings, pair))
                done.append(p)
                paired += p.outcome == "paired"
                say(f"{task} {p.episode_id}: {p.outcome}" + (f" at step {p.tau}, pair {p.pair}" if p.pair else "")
                    + (f" ({p.why})" if p.why else ""))
            if paired < per_task[task]:
                say(f"{task}: {paired} pairs of the {per_task[task]} asked ({len(trajs)} demonstrations)")
    finally:
        try:
            loop.run_until_complete(env.close())
        finally:
            loop.close()
    return done


def _one(loop, env, policy, store, traj: Trajectory, pv, publish) -> Probed:
    try:
        decisions = policy.act(inputs_of(traj, store), greedy=True)
        wanted = [d.action for d in decisions]
        tau = loop.run_until_complete(asyncio.wait_for(first_departure(traj, wanted, env), REPLAY_TIMEOUT_S))
    except ReplayDiverged as exc:
        return Probed(traj.episode_id, traj.task.name, "diverged", why=str(exc))
    except Exception as exc:  # noqa: BLE001 - one demonstration's failure is reported, the rest go on
        loop.run_until_complete(env.restart())  # a replay cut off mid-way leaves its page in any state
        return Probed(traj.episode_id, traj.task.name, "error", why=f"{type(exc).__name__}: {str(exc)[:300]}")
    if tau is None:
        return Probed(traj.episode_id, traj.task.name, "follows")
    d = decisions[tau]
    pair = departure_pair(traj, tau, PairSide(action=d.action, thought=d.thought, raw_output=d.raw_output),
                          pv.policy, pv.version, time.time())
    publish(pair)
    return Probed(traj.episode_id, traj.task.name, "paired", tau, pair.event_id)


def per_task_counts(text: str, tasks: list[str], default: int) -> dict[str, int]:
    """``task=n,...`` (from --counts) or ``default`` for each of ``tasks``; ValueError on a bad entry."""
    if not text:
        return {t: default for t in tasks}
    out = {}
    for item in text.split(","):
        task, eq, n = item.partition("=")
        if not eq or not n.isdigit():
            raise ValueError(f"--counts takes task=n,...; got {item!r}")
        out[task] = int(n)
    return out


def tally(probed: list[Probed]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for p in probed:
        t = out.setdefault(p.task, {})
        t[p.outcome] = t.get(p.outcome, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.ui.demo_pairs", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True, help="the policy whose departures from the person are paired")
    ap.add_argument("--version", type=int, required=True, help="its version (the one DPO will start from)")
    ap.add_argument("--demonstrator", required=True, help="whose demonstrations: human:<demonstrator> (the pairs' annotator)")
    ap.add_argument("--tasks", default="", help="comma-separated (default: every task demonstrated)")
    ap.add_argument("--per-task", type=int, default=5, help="pairs per task: demonstrations are walked until this many gave one")
    ap.add_argument("--counts", default="", help="or per task: task=n,... (overrides --per-task and --tasks)")
    ap.add_argument("--step-ms", type=int, default=STEP_MS, help="page time per step the demonstrations were played with")
    add_arguments(ap, Settings)
    args = ap.parse_args(argv)
    who = human_policy(args.demonstrator)
    settings = load_settings(vars(args))
    demos = [s.trajectory for s in human_demonstrations(settings, asked="app.ui.demo_pairs")
             if s.trajectory.policy == who]
    tasks = [t for t in args.tasks.split(",") if t] or sorted({d.task.name for d in demos})
    try:
        counts = per_task_counts(args.counts, tasks, args.per_task)
    except ValueError as exc:
        ap.error(str(exc))
    if not demos:
        ap.error(f"no successful demonstration by {who} on flywheel.sft.v1 ({settings.topic_prefix or 'no'} topic prefix)")
    probed = pair_demonstrations(settings, pick_demonstrations(demos, counts), counts, args.policy, args.version,
                                 say=lambda line: print(line, flush=True), step_ms=args.step_ms)
    print(json.dumps({"annotator": who, "by_task": tally(probed), "demonstrations": [asdict(p) for p in probed]}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
