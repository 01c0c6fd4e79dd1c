"""app.curriculum: RL episodes go to the tasks the policy still fails, every task keeps
some, no seed repeats within a task, and nothing is counted as sent that the broker refused."""

from __future__ import annotations

import pytest

from app.curriculum import FLOOR, TaskFeed, share, weights

TASKS = ["click-button", "use-spinner", "focus-text-2", "games.snake"]


def test_weights_follow_failure_with_a_floor_and_trust_only_enough_episodes():
    rates = {"click-button": (1.0, 100), "use-spinner": (0.3, 100), "focus-text-2": (0.2, 5)}
    scores = {"games.snake": (0.25, 40)}
    w = weights(TASKS, rates, scores)
    assert w == pytest.approx({"click-button": FLOOR, "use-spinner": 0.7, "focus-text-2": 1.0, "games.snake": 0.75})
    assert weights(["games.snake"], {}, {"games.snake": (1.7, 40)}) == {"games.snake": FLOOR}  # above the reference
    assert weights(["games.snake"], {}, {"games.snake": (-0.4, 40)}) == {"games.snake": 1.0}  # below random


def test_share_follows_the_weights_and_sums_to_n():
    w = {"a": 0.1, "b": 0.7, "c": 1.0, "d": 0.1}
    counts, credit = share(w, 64, {})
    assert sum(counts.values()) == 64 and counts["c"] > counts["b"] > counts["a"] and counts["a"] == counts["d"]
    assert counts == {"a": 3, "b": 24, "c": 34, "d": 3}  # 3.37, 23.58, 33.68, 3.37: largest remainders to b, c
    assert abs(sum(credit.values())) < 1e-9 and max(abs(c) for c in credit.values()) < 1
    assert share(w, 0, {})[0] == {"a": 0, "b": 0, "c": 0, "d": 0}


def test_small_refills_do_not_starve_the_last_tasks():
    # most refills are a few episodes (what the rollout workers took since the last second):
    # "one each in the tasks' order while n lasts" gave them all to the first tasks
    equal = {"games.2048": 1.0, "games.mines": 1.0, "games.snake": 1.0}
    credit, got = {}, {t: 0 for t in equal}
    for n in [1, 2] * 150:
        counts, credit = share(equal, n, credit)
        for t, k in counts.items():
            got[t] += k
    assert got == {"games.2048": 150, "games.mines": 150, "games.snake": 150}
    w = {"solved": FLOOR, "failing": 1.0}  # and the weights still hold
    credit, got = {}, {t: 0 for t in w}
    for _ in range(120):
        counts, credit = share(w, 1, credit)
        for t, k in counts.items():
            got[t] += k
    assert got == {"solved": 20, "failing": 100}


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


def test_a_share_never_goes_to_a_negative_or_nan_weight_and_nothing_to_share_changes_no_credit():
    from app.curriculum import share

    counts, credit = share({"a": 1.0, "b": -1.0, "c": float("nan")}, 4, {})
    assert counts == {"a": 4, "b": 0, "c": 0} and credit["b"] == 0.0
    counts, credit = share({"a": 1.0, "b": 1.0}, -2, {"a": 0.5})
    assert counts == {"a": 0, "b": 0} and credit == {"a": 0.5}
