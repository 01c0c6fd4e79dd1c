"""Record demonstrations through the Annotate view with Playwright playing the person.

For each task and seed, a real Chromium opens the Annotate view, starts a session with the
annotator's name, and plays the episode as a person would: it reads the instruction and the task
page the view shows (its visible elements: text, look and place, ``SEEN_JS``; never the task's
script variables, never a scripted solver), asks the task's routine (``app.ui.record_routines``)
where a person would click, and clicks there on the shown screen. The Annotate view does the
rest as for any person: the episode's events go to the platform's flywheel.steps.v1 under
``human:<annotator>``; `flywheel streams` (running on the platform) routes the successes to
flywheel.sft.v1, where `flywheel demo --demos-from human` takes them. A routine that finds
nothing it recognises, or a click budget spent, ends the episode with Finish: the page judges it
(a failure), it is kept in the log and flagged here, and never routed as a demonstration.

The view is served by this process (the UI's own app, on loopback, on the platform's settings):
reading the task page the view shows needs the session's sandbox, which lives in the server.

    python -m app.ui.record --tasks click-tab-2,email-inbox-delete --n 3 --annotator alice
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass

from aiohttp import web

from app.ui.annotate import SESSIONS_KEY
from app.ui.record_routines import ROUTINES, Seen, routine_for
from app.ui.server import make_app
from infra.runtime.config import add_arguments
from infra.runtime.procs import free_port
from infra.runtime.settings import Settings, load_settings
from producers.human import human_policy

SCALE = 3  # annotate.js shows the task area three times larger
MAX_CLICKS = 16  # a person's patience: a section opening takes a few clicks of page time (100 ms each)
WAIT_MS = 30_000

# What a person sees of the task page: every element drawn on top at its box's centre inside the
# task area, with its own text, tag, classes (its look), the role and open state its widget
# draws, whether it sits in the instruction's box, and whether its content shows cut off (a
# section still opening or closing: the sandbox's page time moves only with the person's actions).
SEEN_JS = """(() => {
  const wrap = document.getElementById('wrap').getBoundingClientRect();
  const query = document.getElementById('query');
  const out = [];
  for (const e of document.querySelectorAll('#wrap *')) {
    const r = e.getClientRects()[0];  // a link wrapped over two lines: its first line's box
    if (!r || r.width <= 0 || r.height <= 0) continue;
    const cx = r.x + r.width / 2, cy = r.y + r.height / 2;
    if (cx < wrap.left || cx >= wrap.right || cy < wrap.top || cy >= wrap.bottom) continue;
    const style = getComputedStyle(e);
    if (style.visibility === 'hidden' || +style.opacity === 0) continue;
    const hit = document.elementFromPoint(cx, cy);
    if (!hit || !(hit === e || e.contains(hit))) continue;
    const widget = e.closest('[role=tab],[role=menuitem]');
    const open = widget && (widget.getAttribute('aria-expanded') === 'true' || widget.getAttribute('aria-selected') === 'true');
    const own = Array.from(e.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    out.push({text: own, tag: e.tagName.toLowerCase(), classes: Array.from(e.classList), x: cx - wrap.left,
              y: cy - wrap.top, role: widget ? widget.getAttribute('role') : '', selected: !!open,
              in_query: !!query && query.contains(e), cut: e.scrollHeight > e.clientHeight + 1});
  }
  return out;
})()"""


@dataclass
class Recorded:
    """One episode as the page ended it."""

    task: str
    seed: int
    episode_id: str
    success: bool
    clicks: int
    points: list[tuple[float, float]]  # where it clicked, in the screen's pixels
    ended_by: str  # the page (the task ended itself) or "finish" (the person gave up: flagged)


def seen_of(rows: list[dict]) -> list[Seen]:
    return [Seen(text=r["text"], tag=r["tag"], classes=tuple(r["classes"]), x=r["x"], y=r["y"], role=r["role"],
                 selected=r["selected"], in_query=r["in_query"], cut=r["cut"]) for r in rows]


class Served:
    """The UI's app on loopback in a thread of its own; ``run(coro)`` runs on its loop."""

    def __init__(self, settings: Settings, open_chdb: bool = False) -> None:
        """``open_chdb``: the views that read tables may open the platform's chDB here (the
        Annotate view reads none; the Episodes view does, when no sink answers for it)."""
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.app = make_app(settings, open_chdb=open_chdb)
        self.runner = web.AppRunner(self.app)
        self.run(self.runner.setup())
        port = free_port()
        self.run(web.TCPSite(self.runner, "127.0.0.1", port).start())
        self.base = f"http://127.0.0.1:{port}"

    def run(self, coro, timeout: float = 120.0):
        """``coro``'s result on the app's loop; past ``timeout`` it is cancelled there (nothing of it
        runs on) and TimeoutError raised."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def seen(self, session_id: str) -> list[Seen]:
        """The task page the session shows, as a person sees it."""
        return seen_of(self.run(self.app[SESSIONS_KEY].get(session_id).sandbox.query(SEEN_JS)))

    def close(self) -> None:
        self.run(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)


def start(page, task: str, seed: int, annotator: str) -> None:
    page.select_option("#annotate-task", task)
    page.fill("input[name=seed]", str(seed))
    page.fill("input[name=name]", annotator)
    page.click("#annotate-go")
    page.wait_for_function("ann.session !== null && ann.view && ann.view.step === 0", timeout=WAIT_MS)


def _send(page, press) -> None:
    """One action through the page (``press``: what the person does), waiting for its answer."""
    before = page.evaluate("window.annotateTimes.length")
    press()
    page.wait_for_function(f"window.annotateTimes.length > {before} && !ann.busy", timeout=WAIT_MS)


def play(page, served: Served, task: str, seed: int, annotator: str, max_clicks: int = MAX_CLICKS) -> Recorded:
    """One episode of ``task`` played by its routine through the Annotate view."""
    routine = routine_for(task)
    start(page, task, seed, annotator)
    session = page.evaluate("ann.session")
    points: list[tuple[float, float]] = []
    while page.get_attribute("#annotate-status", "data-done") == "":
        target = routine(page.inner_text("#annotate-instruction"), served.seen(session)) if len(points) < max_clicks else None
        if target is None:  # nothing a person recognises, or the budget spent: they give up
            _send(page, lambda: page.click("#annotate-finish"))
            return _ended(page, task, seed, points, "finish")
        _send(page, lambda: page.click("#annotate-shot", position={"x": target.x * SCALE, "y": target.y * SCALE}))
        points.append((target.x, target.y))
    return _ended(page, task, seed, points, "page")


def _ended(page, task: str, seed: int, points: list[tuple[float, float]], ended_by: str) -> Recorded:
    view = page.evaluate("ann.view")
    return Recorded(task=task, seed=seed, episode_id=view["episode_id"], success=bool(view["success"]),
                    clicks=len(points), points=points, ended_by=ended_by)


def record(settings: Settings, tasks: list[str], n: int, annotator: str, first_seed: int = 0,
           say=print, max_clicks: int = MAX_CLICKS) -> list[Recorded]:
    """``n`` demonstrations of each of ``tasks`` (seeds ``first_seed``...), played through the
    Annotate view served here on ``settings``' platform; ``say`` gets a line per episode."""
    from playwright.sync_api import sync_playwright  # Playwright: only the recorder needs a browser driver
    from producers.sandboxes.browser_host import find_chromium  # imports Playwright too

    for task in tasks:
        routine_for(task)  # refused before anything starts
    human_policy(annotator)
    served, done = Served(settings), []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(served.base + "/#annotate")
            page.wait_for_selector(f"#annotate-task option[value={tasks[0]}]", state="attached", timeout=WAIT_MS)
            for task in tasks:
                for seed in range(first_seed, first_seed + n):
                    t0 = time.monotonic()
                    done.append(play(page, served, task, seed, annotator, max_clicks))
                    r = done[-1]
                    say(f"{task} seed {seed}: {'success' if r.success else 'FAILURE (kept, flagged)'} in {r.clicks} "
                        f"clicks ({r.ended_by}), {time.monotonic() - t0:.1f} s, episode {r.episode_id}")
            browser.close()
    finally:
        served.close()
    return done


def tally(recorded: list[Recorded]) -> dict[str, dict[str, int]]:
    """Per task: episodes recorded and how many the page scored a success."""
    out: dict[str, dict[str, int]] = {}
    for r in recorded:
        t = out.setdefault(r.task, {"recorded": 0, "success": 0})
        t["recorded"] += 1
        t["success"] += r.success
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.ui.record", description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", required=True, help=f"comma-separated; routines exist for {', '.join(sorted(ROUTINES))}")
    ap.add_argument("--n", type=int, default=3, help="demonstrations per task")
    ap.add_argument("--annotator", default="recorder", help="the name the episodes go under: human:<annotator>")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + n - 1 of each task")
    ap.add_argument("--max-clicks", type=int, default=MAX_CLICKS, help="clicks before the person gives up (Finish)")
    add_arguments(ap, Settings)
    args = ap.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in ROUTINES]
    if unknown or not tasks or args.n < 1:
        ap.error(f"--n must be >= 1 and --tasks name tasks with a routine ({', '.join(sorted(ROUTINES))}); "
                 f"not {', '.join(unknown)}")
    recorded = record(load_settings(vars(args)), tasks, args.n, args.annotator, args.first_seed,
                      say=lambda line: print(line, flush=True), max_clicks=args.max_clicks)
    print(json.dumps({"annotator": human_policy(args.annotator), "by_task": tally(recorded),
                      "episodes": [asdict(r) for r in recorded]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
