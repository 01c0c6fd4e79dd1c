"""Correct failed episodes through the Episodes view, Playwright playing the person.

For each failed episode a person opens its replay, steps to the first wrong step and gives the
right action there (docs/ui.md, "Corrections"). Playwright plays that person as the recorder
(app.ui.record) plays one recording: it looks at the screen through the task's routine
(app.ui.record_routines: the instruction and the visible elements, never a scripted solver).
Screenshots are pixels a routine cannot read, so the person's eyes are a replay of the episode in
a browser sandbox of this process (the task and seed the episode recorded, its actions in order,
each state checked against the recorded screenshot: producers.reflection's walk, with the routine
where the annotator has a scripted solver). The first step where the episode's action is not what
the routine would do is the first wrong one; the person then marks it in the Episodes view (the
replay's step, a click on its screenshot where the routine's element is, their name) and presses
Save correction: the UI writes the error-correction pair to flywheel.pairs.v1 as for any person,
under ``human:<annotator>``, which `flywheel dpo` reads.

An episode where the person would have done what the agent did at every step (``no_error``), or
where at some step they recognise nothing (``person_sees_nothing``), gets no correction; one whose
replay does not reach the recorded screens (``diverged``) neither. Each is reported.

    python -m app.ui.correct --policy pixel-few-n3-s0 --tasks click-tab-2 --n 5 --annotator alice
    python -m app.ui.correct --policy pixel-few-n3-s0 --tasks click-tab-2 --n 30 --corrections 5 --annotator alice
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from app.ui.corrections import ENDED_SQL, LOOKBACK_S, find_trajectory
from app.ui.record import SEEN_JS, WAIT_MS, Served, seen_of
from app.ui.record_routines import ROUTINES, routine_for
from app.ui.server import run_sql
from infra.runtime.config import add_arguments
from infra.runtime.settings import Settings, load_settings
from producers.annotate import BrowserReplay
from producers.human import human_policy
from producers.reflection import NoSolver, ReplayDiverged, annotate
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import Trajectory

STEP_MS = 100  # the rollout workers' default page time per step: a replay needs the episode's own (--step-ms)
REPLAY_TIMEOUT_S = 300.0  # one episode's replay; past it the replay is cancelled and the episode reported
FAILED_SQL = """SELECT episode_id FROM trajectories FINAL
WHERE policy = {policy:String} AND task_name = {task:String} AND status = 'ended' AND success = 0
ORDER BY ended_at DESC LIMIT {n:UInt32}"""


@dataclass
class Corrected:
    """What the person made of one failed episode."""

    episode_id: str
    task: str
    outcome: str  # corrected | no_error | person_sees_nothing | diverged | no_routine | not_found | not_failed | error
    tau: int | None = None  # the first wrong step
    point: tuple[float, float] | None = None  # where the person clicked instead, in the screen's pixels
    pair: str = ""  # the pair's id, as the UI answered
    why: str = ""


def person_choice(task: str, instruction: str, dom: dict[str, Any]) -> Click | None:
    """The click a person would make on this state (the routine's element, at its centre), or None
    when they recognise nothing. ``dom``: the annotator's probe plus ``seen`` (SEEN_JS's rows)."""
    target = routine_for(task)(instruction, seen_of(dom["seen"]))
    if target is None:
        return None
    return Click(x=min(max(target.x / dom["width"], 0.0), 1.0), y=min(max(target.y / dom["height"], 0.0), 1.0))


PERSON_THOUGHT = "I would click there instead"


def person_thought(action: Any) -> str:
    return PERSON_THOUGHT if isinstance(action, Click) else ""


class SeenReplay(BrowserReplay):
    """The annotator's browser replay whose states also carry what a person sees (``seen``)."""

    async def reset(self, task):
        obs, dom = await super().reset(task)
        return obs, {**dom, "seen": await self.sandbox.query(SEEN_JS)}

    async def step(self, action):
        obs, dom, done = await super().step(action)
        return obs, {**dom, "seen": await self.sandbox.query(SEEN_JS)}, done


