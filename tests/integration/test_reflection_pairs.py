"""Reflection pairs on the real broker: `flywheel annotate`'s stage turns failed episodes of
flywheel.ct.v1 into pairs on flywheel.pairs.v1 (bad records dead-lettered, offsets committed),
the sink lands them in ClickHouse with their view, and `flywheel dpo` reads them and publishes
the next version of the policy. The pages are the fake click-checkboxes of the unit tests (the
real browser is tests/e2e/test_reflection_browser.py)."""

from __future__ import annotations

import asyncio
import threading

import torch

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer, read_to_end
from infra.runtime.policy import build_policy, load_policy_version
from infra.runtime import versions
from infra.runtime.topics import TOPICS, topic_name
from producers.annotate import AnnotateConfig, Annotator
from producers.reflection import annotate
from schemas.blobs import BlobStore
from schemas.codec import decode, encode
from schemas.events import DeadLetter, PreferencePair, ScoredTrajectory, TrainerMetrics
from tests.integration.test_sink_clickhouse import client_for, run_sink, scalar
from tests.unit.test_dpo import pixel_policy, training_pairs
from tests.unit.test_reflection import SUBMIT, FakeEnv, checkbox, record
from trainer.dpo.train import run_dpo
from trainer.dpo.config import DPOConfig
from trainer.dpo.inputs import pair_inputs
from trainer.core.publish import make_version, save_weights


class StageEnv(FakeEnv):
    """The fake pages with the lifecycle the stage drives."""

    async def start(self): ...
    async def flush(self): ...
    async def restart(self): ...
    async def close(self): ...


def scored(traj, success=False) -> ScoredTrajectory:
    traj = traj.model_copy(update={"success": success})
    return ScoredTrajectory(trajectory=traj, scorer="env", scorer_version="1", reward=float(success), components={},
                            verdict=int(success), rl_eligible=True, scored_at=2.0)


def produce(settings, spec, items) -> None:
    producer, tracker = make_producer(settings), DeliveryTracker()
    for key, value in items:
        producer.produce(topic_name(spec, settings), key=key, value=value, on_delivery=tracker)
    flush_or_raise(producer, tracker)


def read(settings, spec):
    return list(read_to_end(settings, topic_name(spec, settings), timeout_s=30))


def with_id(traj, eid):
    return traj.model_copy(update={"episode_id": eid, "steps": [s.model_copy(update={"episode_id": eid}) for s in traj.steps]})


def test_annotate_turns_failed_episodes_into_pairs_and_dead_letters_the_rest(settings, group_id):
    wrong_box = with_id(record([checkbox(1), SUBMIT]), "ep-wrong-box")  # two pairs
    submit_early = with_id(record([SUBMIT]), "ep-submit")  # ended by its error: one pair
    solved = with_id(record([checkbox(0), SUBMIT]), "ep-solved")  # a success: not annotated
    unknown = with_id(record([SUBMIT], task_name="book-flight"), "ep-unknown")  # no solver: dead letter
    items = [(t.episode_id.encode(), encode(scored(t))) for t in (wrong_box, submit_early, unknown)]
    items += [(b"ep-solved", encode(scored(solved, success=True))), (b"junk", b"{not json")]
    produce(settings, TOPICS.ct, items)

    cfg = AnnotateConfig(group_id=group_id, exit_when_idle_s=1.5, flush_interval_s=0.5, batch_episodes=2)
    stats = Annotator(settings, cfg, env=StageEnv()).run(threading.Event())
    assert stats.episodes == 2 and dict(stats.pairs) == {"error_correction": 2, "post_reflection": 1}
    assert dict(stats.skipped) == {"succeeded": 1} and stats.dead_letters == 2
    pairs = sorted((decode(m.value(), PreferencePair) for m in read(settings, TOPICS.pairs)), key=lambda p: p.event_id)
    assert [p.event_id for p in pairs] == ["ep-submit:error_correction:scripted-v1",
                                           "ep-wrong-box:error_correction:scripted-v1",
                                           "ep-wrong-box:post_reflection:scripted-v1"]
    assert sorted({m.key() for m in read(settings, TOPICS.pairs)}) == [b"ep-submit", b"ep-wrong-box"]  # by episode
    letters = [decode(m.value(), DeadLetter) for m in read(settings, TOPICS.dlq)]
    assert sorted(d.error_type for d in letters) == ["NoSolver", "invalid_json"] and {d.stage for d in letters} == {"annotate"}
    # offsets were committed after the pairs: the group has nothing left to read
    again = Annotator(settings, cfg, env=StageEnv()).run(threading.Event())
    assert again.episodes == 0 and again.dead_letters == 0 and len(read(settings, TOPICS.pairs)) == 3


