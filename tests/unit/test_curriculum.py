"""infra.app.curriculum: RL episodes go to the tasks the policy still fails, every task keeps
some, no seed repeats within a task, and nothing is counted as sent that the broker refused."""

from __future__ import annotations

import pytest

from infra.app.curriculum import FLOOR, TaskFeed, apportion, weights

TASKS = ["click-button", "use-spinner", "focus-text-2", "games.snake"]


def test_weights_follow_failure_with_a_floor_and_trust_only_enough_episodes():
    rates = {"click-button": (1.0, 100), "use-spinner": (0.3, 100), "focus-text-2": (0.2, 5)}
    scores = {"games.snake": (0.25, 40)}
    w = weights(TASKS, rates, scores)
    assert w == pytest.approx({"click-button": FLOOR, "use-spinner": 0.7, "focus-text-2": 1.0, "games.snake": 0.75})
    assert weights(["games.snake"], {}, {"games.snake": (1.7, 40)}) == {"games.snake": FLOOR}  # above the reference
    assert weights(["games.snake"], {}, {"games.snake": (-0.4, 40)}) == {"games.snake": 1.0}  # below random


def test_apportion_gives_one_each_then_by_weight_and_sums_to_n():
    w = {"a": 0.1, "b": 0.7, "c": 1.0, "d": 0.1}
    counts = apportion(w, 64)
    assert sum(counts.values()) == 64 and min(counts.values()) >= 1
    assert counts["c"] > counts["b"] > counts["a"] and counts["a"] == counts["d"]
    assert counts == {"a": 4, "b": 23, "c": 33, "d": 4}  # 60 left: 3.16, 22.1, 31.6, 3.16
    assert apportion(w, 2) == {"a": 1, "b": 1, "c": 0, "d": 0}  # fewer than the tasks: one each while n lasts
    assert apportion(w, 0) == {"a": 0, "b": 0, "c": 0, "d": 0}


def test_the_feed_tops_up_the_queue_interleaved_with_fresh_seeds():
    sent: list = []
    feed = TaskFeed(["click-button", "use-spinner"], queue=10, seed=500, max_steps=12, run="r1.rl",
                    send=lambda specs: sent.extend(specs) or len(specs), max_per_task=1000)
    assert feed.refill(0, {}, {}) == {"click-button": 5, "use-spinner": 5}  # nothing known: even shares
    assert [s.name for s in sent[:4]] == ["click-button", "use-spinner"] * 2  # interleaved
    assert feed.refill(None, {}, {}) == {} and feed.refill(10, {}, {}) == {}  # lag unknown, or queue full
    rates = {"click-button": (1.0, 100), "use-spinner": (0.0, 100)}
    assert feed.refill(1, rates, {}) == {"click-button": 2, "use-spinner": 7}  # 7 left: 1.17, 5.83
    seeds = [s.seed for s in sent if s.name == "use-spinner"]
    assert seeds == list(range(500, 512)) and len({s.task_id for s in sent}) == len(sent)
    assert all(s.max_steps == 12 and s.task_id.startswith("r1.rl.") for s in sent)


def test_a_task_stops_at_its_episode_cap():
    feed = TaskFeed(["click-button", "use-spinner"], queue=10, seed=0, max_steps=5, run="r",
                    send=len, max_per_task=3)
    assert feed.refill(0, {}, {}) == {"click-button": 3, "use-spinner": 3}
    assert feed.refill(0, {}, {}) == {}


def test_a_refused_send_reuses_no_task_id():
    sent, refuse = [], [True]

    def send(specs):
        if refuse.pop():
            raise RuntimeError("broker down")  # perhaps after delivering some of them
        sent.extend(specs)
        return len(specs)

    feed = TaskFeed(["click-button"], queue=4, seed=0, max_steps=5, run="r", send=send, max_per_task=100)
    with pytest.raises(RuntimeError):
        feed.refill(0, {}, {})
    refuse.append(False)
    feed.refill(0, {}, {})
    assert [s.seed for s in sent] == [4, 5, 6, 7]  # the refused refill's seeds are not used again


def test_the_trainers_backlog_counts_against_the_queue():
    sent: list = []
    feed = TaskFeed(["click-button", "use-spinner"], queue=10, seed=0, max_steps=5, run="r",
                    send=lambda specs: sent.extend(specs) or len(specs), max_per_task=1000)
    assert feed.refill(2, {}, {}, backlog=6) == {"click-button": 1, "use-spinner": 1}  # 10 - 2 queued - 6 untrained
    assert feed.refill(0, {}, {}, backlog=10) == {} and feed.refill(0, {}, {}, backlog=25) == {}  # trainer behind: wait
    assert feed.refill(4, {}, {}, backlog=None) == {"click-button": 3, "use-spinner": 3}  # backlog unknown: the queue alone
    assert len(sent) == 8


def test_one_batch_of_unread_trajectories_is_allowed_beside_a_full_queue():
    feed = TaskFeed(["click-button"], queue=10, seed=0, max_steps=5, run="r",
                    send=lambda specs: len(specs), max_per_task=1000, allowance=4)
    assert feed.room(0, 4) == 10 and feed.room(0, 6) == 8 and feed.room(3, 20) == 0  # 10 - 0, 10 - 2, below 0
    assert feed.refill(5, {}, {}, backlog=4) == {"click-button": 5}  # the next batch waiting: the queue is topped up
