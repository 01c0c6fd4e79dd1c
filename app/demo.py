"""`flywheel demo`: the whole closed loop on one machine, with a live progress view and a report.

Starts (or reuses) the local broker, creates the run's topics (a per-run prefix keeps runs
apart), then runs as child processes: the ClickHouse sink (owner of embedded chDB and its query
endpoint), the Faust app, the PPO trainer, and rollout workers with browser sandboxes; submits
MiniWoB++ tasks; prints one progress line every few seconds (episodes, success over the last
100 episodes per task, published vs acting policy version, trainer updates, consumer lag, dead
letters); stops on Ctrl-C, after --minutes, or (with --until-target) once every task reached its
target; writes the report and prints its path. The phases (cold start -> SFT -> value
pretraining -> PPO -> DPO) are app/phases.py's. Before anything starts it says which tasks
have no demonstrator (they go straight to RL; with none, the run starts from random weights and
skips value pretraining); whatever ends the run, it stops the processes it started.

--sync alternates rollout and training without overlap: the rollout workers collect one batch
under the current version and then wait for the next one, and the trainer updates only on a
full batch; the same report then tells the wall-clock to the target in that mode.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from app import demo_queries as Q
from app import measures, phase_list, phases, run_config, start_from, taught
from infra.kafka.broker import free_port_block
from infra.runtime.config import ConfigError, describe, json_object, opt, to_env
from infra.runtime.cpu_share import CpuShare
from infra.runtime.errors import UserError
from infra.runtime.policy import DemoPPO, policy_kind
from infra.runtime.procs import Child, flywheel_argv, say as _say, stop_signals, wait_until
from infra.runtime.settings import Settings, load_settings
from producers.capacity import machine_sandboxes
from producers.policy_client import noise_error
from producers.suites import RunPlan, plan as suite_plan, setting as suite_setting
from app.curriculum import WINDOW as CURRICULUM_WINDOW, TaskFeed
import app.ui.cli as ui_cli
from app.commands import local_cluster, running_cluster
from infra.runtime.admin import consumer_lag, ensure_topics
from infra.kafka.jars import fetch_jars
from infra.runtime import versions

log = logging.getLogger("flywheel.demo")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a Kafka topic prefix and a folder name


@dataclass
class DemoConfig:
    minutes: float = opt(15.0, "stop after this many minutes of wall-clock")
    until_target: bool = opt(False, "stop early once every task's last-100 success reached its target")
    until_version: int = opt(0, "stop early once PPO published this many versions past the one the trainer started "
                                "from (0: run the whole --minutes); a quick check that the loop closes")
    tasks: list[str] = opt(["default"], "MiniWoB++ tasks or suites to train on (producers.suites: default, quick)")
    episodes: int = opt(20000, "episodes submitted per task at most (the run stops before it uses them all)")
    curriculum: bool = opt(True, "share the RL steps among the tasks by their failure rate over the last 30 (app.curriculum; "
                                 "a solved task keeps a fifth of an unsolved one's share, a long episode counts its "
                                 "steps); --no-curriculum: every task the same share of episodes, all submitted up front")
    max_steps: int = opt(0, "step budget per episode (0: the suite's; 1 means the first click must succeed)")
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
                             "the demonstrations teach during RL too (0: off; -1: 4 for the pixel policy after a cold "
                             "start, +0.03 and +0.06 over 2 seeds in 15 minutes; off on the games, whose RL is "
                             "teacher-free by default, where DAgger's rounds run, and otherwise)")
    sil_coef: float = opt(-1.0, "self-imitation: the trainer keeps the policy's own best episodes (per task the newest "
                                "successes, then the highest returns) and imitates their steps where the return beat "
                                "the critic's value, with this weight beside PPO's loss, and raises the entropy bonus "
                                "while the policy's entropy is below 0.5 (`flywheel train --sil-coef`, trainer.rl.self_imitation; 0: off; -1: 0.5 "
                                "where the run has no RFT rounds and no teacher during RL, i.e. from random weights "
                                "and on the games after their cold start; off on the default suite, whose RFT rounds "
                                "learn from the same successes)")
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
        if self.until_version < 0:
            raise UserError(f"until_version must be >= 0 (0: run the whole --minutes), got {self.until_version}")
        if min(self.max_steps, self.ppo_lr, self.cold_start_demos + 1, self.value_pretrain_batches + 1, self.rft_every + 1) < 0:
            raise UserError("max_steps and ppo_lr must be >= 0; cold_start_demos, value_pretrain_batches and rft_every >= -1")
        if not (self.sil_coef == -1 or self.sil_coef >= 0):  # NaN included
            raise UserError(f"--sil-coef is a weight >= 0 (0: off) or -1 (auto), got {self.sil_coef}")
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


def child_env(settings: Settings, prefix: str) -> dict[str, str]:
    """Children rebuild the platform settings from FLYWHEEL_* variables: every setting is passed,
    credentials given as options included, with the run's topic prefix."""
    env = {
        **to_env(settings),
        "FLYWHEEL_DATA_DIR": str(settings.data_path),
        "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap,
        "FLYWHEEL_TOPIC_PREFIX": prefix,
        "PYTHONUNBUFFERED": "1",
        # one torch/OpenMP thread per process: with every child sharing the cores, two spinning
        # threads made a PPO update 3-5x slower and act() ~10x slower than one
        "OMP_NUM_THREADS": "1",
    }
    return env


