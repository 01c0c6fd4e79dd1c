"""Reward scoring of trajectories (pure functions) and the scorer registry.

    reward = outcome + format + length + shaping + anomaly [+ judge]

- outcome: the environment verifier's ``outcome_reward`` (0 for an aborted episode); a task judged
  at its end that ran out of steps or time (``Trajectory.ran_out``), or that the agent gave up on
  (``finished`` / ``call_user`` without a success), failed: its suite's ``FAILED_OUTCOME`` (a
  game keeps its score so far);
- format: ``-format_penalty`` times the fraction of steps whose model output did not parse;
- length: ``-length_penalty`` times steps used / the task's step budget, for a task judged at its
  end (a game's length is how long it survived, no cost: none, since scoring 1.4);
- shaping: ``shaping`` times the sum of the per-step environment rewards (0 by default);
- anomaly: ``-anomaly_penalty`` times the fraction of steps the anomaly filter flagged;
- judge: ``judge`` times the score of an outcome reward model / judge, only when one is set.

A task the judge decides (``Scorer.judge_tasks``: named ones, or ``*`` for all) has no outcome
component: its ``judge_outcome`` takes its place, the judge's score s on the suite's scale,
s * 1 + (1 - s) * the failed outcome (MiniWoB++: 2s - 1), and V(s) is s >= ``judge_success_at``.
The page's verdict stays in the trajectory (``success``, ``outcome_reward``) as the measure the
judge's reward is compared against, and nothing of it reaches the reward or the judge. This is
how a task without a page verdict is trained, and how RL on a learned verifier's reward is run.

Every component is kept in ``ScoredTrajectory.components`` and they sum to ``reward``.

The anomaly filter follows UI-TARS's rule-based filtering of its online traces: a pointer or
keyboard action after which the screenshot hash did not change (``observation.screenshot.sha256``
== ``next_screenshot_sha256``) did nothing visible, and the same action repeated on an unchanged
screen is the agent stuck in a loop.

The verdict V(s) (1: high quality, SFT; 0: CT) and the trajectory's intrinsic RL eligibility
(not an infrastructure abort, at least one step, no gap, every action sampled from the policy)
are decided here; staleness against the latest policy is the router's business. A greedy or
scripted trajectory (``Step.sampled`` false) keeps its verdict, so a greedy success is an SFT
demonstration and a greedy failure goes to CT (and the reflection annotator), but it is never RL
data: PPO's importance weights assume each action was drawn with its recorded log-prob. Scorers
are registered by name with a version; a ``ScoredTrajectory``'s ``event_id`` includes both, so
re-scoring yields distinguishable records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from infra.runtime.errors import UserError
from schemas.actions import SDK_ACTIONS, TERMINAL_ACTIONS
from schemas.events import JUDGE_OUTCOME, ScoredTrajectory, Step, Trajectory
from streams.judge import OutcomeJudge

# The verifier's reward for a failed attempt, by suite: what a task judged at its end is worth when
# the episode ran out of steps or time before the verdict. Scored 0 (the environment said nothing),
# running out paid better than a wrong answer in MiniWoB++ (-1), and PPO learnt to wait the budget
# out: in a 30-minute starter run navigate-tree fell from 0.27 to 0.02 success while its mean reward
# rose from -0.23 to -0.04, 890 of its 1,476 episodes ending at the step budget.
FAILED_OUTCOME = {"miniwob": -1.0, "desktop": 0.0}

# Actions that legitimately leave the screen as it was.
NO_VISIBLE_EFFECT_EXPECTED = frozenset({"wait"}) | TERMINAL_ACTIONS | SDK_ACTIONS


@dataclass(frozen=True)
class RewardWeights:
    format_penalty: float = 0.1
    length_penalty: float = 0.05
    shaping: float = 0.0
    anomaly_penalty: float = 0.0
    judge: float = 0.0
    repeat_limit: int = 3  # this many identical actions on an unchanged screen is a loop
    sft_max_anomaly_fraction: float = 0.5  # V(s)=1 needs no more anomalous steps than this
    sft_allow_parse_errors: bool = True
    # A scored game (its trajectory carries a normalised score: 0 = the random policy's mean,
    # 1 = the reference heuristic's) is V(s)=1 from this normalised score on, whatever `success` says.
    # Half the heuristic's mean: its own episodes spread from 0.1 to 2.0 around 1, and at 1.0 a third
    # to a half of the cold start's demonstrations went to CT (snake cloned from 6-9 of 16).
    sft_min_normalised_score: float = 0.5


def no_effect_steps(steps: list[Step]) -> list[int]:
    """Indices of steps whose action should have changed the screen but did not."""
    out = []
    for s in steps:
        if s.action is None or s.next_screenshot_sha256 is None:
            continue
        if s.action.type in NO_VISIBLE_EFFECT_EXPECTED:
            continue
        if s.observation.screenshot.sha256 == s.next_screenshot_sha256:
            out.append(s.step_index)
    return out


def repeated_action_steps(steps: list[Step], repeat_limit: int) -> list[int]:
    """Indices of steps that repeat the previous action on the same screen, from the
    ``repeat_limit``-th identical action of a run on."""
    out, run = [], 1
    for prev, cur in zip(steps, steps[1:]):
        same = (cur.action is not None and cur.action == prev.action
                and cur.observation.screenshot.sha256 == prev.observation.screenshot.sha256)
        run = run + 1 if same else 1
        if run >= repeat_limit:
            out.append(cur.step_index)
    return out


def find_anomalies(steps: list[Step], repeat_limit: int) -> tuple[list[str], set[int]]:
    """Human-readable anomalies and the set of flagged step indices."""
    messages, flagged = [], set()
    for i in no_effect_steps(steps):
        messages.append(f"step {i}: action had no visible effect (screenshot unchanged)")
        flagged.add(i)
    for i in repeated_action_steps(steps, repeat_limit):
        messages.append(f"step {i}: action repeated {repeat_limit}+ times on an unchanged screen")
        flagged.add(i)
    return messages, flagged


def gave_up(traj: Trajectory) -> bool:
    """Ended by the agent's own ``finished`` / ``call_user`` without a success. On MiniWoB++ that
    step never reaches the page (the browser sandbox ends the episode without a verdict: reward
    0, where a wrong answer pays -1): scored as the verifier's answer, giving up would pay better
    than trying, the very loophole running out had."""
    last = traj.steps[-1].action if traj.steps else None
    return (traj.status == "ended" and traj.end_reason == "done" and not traj.success
            and last is not None and last.type in TERMINAL_ACTIONS)


def outcome(traj: Trajectory) -> float:
    """The outcome component: the verifier's reward; 0 for an aborted episode; the suite's failed
    outcome for a task judged at its end that ran out of steps or time, or that the agent gave up
    on (``finished`` / ``call_user`` without a success)."""
    if traj.status != "ended":
        return 0.0
    if traj.judged_at_end and (traj.ran_out or gave_up(traj)):
        return FAILED_OUTCOME.get(traj.task.suite, 0.0)
    return traj.outcome_reward


def reward_components(traj: Trajectory, w: RewardWeights, flagged: set[int],
                      judge_score: float | None = None) -> dict[str, float]:
    n = len(traj.steps)
    parse_errors = sum(1 for s in traj.steps if s.parse_error is not None or s.action is None)
    components = {
        "outcome": outcome(traj),
        "format": -w.format_penalty * parse_errors / n if n else 0.0,
        "length": -w.length_penalty * min(n / traj.task.max_steps, 1.0) if traj.judged_at_end else 0.0,
        "shaping": w.shaping * sum(s.reward for s in traj.steps),
        "anomaly": -w.anomaly_penalty * len(flagged) / n if n else 0.0,
    }
    if judge_score is not None:
        components["judge"] = w.judge * judge_score
    return components


def judge_outcome(traj: Trajectory, judge_score: float) -> float:
    """The outcome of a task the judge decides: 0 for an aborted episode, else the judge's
    probability of success on the suite's scale (a success is worth 1, a failure its suite's
    ``FAILED_OUTCOME``), so the expected outcome under the judge's belief."""
    if traj.status != "ended":
        return 0.0
    failed = FAILED_OUTCOME.get(traj.task.suite, 0.0)
    return judge_score + (1.0 - judge_score) * failed


