"""`flywheel demo --start-from RUN[@VERSION]`: a run's RL starts from another run's published version
instead of a cold start (issue 59: the specialists and the joint run all start from one pi_sft).

A demo's versions live on its own topics (prefix ``demo-<run id>.``) under its own policy name
(``<kind>-<run id>``), and its trainer continues from the newest version of its policy
(trainer.rl.start). So the start is a copy: the named version's weights, hash-verified, are
published unchanged as this run's policy's first version, keeping its number, before the
trainer starts; the trainer then continues from it as it continues from pi_sft after a cold start.
The blob store is the data dir's, shared by every run in it, so RUN must be a run of this data dir:
its version is read from its topic on this broker, or from ClickHouse where this broker never held
it (the run's sink landed it there; versions.history). The copy's metrics name where it came from (``start_from/<run>``: the version).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.runtime import versions
from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.settings import Settings, load_settings
from schemas.blobs import BlobStore

METRIC = "start_from/"  # + the source run id: the source version, in the copy's metrics


@dataclass(frozen=True)
class StartFrom:
    """A published version of another run: ``version`` None is its newest."""

    run_id: str
    version: int | None = None

    @property
    def prefix(self) -> str:
        return f"demo-{self.run_id}."

    def policy(self, kind: str) -> str:
        return f"{kind}-{self.run_id}"

    def __str__(self) -> str:
        return self.run_id + ("" if self.version is None else f"@{self.version}")


def parse(text: str, run_id_pattern) -> StartFrom:
    """``RUN`` or ``RUN@VERSION`` (a run id the demo accepts, a version >= 0); UserError otherwise."""
    run_id, at, version = text.partition("@")
    if not run_id_pattern.fullmatch(run_id):
        raise UserError(f"--start-from names a run of this data dir as RUN or RUN@VERSION; {run_id!r} is no run id")
    if not at:
        return StartFrom(run_id)
    if not version.isdigit():
        raise UserError(f"--start-from {text!r}: the version after '@' is a number >= 0")
    return StartFrom(run_id, int(version))


def report_places(start: StartFrom, data_path: Path, report_dir: str) -> list[Path]:
    """Where ``start``'s run keeps its report: the demo's default place, and beside this run's own
    report folder (a benchmark keeps all its runs' reports in one folder)."""
    return [data_path / "reports" / start.run_id] + ([Path(report_dir).parent / start.run_id] if report_dir else [])


def version_taught(said: dict, base: int | None, version: int | None) -> str:
    """What taught ``version`` of a run that recorded ``said`` (its config.json's taught_by,
    app.taught.record) and whose RL started from ``base`` (its outcome.json's base_version; None:
    not recorded). The base version (pi_sft after a cold start) was taught by what came before RL
    only; any other, or one not known, by the run's sources. Joined by ", " (the report's line
    joins its own by "; ")."""
    if version is not None and version == base:
        if said.get("demonstrations"):
            return f"{said['demonstrations']} demonstrations (its run's cold start: pi_sft)"
        if said.get("start_from"):
            return f"the version {said['start_from']}" + (f" (taught by: {said['start_taught']})" if said.get("start_taught") else "")
        return "nothing: its run's random weights"
    sources = said.get("sources")
    return ", ".join(str(s) for s in sources) if isinstance(sources, list) else ""


def taught_by(places: list[Path], version: int | None) -> str:
    """What taught ``version`` (None: not known) of the run whose report is in the first of
    ``places`` holding a readable config.json (``version_taught``); "" where none does."""
    for place in places:
        try:
            said = json.loads((place / "config.json").read_text()).get("taught_by")
        except (OSError, ValueError, AttributeError):  # absent, unreadable or not a config: the next place
            continue
        if not isinstance(said, dict):
            return ""
        try:
            base = json.loads((place / "outcome.json").read_text()).get("base_version")
        except (OSError, ValueError, AttributeError):  # the run has not ended, or wrote no outcome
            base = None
        return version_taught(said, base if isinstance(base, int) else None, version)
    return ""


def source_version(settings: Settings, start: StartFrom, kind: str):
    """The PolicyVersion ``start`` names, read from its run's topics; UserError when it has none."""
    theirs = load_settings({**asdict(settings), "topic_prefix": start.prefix})
    policy = start.policy(kind)
    if start.version is None:
        try:
            pv = versions.latest(theirs, policy)
        except UserError:  # a run of a broker since gone: its sink landed its versions in ClickHouse
            pv = next(reversed(versions.clickhouse_history(theirs, policy)), None)
        if pv is None:
            raise UserError(f"--start-from {start}: {policy} has no published version on {start.prefix}* topics")
        return pv
    known = versions.history(theirs, policy, [start.version])
    return known[start.version]


def copy_into(settings: Settings, start: StartFrom, kind: str, policy: str, version: int | None = None):
    """Publish ``start``'s weights unchanged as ``policy``'s version on ``settings``' topics (the
    same number, or ``version``: benchmarks.merge_curve copies two runs' versions into one policy
    to merge them); -> the new PolicyVersion. A demo's ``policy`` has no version yet (the demo
    claims its run id first), so the trainer's "newest published" is this copy."""
    # local: loads torch and safetensors, needed only on this path (`flywheel demo` starts without them)
    from infra.runtime.policy import load_policy_version
    from trainer.core.publish import publish_version

    pv = source_version(settings, start, kind)
    store = BlobStore(settings.blob_root)
    model = load_policy_version(pv, store)  # verifies the weights' hash
    model.name = policy
    model.version = pv.version if version is None else version
    return publish_version(settings, make_producer(settings), DeliveryTracker(), store, model, None,
                           {METRIC + start.run_id: float(pv.version)})