def plan_children(cfg: DemoConfig, settings: Settings, prefix: str, policy: str, logs: Path,
                  plan: RunPlan, trainer: run_config.Resolved | None = None) -> list[Child]:
    """The processes of the loop, in start order (stop order is the reverse): the platform (sink,
    stream processors), then the learner (trainer, rollout workers). ``trainer``: the trainer's
    resolved configuration (``check_child_options``'; resolved here when not given), handed to it
    as one file in the run's folder (``TRAINER_FILE``, beside ``logs``)."""
    env = child_env(settings, prefix)
    trainer = trainer or trainer_config(cfg, prefix, policy, plan, {**os.environ, **env})
    sync_batch = str(cfg.batch_episodes) if cfg.sync else "0"
    children = [
        Child("sink", flywheel_argv("sink", "--group-id", f"{prefix}sink", "--query-port", "0"),
              logs / "sink.log", env),
        Child("streams", flywheel_argv("streams", "--app-id", f"{prefix}streams", *cfg.streams_args.split()),
              logs / "streams.log", env),
        Child("trainer", flywheel_argv("train", *trainer.write(logs.parent / TRAINER_FILE)), logs / "trainer.log", env),
    ]
    for i in range(cfg.workers):
        children.append(Child(f"rollout-{i}", flywheel_argv(
            "rollout", "--sandboxes", str(cfg.sandboxes or machine_sandboxes(cfg.workers)), "--policy-backend", "torch",
            "--policy-kind", cfg.policy_kind, "--policy-name", policy, "--worker-id", f"worker-{i}",
            "--group-id", f"{prefix}rollout", *(["--sync-episodes", sync_batch] if cfg.sync else []),
            *(["--expert-labels"] if expert_labels(cfg) else []), *cfg.rollout_args.split(),
        ), logs / f"rollout-{i}.log", env))
    return children


def trainer_config(cfg: DemoConfig, prefix: str, policy: str, plan: RunPlan,
                   env: dict[str, str] | None = None) -> run_config.Resolved:
    """`flywheel train`'s whole configuration in the run (``app.run_config``: the kind's, the
    suite's, the demo's, then --trainer-args; ``env``: the child's, this process's by default)."""
    return run_config.resolve_trainer(cfg, prefix, policy, plan, phases.kind_config(cfg, plan.action_types),
                                      dict(os.environ) if env is None else env)


TRAINER_FILE = "trainer.json"  # in the run's folder: `flywheel train --config`'s, the trainer's whole configuration


def ui_child(port: int, token: str, logs: Path, env: dict[str, str]) -> Child:
    """`flywheel ui` for the run. The token travels in its environment (``FLYWHEEL_UI_TOKEN``, which
    only its owner can read), never in its arguments, which any local user sees with `ps` and the
    demo's log repeats. It reads through the run's sink only (``--through-sink``): started first,
    it must not hold the chDB data directory the sink is about to lock."""
    return Child("ui", flywheel_argv("ui", "--port", str(port), "--through-sink"), logs / "ui.log",
                 {**env, ui_cli.TOKEN_ENV: token})


def ppo_lr(cfg: DemoConfig) -> float:
    """PPO's learning rate: fine-tuning a cloned policy takes smaller steps than learning from
    random weights (default suite, seed 0: at 3e-3 the typing tasks fell from 0.9-1.0 under pi_sft
    to 0.0 within 6 minutes of PPO; at 3e-4 they held). The pretrained language policy takes
    1e-6, as docs/language-policy.md measured (one update of 2 epochs moves a step's log-prob by
    about 1 nat); at 3e-5, 16 minutes of PPO took click-test from 0.55 under pi_sft to 0.23
    (demo lm40-s1); the kind says (``PolicyKind.demo_ppo``). 0: the trainer's own default."""
    return cfg.ppo_lr or cfg.kind_ppo().lr


def expert_labels(cfg: DemoConfig) -> bool:
    """Whether the rollout workers record the solvers' labels (DAgger: its term or its rounds)."""
    return cfg.expert_coef > 0 or cfg.dagger_every > 0