def judge_decides(task_name: str, judge_tasks: frozenset[str]) -> bool:
    """Whether the judge's score replaces the page's verdict for this task ("*": every task)."""
    return "*" in judge_tasks or task_name in judge_tasks


def judged_components(traj: Trajectory, w: RewardWeights, flagged: set[int], judge_score: float) -> dict[str, float]:
    """``reward_components`` of a task the judge decides: its ``judge_outcome`` in the page
    outcome's place (no additive judge term: it would count the judge twice)."""
    components = reward_components(traj, w, flagged)
    del components["outcome"]
    return {JUDGE_OUTCOME: judge_outcome(traj, judge_score), **components}


def rl_eligible(traj: Trajectory) -> tuple[bool, str]:
    if traj.infra_failure:
        return False, f"infrastructure abort ({traj.end_reason})"
    if not traj.steps:
        return False, "no steps"
    if traj.missing_steps:
        return False, f"missing steps {traj.missing_steps[:10]}"
    if traj.unsampled_steps:
        return False, f"unsampled steps {traj.unsampled_steps[:10]} (greedy or scripted actions)"
    return True, "valid"


def verdict(traj: Trajectory, w: RewardWeights, flagged: set[int], judged_success: bool | None = None) -> int:
    """V(s): 1 for a successful, clean trajectory (SFT), else 0 (CT). A game's success is its
    normalised score reaching ``w.sft_min_normalised_score``; ``judged_success``, when given,
    is the judge's in place of the page's."""
    if judged_success is not None:
        succeeded = judged_success
    else:
        succeeded = traj.success if traj.judged_at_end else traj.normalised_score >= w.sft_min_normalised_score
    if traj.status != "ended" or not succeeded or not traj.steps or traj.missing_steps:
        return 0
    if len(flagged) / len(traj.steps) > w.sft_max_anomaly_fraction:
        return 0
    if not w.sft_allow_parse_errors and any(s.parse_error is not None or s.action is None for s in traj.steps):
        return 0
    return 1