async def first_wrong(traj: Trajectory, env: SeenReplay) -> tuple[str, int | None, Click | None, str]:
    """(outcome, tau, the person's action at tau, why) of one episode replayed in ``env``."""
    try:
        found = await annotate(traj, env, annotator="person", solve=person_choice, thought=person_thought,
                               knows=lambda task: task in ROUTINES, who="routine of a person", after_error=False)
    except (ReplayDiverged, NoSolver) as exc:
        return "diverged" if isinstance(exc, ReplayDiverged) else "no_routine", None, None, str(exc)
    if found.tau is None:
        outcome = {"no_error": "no_error", "solver_abstained": "person_sees_nothing"}.get(found.outcome, found.outcome)
        return outcome, None, None, ""
    return "corrected", found.tau, found.pairs[0].chosen.action, ""


def mark_in_ui(page, base: str, episode_id: str, tau: int, x: float, y: float, annotator: str) -> str:
    """In the Episodes view: open the episode, step to ``tau``, click its screenshot at (x, y) (the
    screen's pixels: the replay shows it at its size), save the correction; -> the pair's id."""
    page.goto(f"{base}/?episode={episode_id}")
    page.wait_for_selector("#overlay #marker, #overlay text", state="attached", timeout=WAIT_MS)
    for _ in range(tau):
        page.click("#next")
    label = page.inner_text("#step-label")
    if f" step {tau} " not in f"{label} ":
        raise RuntimeError(f"the Episodes view shows {label!r}, not step {tau}")
    page.click("#shot", position={"x": x, "y": y})
    page.select_option("#correct-type", "click")
    page.fill("#correct-thought", PERSON_THOUGHT)
    page.fill("#correct-name", annotator)
    page.click("#correct-send")
    page.wait_for_function("(() => { const r = document.getElementById('correct-result');"
                           " return r.dataset.pair || (r.textContent && r.textContent !== 'saving...'); })()",
                           timeout=WAIT_MS)
    pair = page.get_attribute("#correct-result", "data-pair") or ""
    if not pair:
        raise RuntimeError(f"the correction was not saved: {page.inner_text('#correct-result')}")
    return pair


def failed_episodes(settings: Settings, policy: str, tasks: list[str], n: int) -> list[str]:
    """The ``n`` latest failed episodes of ``policy`` on each of ``tasks``."""
    return [r["episode_id"] for task in tasks for r in run_sql(settings, FAILED_SQL, {"policy": policy, "task": task, "n": n})]


def trajectory_of(settings: Settings, episode_id: str) -> Trajectory | None:
    """The episode as the policy saw it, from flywheel.trajectories.v1 (as the UI's corrections read it)."""
    rows = run_sql(settings, ENDED_SQL, {"episode_id": episode_id})
    if not rows:
        return None
    return find_trajectory(settings, episode_id, int(rows[0]["ended_ms"]), int(rows[0]["ingested_ms"]) + int(LOOKBACK_S * 1000))


def correct(settings: Settings, episodes: list[str], annotator: str, say=print, step_ms: int = STEP_MS,
            want: int = 0) -> list[Corrected]:
    """Each of ``episodes`` (failed ones) judged by the person and, where they find a first wrong
    step, corrected through the Episodes view served here on ``settings``' platform, in order until
    ``want`` are corrected (0: all). ``step_ms``: the page time per step the episodes were played
    with. An episode that fails on the way (a timeout, a crashed sandbox, the broker) is reported
    as ``error`` and the next one goes on."""
    from playwright.sync_api import sync_playwright  # Playwright: only the corrector needs a browser driver
    from producers.sandboxes.browser_host import find_chromium  # imports Playwright too

    human_policy(annotator)  # a bad name is refused before anything starts
    served, done, env = Served(settings, open_chdb=True), [], None
    try:
        env = SeenReplay(BlobStore(settings.blob_root), step_ms)  # the person's eyes: on the served app's loop
        served.run(env.start())
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for episode_id in episodes:
                if want and sum(c.outcome == "corrected" for c in done) >= want:
                    break
                try:
                    done.append(_one(settings, served, env, page, episode_id, annotator))
                except Exception as exc:  # noqa: BLE001 - one episode's failure is reported, the rest go on
                    done.append(Corrected(episode_id, "", "error", why=f"{type(exc).__name__}: {str(exc)[:300]}"))
                    served.run(env.restart())  # a replay cut off mid-way leaves its page in any state
                c = done[-1]
                say(f"{c.task or '?'} {episode_id}: {c.outcome}" + (f" at step {c.tau}, pair {c.pair}" if c.pair else "")
                    + (f" ({c.why})" if c.why else ""))
            browser.close()
    finally:
        try:
            if env is not None:
                served.run(env.close())
        finally:
            served.close()
    return done


