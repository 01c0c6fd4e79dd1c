"""The demo's task feed: RL episodes go where the policy still fails.

Submitting every task's 20,000 episodes up front, interleaved, gave each task the same share of
the rollouts, so a 15-minute run spent most of its episodes on tasks π_sft had already solved
(the five at >= 0.97 success were half the trained steps) while the two it failed most saw
about ten episodes a minute each. The feed keeps a short queue instead and refills it every
second (the demo's feed tick), each task's share in proportion to how far it is from solved:

- a task's weight is its failure rate over its last ``WINDOW`` (30) episodes (for a game: 1 - its
  normalised score, clipped to 0..1), at least ``floor`` so a solved task keeps being played and
  measured. A first version read the last 100 at a floor of 0.1: in a 30-minute starter run
  focus-text, solved at 0.94 by minute 21, fell to 0.28 while its tenth of a share took minutes
  to fill the window that would have shown it;
  a task with fewer than ``min_episodes`` ended episodes counts as unsolved (weight 1);
- the weights share the STEPS, not the episodes: a task's episode weight is its weight over its
  mean episode length (``lengths``, ``by_steps``) over the same recent episodes. Shared by
  episodes, a games run gave mines (an episode ends at the first mine: a few clicks) about 3% of
  the RL steps beside 2048 and snake (hundreds of steps an episode) at the same weight. A task
  with fewer than ``min_episodes`` ended episodes counts as the mean length of those that have
  (1 if none: the first refills share episodes as before). Tasks of near lengths keep nearly
  their episode shares; the default suite's run from 1 (focus-text-2) to 6 (use-spinner) steps,
  so there the short tasks get more episodes than before and use-spinner, a third of the steps
  at a sixth of the weight in a 15-minute run, gets its weight's share of the steps;
- a refill of n tasks shares them by weight, fairly across refills (``share``: a task's credit
  grows by its share and falls by one per episode it gets);
- the queue is sized to the trainer: the trajectories the trainer has not yet read (its
  consumer group's lag on flywheel.rl.v1) beyond ``allowance`` (one batch: the next update's
  input while the current one runs) count against it, so episodes wait as tasks, not as
  trajectories that go stale. Without this bound a 15-minute default run left the trainer ~250
  episodes behind: every batch it trained was 4 versions old (the most it keeps) and a quarter of
  the episodes were dropped as staler still. Counting every unread trajectory (no allowance)
  dropped none, but left the trainer waiting for data a third of its time and the machine 75% busy;
- episode k of a task gets seed ``base + k`` and task id ``<run>.<task>.<seed>``, as
  ``producers.tasks.build_tasks`` numbers them, so no seed repeats within a task, not even after a
  refill the broker refused part of (its seeds are skipped, the queue is topped up at the next).

- with ``explore`` (the demo's --explore: on auto 0.5 from random weights on MiniWoB++ tasks,
  ``auto_explore``), a task whose recent success is below
  ``EXPLORE_BELOW`` (or that has too few episodes to say) gets its episodes with an exploration
  floor: a share of the policy's clicks drawn uniformly (``exploring``; the pixel policy's
  ``mix_floor``), ``explore`` at no success, shrinking linearly to none at the bar. Why: in a multistep run from random weights with self-imitation
  (docs/rl-alone, ms-sil-s0), click-menu-2 had no success in 1,610 episodes where random clicks
  solve 5%: the click head, shared across tasks, had moved to where the other tasks' successes
  were (the lower half of the page), away from the menu at the top, with its entropy still near
  3 nats, so no entropy band could bring it back. A floor of uniform clicks gives such a task back
  random clicks' rare successes; the logged log-prob is the mixture's, so PPO's truncated
  importance weights (decoupled PPO) correct for the behaviour, and self-imitation, which needs
  no importance weight, learns the successes it finds. A task at or above the bar plays the
  policy alone, and its figures measure the policy. Measured once (docs/tasks.md, multistep seed
  0, 0.5, the floor then whole below the bar): click-menu-2 rose from 0.00 to 0.16 and the
  suite's mean fell from 0.324 to 0.249, the tasks near the bar playing half their clicks at random
  for most of the run; so the floor now shrinks with the task's success (a task at 0.05 plays a
  quarter of its clicks at random with --explore 0.5, not half): over three seeds the suite's mean
  is 0.308 +- 0.020 with it and 0.282 +- 0.033 without (docs/tasks.md).
- with ``points`` (the demo's --explore-from human, ``guide_points``), a task that has
  demonstrations draws its floor's clicks near where they clicked at the same step instead of
  uniformly (``producers.tasks.EXPLORE_AT``, the pixel policy's ``guide_floor``): the
  demonstrations constrain exploration and are never cloned (workflow-guided exploration, arXiv
  1802.08802, at its simplest: where to click, not which element).

``weights``, ``exploring``, ``guide_points``, ``lengths``, ``by_steps`` and ``share`` are pure; ``TaskFeed`` is the thin loop's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import zip_longest

from producers.suites import family
from producers.tasks import EXPLORE, EXPLORE_AT, MAX_EXPLORE_POINTS, build_tasks
from schemas.events import TaskSpec

FLOOR = 0.2  # a solved task's weight relative to an unsolved one's: it keeps being played and measured
WINDOW = 30  # a task's recent episodes its weight reads: a solved task's forgetting shows in a few minutes
MIN_EPISODES = 20  # below this many ended episodes a task's rate says too little: weight 1
# a task explores (``exploring``) while its recent success is below this: about random clicks'
# rate on the multistep suite's tasks (1-10%), so a policy worse than random clicks gets theirs back
EXPLORE_BELOW = 0.1
EXPLORE_AUTO = 0.5  # the floor's share from random weights when --explore is on auto (``auto_explore``)


def recent(task: str, rates: Mapping[str, tuple[float, int]], scores: Mapping[str, tuple[float, int]],
           min_episodes: int = MIN_EPISODES) -> float | None:
    """A task's recent figure: its normalised score for a game, else its success rate; None while
    it has fewer than ``min_episodes`` ended episodes or the figure is NaN (nothing known)."""
    value, n = scores.get(task) or rates.get(task) or (0.0, 0)
    return None if n < min_episodes or float(value) != float(value) else float(value)  # a NaN says nothing


def weights(tasks: list[str], rates: Mapping[str, tuple[float, int]], scores: Mapping[str, tuple[float, int]],
            floor: float = FLOOR, min_episodes: int = MIN_EPISODES) -> dict[str, float]:
    """Each task's weight from its recent (success rate, episodes) and, for a game, its
    (normalised score, episodes): how far from solved, at least ``floor``."""
    out = {}
    for task in tasks:
        value = recent(task, rates, scores, min_episodes)
        out[task] = max(1.0 if value is None else 1.0 - min(max(value, 0.0), 1.0), floor)
    return out


def auto_explore(tasks: list[str] | tuple[str, ...], cold_start: bool, can: bool) -> float:
    """The exploration floor's share when the demo's --explore is on auto: ``EXPLORE_AUTO`` from
    random weights (no ``cold_start``) on MiniWoB++ tasks where the run ``can`` explore (a policy
    kind that explores, with the curriculum), else 0. From random weights the click head, shared
    by the tasks, drifts to where some tasks pay before the others found a success (a task at 0 in
    1,200-1,600 episodes where random clicks solve 2-5%). Three seeds each, reward alone with
    self-imitation (docs/tasks.md): the multistep suite 0.308 +- 0.020 with this floor, 0.282 +-
    0.033 without; four tasks in no suite 0.578 +- 0.020 with it, every task above random clicks
    on every seed, 0.404 +- 0.088 without; the starter suite 0.806 with it on one seed (0.777
    without; its tasks pass the bar within minutes, so the floor plays little there). Not measured
    with it: PPO without self-imitation. After a cold start pi_sft's clicks are the
    demonstrators' and uniform ones would only spend its episodes (a run cloning some of its tasks
    gives the others none either); the games' long episodes (arrow keys, scores) were not measured
    with it."""
    if cold_start or not can or not tasks or any(family(t, "miniwob") != "miniwob" for t in tasks):
        return 0.0
    return EXPLORE_AUTO


def exploring(tasks: list[str], rates: Mapping[str, tuple[float, int]], scores: Mapping[str, tuple[float, int]],
              explore: float, below: float = EXPLORE_BELOW, min_episodes: int = MIN_EPISODES) -> dict[str, float]:
    """Each task's exploration floor for its next episodes (a share of uniform clicks,
    producers.tasks.explore_share): ``explore`` while it has fewer than ``min_episodes`` ended
    episodes or no success, shrinking linearly with its recent success (a game: its normalised
    score) to 0 at ``below``: explore * (1 - success / below)."""
    out = {}
    for task in tasks:
        value = recent(task, rates, scores, min_episodes)
        share = 1.0 if value is None else max(0.0, 1.0 - max(value, 0.0) / below)
        out[task] = explore * share if explore > 0 else 0.0
    return out


def guide_points(demos: list, cap: int = MAX_EXPLORE_POINTS) -> dict[str, list[list]]:
    """Per task, where its demonstrations (ScoredTrajectory or Trajectory) clicked: ``[step, x, y]``
    of every click (the screen's fractions, as actions give them; the floor guides the click head
    only), at most ``cap`` per task (the task param's bound, producers.tasks.explore_points) taken
    in turn from each step, so a long demonstration's late steps keep theirs."""
    by_step: dict[str, dict[int, list[list]]] = {}
    for demo in demos:
        traj = getattr(demo, "trajectory", demo)
        for step in traj.steps:
            a = step.action
            if a is not None and a.type == "click":
                steps = by_step.setdefault(traj.task.name, {})
                steps.setdefault(int(step.step_index), []).append([int(step.step_index), float(a.x), float(a.y)])
    out = {}
    for task, steps in by_step.items():
        rows = [steps[k] for k in sorted(steps)]
        turns = (p for turn in zip_longest(*rows) for p in turn if p is not None)
        out[task] = [p for _, p in zip(range(cap), turns)]
    return out


def lengths(tasks: list[str], steps: Mapping[str, tuple[float, int]],
            min_episodes: int = MIN_EPISODES) -> dict[str, float]:
    """Each task's mean episode length in steps from its recent (mean steps, episodes), at least 1;
    a task with fewer than ``min_episodes`` ended episodes gets the mean over the tasks that have
    enough (1 if none), so a new task is neither flooded nor starved while its length is unknown."""
    known = {}
    for task in tasks:
        mean, n = steps.get(task) or (0.0, 0)
        if n >= min_episodes and float(mean) == float(mean):  # a NaN mean says nothing
            known[task] = max(float(mean), 1.0)
    fallback = sum(known.values()) / len(known) if known else 1.0
    return {task: known.get(task, fallback) for task in tasks}


def by_steps(w: Mapping[str, float], length: Mapping[str, float]) -> dict[str, float]:
    """Episode weights whose STEPS follow ``w``: each task's weight over its mean episode length
    (``lengths``; a task it lacks counts as 1 step)."""
    return {t: v / max(length.get(t, 1.0), 1.0) for t, v in w.items()}


def share(w: Mapping[str, float], n: int, credit: Mapping[str, float]) -> tuple[dict[str, int], dict[str, float]]:
    """``n`` episodes over the tasks of ``w`` in proportion to the weights, fair across refills:
    each task's credit grows by its share of ``n`` and falls by one per episode it gets, and each
    episode goes to the largest credit (ties: the order of ``w``); -> (counts summing to ``n``, the
    credits to pass to the next refill). A first version gave "one each, in the order of the
    tasks, while n lasts" and the rest by weight: a refill of fewer episodes than tasks (a few a
    second, most of a run) always went to the first tasks, so the last ones starved (games g35t:
    2048 79 episodes, mines 59, snake 37, in that order)."""
    tasks = list(w)
    if not tasks or n <= 0:
        return {t: 0 for t in tasks}, dict(credit)
    w = {t: v if v > 0 else 0.0 for t, v in w.items()}  # a negative or NaN weight is no share
    total = sum(w.values())
    credit = {t: credit.get(t, 0.0) + (n * w[t] / total if total > 0 else n / len(tasks)) for t in tasks}
    counts = {t: 0 for t in tasks}
    for _ in range(n):
        t = max(tasks, key=lambda t: credit[t])
        counts[t] += 1
        credit[t] -= 1.0
    return counts, credit


class TaskFeed:
    """Keeps about ``queue`` RL tasks waiting for the rollout workers, refilled by weight.
    ``send`` produces a list of TaskSpecs and returns how many the broker acknowledged."""

    def __init__(self, tasks: list[str], queue: int, seed: int, max_steps: int, run: str,
                 send: Callable[[list[TaskSpec]], int], max_per_task: int, allowance: int = 0,
                 explore: float = 0.0, points: Mapping[str, list[list]] | None = None) -> None:
        self.tasks, self.queue, self.seed, self.max_steps, self.run = tasks, queue, seed, max_steps, run
        self.send, self.max_per_task, self.allowance, self.explore = send, max_per_task, allowance, explore
        self.points = dict(points or {})  # the guide's, per task (``guide_points``): where its floor clicks
        self.submitted = {t: 0 for t in tasks}
        self.credit: dict[str, float] = {}  # share's, carried from refill to refill

    def refill(self, queued: int | None, rates: Mapping[str, tuple[float, int]],
               scores: Mapping[str, tuple[float, int]], backlog: int | None = 0,
               steps: Mapping[str, tuple[float, int]] | None = None) -> dict[str, int]:
        """Top the queue up to ``queue`` less the trainer's ``backlog`` beyond ``allowance``
        (trajectories it has not read yet; None: unknown, taken as none), the weights sharing the
        steps by each task's recent (mean steps, episodes) in ``steps`` (none: episodes); nothing
        when ``queued`` is unknown; -> what was sent."""
        room = self.room(queued, backlog)
        if room <= 0:
            return {}
        open_tasks = [t for t in self.tasks if self.submitted[t] < self.max_per_task]
        w = by_steps(weights(open_tasks, rates, scores), lengths(open_tasks, steps or {}))
        counts, self.credit = share(w, room, self.credit)
        counts = {t: min(k, self.max_per_task - self.submitted[t]) for t, k in counts.items() if k > 0}
        floor = exploring(list(counts), rates, scores, self.explore)
        per_task = [build_tasks("miniwob", [t], k, self.seed + self.submitted[t], max_steps=self.max_steps,
                                prefix=self.run, params=self.floor_params(t, floor[t]))
                    for t, k in counts.items()]
        # interleaved, as build_tasks does: no task waits behind a burst of another
        specs = [spec for row in zip_longest(*per_task) for spec in row if spec is not None]
        for t, k in counts.items():  # counted before sending: a send that fails part-way reuses no task id
            self.submitted[t] += k
        if specs:
            self.send(specs)  # raises when the broker did not take them all; the next refill tops up with new seeds
        return counts

    def floor_params(self, task: str, floor: float) -> dict | None:
        """A task's params for its exploration floor: its share and, where the guide has points
        for it, where the floor clicks; None without a floor."""
        if not floor:
            return None
        return {EXPLORE: floor, **({EXPLORE_AT: self.points[task]} if self.points.get(task) else {})}

    def room(self, queued: int | None, backlog: int | None) -> int:
        """Tasks a refill may send: the queue less what waits as tasks and as untrained
        trajectories beyond the allowance."""
        if queued is None:
            return 0
        return max(self.queue - max(queued, 0) - max((backlog or 0) - self.allowance, 0), 0)