@dataclass(frozen=True)
class Scorer:
    name: str
    version: str
    weights: RewardWeights = field(default_factory=RewardWeights)
    judge: OutcomeJudge | None = None
    # Empty: the judge, if set, adds its weighted score to every trajectory. Else the tasks whose
    # outcome the judge decides ("*": all); the judge is not asked about the others.
    judge_tasks: frozenset[str] = frozenset()
    judge_success_at: float = 0.5  # a judged task's V(s) needs the judge's score >= this

    def score(self, traj: Trajectory, now: float) -> ScoredTrajectory:
        anomalies, flagged = find_anomalies(traj.steps, self.weights.repeat_limit)
        judged_success = None
        if self.judge is not None and self.judge_tasks:
            if judge_decides(traj.task.name, self.judge_tasks):
                judge_score = self.judge.judge(traj)
                components = judged_components(traj, self.weights, flagged, judge_score)
                judged_success = judge_score >= self.judge_success_at
            else:
                components = reward_components(traj, self.weights, flagged)
        else:
            judge_score = self.judge.judge(traj) if self.judge is not None else None
            components = reward_components(traj, self.weights, flagged, judge_score)
        eligible, _ = rl_eligible(traj)
        return ScoredTrajectory(
            trajectory=traj, scorer=self.name, scorer_version=self.version,
            reward=sum(components.values()), components=components,
            verdict=verdict(traj, self.weights, flagged, judged_success), rl_eligible=eligible,
            anomalies=anomalies, scored_at=now,
        )


# The rules' version, in every ScoredTrajectory (and its event_id): 1.1 scores a task judged at its
# end that ran out of steps or time as failed (1.0 scored it 0); 1.2 also one the agent gave up on
# with ``finished`` / ``call_user`` (1.1 scored a MiniWoB++ one 0). A re-scoring run under a new
# version adds rows beside the older ones instead of replacing them. 1.3: a game is V(s)=1 from
# half the heuristic's normalised score (1.2: from the heuristic's mean). 1.4: no length penalty
# on a game (it charged a snake for staying alive: up to -0.05 at its death, an apple's worth).
SCORING_VERSION = "1.4"

SCORERS: dict[str, Callable[[OutcomeJudge | None], Scorer]] = {}


def register_scorer(name: str):
    def deco(factory: Callable[[OutcomeJudge | None], Scorer]):
        SCORERS[name] = factory
        return factory
    return deco


@register_scorer("rule-v1")
def _rule_v1(judge: OutcomeJudge | None = None) -> Scorer:
    """Verifier outcome, mild format and length penalties; anomalies only gate SFT."""
    return Scorer("rule-v1", SCORING_VERSION, RewardWeights(judge=1.0 if judge else 0.0), judge)


@register_scorer("strict-v1")
def _strict_v1(judge: OutcomeJudge | None = None) -> Scorer:
    """Penalises anomalies in the reward too; SFT only for spotless trajectories."""
    w = RewardWeights(format_penalty=0.2, length_penalty=0.1, anomaly_penalty=0.2, judge=1.0 if judge else 0.0,
                      repeat_limit=2, sft_max_anomaly_fraction=0.0, sft_allow_parse_errors=False)
    return Scorer("strict-v1", SCORING_VERSION, w, judge)


def make_scorer(name: str, judge: OutcomeJudge | None = None, judge_tasks: frozenset[str] = frozenset(),
                judge_success_at: float = 0.5) -> Scorer:
    """The registered scorer ``name``; ``judge_tasks`` (with a judge) the tasks whose outcome the
    judge decides instead of the page (``*``: all)."""
    if name not in SCORERS:
        raise UserError(f"unknown scorer {name!r}: choose one of {', '.join(sorted(SCORERS))}")
    check_judge(judge_tasks, judge is not None, judge_success_at)
    return replace(SCORERS[name](judge), judge_tasks=frozenset(judge_tasks), judge_success_at=judge_success_at)


def check_judge(judge_tasks: frozenset[str], has_judge: bool, judge_success_at: float) -> None:
    """UserError unless the judge options make sense together: judge tasks need a judge, and a
    judged task's success threshold is a judge score. The one home of the rule: the streams apply
    it when they build their scorer, `flywheel demo` before it starts them."""
    if judge_tasks and not has_judge:
        raise UserError(f"judge tasks {', '.join(sorted(judge_tasks))} need a judge: set --judge-url")
    if not 0.0 <= judge_success_at <= 1.0:  # NaN fails too: every judged task would silently fail or succeed
        raise UserError(f"--judge-success-at {judge_success_at} must be a judge score in [0, 1]")


def parse_judge_tasks(text: str) -> frozenset[str]:
    """The ``--judge-tasks`` option: comma-separated task names, ``*`` for every task."""
    return frozenset(t.strip() for t in text.split(",") if t.strip())