def _one(settings: Settings, served: Served, env: SeenReplay, page, episode_id: str, annotator: str) -> Corrected:
    traj = trajectory_of(settings, episode_id)
    if traj is None:
        return Corrected(episode_id, "", "not_found", why="not in ClickHouse or not on flywheel.trajectories.v1")
    if traj.success:
        return Corrected(episode_id, traj.task.name, "not_failed")
    outcome, tau, action, why = served.run(first_wrong(traj, env), REPLAY_TIMEOUT_S)
    if tau is None or action is None:
        return Corrected(episode_id, traj.task.name, outcome, why=why)
    screen = traj.steps[tau].observation
    point = (action.x * screen.screen_width, action.y * screen.screen_height)
    pair = mark_in_ui(page, served.base, episode_id, tau, point[0], point[1], annotator)
    return Corrected(episode_id, traj.task.name, "corrected", tau, point, pair)


def tally(corrected: list[Corrected]) -> dict[str, dict[str, int]]:
    """Per task: how many episodes ended in each outcome."""
    out: dict[str, dict[str, int]] = {}
    for c in corrected:
        t = out.setdefault(c.task or "?", {})
        t[c.outcome] = t.get(c.outcome, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.ui.correct", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="", help="correct this policy's latest failed episodes")
    ap.add_argument("--tasks", default="", help=f"comma-separated, with --policy; routines exist for {', '.join(sorted(ROUTINES))}")
    ap.add_argument("--n", type=int, default=None, help="with --policy: failed episodes per task, the latest first (default 5)")
    ap.add_argument("--corrections", type=int, default=0,
                    help="with --policy: walk each task's --n latest failed episodes until this many are corrected (0: all of them)")
    ap.add_argument("--episodes", default="", help="or these episode ids, comma separated")
    ap.add_argument("--annotator", default="corrector", help="the name the pairs go under: human:<annotator>")
    ap.add_argument("--step-ms", type=int, default=STEP_MS, help="page time per step the episodes were played with "
                                                                 "(the rollout's --step-ms): a replay needs the same")
    add_arguments(ap, Settings)
    args = ap.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in ROUTINES]
    if args.episodes and (args.corrections or tasks or args.n is not None):  # they choose among a policy's failures
        ap.error("--corrections, --tasks and --n go with --policy: --episodes corrects exactly the episodes it names")
    args.n = 5 if args.n is None else args.n
    if bool(args.episodes) == bool(args.policy) or unknown or (args.policy and not tasks) or args.n < 1 or args.corrections < 0:
        ap.error("give --episodes, or --policy with --tasks that have a routine "
                 f"({', '.join(sorted(ROUTINES))}) and --n >= 1" + (f"; no routine for {', '.join(unknown)}" if unknown else ""))
    settings = load_settings(vars(args))
    say = lambda line: print(line, flush=True)  # noqa: E731
    if args.episodes:
        corrected = correct(settings, [e for e in args.episodes.split(",") if e], args.annotator, say, args.step_ms)
    else:  # each task on its own: --corrections counts per task
        corrected = [c for task in tasks for c in correct(settings, failed_episodes(settings, args.policy, [task], args.n),
                                                          args.annotator, say, args.step_ms, args.corrections)]
    print(json.dumps({"annotator": human_policy(args.annotator), "by_task": tally(corrected),
                      "episodes": [asdict(c) for c in corrected]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
