"""One resolved configuration per run: the trainer's settings decided once, in the demo, before
anything starts, with one declared precedence (``PRECEDENCE``, later wins):

    the trainer's defaults < FLYWHEEL_* variables < the policy kind's < the suite's
      < the run's (the demo's options, the user's among them) < --trainer-args

Each layer is a dict of ``TrainConfig`` fields; a layer written as options (a kind's
``demo_ppo_args``, a suite's ``child_args``, the user's ``--trainer-args``) is parsed once here, by
the trainer's own parser. The merged dict is resolved and validated as the ``TrainConfig`` the
trainer will run with; the child gets it whole, as one file (``Resolved.write``: every field, which
`flywheel train --config` reads back), so nothing is decided twice, and ``origins`` says which layer
set each field (the run's folder and report show both). An automatic demo option (-1, or 0 for
``--ppo-lr``) is the kind's; one the user gave is the run's, above the suite's: the games' suite
sets ``--target-kl 0.02``, and ``flywheel demo --tasks games --target-kl 0.05`` trains at 0.05.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.runtime.command import check_argv, parse_command
from infra.runtime.config import ConfigError, config_json, describe, resolve
from infra.runtime.errors import UserError
from infra.runtime.policy import policy_kind
from infra.runtime.settings import Settings, load_settings
from producers.suites import RunPlan, auto_rft, child_args, expand
from trainer import cli as trainer_cli
from trainer.rl.config import TrainConfig
from trainer.sft.bc_config import BCConfig

PRECEDENCE = ("defaults", "environment", "kind", "suite", "run", "trainer_args")
# value pretraining's bound, a share of the run's minutes: a game's batch of 200-step episodes takes
# ~25 s to gather on 2 cores, so 20 of them filled an 8-minute run and PPO never started
VALUE_PRETRAIN_SHARE = 0.2
MAX_WAIT_SYNC_S = 120  # --sync: update on a full batch (a partial one only if trajectories were lost to aborts)
# self-imitation's weight where the demo's --sil-coef is on auto and the run has neither RFT rounds
# nor a teacher during RL (``kind_sil_coef``), and the entropy band's floor that comes with it (the
# pixel policy's entropy is that of its action type plus that of its arguments: ~5 nats at random,
# 0.06-0.08 after RFT rounds collapsed it); neither is tuned yet
SIL_COEF = 0.5
SIL_ENT_FLOOR = 0.5
TRAIN_DEFAULTS = TrainConfig()  # the trainer's own values, below every layer


@dataclass(frozen=True)
class Resolved:
    """The trainer's configuration of a run, and where each of its fields was decided."""

    train: TrainConfig
    origins: dict[str, str]  # field -> the layer of PRECEDENCE that set it
    settings_argv: tuple[str, ...] = ()  # platform settings the user gave in --trainer-args

    def write(self, path: Path) -> list[str]:
        """Write the trainer's whole configuration to ``path`` (every field: FLYWHEEL_* variables in
        the child change nothing) -> what the trainer is started with: that file, then the user's
        platform settings."""
        path.write_text(config_json(self.train))
        return ["--config", str(path), *self.settings_argv]

    def record(self) -> dict[str, Any]:
        """For the run's folder and its report: each field's value and the layer that set it."""
        return {"precedence": " < ".join(PRECEDENCE), "trainer": describe(self.train),
                "trainer_origins": {k: v for k, v in self.origins.items() if v != "defaults"}}


def options(argv: list[str] | tuple[str, ...], command: str = "train", config: type = TrainConfig) -> dict[str, Any]:
    """The fields of ``config`` that ``flywheel <command> <argv>`` sets, parsed by the command's own
    parser (abbreviations resolved; a misspelt or ambiguous option is a ConfigError)."""
    return fields_set(no_config_file(parse_command(trainer_cli.register, command, list(argv)), command), config)


def fields_set(args: dict[str, Any], config: type) -> dict[str, Any]:
    """The fields of ``config`` that the parsed options ``args`` set."""
    names = {f.name for f in dataclasses.fields(config)}
    return {k: v for k, v in args.items() if k in names and v is not None}


