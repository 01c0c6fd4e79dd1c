"""`flywheel annotate`: failed episodes -> reflection pairs on flywheel.pairs.v1 (UI-TARS section 4.5).

Reads flywheel.ct.v1 (the V(s) = 0 trajectories; ``--source scored`` reads every scored one) and
keeps the failed MiniWoB++ episodes (success false, not an infrastructure failure). Each is
replayed in a browser sandbox from its TaskSpec seed with its recorded actions (the fake clock
and the parked pointer make the replay show the recorded screens) and judged by the scripted
solvers through producers.reflection: its first wrong step tau gives an error-correction pair
and, after the wrong action, a post-reflection pair. Screenshots the replay takes are written to
the blob store before the pair that refers to them is produced. A person or a judge model can
write pairs to the same topic under another ``annotator`` id.

Delivery: at-least-once, on the checkpointed consume loop (infra.runtime.consume_loop, group offsets):
``add`` decodes and buffers, ``flush`` annotates the buffered episodes, produces their pairs
(keyed by episode id) and waits for the broker's acknowledgements; the loop then acknowledges
the dead letters and commits. A crash before the commit annotates the batch again: the pairs'
ids (episode, kind, annotator) are the same, so ClickHouse and `flywheel dpo` count them once.

Errors are data: an undecodable record, a task with no solver, or a replay that does not reach
the recorded state -> flywheel.dlq.v1 (stage "annotate", with the reason) and the loop goes on.
A browser that crashes is restarted and the episode tried once more; a second crash stops the
stage without a commit (an infrastructure failure is not the episode's verdict).
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infra.runtime.config import opt
from infra.runtime.consume_loop import ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from producers import scripted
from producers.reflection import ANNOTATOR, NoSolver, ReplayDiverged, annotate
from producers.sandboxes.base import SandboxCrashed
from schemas.blobs import BlobStore
from schemas.codec import DecodeError, decode, encode
from schemas.events import Observation, ScoredTrajectory, TaskSpec

log = logging.getLogger("flywheel.annotate")
STAGE = "annotate"


@dataclass
class AnnotateConfig:
    group_id: str = opt("flywheel-annotate", "consumer group (more annotator processes share the episodes)")
    source: str = opt("ct", "failed episodes from: ct (V(s) = 0) or scored (every verdict)", choices=("ct", "scored"))
    annotator: str = opt(ANNOTATOR, "annotator id written on every pair")
    step_ms: int = opt(100, "page time per step: must be the rollout workers' --step-ms, or replays diverge")
    verify_screens: bool = opt(True, "a replayed screen must have the recorded screenshot's hash (else the instruction only)")
    browser_executable: str = opt("", "Chromium binary (default: chromium on PATH)")
    batch_episodes: int = opt(8, "episodes annotated per checkpoint")
    flush_interval_s: float = opt(5.0, "checkpoint at least this often (seconds)")
    exit_when_idle_s: float = opt(0.0, "stop after this many seconds with no record and no lag (0: run until signalled)")

    def loop_config(self) -> LoopConfig:
        return LoopConfig(poll_messages=max(self.batch_episodes, 1), flush_interval_s=self.flush_interval_s,
                          exit_when_idle_s=self.exit_when_idle_s)


@dataclass
class AnnotateStats:
    episodes: int = 0
    pairs: Counter = field(default_factory=Counter)  # by kind
    outcomes: Counter = field(default_factory=Counter)  # by annotation outcome
    skipped: Counter = field(default_factory=Counter)  # not failed episodes, by reason
    dead_letters: int = 0


def skip_reason(scored: ScoredTrajectory) -> str | None:
    """Why an episode is not for the annotator (None: it is a failure worth annotating)."""
    t = scored.trajectory
    if t.success:
        return "succeeded"
    if t.infra_failure:
        return "infra_failure"
    if not t.steps:
        return "no_steps"
    if t.noise_steps:  # a demonstration made noisy on purpose (--demo-noise): its mistakes are no agent's
        return "noisy_demonstration"
    return None


# Two renderings of one page state may differ by a level or two of anti-aliasing at rounded
# corners (seen: 9 pixels off by one on click-collapsible-2's first screen, rollout against replay);
# a state change (a ticked box, an opened section, a moved item) changes pixels by far more
SCREEN_TOLERANCE = 8  # per channel, out of 255


def same_screen(image: np.ndarray, png: bytes, tolerance: int = SCREEN_TOLERANCE) -> bool:
    """Whether ``image`` (H x W x 3) shows ``png``'s pixels, each channel within ``tolerance``."""
    from PIL import Image  # local: Pillow, needed only where a replay's screens are compared

    recorded = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    if recorded.shape != image.shape:
        return False
    return int(np.abs(recorded.astype(np.int16) - image.astype(np.int16)).max()) <= tolerance