def test_pairs_land_in_clickhouse_once_with_their_view(settings, group_id):
    pairs = []
    for k, actions in enumerate(([checkbox(1), SUBMIT], [checkbox(2)], [SUBMIT])):
        pairs += asyncio.run(annotate(with_id(record(actions), f"ep-{k}"), FakeEnv())).pairs
    assert len(pairs) == 5
    items = [(p.episode_id.encode(), encode(p)) for p in pairs]
    produce(settings, TOPICS.pairs, items + items)  # annotated twice (a replay after a crash)
    stats = run_sink(settings, group_id, kinds=["pairs"])
    assert stats.rows == 10 and stats.dead_letters == 0
    with client_for(settings) as client:
        assert scalar(client, "SELECT count() FROM pairs FINAL") == 5
        rows = client.query("SELECT kind, pairs, episodes, with_rejected, mean_tau FROM v_pairs_by_task "
                            "WHERE task_name = 'click-checkboxes' ORDER BY kind").result_rows
        assert rows == [("error_correction", 3, 3, 3, 0.0), ("post_reflection", 2, 2, 1, 0.0)]


def test_dpo_reads_the_pairs_and_publishes_the_next_version(settings):
    torch.manual_seed(0)
    store = BlobStore(settings.blob_root)
    reference = pixel_policy()
    reference.name = "pixel-dpo-test"
    producer, tracker = make_producer(settings), DeliveryTracker()
    versions.publish(producer, tracker, settings, make_version(reference, save_weights(reference, store), parent=None))
    pairs = training_pairs(store)
    items = [(p.episode_id.encode(), encode(p)) for p in pairs]
    produce(settings, TOPICS.pairs, items + items[:3] + [(b"junk", b"[1, 2")])

    cfg = DPOConfig(policy_name="pixel-dpo-test", beta=0.5, epochs=5, lr=1e-2, minibatch_size=4, run_id="dpo-it")
    out = run_dpo(cfg, settings)
    assert (out["version"], out["reference"], out["pairs"]) == (1, 0, len(pairs))  # the repeats count once
    published = {v.version: v for v in versions.scan(settings, "pixel-dpo-test")}
    assert published[1].parent == 0 and published[1].metrics["batch/pairs"] == len(pairs)
    metrics = [decode(m.value(), TrainerMetrics) for m in read(settings, TOPICS.metrics)]
    assert [m.update for m in metrics if m.run_id == "dpo-it"] == list(range(5))
    assert metrics[-1].metrics["dpo/accuracy"] > 0.5
    assert metrics[-1].metrics["losses/dpo_loss"] < metrics[0].metrics["losses/dpo_loss"]
    letters = [decode(m.value(), DeadLetter) for m in read(settings, TOPICS.dlq)]
    assert [d.stage for d in letters] == ["dpo"]
    # the published weights prefer the chosen actions more than the reference does
    trained, ref = load_policy_version(published[1], store), load_policy_version(published[0], store)
    data, _ = pair_inputs(ref, pairs, store)
    with torch.no_grad():
        (tc, tr), (rc, rr) = data.logprobs(trained, list(range(len(data)))), data.logprobs(ref, list(range(len(data))))
    gain = (tc - tr) - (rc - rr)
    assert float(gain.mean()) > 0 and int((gain > 0).sum()) >= 0.75 * len(gain), gain