def check_child_options(cfg: DemoConfig, cold: phases.ColdStart, names: tuple[str, str, str],
                        settings: Settings) -> run_config.Resolved:
    """The trainer's resolved configuration in this run (``trainer_config``), or UserError unless
    `flywheel train` and, with a cold start, `flywheel bc` accept what the run will give them
    (``phases.bc_options``: the demo's settings, then --bc-args), parsed by their own parser,
    platform settings included. A misspelt option, a bad value, or RFT rounds with
    --nproc-per-node 2 failed the run only when its phase began, minutes in. Checked before
    anything starts, in the environment they will have (``child_env``: the run's ``settings`` as
    FLYWHEEL_* variables over this process's)."""
    _, prefix, policy = names
    plan = suite_plan(cfg.tasks, cfg.max_steps)
    env = {**os.environ, **child_env(settings, prefix)}
    trainer = trainer_config(cfg, prefix, policy, plan, env)
    check_labels(cfg, trainer.train, type(trainer.train)())
    if cfg.cold_start_demos:
        try:
            run_config.bc_config(phases.bc_options(cfg, policy, list(cold.demonstrated), plan.action_types), env)
        except (ConfigError, UserError) as exc:
            raise UserError(f"flywheel bc would refuse its options in this run (the demo's, then --bc-args "
                            f"{cfg.bc_args!r}; FLYWHEEL_* variables count too): {exc}") from None
    return trainer


def check_labels(cfg: DemoConfig, train: Any, default: Any) -> None:
    """UserError where the trainer would run DAgger otherwise than the demo set it (--trainer-args,
    abbreviated or not, or a FLYWHEEL_* variable): the demo also tells the rollout workers whether
    to record the solver's labels, and its header says what it set."""
    meant = {"expert_coef": cfg.expert_coef if cfg.expert_coef > 0 else default.expert_coef,
             "dagger_every": cfg.dagger_every if cfg.dagger_every > 0 else default.dagger_every}
    changed = [f"--{k.replace('_', '-')}" for k, v in meant.items() if getattr(train, k) != v]
    if changed:
        raise UserError(f"give {' and '.join(changed)} to the demo itself, not in --trainer-args or a FLYWHEEL_* "
                        "variable: the demo also tells the rollout workers whether to record the solver's labels")


def rft_every(cfg: DemoConfig) -> int:
    """PPO updates between RFT rounds (0: none): the user's, else the kind's (``run_config.kind_rft_every``)."""
    return cfg.rft_every if cfg.rft_every >= 0 else run_config.kind_rft_every(cfg)


def target_kl(cfg: DemoConfig) -> float:
    """The KL at which PPO stops an update's epochs (0: every epoch runs). Auto (-1): the kind's
    (``PolicyKind.demo_ppo``): 0.02 for the pixel policy from random weights, where the
    starter suite's tasks had collapsed onto one wrong click without it (docs/tasks.md); off after
    a cold start and for the language policy."""
    return cfg.target_kl if cfg.target_kl >= 0 else cfg.kind_ppo().target_kl


def resolved(cfg: DemoConfig, train: Any = None) -> dict[str, float]:
    """What the run's automatic settings (-1 or 0 in the config) came to, for its report: those of
    the trainer as it runs (``train``, the resolved TrainConfig; by default this run's, resolved
    here), whichever layer set them (the kind, the suite, the user)."""
    if train is None:
        train = trainer_config(cfg, "demo-x.", f"{cfg.policy_kind}-x", suite_plan(cfg.tasks, cfg.max_steps)).train
    return {"ppo_lr": train.lr, "rft_every": train.rft_every, "target_kl": train.target_kl,
            "sandboxes_per_worker": cfg.sandboxes or machine_sandboxes(cfg.workers)}


def broker_to_start(settings: Settings):
    """The local broker this run must start (not started yet), or None when one is named or
    already running: known before it starts, so an exit while it is starting still stops it."""
    if settings.kafka_bootstrap:
        return None

    return local_cluster(settings, 1) if running_cluster(settings) is None else None


def ensure_platform(settings: Settings, broker) -> None:
    """Start ``broker`` (``broker_to_start``'s) if there is one, then create the run's topics."""

    if broker is not None:

        fetch_jars(broker.libs)
        took = broker.start()
        print(f"Kafka up in {took:.1f}s at {broker.bootstrap}", flush=True)
    report = ensure_topics(settings)
    if report.drift:
        raise UserError("topic drift: " + "; ".join(report.lines()))


def leave_platform(settings: Settings, started, keep: bool) -> str:
    """Stop the broker this run started unless asked to keep it; -> one line saying what is left."""
    if started is None:
        where = settings.kafka_bootstrap or f"127.0.0.1:{settings.kafka_port}"
        return f"Kafka at {where} was running before this demo and is left running"
    if keep:
        return f"Kafka at {started.bootstrap} is left running (--keep-broker); stop it with `flywheel down`"
    if not started.stop():
        return f"the Kafka broker this demo was to start ({started.bootstrap}) is not running"
    return f"stopped the Kafka broker this demo started ({started.bootstrap}); its data stays under {settings.data_path}"


def stop_children(children: list[Child]) -> str:
    """Stop every child still running, the last started first (the sink gets longer to flush its
    last batch); -> one line naming the ones this call stopped (empty when none was running)."""
    stopped = []
    for child in reversed(children):
        if child.alive:
            child.stop(grace=60 if child.name == "sink" else 30)
            stopped.append(child.name)
    return f"stopped {', '.join(stopped)}" if stopped else ""


