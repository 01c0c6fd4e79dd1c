"""app.curriculum: RL episodes go to the tasks the policy still fails, every task keeps
some, no seed repeats within a task, and nothing is counted as sent that the broker refused."""

from __future__ import annotations

import pytest

from app.curriculum import FLOOR, WINDOW, TaskFeed, by_steps, lengths, share, weights

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


def test_the_weights_share_the_steps_not_the_episodes():
    """Issue 56: shared by episodes, mines (a few clicks an episode) got ~3% of a games run's RL
    steps beside 2048 and snake (hundreds). At equal weights, mean lengths 5 and 100 -> episodes
    about 20:1, so each task gets about half the steps."""
    feed = TaskFeed(["games.mines", "games.2048"], queue=210, seed=0, max_steps=500, run="r",
                    send=len, max_per_task=10_000)
    steps = {"games.mines": (5.0, 30), "games.2048": (100.0, 30)}
    counts = feed.refill(0, {}, {}, steps=steps)
    assert counts == {"games.mines": 200, "games.2048": 10}  # by episodes it was 105 each
    assert 5.0 * counts["games.mines"] == 100.0 * counts["games.2048"]  # the steps, half each
    assert by_steps({"a": 1.0, "b": FLOOR}, {"a": 5.0, "b": 100.0}) == pytest.approx({"a": 0.2, "b": FLOOR / 100})


def test_small_refills_by_steps_keep_the_step_shares():
    # a games run's refills are one or two episodes a second: the credit carries the 20:1
    w = by_steps({"games.mines": 1.0, "games.2048": 1.0}, {"games.mines": 5.0, "games.2048": 100.0})
    credit, got = {}, {t: 0 for t in w}
    for n in [1, 2] * 70:
        counts, credit = share(w, n, credit)
        for t, k in counts.items():
            got[t] += k
    assert got == {"games.mines": 200, "games.2048": 10}


def test_a_task_whose_length_is_unknown_counts_as_the_mean_of_the_known_ones():
    tasks = ["games.mines", "games.2048", "games.snake"]
    got = lengths(tasks, {"games.mines": (5.0, 30), "games.2048": (95.0, 20), "games.snake": (400.0, 3)})
    assert got == {"games.mines": 5.0, "games.2048": 95.0, "games.snake": 50.0}  # snake: 3 episodes say too little
    assert lengths(tasks, {"games.snake": (400.0, 3)}) == {t: 1.0 for t in tasks}  # none known: episodes as before
    assert lengths(["a", "b"], {"a": (0.0, 30), "b": (float("nan"), 30)}) == {"a": 1.0, "b": 1.0}  # at least 1 step


def test_near_lengths_barely_move_the_episode_shares():
    # tasks of 2.0 and 2.2 steps an episode (two-click tasks): the shares stay within a step of
    # those by episodes
    feed = TaskFeed(["click-option", "click-collapsible"], queue=64, seed=0, max_steps=14, run="r",
                    send=len, max_per_task=10_000)
    rates = {"click-option": (0.0, 30), "click-collapsible": (0.8, 30)}  # weights 1 and 0.2
    steps = {"click-option": (2.2, 30), "click-collapsible": (2.0, 30)}
    assert feed.refill(0, rates, {}) == {"click-option": 53, "click-collapsible": 11}  # by episodes: 53.3, 10.7
    feed = TaskFeed(["click-option", "click-collapsible"], queue=64, seed=0, max_steps=14, run="r",
                    send=len, max_per_task=10_000)
    assert feed.refill(0, rates, {}, steps=steps) == {"click-option": 52, "click-collapsible": 12}  # 52.4, 11.6


def test_the_demo_feeds_the_curriculum_each_tasks_mean_length_from_its_window(monkeypatch):
    """The curriculum's query over the last WINDOW episodes returns their mean steps; the progress
    reading keeps it beside the rates, and the feed tick hands it to the refill."""
    from app import demo
    from app import demo_queries as Q
    from infra.clickhouse import query as ch

    sql = Q.last_n_success("p", WINDOW, steps=True)
    assert "round(avg(num_steps), 2) AS mean_steps" in sql and f"LIMIT {WINDOW} BY task_name" in sql
    assert "num_steps" not in Q.last_n_success("p")  # the report's table keeps its three columns

    def execute(settings, sql):
        if "mean_steps" in sql:
            return None, [("games.mines", 30, 0.1, 4.5), ("games.2048", 30, 0.0, 200.0)], None
        return None, [], None

    monkeypatch.setattr(ch, "execute", execute)
    monkeypatch.setattr(demo, "run_lags", lambda settings, prefix: {"rollout": 0})
    snap = demo.snapshot(None, "p", "demo-r.")
    assert snap["recent_steps"] == {"games.mines": (4.5, 30), "games.2048": (200.0, 30)}
    assert snap["recent_rates"] == {"games.mines": (0.1, 30), "games.2048": (0.0, 30)}
    feed = TaskFeed(["games.mines", "games.2048"], queue=82, seed=0, max_steps=500, run="r",
                    send=len, max_per_task=10_000)
    demo.feed_tick(feed, None, "demo-r.", snap)
    assert feed.submitted == {"games.mines": 80, "games.2048": 2}  # weights 0.9 and 1 over 4.5 and 200 steps: 40:1


def test_a_nan_figure_reads_as_unknown_for_the_weights_and_the_floor():
    from app.curriculum import exploring

    rates = {"a": (float("nan"), 30), "b": (0.5, 30)}
    assert weights(["a", "b"], rates, {}) == {"a": 1.0, "b": 0.5}  # not a NaN weight
    assert exploring(["a", "b"], rates, {}, 0.3) == {"a": 0.3, "b": 0.0}
