"""Hot reload of policy versions from flywheel.policy.v1 while serving.

Delivery: every server replica must see every version of its policy, so each replica reads the
compacted topic from the beginning with its own throw-away consumer group and never commits.
On start it catches up to the end and loads only the newest version (falling back to the next
newest when that one is refused). After that, each newer version is loaded as it arrives.
Weights are checked against the announced sha256 before loading (``load_policy_version``); a
tampered or missing file is refused with a logged error and the current version keeps serving.
Loading happens on the reloader's thread; the swap is one attribute assignment, so a batch that
already took ``holder.policy`` finishes on the version it started with.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from infra.runtime.settings import Settings
from infra.runtime.versions import VersionFollower
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.reload")


@dataclass
class PolicyHolder:
    """The version being served, plus what was refused (shown on /healthz)."""

    name: str
    policy: Any = None  # the loaded Policy (torch backend) or a handle (vLLM backend)
    version: int = -1
    kind: str = ""
    loaded_at: float = 0.0
    published: bool = False  # False while serving a fresh, never-published model (any version replaces it)
    refused: list[dict[str, Any]] = field(default_factory=list)

    def swap(self, policy: Any, pv: PolicyVersion | None) -> None:
        self.policy = policy
        self.version = pv.version if pv is not None else policy.version  # a fresh Policy (unpublished)
        self.kind = pv.kind if pv is not None else policy.kind
        self.loaded_at = time.time()
        self.published = pv is not None


def apply_version(holder: PolicyHolder, pv: PolicyVersion, load: Callable[[PolicyVersion], Any]) -> str:
    """Load ``pv`` into ``holder`` if it is newer; -> "loaded" | "stale" | "refused"."""
    if pv.policy != holder.name or (holder.published and pv.version <= holder.version):
        return "stale"
    try:
        policy = load(pv)
    except Exception as exc:  # tampered, missing or unloadable: keep serving what we have
        log.error("refusing %s v%d (still serving v%d): %s", pv.policy, pv.version, holder.version, exc)
        holder.refused.append({"version": pv.version, "sha256": pv.sha256, "error": str(exc)[:500], "ts": time.time()})
        del holder.refused[:-20]
        return "refused"
    holder.swap(policy, pv)
    log.info("now serving %s v%d (%s)", pv.policy, pv.version, pv.uri)
    return "loaded"


class PolicyReloader(threading.Thread):
    def __init__(self, settings: Settings, holder: PolicyHolder, load: Callable[[PolicyVersion], Any],
                 on_loaded: Callable[[PolicyVersion], None] | None = None) -> None:
        super().__init__(name="policy-reloader", daemon=True)
        self.settings, self.holder, self.load, self.on_loaded = settings, holder, load, on_loaded
        self.caught_up = threading.Event()
        self._stopping = threading.Event()
        self.error: str | None = None

    def stop(self) -> None:
        self._stopping.set()

    def _apply(self, pv: PolicyVersion) -> str:
        outcome = apply_version(self.holder, pv, self.load)
        if outcome == "loaded" and self.on_loaded is not None:
            self.on_loaded(pv)
        return outcome

    def run(self) -> None:
        try:
            follower = VersionFollower(self.settings, "serve")
        except Exception as exc:
            self.error = f"cannot follow the policy topic: {exc}"
            log.error("%s", self.error)
            self.caught_up.set()
            return
        try:
            backlog: dict[int, PolicyVersion] = {}
            while not self._stopping.is_set():
                ann = follower.poll(0.5)
                if ann is not None and ann.version is None:
                    # the sink routes bad records to the DLQ; a server only skips them
                    log.warning("skipping undecodable policy record at offset %d: %s", ann.msg.offset(), ann.error)
                elif ann is not None and ann.version.policy == self.holder.name:
                    if self.caught_up.is_set():
                        self._apply(ann.version)
                    else:
                        backlog[ann.version.version] = ann.version
                if not self.caught_up.is_set() and follower.caught_up:
                    self._catch_up(backlog)
        except Exception as exc:  # keep serving the current version; /healthz shows the reason
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("policy reloader stopped")
        finally:
            self.caught_up.set()
            follower.close()

    def _catch_up(self, backlog: dict[int, PolicyVersion]) -> None:
        """Load the newest published version; older ones only if the newer are refused."""
        for version in sorted(backlog, reverse=True):
            if self._apply(backlog[version]) != "refused":
                break
        self.caught_up.set()
