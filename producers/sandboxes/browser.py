"""The browser sandbox: MiniWoB++ tasks and Flywheel's games in headless Chromium, driven by Playwright.

One sandbox = a page per recently used task in a shared Chromium (``browser_host``), each page in
a browser context of its own with its own fake clock (``max_pages``, least recently used closed
first), so a worker alternating between a few tasks never reloads them, and advancing the current
task's clock runs that page's timers only: with every page in one context, a step ran the timers
and animations of every loaded task (a click-test-2 step took 25 ms alone and 88 ms with eight
other task pages loaded). ``reset`` makes the task's page current, starts
an episode from the task's seed the way its family of pages says (``producers.sandboxes.pages``:
MiniWoB++ as the miniwob package's own environment does, a game through ``flywheelGame.start``),
and screenshots the task area (the 160x210 ``#wrap`` both use, instruction included). It also
parks the pointer at the page's corner and drops the focus, so an episode's screens depend on its
seed and actions only, never on the episode before it (a replay from the seed shows the same
screens: producers.reflection). ``step`` performs a unified
action through ``schemas.convert.to_playwright`` with coordinates relative to that task area,
advances the fake clock by ``step_ms`` and reads the page's state: a MiniWoB++ task's own reward
at its end, a game's score after every step (the step's reward is its change).

A step is three kinds of browser call and no more: the action's real input events (Playwright's
mouse and keyboard: tasks listen to them), one evaluate that runs the page's timers for ``step_ms``
and reads its state, and one ``Page.captureScreenshot`` of the whole viewport on the page's own
CDP session, cropped to the task area here. Playwright's ``clock.run_for`` would add an init
script to the context on every call, and its ``page.screenshot(clip=...)`` costs three more page
evaluations and, with a clip, two viewport emulation changes that re-composite the page: together
about half a step's CPU (docs/performance.md, "The fast step path").

Time: Playwright's clock is installed before the page loads and paused, so page time moves only
when we advance it: a task's 10 s limit and its time-scaled reward depend on the number of
steps, not on how busy the machine is, and every episode starts at the same wall-clock date.

Every Playwright call has a timeout; a dead or hung browser raises ``SandboxCrashed``. An action
that merely cannot be performed (an SDK action, an unknown key) is reported in
``StepResult.error`` and the episode goes on.
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections import OrderedDict
from typing import Any

import numpy as np
from PIL import Image

from producers.sandboxes.base import Obs, SandboxCrashed, StepResult, register_sandbox
from producers.sandboxes.browser_host import BrowserHost, shared_host
from producers.sandboxes.miniwob_server import TASK_HEIGHT, TASK_WIDTH, WINDOW_HEIGHT, WINDOW_WIDTH
from producers.sandboxes.pages import PAGES, MiniwobPages, TaskPages
from schemas.blobs import BlobStore, sha256_hex
from schemas.convert import UnsupportedAction, apply_playwright, to_playwright
from schemas.events import BlobRef, Observation, TaskSpec

EPOCH_MS = 1_700_000_000_000  # the page's "now" at every episode start (fake clock)
READY_POLL_MS = 50
# The fake clock Playwright installed on the page (context.clock.install), driven directly: one
# evaluate per step, and no init script added to the context per call as clock.run_for does.
_CLOCK = "globalThis.__pwClock.controller"
# A timer the page's own script throws in rejects runFor after every due timer ran and the time
# advanced: reported as the step's error, not a crash (the evaluate itself failing is one).
_RUN_FOR = ("(async () => {{ let error = null; try {{ await " + _CLOCK + ".runFor({ms}); }} catch (e) {{"
            " error = (e && e.name ? e.name + ': ' : '') + String(e && e.message !== undefined ? e.message : e); }}"
            " return [error, {state}]; }})()")
# PNG is what the blob store keeps and the UI shows; level 1: the task area is flat UI, and the
# encode is on the step's path (in a thread)
PNG_LEVEL = 1
READY_MAX_POLLS = 100
_POINTER_PATHS = frozenset({"mouse.click", "mouse.dblclick", "mouse.move"})
_NOT_IN_BROWSER = frozenset({"press_back", "press_home", "open_app", "shell", "file_read", "file_write"})
# Every task of a suite stays loaded (the default suite has 11): a worker cycling through more tasks
# than it keeps pages reloads one on every reset, ~0.5 s against ~0.07 s for a loaded page, which
# for episodes of a few steps was the largest share of a sandbox's time. A page costs ~17 MiB (USS).
MAX_PAGES = 12


class BrowserSandbox:
    kind = "browser"

    def __init__(self, blobs: BlobStore, *, host: BrowserHost | None = None, step_ms: int = 100,
                 call_timeout_s: float = 10.0, executable: str = "", defer_writes: bool = False,
                 max_pages: int = MAX_PAGES) -> None:
        self.blobs = blobs
        # defer_writes: screenshots are written to the blob store in the background and the caller
        # awaits flush() before publishing an event that refers to them (the rollout worker does),
        # so the durable write overlaps the policy's turn instead of adding to every step.
        self.defer_writes = defer_writes
        self._writes: list[asyncio.Future] = []
        self.step_ms = step_ms
        self.call_timeout_s = call_timeout_s
        self._executable = executable
        self.host = host
        self._browser: Any = None
        self._spare: Any = None  # a fresh context with its clock installed, for the next page opened
        self._context: Any = None  # the current task page's context (its clock is the page's)
        self._page: Any = None
        self._generation = -1
        self._task: str | None = None  # the task of the current page
        self._cdp: Any = None  # the current page's CDP session (its screenshots)
        # Task pages kept loaded, each in its own context (LRU): switching between a few tasks costs no
        # reload. name -> (context, page, the task area's box on the page, the page's CDP session)
        self._loaded: OrderedDict[str, tuple[Any, Any, tuple[float, ...], Any]] = OrderedDict()
        self.max_pages = max(1, max_pages)
        self._box = (0.0, 0.0, float(TASK_WIDTH), float(TASK_HEIGHT))
        self._instruction = ""
        self._done = False
        self._pages: TaskPages = MiniwobPages()  # the current task's family of pages
        self._spec: TaskSpec | None = None
        self._steps = 0  # steps since reset
        self._score = 0.0  # a game's score after the last step

    # ------------------------------------------------------------ guarded Playwright calls

    async def _call(self, awaitable: Any, what: str, bounded: bool = True) -> Any:
        """Await one Playwright call under the call timeout (``bounded``; else the awaitable bounds
        itself); a dead or hung browser -> SandboxCrashed."""
        try:
            async with asyncio.timeout(self.call_timeout_s if bounded else None):  # unlike wait_for, no task per call
                return await awaitable
        except asyncio.TimeoutError:
            raise SandboxCrashed(f"browser hung: {what} took more than {self.call_timeout_s:.0f}s") from None
        except (asyncio.CancelledError, SandboxCrashed):
            raise
        except Exception as exc:  # playwright.Error and friends: the page or browser is gone
            raise SandboxCrashed(f"browser failed during {what}: {type(exc).__name__}: {str(exc)[:300]}") from None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.host is None:
            self.host = shared_host(self._executable)
        # A cold Chromium start on a busy machine can take longer than a page call: the launch is
        # bounded by the host's own deadline (60 s), and a wait for its lock by the deadline of the
        # sandbox launching meanwhile, so no call timeout here (it would cut a queued launch short).
        self._browser, self._generation = await self._call(self.host.browser(), "launch", bounded=False)
        self._context, self._page, self._task = None, None, None
        self._loaded.clear()
        self._spare = await self._new_context()

    async def _new_context(self) -> Any:
        """A context for one task page, its fake clock installed before the page loads and paused."""
        context = await self._call(
            self._browser.new_context(viewport={"width": WINDOW_WIDTH, "height": WINDOW_HEIGHT}, device_scale_factor=1,
                                      service_workers="block"),
            "new_context")
        context.set_default_timeout(self.call_timeout_s * 1000)
        await self._call(context.clock.install(time=EPOCH_MS), "clock.install")
        await self._call(context.clock.pause_at(EPOCH_MS), "clock.pause_at")
        return context

    async def restart(self) -> None:
        """After a crash: drop this context and, if the browser itself is dead or hung, relaunch it."""
        if self.host is not None and not await self._browser_healthy():
            await self.host.relaunch(self._generation)
        await self.close()
        await self.start()

    async def _browser_healthy(self) -> bool:
        if self.host is None or not self.host.connected:
            return False
        if self._generation != self.host.generation:
            return True  # another sandbox already replaced the browser we were using
        try:
            browser, _ = await asyncio.wait_for(self.host.browser(), 2.0)
            probe = await asyncio.wait_for(browser.new_context(), 3.0)
            await asyncio.wait_for(probe.close(), 3.0)
            return True
        except Exception:  # noqa: BLE001 - any failure means: replace it
            return False

    async def close(self) -> None:
        try:
            await self.flush()
        except Exception:  # noqa: BLE001 - a failed write was already reported to whoever flushed
            pass
        contexts = [ctx for ctx, _, _, _ in self._loaded.values()] + ([self._spare] if self._spare is not None else [])
        self._browser, self._spare, self._context, self._page, self._task = None, None, None, None, None
        self._cdp = None
        self._loaded.clear()
        for ctx in contexts:
            await self._close_quietly(ctx)

    @staticmethod
    async def _close_quietly(ctx: Any) -> None:
        try:
            await asyncio.wait_for(ctx.close(), 5.0)
        except Exception:  # noqa: BLE001 - closing a dead context is best effort
            pass

    # ------------------------------------------------------------ episode

    async def reset(self, task: TaskSpec) -> Obs:
        pages = PAGES.get(task.suite)
        if pages is None:
            raise ValueError(f"the browser sandbox runs {', '.join(PAGES)} tasks, not suite {task.suite!r}")
        if task.name not in pages.names():
            raise ValueError(f"unknown {task.suite} task {task.name!r}")
        if self._browser is None:
            await self.start()
        self._pages, self._spec, self._steps, self._score = pages, task, 0, 0.0
        await self._open(task.name)
        page = self._page
        # the pointer where a fresh page has it, and (in the start script) no focus: the last
        # episode's pointer would leave a hover state and its focused field a focus ring on the
        # new screen (tasks that keep their inputs across episodes), and a replay from the seed
        # would not look the same
        await self._call(page.mouse.move(0, 0), "park the pointer")
        utterance = await self._call(page.evaluate(f"({_CLOCK}.setSystemTime({EPOCH_MS}), {pages.start_js(task)})"),
                                     "start episode")
        ready, self._instruction = bool(utterance[0]), str(utterance[1])
        for _ in range(READY_MAX_POLLS):  # tasks that build their problem asynchronously
            if ready:
                break
            # a page script error here is the page's, like in step
            _, ready = await self._advance_clock(READY_POLL_MS, pages.ready_js)
        else:
            raise SandboxCrashed(f"task {task.name} did not become ready")
        self._done = False
        return await self._observe()

    async def _open(self, name: str) -> None:
        """Make ``name``'s page current, loading it (and evicting the least recently used) if needed."""
        if name not in self._loaded:
            if len(self._loaded) >= self.max_pages:
                _, (old, _, _, _) = self._loaded.popitem(last=False)
                await self._call(old.close(), "close page")  # its context: the page and its clock
            context, self._spare = self._spare or await self._new_context(), None
            try:
                page = await self._call(context.new_page(), "new_page")
                await self._call(page.goto(self._pages.url(name), wait_until="load"), f"load {name}")
                rect = await self._call(page.evaluate(
                    "(() => { const r = document.getElementById('wrap').getBoundingClientRect();"
                    " return [r.x, r.y, r.width, r.height]; })()"), "measure #wrap")
                cdp = await self._call(context.new_cdp_session(page), "CDP session")
            except BaseException:
                await asyncio.shield(self._close_quietly(context))  # a context no page list holds
                raise
            self._loaded[name] = (context, page, tuple(float(v) for v in rect), cdp)
        self._loaded.move_to_end(name)
        (self._context, self._page, self._box, self._cdp), self._task = self._loaded[name], name

    async def step(self, action: Any) -> StepResult:
        error = None
        if self._page is None:
            raise SandboxCrashed("step before reset")
        self._steps += 1
        if action is None or action.type == "wait":
            pass
        elif action.type in ("finished", "call_user"):
            return await self._result(await self._call(self._page.evaluate(self._pages.state_js), "read reward"),
                                      terminal=True)
        elif action.type in _NOT_IN_BROWSER:
            error = f"{action.type!r} is not available in the browser sandbox"
        else:
            try:
                calls = self._offset(to_playwright(action, int(self._box[2]), int(self._box[3])))
            except UnsupportedAction as exc:
                calls, error = [], str(exc)
            if calls:
                error = await self._perform(calls)
        clock_error, state = await self._advance_clock(self.step_ms, self._pages.state_js)
        return await self._result(state, error=clock_error or error)

    async def _advance_clock(self, ms: int, state_js: str) -> tuple[str | None, Any]:
        """Run the page's timers for ``ms`` of page time and read ``state_js`` after them, in one
        call -> (the page's script error, if a timer threw, the state). A task page's own script
        throwing inside a timer (jQuery-UI animations under the fake clock do) is the page's error,
        recorded on the step, not a crashed browser; a dead or hung one raises SandboxCrashed."""
        error, state = await self._call(self._page.evaluate(_RUN_FOR.format(ms=int(ms), state=state_js)),
                                        "advance the clock")
        return (f"page script error: {str(error)[:300]}" if error is not None else None), state

    async def _perform(self, calls: list) -> str | None:
        try:
            async with asyncio.timeout(self.call_timeout_s):
                await apply_playwright(self._page, calls)
            return None
        except asyncio.TimeoutError:
            raise SandboxCrashed(f"browser hung performing {calls[0][0]}") from None
        except Exception as exc:  # noqa: BLE001
            if self._page.is_closed() or not self.host.connected:
                raise SandboxCrashed(f"browser died performing {calls[0][0]}: {exc}") from None
            return f"{type(exc).__name__}: {str(exc)[:500]}"  # e.g. a key Playwright does not know

    def _offset(self, calls: list) -> list:
        """Shift pointer coordinates from the task area to the page."""
        x0, y0 = self._box[0], self._box[1]
        return [(p, (a[0] + x0, a[1] + y0, *a[2:]) if p in _POINTER_PATHS and len(a) >= 2 else a, k)
                for p, a, k in calls]

    async def _result(self, state: Any, error: str | None = None, terminal: bool = False) -> StepResult:
        obs = await self._observe()
        reading = self._pages.read(self._spec, state, self._steps, self._score)
        if reading.score is not None:
            self._score = reading.score
        return StepResult(obs=obs, reward=reading.reward, done=reading.done or terminal, success=reading.success,
                          error=error, score=reading.score, normalised_score=reading.normalised_score)

    async def _observe(self) -> Obs:
        # the whole viewport: a clip would make Chromium change the viewport's emulation and back
        shot = await self._call(self._cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}),
                                "screenshot")
        image, png, ref = await asyncio.to_thread(self._crop, shot["data"])
        write = asyncio.ensure_future(asyncio.to_thread(self.blobs.put, png, "image/png", ref.width, ref.height))
        self._writes.append(write)
        if not self.defer_writes:
            await self.flush()
        observation = Observation(screenshot=ref, screen_width=image.shape[1], screen_height=image.shape[0],
                                  instruction=self._instruction, url=self._pages.path(self._task))
        return Obs(observation=observation, image=image)

    def _crop(self, viewport_b64: str) -> tuple[np.ndarray, bytes, BlobRef]:
        """The viewport's screenshot -> the task area's pixels, their PNG and its ref."""
        image = task_area(base64.b64decode(viewport_b64), self._box)
        out = io.BytesIO()
        Image.fromarray(image).save(out, format="PNG", compress_level=PNG_LEVEL)
        png = out.getvalue()
        sha = sha256_hex(png)
        ref = BlobRef(sha256=sha, uri=self.blobs.uri(sha), media_type="image/png", width=image.shape[1],
                      height=image.shape[0], size_bytes=len(png))
        return image, png, ref

    async def flush(self) -> None:
        """Wait until every screenshot taken so far is in the blob store (raises if a write failed)."""
        writes, self._writes = self._writes, []
        outcomes = await asyncio.gather(*writes, return_exceptions=True)  # every write awaited, even after a failure
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    # ------------------------------------------------------------ for scripted solvers and tests

    async def query(self, js: str) -> Any:
        """Evaluate ``js`` on the task page (scripted solvers read the DOM through this)."""
        return await self._call(self._page.evaluate(js), "query")


def task_area(viewport_png: bytes, box: tuple[float, ...]) -> np.ndarray:
    """The task area ``box`` (x, y, width, height in CSS pixels, scale 1) of a viewport screenshot,
    H x W x 3 uint8: the pixels a clipped screenshot of the same frame shows."""
    x, y, w, h = (int(round(v)) for v in box)
    return np.ascontiguousarray(np.asarray(Image.open(io.BytesIO(viewport_png)).convert("RGB"))[y:y + h, x:x + w])


@register_sandbox("browser")
def make_browser_sandbox(blobs: BlobStore, **kwargs: Any) -> BrowserSandbox:
    return BrowserSandbox(blobs, **kwargs)
