"""`flywheel demo`'s options (``DemoConfig``) and what a run makes of them before anything
starts: ``effective`` (the cold start over the tasks with a demonstrator, the settings on auto
resolved, what --sync changes). What the trainer runs with, the kind's automatic PPO settings
where an option is on auto included, is app.run_config's to decide (``passed``: --trainer-args
last) and app.demo_report.resolved's to say."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, replace

from app import phases, run_config, start_from
from app.curriculum import auto_explore
from infra.runtime.config import ConfigError, json_object, opt
from infra.runtime.errors import UserError
from infra.runtime.policy import DemoPPO, policy_kind
from producers.policy_client import noise_error
from producers.suites import RunPlan, plan as suite_plan, setting as suite_setting

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a Kafka topic prefix and a folder name


@dataclass
class DemoConfig:
    minutes: float = opt(15.0, "stop after this many minutes of wall-clock")
    until_target: bool = opt(False, "stop early once every task's last-100 success reached its target")
    until_version: int = opt(0, "stop early once PPO published this many versions past the one the trainer started "
                                "from (0: run the whole --minutes); a quick check that the loop closes")
    until_episodes: int = opt(0, "stop early once every task has this many ended episodes of the run's policy, at most "
                                 "100 (0: run the whole --minutes); for evaluation runs that submit their episodes up "
                                 "front (--no-curriculum --episodes N)")
    tasks: list[str] = opt(["default"], "MiniWoB++ tasks or suites to train on (producers.suites: default, quick)")
    episodes: int = opt(20000, "episodes submitted per task at most (the run stops before it uses them all)")
    curriculum: bool = opt(True, "share the RL steps among the tasks by their failure rate over the last 30 (app.curriculum; "
                                 "a solved task keeps a fifth of an unsolved one's share, a long episode counts its "
                                 "steps); --no-curriculum: every task the same share of episodes, all submitted up front")
    max_steps: int = opt(0, "step budget per episode (0: the suite's; 1 means the first click must succeed)")
    actions: list[str] = opt([], "the action types the policy may take, e.g. click (default: the heads of the suites that "
                                 "hold the tasks; a task in no suite gets the default suite's: click, type, scroll, "
                                 "press_enter, finished)")
    cold_start_demos: int = opt(-1, "cold start: scripted demonstrations per task cloned into pi_sft before RL (-1: 20 of "
                                    "each task with a demonstrator, PPO alone on the others, random weights if no task has one; "
                                    "0: start from random weights; N > 0: N of every task, refused if a task has no demonstrator)")
    start_from: str = opt("", "RUN or RUN@VERSION: RL starts from that published version of another run of this data dir "
                              "(its newest without @) instead of a cold start, copied unchanged as this run's first "
                              "version (app.start_from), with the settings of a run after a cold start (PPO's learning "
                              "rate, value pretraining, RFT rounds on the policy's own successes); excludes "
                              "--cold-start-demos > 0")
    demos_from: str = opt("scripted", "cold start demonstrations by: scripted (the solvers play the annotators) or human "
                                      "(the human:<name> ones recorded beforehand in `flywheel ui`'s Annotate view on this "
                                      "platform's topics; only their tasks get a cold start)", choices=("scripted", "human"))
    demo_noise: float = opt(-1.0, "cold start: the chance each step of a game's demonstration is a mistake drawn from "
                                  "the game's plausible ones instead of the heuristic's move (DART: the clone also sees "
                                  "the heuristic recover; those steps are not imitated); -1: the suite's (0.2 on the "
                                  "games), 0: off")
    ppo_lr: float = opt(0.0, "PPO learning rate (0: 3e-4 after a cold start, the trainer's default from random weights; 3e-3 undid pi_sft's typing within minutes)")
    target_kl: float = opt(-1.0, "PPO stops an update's epochs once it moved the policy this far (KL; `flywheel train "
                                 "--target-kl`): -1: the policy kind's, 0.02 for the pixel policy from random weights, off "
                                 "after a cold start and for the language policy; 0: off")
    value_pretrain_batches: int = opt(-1, "value pretraining: critic-only batches at most on the starting policy's rollouts "
                                          "before PPO (-1: 20 after a cold start, off from random weights, whose rollouts "
                                          "give the critic nothing to learn that PPO keeps; 0: off), and in "
                                          "any case for a fifth of --minutes at most")
    rft_every: int = opt(-1, "rejection-sampling fine-tuning: after every this many PPO updates the trainer fine-tunes "
                             "the policy on its own successful episodes and the demonstrations, so after a cold start "
                             "the demonstrations teach during RL too (0: off; -1: 8 for the pixel policy after a cold "
                             "start, one pass a round; off on the games, whose RL is "
                             "teacher-free by default, where DAgger's rounds run, and otherwise)")
    sil_coef: float = opt(-1.0, "self-imitation: the trainer keeps the policy's own best episodes (per task the newest "
                                "successes, then the highest returns) and imitates their steps where the return beat "
                                "the critic's value, with this weight beside PPO's loss, and raises the entropy bonus "
                                "while the policy's entropy is below 0.5 (`flywheel train --sil-coef`, trainer.rl.self_imitation; 0: off; -1: 0.5 "
                                "where the run has no RFT rounds and no teacher during RL, i.e. from random weights "
                                "and on the games after their cold start; off on the default suite, whose RFT rounds "
                                "learn from the same successes)")
    explore: float = opt(-1.0, "an exploration floor: while a task's success over its last 30 episodes is below 0.1 (or "
                               "it has fewer than 20), up to this share of the policy's clicks on it is drawn uniformly "
                               "over the page, all of it at no success and less as the success nears 0.1, logged with the "
                               "mixture's log-prob (app.curriculum.exploring; 0 <= e < 1, 0: off; -1: 0.5 from random "
                               "weights on MiniWoB++ tasks, for a kind that explores (pixel) with the curriculum, "
                               "else off; app.curriculum.auto_explore)")
    explore_from: str = opt("", "guide the exploration floor by demonstrations instead of drawing its clicks uniformly: "
                                "human (the human:<name> ones recorded in `flywheel ui`'s Annotate view on this platform's "
                                "topics): a task they demonstrate draws its floor's clicks near where they clicked at the "
                                "same step (app.curriculum.guide_points); they are not cloned. Needs a floor (--explore "
                                "> 0, or auto from random weights); '': uniform", choices=("", "human"))
    expert_coef: float = opt(-1.0, "a teacher during RL, off by default: the rollout workers record on each step of a task "
                                   "with a scripted solver what it would have done there (--expert-labels) and the trainer "
                                   "imitates those labels with this weight beside PPO's loss (DAgger's expert term; the "
                                   "policy still acts alone; 0: off; -1: the suite's, 0 on every suite, the games' RL "
                                   "teacher-free; e.g. 1 with --dagger-every 2, the games' earlier recipe)")
    dagger_every: int = opt(-1, "a teacher during RL, off by default: DAgger rounds; the rollout workers record the solver's "
                                "labels as with --expert-coef and, after every this many PPO updates, the trainer fits "
                                "the policy to the labels of the states it visited (at most 8192, shared among the tasks; "
                                "`flywheel train --dagger-every`, trainer.sft.dagger; 0: off; -1: the suite's, 0 on "
                                "every suite)")
    seed: int = opt(0, "seed of the initial weights, the cloning and the task layouts")
    sandboxes: int = opt(0, "browser sandboxes per rollout worker (0: the machine's share of each worker, producers.capacity)")
    workers: int = opt(1, "rollout worker processes")
    sync: bool = opt(False, "alternate rollout and training without overlap (for the async/sync comparison)")
    batch_episodes: int = opt(32, "complete trajectories per PPO update")
    policy_kind: str = opt("pixel", "policy model the trainer learns (a registered kind: pixel, lm)")
    dpo_minutes: float = opt(-1.0, "last minutes of the run given to DPO of pi_sft on reflection pairs annotated meanwhile "
                                   "(0: no DPO phase; -1: a quarter of --minutes for the language policy, 0 for the pixel policy)")
    dpo_args: str = opt("", "extra arguments for `flywheel dpo`, space separated")
    progress_s: float = opt(5.0, "seconds between progress lines")
    run_id: str = opt("", "name of this run (default: a fresh id); prefixes its topics and policy name")
    report_dir: str = opt("", "where the report goes (default <data_dir>/reports/<run_id>)")
    policy_config: str = opt("", "JSON object merged into the pixel policy's config, e.g. '{\"ground\": false}' "
                                 "(default: the suite's heads, text grounding and coordinates)")
    trainer_args: str = opt("", "extra arguments for `flywheel train`, space separated")
    bc_args: str = opt("", "extra arguments for `flywheel bc` (the cold start's cloning), space separated, "
                            "e.g. '--epochs 12' for many demonstrations")
    rollout_args: str = opt("", "extra arguments for `flywheel rollout`, space separated")
    streams_args: str = opt("", "extra arguments for `flywheel streams`, space separated")
    keep_broker: bool = opt(False, "leave the Kafka broker this demo started running at exit")
    ui: bool = opt(True, "start `flywheel ui` on a free loopback port and print its URL")

    def plan(self) -> RunPlan:
        """The run's tasks, policy heads and step budget (producers.suites.plan); UserError for an
        unknown task name or action type."""
        return suite_plan(self.tasks, self.max_steps, tuple(self.actions))

    def validate(self) -> "DemoConfig":
        if self.run_id and not RUN_ID.fullmatch(self.run_id):
            raise UserError(f"--run-id names the run's topics and folders: letters, digits, '.', '_' and '-', "
                            f"starting with a letter or digit, at most 100; got {self.run_id!r}")
        if self.minutes <= 0 or self.episodes < 1 or self.sandboxes < 0 or self.workers < 1 or self.batch_episodes < 1:
            raise UserError("minutes must be > 0; episodes, workers and batch_episodes >= 1, sandboxes >= 0")
        if self.demo_noise != -1 and noise_error(self.demo_noise):
            raise UserError(f"--demo-noise is a chance per step in [0, 1) or -1 (the suite's), got {self.demo_noise}")
        if self.demo_noise > 0 and (self.cold_start_demos == 0 or self.demos_from != "scripted"):
            raise UserError("--demo-noise perturbs the scripted demonstrations of the cold start: it needs "
                            "--demos-from scripted and --cold-start-demos other than 0")
        if self.start_from:
            start_from.parse(self.start_from, RUN_ID)
            if self.cold_start_demos > 0 or self.demos_from != "scripted":
                raise UserError("--start-from starts RL from a published version: it has no cold start "
                                "(leave --cold-start-demos and --demos-from out)")
        if not 0 <= self.until_episodes <= UNTIL_EPISODES_MAX:
            raise UserError(f"--until-episodes counts a task's ended episodes, 0 (off) to {UNTIL_EPISODES_MAX} "
                            f"(the progress reading's window), got {self.until_episodes}")
        if self.until_version < 0:
            raise UserError(f"until_version must be >= 0 (0: run the whole --minutes), got {self.until_version}")
        if min(self.max_steps, self.ppo_lr, self.cold_start_demos + 1, self.value_pretrain_batches + 1, self.rft_every + 1) < 0:
            raise UserError("max_steps and ppo_lr must be >= 0; cold_start_demos, value_pretrain_batches and rft_every >= -1")
        if not (self.sil_coef == -1 or self.sil_coef >= 0):  # NaN included
            raise UserError(f"--sil-coef is a weight >= 0 (0: off) or -1 (auto), got {self.sil_coef}")
        if not (self.explore == -1 or 0.0 <= self.explore < 1.0):  # NaN included
            raise UserError(f"--explore is the share of uniform clicks, 0 <= e < 1 (0: off) or -1 (auto), got {self.explore}")
        if self.explore > 0 and (not policy_kind(self.policy_kind).explores or not self.curriculum):
            raise UserError("--explore mixes uniform clicks into the policy's click head for the tasks the curriculum "
                            "reads as unsolved: it needs a policy kind that explores (pixel) and the curriculum")
        if self.explore_from and (not policy_kind(self.policy_kind).explores or not self.curriculum):
            raise UserError(f"--explore-from {self.explore_from} guides the exploration floor of the tasks the "
                            f"curriculum reads as unsolved: it needs a policy kind that explores (pixel) and the curriculum")
        if self.explore_from and self.explore == 0:  # auto (-1) is resolved by ``effective``, then checked here again
            raise UserError(f"--explore-from {self.explore_from} guides the exploration floor, which is off: give "
                            f"--explore > 0 (auto turns it on only from random weights on MiniWoB++ tasks)")
        if not (self.expert_coef == -1 or self.expert_coef >= 0):  # NaN included
            raise UserError(f"--expert-coef is a weight >= 0 (0: off) or -1 (the suite's), got {self.expert_coef}")
        if self.dagger_every < -1:
            raise UserError(f"--dagger-every counts PPO updates between rounds (0: off) or is -1 (the suite's), "
                            f"got {self.dagger_every}")
        if expert_labels(self) and not policy_kind(self.policy_kind).scores_actions:
            raise UserError(f"--expert-coef and --dagger-every train a policy on labels it is handed (the pixel policy); the "
                            f"{self.policy_kind} policy scores only its own samples")
        if not (self.target_kl == -1 or self.target_kl >= 0):  # NaN included
            raise UserError(f"target_kl must be -1 (the kind's), 0 (off) or a KL > 0, got {self.target_kl}")
        if self.rft_every > 0 and not policy_kind(self.policy_kind).rft:
            raise UserError(f"--rft-every fine-tunes a kind with RFT rounds (the pixel policy); the {self.policy_kind} "
                            "policy's is another job (the language policy's: `flywheel sft`)")
        if self.dpo_minutes < -1 or self.dpo_minutes >= self.minutes:
            raise UserError(f"dpo_minutes must be -1 (auto), 0 (off) or less than --minutes ({self.minutes:g})")
        if self.until_version and self.dpo_span_s() > 0:
            raise UserError("--until-version stops the run during PPO, before a DPO phase: add --dpo-minutes 0")
        if self.dpo_minutes > 0 and self.cold_start_demos == 0:
            raise UserError("a DPO phase needs pi_sft as its reference: set --cold-start-demos > 0 or --dpo-minutes 0")
        if self.actions and not policy_kind(self.policy_kind).sized_heads:
            raise UserError(f"--actions sets the policy's action heads; the {self.policy_kind} policy has none "
                            "(it writes its actions as text)")
        if self.actions and "action_types" in self.policy_overrides():
            raise UserError("give the action types once: --actions, or action_types in --policy-config")
        self.policy_overrides()
        return self

    def policy_overrides(self) -> dict:
        """``policy_config`` as a dict; UserError when it is not a JSON object."""
        try:
            return json_object(self.policy_config, "--policy-config")
        except ConfigError as exc:
            raise UserError(str(exc)) from None

    def dpo_span_s(self) -> float:
        """Seconds of DPO at the end of the run (0: none)."""
        if self.dpo_minutes >= 0:
            return self.dpo_minutes * 60
        return self.minutes * 60 * self.kind_ppo().dpo_share

    def kind_ppo(self) -> DemoPPO:
        """The kind's automatic PPO settings for this run (``PolicyKind.demo_ppo``)."""
        return policy_kind(self.policy_kind).demo_ppo(self.cold_start)

    @property
    def cold_start(self) -> bool:
        """Whether RL starts from pi_sft: cloned before RL (auto counts as yes until ``effective``
        resolves it), or another run's version (--start-from), which takes the same PPO settings."""
        return self.cold_start_demos != 0 or bool(self.start_from)