def snapshot(settings: Settings, policy: str, prefix: str) -> dict:
    """One progress reading; every part is best effort (the sink may be starting)."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    snap: dict = {"rates": {}, "episodes": 0}
    try:
        _, rows, _ = execute(settings, Q.last_n_success(policy))
        snap["rates"] = {r[0]: (r[2], r[1]) for r in rows}
        _, rows, _ = execute(settings, Q.last_n_scores(policy))
        snap["scores"] = {r[0]: (r[2], r[1]) for r in rows}  # games: normalised score, shown instead of success
        # the curriculum's reading: a shorter window, so a solved task's forgetting shows sooner
        _, rows, _ = execute(settings, Q.last_n_success(policy, CURRICULUM_WINDOW, steps=True))
        snap["recent_rates"] = {r[0]: (r[2], r[1]) for r in rows}
        snap["recent_steps"] = {r[0]: (r[3], r[1]) for r in rows}  # mean episode length: shares by steps
        _, rows, _ = execute(settings, Q.last_n_scores(policy, CURRICULUM_WINDOW))
        snap["recent_scores"] = {r[0]: (r[2], r[1]) for r in rows}
        _, rows, _ = execute(settings, Q.totals(policy))
        snap["episodes"] = sum(r[1] for r in rows)
        _, rows, _ = execute(settings, Q.latest_versions(policy, settings.topic_prefix))
        if rows:
            snap["published"], snap["acting"], snap["updates"], snap["dlq"] = rows[0]
    except Exception as exc:  # noqa: BLE001 - progress must never stop the run
        snap["error"] = str(exc)[:120]
    try:
        snap["lag"] = run_lags(settings, prefix)
    except Exception:  # noqa: BLE001
        pass
    return snap


def run_lags(settings: Settings, prefix: str) -> dict[str, int]:
    """The run's consumer groups (named ``<prefix><role>``) -> messages they have not committed.
    A group with no commit yet is left out (its lag is unknown, not 0): the rollout group before
    its first finished episode would otherwise read as an empty task queue, and every feed tick
    would send another full queue."""
    lag = consumer_lag(settings, group_prefix=prefix)  # the run's groups only: this is read every second
    return {g.removeprefix(prefix): sum(t.values()) for g, t in lag.items() if g.startswith(prefix) and t}


def feed_tick(feed: TaskFeed, settings: Settings, prefix: str, snap: dict, trainer: bool = True) -> None:
    """One refill of the curriculum's queue, from the groups' lag now (the rollout group's is the
    task queue, the trainer's its unread trajectories) and the last progress reading's rates and
    mean episode lengths.
    ``trainer``: whether a trainer still runs; after the DPO phase stopped it, its group's lag only
    grows and would stop the feed for good, so the queue alone bounds it."""
    try:
        lags = run_lags(settings, prefix)
        feed.refill(lags.get("rollout"), snap.get("recent_rates", {}), snap.get("recent_scores", {}),
                    lags.get("trainer") if trainer else None, snap.get("recent_steps", {}))
    except Exception as exc:  # noqa: BLE001 - the next tick tops the queue up again
        log.warning("task feed: refill failed (%s); retrying at the next tick", exc)


def format_progress(elapsed_s: float, snap: dict, phase: str = "") -> str:
    scores = snap.get("scores", {})  # a game's figure is its normalised score, not its success
    rates = " ".join(f"{t} {'score ' if t in scores else ''}{r:.2f}({n})"
                     for t, (r, n) in sorted({**snap.get("rates", {}), **scores}.items())) or "-"
    lags = dict(snap.get("lag", {}))
    queued = lags.pop("rollout", None)  # the rollout group's lag is the task queue (the curriculum keeps it short), not a backlog
    lag = " ".join(f"{g}={v}" for g, v in sorted(lags.items())) or "-"
    m, s = divmod(int(elapsed_s), 60)
    line = (f"[{m:02d}:{s:02d}]{' ' + phase if phase else ''} episodes {snap.get('episodes', 0)} | last-100 success {rates} | "
            f"policy v{snap.get('published', '-')} acting v{snap.get('acting', '-')} | "
            f"updates {snap.get('updates', '-')} | {'' if queued is None else f'tasks queued {queued} | '}"
            f"lag {lag} | dlq {snap.get('dlq', '-')}")
    if snap.get("error"):
        line += f" | ({snap['error']})"
    return line


FEED_TICK_S = 1.0  # how often the task queue is topped up (progress lines come every progress_s)


def task_feed(cfg: DemoConfig, settings: Settings, run_id: str, tasks: list[str], max_steps: int) -> TaskFeed:
    """The RL task feed of a run (``tasks``: the plan's, suites expanded): a queue of 8 tasks per
    sandbox, 64 at least, less the trainer's unread trajectories beyond one batch."""
    sandboxes = (cfg.sandboxes or machine_sandboxes(cfg.workers)) * cfg.workers
    return TaskFeed(list(tasks), max(64, 8 * sandboxes), phases.rl_seed(cfg.seed), max_steps, f"{run_id}.rl",
                    lambda specs: phases.send_tasks(settings, specs), cfg.episodes, allowance=cfg.batch_episodes)


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
    tasks = suite_plan(cfg.tasks, cfg.max_steps).tasks
    if cfg.start_from:  # no cloning: RL starts from the copied version
        cfg = replace(cfg, cold_start_demos=0)
    cold = phases.cold_start_plan(tasks, cfg.cold_start_demos, phases.demonstrators() if demonstrable is None else demonstrable)
    cfg = replace(cfg, cold_start_demos=cold.per_task)
    if cfg.value_pretrain_batches < 0:
        cfg = replace(cfg, value_pretrain_batches=VALUE_PRETRAIN_BATCHES if cfg.cold_start else 0)
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


def _roots(children: list[Child]) -> dict[str, int]:
    """The running children's pids by name: the processes whose CPU the report shares out."""
    return {c.name: c.proc.pid for c in children if c.proc is not None and c.alive}


@dataclass
class Learner:
    """The trainer's half of a run, as the phases the trainer runs drive it (``phase_list.Learner``):
    started once (the trainer, awaited until it published; the rollout workers; the reflection
    annotator of a run with a DPO phase; the task feed), then one tick at a time: the feed every
    ``FEED_TICK_S``, and every ``progress_s`` a reading (a dead child fails the run; CPU shares
    sampled; the progress line printed). ``snap``: the last reading (the run's outcome reads it)."""

    cfg: DemoConfig
    settings: Settings
    env: dict[str, str]
    run_id: str
    prefix: str  # the run's topic and consumer group prefix
    policy: str
    plan: RunPlan
    logs: Path
    children: list[Child]  # the run's, the learner's among them (the DPO phase changes the list)
    clock: phases.PhaseClock
    notes: list[str]
    t0: float
    base_version: int = 0
    dpo_version: int | None = None
    snap: dict = field(default_factory=dict)
    cpu: CpuShare = field(default_factory=CpuShare)  # each process's share, from RL's first task on
    feed: TaskFeed | None = None
    started: bool = False
    next_line: float = 0.0

    @staticmethod
    def runs(child: Child) -> bool:
        """Whether ``child`` is the learner's (the trainer, a rollout worker), started with it."""
        return child.name == "trainer" or child.name.startswith("rollout-")

    def start(self) -> str:
        """-> what the trainer starts from ('' when the learner already runs)."""
        if self.started:
            return ""
        self.started = True
        cfg, settings = self.cfg, self.settings
        for child in [c for c in self.children if self.runs(c)]:
            child.start()
            if child.name == "trainer":  # rollout acts only with weights the trainer published
                wait_s = min(180.0, max(30.0, self.t0 + cfg.minutes * 60 - time.time()))
                if not wait_until(lambda: not child.alive or _published(settings, self.policy), wait_s, 1.0):
                    raise UserError(f"the trainer published no version within {wait_s:.0f}s (log {child.log_path})")
                self.base_version = _latest_version(settings, self.policy)
        if cfg.dpo_span_s():  # failed episodes -> reflection pairs, while PPO runs
            self.children.append(phases.reflection_annotator(self.env, self.prefix, self.logs,
                                                             cfg.rollout_args).start())
        tasks = list(self.plan.tasks)
        if cfg.curriculum:
            self.feed = task_feed(cfg, settings, self.run_id, tasks, self.plan.max_steps)
            self.feed.refill(0, {}, {})
            self.notes.append(f"RL tasks fed by failure rate over the last {CURRICULUM_WINDOW}, shared by steps (app.curriculum), "
                              f"{self.feed.queue} queued less the trajectories the trainer has not read; "
                              "--no-curriculum gives every task the same share")
        else:
            phases.submit(self.env, self.logs, tasks, cfg.episodes, self.plan.max_steps, phases.rl_seed(cfg.seed))
        self.cpu = CpuShare()
        self.cpu.sample(_roots(self.children), own="demo")
        self.next_line = time.time() + cfg.progress_s
        return f"the trainer starts from v{self.base_version}"

    def tick(self) -> dict | None:
        """-> a reading every ``progress_s`` (None between them); UserError when a child died."""
        time.sleep(min(FEED_TICK_S, self.cfg.progress_s))
        if self.feed is not None:  # every second: a trainer that caught up gets the next episodes at once
            feed_tick(self.feed, self.settings, self.prefix, self.snap,
                      trainer=any(c.name == "trainer" for c in self.children))
        if time.time() < self.next_line:
            return None
        self.next_line = time.time() + self.cfg.progress_s
        self.cpu.sample(_roots(self.children), own="demo")
        dead = [c for c in self.children if not c.alive]
        if dead:
            c = dead[0]
            raise UserError(f"{c.name} exited with code {c.returncode()}: {c.tail(3)} (log {c.log_path})")
        self.snap = snapshot(self.settings, self.policy, self.prefix)
        self.show(self.snap)
        return self.snap

    def show(self, snap: dict) -> None:
        print(format_progress(time.time() - self.t0, snap, self.clock.current), flush=True)

    def dpo(self) -> None:
        def tick() -> None:  # progress while DPO runs
            self.show(snapshot(self.settings, self.policy, self.prefix))

        self.dpo_version = _dpo_phase(self.cfg, self.settings, self.env, self.children, self.policy,
                                      self.base_version, self.logs, self.clock, self.notes, tick)


class Terminated(KeyboardInterrupt):
    """SIGTERM, or SIGHUP (the terminal closed, an ssh session dropped): the demo stops as on
    Ctrl-C (its children and broker stopped, the report written)."""

    def __init__(self, signame: str = "SIGTERM") -> None:
        super().__init__(signame)
        self.signame = signame


def _terminate_once(stop: phases.Stop):
    """A SIGTERM, SIGHUP and SIGINT handler: the first signal sets ``stop`` (its reason: the
    signal) and raises ``Terminated`` (SIGTERM, SIGHUP) or KeyboardInterrupt (Ctrl-C) wherever the
    run is (a blocking step included: its own cleanup stops it). A further signal lets the stopping
    of processes finish (a second Ctrl-C, or a supervisor's SIGTERM after it, cut the cold start's
    stop of its rollout worker short and left that worker running); only while
    ``stop.interruptible`` (the report is being written) does it raise again, skipping the rest of
    the report."""
    def handler(signum, frame) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if stop.set(f"stopped by {name}"):
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(name)
        if stop.interruptible:
            stop.interruptible = False
            raise KeyboardInterrupt()
        _say("already stopping: the run stops its processes (once they are, another Ctrl-C skips the report)")
    return handler


def run_demo(cfg: DemoConfig, settings: Settings) -> Path:
    """The whole run, decided before anything starts (``effective``: the cold start, the tasks
    without a demonstrator). Every exit (a phase failing, a child dying, Ctrl-C, SIGTERM, the
    report failing) stops each child still running and the broker this run started (unless
    --keep-broker); the last line says what is left running."""
    human = phases.human_demonstrations(settings) if cfg.demos_from == "human" else None
    cfg, cold, changed = effective(cfg.validate(), None if human is None else
                                   frozenset(s.trajectory.task.name for s in human))
    run_id, prefix, policy = run_names(cfg)
    settings = load_settings({**asdict(settings), "topic_prefix": prefix})
    trainer = check_child_options(cfg, cold, (run_id, prefix, policy), settings)
    for line in (*cold.lines, *changed):
        print(line, flush=True)
    broker = broker_to_start(settings)
    children: list[Child] = []
    stop = phases.Stop()
    previous = {s: signal.signal(s, _terminate_once(stop)) for s in stop_signals()}
    try:
        return _run(cfg, settings, cold, (run_id, prefix, policy), broker, children, stop, changed, human, trainer)
    finally:
        stop.set("the run ended")  # from here a signal lets the cleanup finish
        stop.interruptible = False
        try:
            left = stop_children(children)  # after a failure: the run's own stop did not happen
            if left:
                _say(left)
            _say(leave_platform(settings, broker, cfg.keep_broker))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _run(cfg: DemoConfig, settings: Settings, cold: phases.ColdStart, names: tuple[str, str, str], broker,
         children: list[Child], stop: phases.Stop, changed: list[str], human: list | None = None,
         trainer: run_config.Resolved | None = None) -> Path:
    """Start the platform and the children (appended to ``children`` as they are planned, for
    run_demo to stop whatever happens), run the phases until the deadline, stop the children and
    write the report; -> its path. ``human``: the people's demonstrations of ``--demos-from human``;
    ``trainer``: the trainer's resolved configuration (resolved here when not given)."""
    run_id, prefix, policy = names
    budget = phase_list.Budget(time.time(), cfg.minutes)  # --minutes bounds the whole run, its start-up included
    plan = suite_plan(cfg.tasks, cfg.max_steps)
    trainer = trainer or trainer_config(cfg, prefix, policy, plan, {**os.environ, **child_env(settings, prefix)})
    train = trainer.train
    tasks = list(plan.tasks)
    out = Path(cfg.report_dir) if cfg.report_dir else settings.data_path / "reports" / run_id
    logs = out / "logs"
    cold_start = cfg.cold_start_demos > 0
    dpo_s = cfg.dpo_span_s()
    taught_by = taught.taught_of(cfg.cold_start_demos, cfg.demos_from, cfg.demo_noise, train)
    print(f"Flywheel demo {run_id}: mode {'sync' if cfg.sync else 'async'}, policy {policy}, {len(tasks)} tasks "
          f"({', '.join(tasks)}), step budget {plan.max_steps}, phases: "
          f"{'cold start' if cold_start else ''}"
          f"{f' ({cfg.demo_noise:.0%} mistakes)' if cold_start and cfg.demo_noise else ''}"
          f"{' -> SFT -> ' if cold_start else ''}{'value pretraining -> ' if cfg.value_pretrain_batches else ''}"
          f"PPO{f' (RFT every {train.rft_every} updates)' if train.rft_every else ''}"
          f"{f' (epochs stop at KL {train.target_kl:g})' if train.target_kl else ''}"
          f"{f' (self-imitation x {train.sil_coef:g})' if train.sil_coef else ''}"
          f"{f' (expert labels x {train.expert_coef:g})' if train.expert_coef else ''}"
          f"{f' (DAgger every {train.dagger_every} updates)' if train.dagger_every else ''}"
          f"{f' -> DPO (last {dpo_s / 60:g} min)' if dpo_s else ''}; {cfg.minutes:g} min"
          f"{f' (the cold start ends by {budget.deadline(phases.COLD_START) - budget.t0:.0f} s, SFT by {budget.deadline(phases.SFT) - budget.t0:.0f} s)' if cold_start else ''}"
          f"; logs in {logs}\n{taught.line(taught_by)}", flush=True)
    log.info("demo config %s", describe(cfg))
    log.info("trainer config %s", trainer.record())
    ensure_platform(settings, broker)
    claim_run_id(settings, run_id, policy)  # its topics, versions, checkpoint and rows would mix with this run's
    if cfg.start_from:  # before the trainer starts: it continues from the newest published version
        pv = start_from.copy_into(settings, start_from.parse(cfg.start_from, RUN_ID), cfg.policy_kind, policy)
        print(f"starting from {cfg.start_from}: published as {policy} v{pv.version}", flush=True)
    logs.mkdir(parents=True, exist_ok=True)  # after the claim: a run's logs mean its run id is spent
    config = {"demo": asdict(cfg), "resolved": resolved(cfg, train), "run_config": trainer.record(),
              "taught_by": taught.record(taught_by),
              "settings": describe(settings)}
    if cold_start:  # the cloning's, as `flywheel bc` will resolve it (SFT may cut its epochs to its share)
        config["bc"] = describe(run_config.bc_config(phases.bc_options(cfg, policy, list(cold.demonstrated),
                                                                       plan.action_types),
                                                     {**os.environ, **child_env(settings, prefix)}))
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    children += plan_children(cfg, settings, prefix, policy, logs, plan, trainer)
    env = child_env(settings, prefix)
    if cfg.ui:  # first to start, last to stop: the page shows the whole run
        ui_port = free_port_block(1)
        token = secrets.token_urlsafe(18)  # the UI writes training data: only who has the URL may
        children.insert(0, ui_child(ui_port, token, logs, env))
        print(f"ui: http://127.0.0.1:{ui_port}/?token={token}&run={policy}", flush=True)
    notes: list[str] = list(changed)
    clock = phases.PhaseClock()
    learner = Learner(cfg, settings, env, run_id, prefix, policy, plan, logs, children, clock, notes, budget.t0)
    ctx = phase_list.Ctx(cfg, settings, env, prefix, policy, plan, cold, logs, clock, stop, human, notes, learner)
    try:
        for child in [c for c in children if not learner.runs(c)]:  # the platform (and the UI)
            child.start()
            if child.name == "sink":  # the query endpoint must be up before progress reads
                wait_until(lambda: not child.alive or _endpoint_up(settings), 60)
        phase_list.run_phases(ctx, budget)  # each phase of the run, to its deadline
        final = snapshot(settings, policy, prefix)  # the run's last reading: did it make an RL update?
        learner.snap = final if "published" in final else learner.snap
    except KeyboardInterrupt as exc:
        notes.append(f"stopped by {exc.signame}" if isinstance(exc, Terminated) else "stopped by Ctrl-C")
    finally:
        stop.set("the run ended")  # a SIGTERM from here on lets the stopping finish
        ended = time.time()
        clock.close(ended)
        no_rl = rl_outcome(learner.base_version, learner.snap, out)
        if no_rl:
            notes.append(no_rl)
            _say(no_rl)
        _say("stopping: rollout workers, then the stream processors, trainer and sink")
        _say(stop_children(children) or "no child was running")
    stop.interruptible = True  # the processes are stopped: a further Ctrl-C may skip the report
    # local: loads Pillow, clickhouse-connect, needed only on this path
    from app.report import RunInfo, write_report

    run = RunInfo(run_id, policy, "sync" if cfg.sync else "async", budget.t0, ended,
                  config, notes)
    extra, data = [], {}
    try:
        extra, data = measures.report_section(settings, policy, learner.base_version, cfg.cold_start,
                                              cfg.value_pretrain_batches > 0, clock, learner.dpo_version, taught_by)
    except Exception as exc:  # noqa: BLE001 - the rest of the report still helps
        notes.append(f"the phase section could not be computed: {exc}")
    path = write_report(settings, run, out, extra + [learner.cpu.markdown()], extra_summary=data)
    _say(f"report: {path}")  # after a SIGHUP the terminal is gone: the report is written all the same
    return path


def rl_outcome(base_version: int, snap: dict, out: Path) -> str:
    """Whether the run made an RL update (the trainer published a version past ``base_version``,
    by ``snap``, the last reading), kept in ``<out>/outcome.json`` for `flywheel demo`'s exit
    code; -> the line saying it made none, or ''."""
    published = snap.get("published")
    line = phase_list.rl_update_line(base_version, published)
    try:
        (out / OUTCOME).write_text(json.dumps({"rl_update": not line, "base_version": base_version,
                                               "published": published}) + "\n")
    except OSError as exc:  # the line still says it; the exit code cannot
        log.warning("could not write %s: %s", out / OUTCOME, exc)
    return line


OUTCOME = "outcome.json"  # in the run's folder: whether the run made an RL update


def exit_code(report: Path) -> int:
    """`flywheel demo`'s exit code from the run's folder: ``phase_list.NO_RL_UPDATE`` when it made no RL update."""
    try:
        outcome = json.loads((report.parent / OUTCOME).read_text())
    except (OSError, ValueError):
        return 0
    return 0 if outcome.get("rl_update", True) else phase_list.NO_RL_UPDATE


def _dpo_phase(cfg: DemoConfig, settings: Settings, env: dict[str, str], children: list[Child], policy: str,
               reference: int, logs: Path, clock: phases.PhaseClock, notes: list[str], tick=None) -> int | None:
    """Stop PPO and the annotator for good and pause the rollout workers, so DPO has every core
    (demo lm40-s2: with 4 sandboxes and the language policy acting beside it, one DPO epoch of 32
    pairs took 9 minutes instead of 1.5, and DPO ran out of time); then DPO of pi_sft, and the
    workers start again, acting with its version (PPO's last if DPO failed). -> the DPO version."""
    paused = [c for c in children if c.name.startswith("rollout-")]
    for child in children:
        if child.name in ("trainer", "reflection") or child in paused:
            child.stop(grace=60)
    children[:] = [c for c in children if c.name not in ("trainer", "reflection")]
    try:
        return phases.dpo(cfg, settings, env, policy, reference, logs, clock, timeout_s=max(cfg.dpo_span_s() - 30, 60),
                          tick=tick)
    except UserError as exc:  # the run goes on with the PPO policy; the report says why
        notes.append(f"DPO phase failed: {exc}")
        clock.note(f"failed: {exc}")
        return None
    finally:
        for child in paused:
            child.start()


def _published(settings: Settings, policy: str) -> bool:
    try:
        return versions.latest(settings, policy) is not None
    except Exception:  # noqa: BLE001 - not yet readable
        return False


def claim_run_id(settings: Settings, run_id: str, policy: str) -> None:
    """Claim ``run_id`` in this data dir, or UserError where it was used before: ``policy`` has
    versions on the broker, or its trainer's checkpoint is kept (a broker started afresh, as a
    benchmark's, holds no versions of earlier runs), or a ClickHouse server holds its episodes
    (they outlive a data dir), or the claim exists (``<data dir>/runs/<id>``, made here atomically
    before anything starts: a run stopped before its trainer began, or a second demo of the same
    id at the same time)."""
    claim = settings.data_path / "runs" / run_id
    if _published(settings, policy):
        used = f"{policy} has published versions"
    elif (settings.checkpoint_root / policy).exists():
        used = f"{policy} has a trainer checkpoint in {settings.checkpoint_root / policy}"
    elif settings.clickhouse_url and _scored_on_server(settings, policy):
        used = f"the ClickHouse server holds episodes of {policy}"
    else:
        try:
            claim.parent.mkdir(parents=True, exist_ok=True)
            claim.mkdir()
            (claim / "started.txt").write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
            return
        except FileExistsError:
            used = (f"claimed by a demo: {claim}; if that demo failed before it played anything, deleting the "
                    "folder frees the id")
        except OSError as exc:
            raise UserError(f"cannot claim run id {run_id!r} in the data dir ({exc}): is it writable?") from None
    raise UserError(f"run id {run_id!r} was used before in this data dir ({used}): give another --run-id, or "
                    "leave it out for a fresh one")


def _scored_on_server(settings: Settings, policy: str) -> bool:
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    names = ", ".join(Q.q(p) for p in (policy, phases.scripted_policy(policy)))
    _, rows, _ = execute(settings, f"SELECT count() FROM scored WHERE policy IN ({names})")
    return bool(rows and rows[0][0])


def _latest_version(settings: Settings, policy: str) -> int:
    latest = versions.latest(settings, policy)
    return latest.version if latest is not None else 0


def _endpoint_up(settings: Settings) -> bool:
    # local: loads chdb, clickhouse-connect, needed only on this path
    from infra.clickhouse.endpoint import find_endpoint

    return settings.clickhouse_url != "" or find_endpoint(settings) is not None
