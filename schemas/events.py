"""Event models for every Flywheel topic (see DESIGN.md, topic catalog).

Each top-level event has ``schema_version`` and a deterministic ``event_id`` derived from its
content keys, so consumers and ClickHouse can dedupe replays.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, StringConstraints, model_validator

from schemas.actions import Action
from schemas.base import Event, Id, OmitsAbsentOptionals, Int32, Int64, JsonDict, Metrics, Model, Name, RawText, Sha256, Text, Timestamp, UInt32

# ---------------------------------------------------------------- shared pieces

Base64 = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9+/]*={0,2}$")]


class BlobRef(Model):
    """A content-addressed blob (screenshot, weights): never inline in an event."""

    sha256: Sha256
    uri: Annotated[str, Field(min_length=1, max_length=4096)]
    media_type: Annotated[str, Field(min_length=1, max_length=128)] = "image/png"
    width: UInt32 = 0
    height: UInt32 = 0
    size_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0


class Observation(Model):
    screenshot: BlobRef
    screen_width: Annotated[int, Field(gt=0, le=16384)]
    screen_height: Annotated[int, Field(gt=0, le=16384)]
    instruction: Text = ""
    url: Text = ""
    window_title: Text = ""


# ---------------------------------------------------------------- tasks

MAX_TASK_TIMEOUT_S = 3600  # the longest wall-clock limit a task may give its episode



class TaskSpec(Event):
    task_id: Id
    suite: Literal["miniwob", "desktop", "games"]
    name: Name  # e.g. "click-test", "desktop.write-file" or "games.2048"
    seed: int = 0
    max_steps: Annotated[int, Field(gt=0, le=1000)] = 10
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TASK_TIMEOUT_S)] = 60.0
    params: JsonDict = Field(default_factory=dict)
    submitted_at: Timestamp = 0.0

    @property
    def event_id(self) -> str:
        return self.task_id


# ---------------------------------------------------------------- episode events (flywheel.steps.v1)


class _EpisodeBase(Event):
    episode_id: Id
    ts: Timestamp


class EpisodeStarted(_EpisodeBase):
    kind: Literal["started"] = "started"
    task: TaskSpec
    attempt: Annotated[int, Field(ge=0, le=1000)] = 0  # which run of task.task_id (ids differ per execution)
    sandbox: Name  # "browser" | "desktop"
    worker_id: Name
    policy: Name
    policy_version: UInt32

    @property
    def event_id(self) -> str:
        return f"{self.episode_id}:started"


class Step(OmitsAbsentOptionals, _EpisodeBase):
    omit_when_none: ClassVar[tuple[str, ...]] = ("expert_action",)  # only a rollout asked for labels has it
    kind: Literal["step"] = "step"
    step_index: UInt32
    started_at: Timestamp
    observation: Observation
    thought: Text = ""
    action: Action | None = None  # None when the model output could not be parsed
    raw_output: RawText = ""
    parse_error: Text | None = None
    policy: Name
    policy_version: UInt32
    logprob: float  # behaviour log-prob of the whole action under policy_version
    # False: not a draw from the policy (greedy argmax, scripted demo): never trained on by PPO; a scripted
    # demonstration's injected mistake (--demo-noise) is a draw: True among False steps (Trajectory.noise_steps)
    sampled: bool = True
    value: float | None = None
    reward: float = 0.0  # environment reward observed after the action
    done: bool = False
    latency_policy_ms: Annotated[float, Field(ge=0)] = 0.0
    latency_env_ms: Annotated[float, Field(ge=0)] = 0.0
    error: Text | None = None  # the action failed to execute (e.g. refused SDK call)
    output: Text | None = None  # what a GUI-SDK action returned (shell output, file contents)
    next_screenshot_sha256: Sha256 | None = None  # lets the scorer see "nothing changed"
    # what the task's scripted solver would have done on this step's screen (`flywheel rollout
    # --expert-labels`): a DAgger label on the policy's own states, never acted on
    expert_action: Action | None = None

    @property
    def event_id(self) -> str:
        return f"{self.episode_id}:step:{self.step_index}"


class EpisodeEnded(OmitsAbsentOptionals, _EpisodeBase):
    omit_when_none: ClassVar[tuple[str, ...]] = ("score", "normalised_score")  # only a game's episode has them
    kind: Literal["ended"] = "ended"
    num_steps: UInt32
    outcome_reward: float  # the environment's own verifier (a game's: its normalised score)
    success: bool
    reason: Literal["done", "step_budget", "timeout"] = "done"
    score: float | None = None  # a game's final score (its steps' rewards are its changes); None: no score
    normalised_score: float | None = None  # that score on the game's scale: 0 = random policy's mean, 1 = reference

    @property
    def event_id(self) -> str:
        return f"{self.episode_id}:end"


class EpisodeAborted(_EpisodeBase):
    kind: Literal["aborted"] = "aborted"
    num_steps: UInt32
    reason: Text
    infra_failure: bool  # a crashed browser/display: never trained on as a zero reward

    @property
    def event_id(self) -> str:
        return f"{self.episode_id}:end"


EpisodeEvent = Annotated[Union[EpisodeStarted, Step, EpisodeEnded, EpisodeAborted], Field(discriminator="kind")]


# ---------------------------------------------------------------- trajectories


class Trajectory(OmitsAbsentOptionals, Event):
    omit_when_none: ClassVar[tuple[str, ...]] = ("score", "normalised_score")  # only a game's episode has them
    episode_id: Id
    task: TaskSpec
    sandbox: Name
    worker_id: Name
    policy: Name
    steps: list[Step]
    status: Literal["ended", "aborted"]
    outcome_reward: float = 0.0
    success: bool = False
    end_reason: Text = ""
    infra_failure: bool = False
    score: float | None = None  # EpisodeEnded.score: a game's final score
    normalised_score: float | None = None  # EpisodeEnded.normalised_score
    started_at: Timestamp
    ended_at: Timestamp
    duplicates_dropped: UInt32 = 0
    missing_steps: list[UInt32] = Field(default_factory=list)  # indices never seen (a gap upstream)

    @property
    def event_id(self) -> str:
        return self.episode_id

    @property
    def ran_out(self) -> bool:
        """Ended by the step budget or the time limit, not by the environment. A game stopped so is
        cut short (its score so far counts; GAE bootstraps from its last state); a task judged at
        its end (MiniWoB++, desktop) that ran out failed it: the scorer gives it the failed
        outcome and it is terminal."""
        return self.status == "ended" and self.end_reason in ("step_budget", "timeout")

    @property
    def judged_at_end(self) -> bool:
        """A task whose environment gives one verdict at its end (MiniWoB++, the desktop), not a
        game that scores as it goes (one with a normalised score)."""
        return self.normalised_score is None

    @property
    def cut_short(self) -> bool:
        """A game stopped by the step budget or the time limit: not a terminal state (GAE
        bootstraps from its last one). One home for the scorer's and the trainer's reading."""
        return self.ran_out and not self.judged_at_end

    @property
    def policy_versions(self) -> tuple[int, int]:
        versions = [s.policy_version for s in self.steps] or [0]
        return min(versions), max(versions)

    @property
    def unsampled_steps(self) -> list[int]:
        """Indices of the steps whose action was not sampled from the policy (``Step.sampled``):
        any one keeps the whole trajectory out of PPO, whose advantages and importance weights
        assume every action was a draw with the recorded log-prob. One home for the scorer, the
        router and the trainer."""
        return [s.step_index for s in self.steps if not s.sampled]

    @property
    def noise_steps(self) -> list[int]:
        """Indices of the steps a demonstration left to chance: in a trajectory whose other steps
        are a demonstrator's (not sampled), the sampled ones are its injected noise (the scripted
        backend's ``--demo-noise``, DART), there to show the demonstrator recovering from states
        its own play never reaches. They stay in the history; they are no label to imitate.
        A trajectory of one kind only (every step sampled, or none) has none."""
        unsampled = self.unsampled_steps
        if not unsampled or len(unsampled) == len(self.steps):
            return []
        return [s.step_index for s in self.steps if s.sampled]


JUDGE_OUTCOME = "judge_outcome"  # the component of a task the judge decides (streams.score.judged_components)


class ScoredTrajectory(Event):
    trajectory: Trajectory
    scorer: Name
    scorer_version: Name
    reward: float
    components: dict[str, float]  # outcome, format, length, shaping, ... summing to reward
    verdict: Literal[0, 1]  # V(s): 1 -> SFT, 0 -> CT
    rl_eligible: bool
    routes: list[Literal["sft", "ct", "rl"]] = Field(default_factory=list)
    route_reasons: list[Text] = Field(default_factory=list)
    anomalies: list[Text] = Field(default_factory=list)
    scored_at: Timestamp

    @property
    def episode_id(self) -> str:
        return self.trajectory.episode_id

    @property
    def event_id(self) -> str:
        return f"{self.trajectory.episode_id}:{self.scorer}:{self.scorer_version}"

    @property
    def judged(self) -> bool:
        """Whether the streams' judge decided this task's outcome (its ``judge_outcome`` component
        stands in the page outcome's place, streams.score): then nothing of the page's verdict or
        score may reach what is learnt from it."""
        return JUDGE_OUTCOME in self.components


# ---------------------------------------------------------------- policy and trainer


class PolicyVersion(Event):
    policy: Name
    version: UInt32
    # the registered policy kind that rebuilds it (infra.runtime.policy.policy_kind): any installed or
    # registered kind, so this schema names none; publishing and loading refuse an unknown one
    kind: Name
    uri: Annotated[str, Field(min_length=1, max_length=4096)]
    sha256: Sha256
    parent: UInt32 | None = None
    created_at: Timestamp
    metrics: Metrics = Field(default_factory=dict)  # non-finite values are dropped
    config: JsonDict = Field(default_factory=dict)  # model config needed to rebuild it

    @property
    def event_id(self) -> str:
        return f"{self.policy}:{self.version}"


class TrainerMetrics(Event):
    run_id: Id
    update: UInt32
    policy: Name
    policy_version: UInt32
    ts: Timestamp
    metrics: Metrics  # non-finite values (undefined this update) are dropped

    @property
    def event_id(self) -> str:
        return f"{self.run_id}:{self.update}"


class DeadLetter(Event):
    stage: Name
    error_type: Name
    message: Text
    source_topic: Name
    source_partition: Int32
    source_offset: Int64
    original_key: Base64 | None = None  # base64
    original_value: Base64  # base64 of the exact bytes received (a prefix if original_truncated)
    ts: Timestamp
    original_truncated: bool = False  # the record was too large to carry whole in a dead letter
    original_size: UInt32 | None = None  # bytes received

    @property
    def event_id(self) -> str:
        base = f"{self.source_topic}:{self.source_partition}:{self.source_offset}:{self.stage}"
        # a letter with no source offset (e.g. an abandoned episode's state) is told apart by its key
        return base if self.source_offset >= 0 else f"{base}:{self.original_key or ''}"


# ---------------------------------------------------------------- reflection pairs (flywheel.pairs.v1)


class PairSide(Model):
    """One side of a preference pair: an action and, for a language policy, the text it is scored on."""

    action: Action | None  # None: a model output that did not parse (only ever a rejected side)
    thought: Text = ""
    raw_output: RawText = ""  # what the model wrote; empty for an annotator's action (rendered when trained on)


class PreferencePair(Event):
    """UI-TARS reflection tuning (section 4.5): at one state of a failed episode, the annotator's
    action (``chosen``) is preferred to the agent's (``rejected``).

    ``error_correction``: the state before ``tau``, the episode's first wrong step.
    ``post_reflection``: the state that wrong action produced (step tau + 1); ``chosen`` recovers
    from it, ``rejected`` is what the agent did next (None when the episode stopped there).
    The state is exactly what the policy saw: ``observation`` (screenshot reference, instruction)
    and ``history``, the episode's recorded steps before it (for post_reflection the wrong step is
    the last of them), so a trainer rebuilds either policy kind's input from the pair alone.
    """

    episode_id: Id
    kind: Literal["error_correction", "post_reflection"]
    task: TaskSpec  # name and seed: the episode can be replayed
    tau: UInt32  # step index of the first wrong step
    step_index: UInt32  # the state's step: tau (error_correction) or tau + 1 (post_reflection)
    observation: Observation
    history: list[Step]
    chosen: PairSide
    rejected: PairSide | None = None
    annotator: Name  # who chose: "scripted-v1", a person's or a judge's id
    policy: Name  # the policy (and version) that produced the rejected action, or the wrong step
    policy_version: UInt32
    created_at: Timestamp

    @model_validator(mode="after")
    def _consistent(self) -> "PreferencePair":
        want = self.tau + (self.kind == "post_reflection")
        if self.step_index != want:
            raise ValueError(f"a {self.kind} pair's step_index must be {want} (tau = {self.tau}), not {self.step_index}")
        if len(self.history) != self.step_index:
            raise ValueError(f"history must hold the {self.step_index} steps before the state, not {len(self.history)}")
        if self.chosen.action is None:
            raise ValueError("the chosen side needs an action")
        if self.kind == "error_correction" and self.rejected is None:
            raise ValueError("an error_correction pair needs the rejected (agent's) side")
        return self

    @property
    def event_id(self) -> str:
        # one pair of each kind per episode and annotator: tau is that annotator's first wrong step
        return f"{self.episode_id}:{self.kind}:{self.annotator}"


EVENT_TYPES: dict[str, Any] = {
    "TaskSpec": TaskSpec,
    "EpisodeEvent": EpisodeEvent,
    "Trajectory": Trajectory,
    "ScoredTrajectory": ScoredTrajectory,
    "PolicyVersion": PolicyVersion,
    "TrainerMetrics": TrainerMetrics,
    "DeadLetter": DeadLetter,
    "PreferencePair": PreferencePair,
}