def run_names(cfg: DemoConfig) -> tuple[str, str, str]:
    run_id = cfg.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    return run_id, f"demo-{run_id}.", f"{cfg.policy_kind}-{run_id}"


def expert_labels(cfg: DemoConfig) -> bool:
    """Whether the rollout workers record the solvers' labels (DAgger: its term or its rounds)."""
    return cfg.expert_coef > 0 or cfg.dagger_every > 0


UNTIL_EPISODES_MAX = 100  # the progress reading counts each task's last 100 episodes (app.demo.snapshot)
VALUE_PRETRAIN_BATCHES = 20  # critic-only batches at most after a cold start, when left on auto
# (and at most run_config.VALUE_PRETRAIN_SHARE of the run's minutes)


def effective(cfg: DemoConfig, demonstrable: frozenset[str] | None = None) -> tuple[DemoConfig, phases.ColdStart, list[str]]:
    """The configuration a run can honour, its cold start and what was changed, decided before
    anything starts: the cold start over the tasks ``demonstrable`` holds (default: those with a
    scripted solver; ``phases.cold_start_plan``, a UserError when demonstrations were asked of a
    task that has none), value pretraining's auto setting resolved (none from random weights) and
    the demonstrations' noise (the suite's, on a scripted cold start) and DAgger's settings (the
    suite's, for a policy kind that scores the labels it is handed).
    Under --sync a critic-only update publishes no version while the synchronous rollout waits for
    one, so value pretraining would stall the run after one batch."""
    tasks = cfg.plan().tasks
    if cfg.start_from:  # no cloning, and not random weights: RL starts from the copied version
        cold = phases.ColdStart(0, (), tuple(tasks),
                                (f"no cold start: RL starts from {cfg.start_from} (--start-from), copied unchanged",))
    else:
        cold = phases.cold_start_plan(tasks, cfg.cold_start_demos, phases.demonstrators() if demonstrable is None else demonstrable)
    cfg = replace(cfg, cold_start_demos=cold.per_task)
    if cfg.value_pretrain_batches < 0:
        cfg = replace(cfg, value_pretrain_batches=VALUE_PRETRAIN_BATCHES if cfg.cold_start else 0)
    if cfg.explore == -1:
        cfg = replace(cfg, explore=auto_explore(tasks, cfg.cold_start, policy_kind(cfg.policy_kind).explores and cfg.curriculum))
    if cfg.demo_noise < 0:
        scripted = cold.per_task and cfg.demos_from == "scripted"
        cfg = replace(cfg, demo_noise=suite_setting(list(cold.demonstrated), "demo_noise") if scripted else 0.0)
    labels = policy_kind(cfg.policy_kind).scores_actions
    if cfg.expert_coef < 0:
        cfg = replace(cfg, expert_coef=float(suite_setting(tasks, "expert_coef")) if labels else 0.0)
    if cfg.dagger_every < 0:
        cfg = replace(cfg, dagger_every=int(suite_setting(tasks, "dagger_every")) if labels else 0)
    changed: list[str] = []
    if cfg.sync and cfg.value_pretrain_batches:
        cfg = replace(cfg, value_pretrain_batches=0)
        changed.append("--sync: value pretraining off (a critic-only update publishes no version, and the synchronous "
                       "rollout waits for a new one)")
    if cfg.sync and cfg.dpo_span_s():
        cfg = replace(cfg, dpo_minutes=0.0)
        changed.append("--sync: no DPO phase (with the trainer stopped, the synchronous rollout would wait for ever)")
    return cfg.validate(), cold, changed