class BrowserReplay:
    """A browser sandbox as a ``producers.reflection.ReplayEnv`` (each state with its DOM), plus
    the lifecycle the stage drives: start, restart after a crash, flush screenshots, close."""

    def __init__(self, blobs: BlobStore, step_ms: int, executable: str = "", sandbox: Any = None) -> None:
        """``sandbox``: replay in this started browser sandbox (its owner closes it), else in a
        sandbox of this stage's own Chromium, which ``close`` ends."""
        # local: loads Pillow, needed only on this path
        from producers.sandboxes.browser import BrowserSandbox
        from producers.sandboxes.browser_host import BrowserHost

        self.host = None if sandbox is not None else BrowserHost(executable)
        self.sandbox = sandbox or BrowserSandbox(blobs, host=self.host, step_ms=step_ms)
        self.blobs, self.image = blobs, None  # the pixels of the screen shown now

    async def start(self) -> None:
        await self.sandbox.start()

    async def reset(self, task: TaskSpec) -> tuple[Observation, dict[str, Any]]:
        obs = await self.sandbox.reset(task)
        self.image = obs.image
        return obs.observation, await self.sandbox.query(scripted.DOM_PROBE_JS)

    async def step(self, action: Any) -> tuple[Observation, dict[str, Any], bool]:
        result = await self.sandbox.step(action)
        self.image = result.obs.image
        return result.obs.observation, await self.sandbox.query(scripted.DOM_PROBE_JS), result.done

    def looks_same(self, recorded: Observation) -> bool:
        """Whether the screen shown now is ``recorded``'s up to rendering noise (``same_screen``)."""
        return self.image is not None and same_screen(self.image, self.blobs.get(recorded.screenshot.sha256))

    async def flush(self) -> None:
        await self.sandbox.flush()

    async def restart(self) -> None:
        await self.sandbox.restart()

    async def close(self) -> None:
        if self.host is not None:
            await self.sandbox.close()
            await self.host.close()


class Annotator:
    """A consume-loop stage: ``add`` buffers failed episodes, ``flush`` annotates them and produces pairs."""

    def __init__(self, settings: Settings, cfg: AnnotateConfig, env: Any = None) -> None:
        """``env``: where episodes are replayed (default: a ``BrowserReplay``; anything with its methods)."""
        self.settings, self.cfg = settings, cfg
        self.source = topic_name(getattr(TOPICS, cfg.source), settings)
        self.pairs_topic = topic_name(TOPICS.pairs, settings)
        self.aio = asyncio.new_event_loop()  # the env's loop, driven from the consume loop's thread
        self.env = env or BrowserReplay(BlobStore(settings.blob_root), cfg.step_ms, cfg.browser_executable)
        self.producer, self.tracker = make_producer(settings), DeliveryTracker()
        self.pending: list[tuple[Any, ScoredTrajectory]] = []
        self.stats = AnnotateStats()

    def add(self, record: Any, dlq: DeadLetters) -> None:
        try:
            scored = decode(record.value(), ScoredTrajectory)
        except DecodeError as exc:
            dlq.send_record(exc, record)
            self.stats.dead_letters += 1
            return
        reason = skip_reason(scored)
        if reason is not None:
            self.stats.skipped[reason] += 1
            return
        self.pending.append((record, scored))

    def ready(self) -> bool:
        return len(self.pending) >= self.cfg.batch_episodes

    def flush(self, dlq: DeadLetters) -> None:
        for record, scored in self.pending:
            traj = scored.trajectory
            try:
                result = self.aio.run_until_complete(self._annotate(traj))
            except (NoSolver, ReplayDiverged, ValueError) as exc:
                log.info("episode %s (%s) not annotated: %s", traj.episode_id, traj.task.name, exc)
                dlq.send_record(exc, record)
                self.stats.dead_letters += 1
                continue
            self.stats.episodes += 1
            self.stats.outcomes[result.outcome] += 1
            for pair in result.pairs:
                self.producer.produce(self.pairs_topic, key=pair.episode_id.encode(), value=encode(pair),
                                      on_delivery=self.tracker)
                self.stats.pairs[pair.kind] += 1
        self.pending = []
        flush_or_raise(self.producer, self.tracker)  # every pair acknowledged before the loop commits

    async def _annotate(self, traj):
        for attempt in (1, 2):
            try:
                result = await annotate(traj, self.env, annotator=self.cfg.annotator,
                                        verify_screens=self.cfg.verify_screens)
                await self.env.flush()  # the replayed screenshots the pairs refer to are stored
                return result
            except SandboxCrashed as exc:
                if attempt == 2:
                    raise
                log.warning("browser crashed annotating %s (%s): restarting it", traj.episode_id, exc)
                await self.env.restart()

    def run(self, stop: threading.Event) -> AnnotateStats:
        try:
            self.aio.run_until_complete(self.env.start())
            loop = ConsumeLoop.create(self.settings, self.cfg.group_id, [self.source], self, STAGE,
                                      self.cfg.loop_config())
            loop.run(stop)
        finally:
            self.aio.run_until_complete(self.env.close())
            self.aio.close()
        log.info("stopped: %d episodes annotated, pairs %s, outcomes %s, skipped %s, %d dead letters",
                 self.stats.episodes, dict(self.stats.pairs), dict(self.stats.outcomes), dict(self.stats.skipped),
                 self.stats.dead_letters)
        return self.stats
