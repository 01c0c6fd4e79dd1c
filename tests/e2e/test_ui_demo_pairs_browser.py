"""Pairs from a demonstration (app.ui.demo_pairs) in a real browser: a click-tab-2 demonstration
recorded through the Annotate view by the person's routine is replayed in the pairer's own browser
sandbox (its recorded screens checked); a published policy that would click elsewhere gives one
error-correction pair at that state under the demonstrator's name, the person's click chosen and
the policy's greedy one rejected; a policy that clicks where the person did gives none."""

from __future__ import annotations

import torch

from app.ui import demo_pairs
from app.ui.record import record
from infra.runtime import versions
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.policy import Decision
from producers import reflection
from schemas.blobs import BlobStore
from tests.e2e.browser_support import require_chromium
from tests.e2e.pipeline_support import assembled, steps_events
from tests.unit.test_dpo import pixel_policy
from trainer.core.publish import make_version, save_weights
from trainer.dpo.train import read_pairs, select_pairs

TASK, SEED, NAME, POLICY = "click-tab-2", 11, "teacher", "pixel-pairer"


def demonstration(settings):
    done = record(settings, [TASK], 1, NAME, first_seed=SEED, say=lambda _line: None)
    assert [r.success for r in done] == [True], done
    traj = assembled(steps_events(settings))
    assert traj is not None and traj.success and traj.policy == f"human:{NAME}" and len(traj.steps) >= 2
    return traj


def test_a_demonstration_gives_a_pair_where_the_policy_would_leave_it_and_none_where_it_follows(settings, monkeypatch):
    require_chromium()
    traj = demonstration(settings)
    torch.manual_seed(0)
    policy = pixel_policy()
    policy.name = POLICY
    store = BlobStore(settings.blob_root)
    versions.publish(make_producer(settings), DeliveryTracker(), settings,
                     make_version(policy, save_weights(policy, store), parent=None))
    wanted = [d.action for d in policy.eval().act(demo_pairs.inputs_of(traj, store), greedy=True)]
    tau = next(i for i, (s, w) in enumerate(zip(traj.steps, wanted))
               if w is None or w.type != s.action.type or abs(w.x - s.action.x) * 160 > 12 or abs(w.y - s.action.y) * 210 > 12)

    done = demo_pairs.pair_demonstrations(settings, {TASK: [traj]}, {TASK: 1}, POLICY, 0, say=lambda _l: None)
    assert [p.outcome for p in done] == ["paired"], done
    assert done[0].tau <= tau  # a click more than 12 px off the person's can hit no element of theirs
    pairs = select_pairs(read_pairs(settings, 30), ["error_correction"], [f"human:{NAME}"])
    assert [p.event_id for p in pairs] == [done[0].pair]
    pair = pairs[0]
    assert pair.episode_id == traj.episode_id and pair.tau == done[0].tau
    assert pair.chosen.action == traj.steps[pair.tau].action and pair.rejected.action == wanted[pair.tau]
    assert (pair.policy, pair.policy_version) == (POLICY, 0)

    class Follower:  # clicks exactly where the person did
        def eval(self):
            return self

        def act(self, inputs, greedy=False):
            return [Decision(action=s.action, logprob=0.0) for s in traj.steps]

    monkeypatch.setattr(demo_pairs, "load_policy_version", lambda *_a, **_k: Follower())
    judged = []
    monkeypatch.setattr(demo_pairs, "same_action", lambda want, got, dom: judged.append(1) or reflection.same_action(want, got, dom))
    done = demo_pairs.pair_demonstrations(settings, {TASK: [traj]}, {TASK: 1}, POLICY, 0, say=lambda _l: None)
    assert [p.outcome for p in done] == ["follows"] and len(judged) == len(traj.steps)