def trainer_args(cfg) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's --trainer-args, parsed once by `flywheel train`'s own parser -> the ``TrainConfig``
    fields they set (the top layer of ``PRECEDENCE``) and the platform settings they set."""
    args = no_config_file(parse_command(trainer_cli.register, "train", cfg.trainer_args.split()), "train")
    return fields_set(args, TrainConfig), fields_set(args, Settings)


def no_config_file(args: dict[str, Any], command: str) -> dict[str, Any]:
    """``args``, or ConfigError where they name a --config file: the run resolves the child's
    configuration and hands it as a file itself."""
    if args.get("config"):
        raise ConfigError(f"--config {args['config']}: the run hands `flywheel {command}` its resolved configuration "
                          "as a file itself; give the options instead")
    return args


def settings_options(argv: list[str] | tuple[str, ...], command: str = "train") -> dict[str, Any]:
    """The platform settings ``flywheel <command> <argv>`` sets."""
    return fields_set(parse_command(trainer_cli.register, command, list(argv)), Settings)


def kind_layer(cfg) -> dict[str, Any]:
    """The policy kind's automatic PPO settings for the run (``PolicyKind.demo_ppo`` after a cold
    start or from random weights, and its ``demo_ppo_args``), where the demo's option is on auto.
    No RFT rounds where DAgger's rounds run (``kind_rft_every``). Its self-imitation depends on the
    layers above it: ``kind_sil``, from what they pass."""
    kind, auto = policy_kind(cfg.policy_kind), cfg.kind_ppo()
    out: dict[str, Any] = options(kind.demo_ppo_args)
    if auto.lr:
        out["lr"] = auto.lr
    out["target_kl"] = auto.target_kl
    out["rft_every"] = kind_rft_every(cfg)
    if auto.rft_epochs:  # a round's passes, on auto or asked with --rft-every
        out["rft_epochs"] = auto.rft_epochs
    if auto.epochs:  # a suite's own --epochs (the games') and --trainer-args come after it
        out["epochs"] = auto.epochs
    return out


def kind_sil(cfg, passed: dict[str, Any]) -> dict[str, Any]:
    """The kind's self-imitation, with the entropy band that comes with it, where the demo's
    --sil-coef is on auto (``kind_sil_coef``); nothing where it is off."""
    sil_coef = kind_sil_coef(cfg, passed)
    return {"sil_coef": sil_coef, "ent_floor": SIL_ENT_FLOOR} if sil_coef else {}


def kind_sil_coef(cfg, passed: dict[str, Any]) -> float:
    """Self-imitation's weight when the demo's --sil-coef is on auto: ``SIL_COEF`` where the run
    has no RFT rounds and no teacher during RL (expert labels, DAgger rounds), for a kind the
    trainer fine-tunes on its own successes (the pixel policy) in one process: from random weights,
    and on the games after their cold start. Elsewhere 0: RFT rounds already learn from the same
    successes (the default suite's recipe), a teacher's labels pull elsewhere, and the replay lives
    in one process. ``passed``: what the other layers pass the trainer (``passed``), --trainer-args
    last: their --sil-coef 0 takes the band too."""
    def value(name: str, kind: type) -> Any:  # a parsed layer's values are the parser's strings
        return kind(passed.get(name, getattr(TRAIN_DEFAULTS, name)))

    teacher = value("expert_coef", float) > 0 or value("dagger_every", int) > 0
    one_process = value("nproc_per_node", int) <= 1
    wanted = float(passed.get("sil_coef", SIL_COEF)) > 0
    return SIL_COEF if policy_kind(cfg.policy_kind).rft and not value("rft_every", int) and not teacher \
        and one_process and wanted else 0.0


def kind_rft_every(cfg) -> int:
    """PPO updates between RFT rounds when the demo's --rft-every is on auto: 8 for the pixel
    policy after a cold start, one pass each (every 4, two passes: default suite, 15 minutes, suite
    mean 0.682 vs 0.623 on seed 0, 0.68 vs 0.658 on seed 1; a quarter of that work since it bound
    the run, docs/performance.md); none from random weights (few successes to learn
    from) or for the language policy (its fine-tuning is `flywheel sft`); none on the games
    (``producers.suites.auto_rft``): a round re-clones the cold start's demonstrations, a teacher
    during RL their teacher-free default keeps out; nor where DAgger rounds run: they fit the
    solver's labels on the policy's own states, which a round of its own successes adds little
    to, and an RFT round took 105-115 s of a games run's ~17 minutes of PPO (g49)."""
    if cfg.dagger_every > 0 or not auto_rft(expand(list(cfg.tasks))):
        return 0
    return cfg.kind_ppo().rft_every


def suite_layer(cfg, plan: RunPlan) -> dict[str, Any]:
    """The suite's trainer settings for this kind (``producers.suites.child_args``)."""
    return options(child_args("train", plan.tasks, cfg.policy_kind))


def run_layer(cfg, prefix: str, policy: str, plan: RunPlan, policy_config: dict) -> dict[str, Any]:
    """What the demo itself sets: the run's names and batch, value pretraining's bounds, how the
    policy reads the pages (``policy_config``, used when the trainer builds the policy: no cold
    start), DAgger as ``effective`` resolved it, and the PPO options the user gave the demo."""
    out: dict[str, Any] = {
        "policy_kind": cfg.policy_kind, "policy_name": policy, "min_batch": cfg.batch_episodes,
        "group_id": f"{prefix}trainer", "seed": cfg.seed,
        "value_pretrain_max_batches": cfg.value_pretrain_batches,
        "value_pretrain_max_s": VALUE_PRETRAIN_SHARE * cfg.minutes * 60,
        "policy_config": json.dumps(policy_config),
    }
    if cfg.sync:
        out["max_wait_s"] = MAX_WAIT_SYNC_S
    if cfg.expert_coef > 0:
        out["expert_coef"] = cfg.expert_coef
    if cfg.dagger_every > 0:
        out["dagger_every"] = cfg.dagger_every
    if cfg.ppo_lr > 0:
        out["lr"] = cfg.ppo_lr
    if cfg.target_kl >= 0:
        out["target_kl"] = cfg.target_kl
    if cfg.rft_every >= 0:
        out["rft_every"] = cfg.rft_every
    if cfg.sil_coef >= 0:  # the entropy band comes with self-imitation
        out.update(sil_coef=cfg.sil_coef, ent_floor=SIL_ENT_FLOOR if cfg.sil_coef > 0 else 0.0)
    return out


def passed(cfg, given: dict[str, Any], prefix: str, policy: str, plan: RunPlan,
           policy_config: dict) -> tuple[dict[str, Any], dict[str, str]]:
    """The options the run passes the trainer: the layers above the defaults and the environment,
    in ``PRECEDENCE`` order, merged (``given``: the fields --trainer-args set, ``trainer_args``) ->
    the values and, per field, the layer that set it. The kind's automatic self-imitation is
    decided from what the other layers pass (``kind_sil``), then takes its place in the kind's."""
    above = [("suite", suite_layer(cfg, plan)), ("run", run_layer(cfg, prefix, policy, plan, policy_config)),
             ("trainer_args", given)]
    kind = kind_layer(cfg)
    values, _ = merge([("kind", kind), *above])
    return merge([("kind", {**kind, **kind_sil(cfg, values)}), *above])


def merge(stack: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The layers merged, the later winning; -> the values and, per field, the layer that set it."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, layer in stack:
        values.update(layer)
        origins.update(dict.fromkeys(layer, name))
    return values, origins


def resolve_trainer(cfg, prefix: str, policy: str, plan: RunPlan, policy_config: dict,
                    env: dict[str, str]) -> Resolved:
    """The trainer's whole configuration in this run, validated (``env``: the child's environment,
    whose FLYWHEEL_* variables sit just above the defaults); UserError naming the layers when it
    would not run."""
    try:
        given, user_settings = trainer_args(cfg)
        values, origins = passed(cfg, given, prefix, policy, plan, policy_config)
        load_settings(user_settings, env=env)
        train = resolve(TrainConfig, values, env).validate()
    except (ConfigError, UserError) as exc:
        raise UserError(f"flywheel train would refuse its options in this run (the kind's, the suite's, the demo's, "
                        f"then --trainer-args {cfg.trainer_args!r}; FLYWHEEL_* variables count too): {exc}") from None
    for f in dataclasses.fields(TrainConfig):
        if f.name not in origins:
            origins[f.name] = "defaults" if getattr(train, f.name) == getattr(TRAIN_DEFAULTS, f.name) else "environment"
    return Resolved(train, origins, tuple(config_argv_of(user_settings, Settings)))


def config_argv_of(values: dict[str, Any], cls: type) -> list[str]:
    """The fields ``values`` of config class ``cls`` as options (None: left out)."""
    kinds = {f.name: f for f in dataclasses.fields(cls)}
    out: list[str] = []
    for name, value in values.items():
        flag = "--" + kinds[name].name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
            continue
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        # attached with '=' where argparse would read the value as an option ('-1.0' is not: a number)
        out += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return out


def bc_config(argv: list[str], env: dict[str, str] | None = None) -> BCConfig:
    """The config `flywheel bc <argv>` runs with in ``env`` (its own parser; ConfigError where it would refuse)."""
    no_config_file(parse_command(trainer_cli.register, "bc", list(argv)), "bc")
    return check_argv(trainer_cli.register, "bc", argv, BCConfig, env)


def bc_handed(argv: list[str], env: dict[str, str], path: Path, epochs: int | None = None,
              train_budget_s: float = 0.0) -> list[str]:
    """The cold start's cloning configuration (``bc_config`` of its options ``argv`` in ``env``, its
    epochs cut to ``epochs`` when given) written whole to ``path`` -> what `flywheel bc` is started
    with: that file, then the platform settings the options gave."""
    cfg = bc_config(argv, env)
    if epochs is not None:
        cfg = dataclasses.replace(cfg, epochs=epochs)
    if train_budget_s > 0 and not cfg.train_budget_s:  # a budget the user gave in --bc-args stands
        cfg = dataclasses.replace(cfg, train_budget_s=train_budget_s)
    path.write_text(config_json(cfg))
    return ["--config", str(path), *config_argv_of(settings_options(argv, "bc"), Settings)]
