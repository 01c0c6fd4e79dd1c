"""What taught a run's policy, read from its resolved configuration (issue 56): every learning
figure the report prints names it, so a score a teacher earned is not read as RL's.

The sources, each from a setting the run resolved before it started:
- reward: always (RL learns from it in every run); the page's verdict, or a learned verifier's on
  the tasks the streams' ``--judge-tasks`` hands it (``judged``: app.demo_children.judged_tasks);
- scripted or human demonstrations, cloned into pi_sft by the cold start (``cold_start_demos``);
- RFT rounds re-cloning those demonstrations beside the policy's own successes during RL
  (``rft_every`` after a cold start; from random weights a round fits the policy's own successes,
  which reward taught);
- a teacher during RL: the solvers' labels in PPO's loss (``expert_coef``) or DAgger's rounds
  fitting them (``dagger_every``).
- demonstrations guiding the exploration floor's clicks (``explore_from``, --explore-from): they
  say where the floor clicks, never what the policy is fitted to; named as a source all the same.
- the version RL started from (``start_from``, --start-from RUN@VERSION), and what taught it as its
  own run recorded (``start_taught``; app.start_from.taught_by), where that run's report is found.
Self-imitation (``sil_coef``) fits the policy's own best episodes, which reward alone picked: it is
named beside reward, not as a source of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Taught:
    """The teaching settings of one run, as resolved (the demo's, then the trainer's)."""

    demonstrations: str  # "" (none: random weights), "scripted" or "human": the cold start's
    demo_noise: float  # the chance of a mistake per step of the scripted demonstrations
    rft_every: int  # PPO updates between RFT rounds (0: none)
    expert_coef: float  # the solvers' labels' weight beside PPO's loss (0: none)
    dagger_every: int  # PPO updates between DAgger rounds (0: none)
    sil_coef: float = 0.0  # self-imitation's weight on the policy's own best episodes (0: none)
    explore_from: str = ""  # "" or "human": demonstrations guiding the exploration floor's clicks
    judged: str = ""  # the tasks whose reward the streams' judge decides ("*": every task; "": none, the page's)
    start_from: str = ""  # "" or the version RL started from (RUN@VERSION)
    start_taught: str = ""  # what taught that version, as its run recorded ("": not found)

    @property
    def teacher_in_rl(self) -> bool:
        """Whether a solver's labels reached the policy during RL (DAgger's term or its rounds)."""
        return self.expert_coef > 0 or self.dagger_every > 0

    @property
    def recloned(self) -> bool:
        """Whether RFT rounds fitted the cold start's demonstrations again during RL."""
        return self.rft_every > 0 and bool(self.demonstrations)


def taught_of(cold_start_demos: int, demos_from: str, demo_noise: float, train: Any, explore_from: str = "",
              judged: str = "", start_from: str = "", start_taught: str = "") -> Taught:
    """The teaching of a run with that many demonstrations per task by ``demos_from`` (0: from
    random weights) and the trainer's resolved configuration ``train`` (a TrainConfig); ``judged``:
    the tasks the streams' judge rewards (app.demo_children.judged_tasks); ``start_from`` and
    ``start_taught``: the version RL started from and what taught it (app.start_from.taught_by)."""
    return Taught(demonstrations=demos_from if cold_start_demos > 0 else "",
                  demo_noise=demo_noise if cold_start_demos > 0 and demos_from == "scripted" else 0.0,
                  rft_every=int(train.rft_every), expert_coef=float(train.expert_coef),
                  dagger_every=int(train.dagger_every), sil_coef=float(train.sil_coef), explore_from=explore_from,
                  judged=judged, start_from=start_from, start_taught=start_taught if start_from else "")


def sources(t: Taught) -> list[str]:
    """What taught the policy, one phrase per source, reward first."""
    said = ([f"the verdict of the judge at --judge-url, not the page's, on "
             f"{'every task' if t.judged == '*' else t.judged}"]
            if t.judged else []) + ([f"self-imitation of the policy's own best episodes x {t.sil_coef:g}"]
                                    if t.sil_coef > 0 else [])
    out = [f"reward ({'; '.join(said)})" if said else "reward"]
    if t.demonstrations:
        noise = f", {t.demo_noise:.0%} mistakes" if t.demo_noise else ""
        out.append(f"{t.demonstrations} demonstrations (the cold start's pi_sft{noise})")
    if t.start_from:
        out.append(f"the version it started from, {t.start_from} (taught by: {t.start_taught})" if t.start_taught
                   else f"the version it started from, {t.start_from} (what taught it: that run's report)")
    if t.explore_from:
        out.append(f"{t.explore_from} demonstrations guiding the exploration floor's clicks (not cloned)")
    if t.rft_every > 0:
        out.append(f"RFT rounds every {t.rft_every} updates re-cloning the demonstrations" if t.recloned
                   else f"RFT rounds every {t.rft_every} updates on the policy's own successes")
    if t.expert_coef > 0:
        out.append(f"a teacher during RL: the solvers' labels x {t.expert_coef:g} in PPO's loss")
    if t.dagger_every > 0:
        out.append(f"a teacher during RL: DAgger rounds every {t.dagger_every} updates fitting the solvers' labels")
    return out


def line(t: Taught) -> str:
    """The report's sentence: "Taught by: reward alone." or the sources joined."""
    said = sources(t)
    if len(said) == 1:  # reward alone, with or without self-imitation of what it picked
        return "Taught by: " + said[0].replace("reward", "reward alone", 1) + "."
    return "Taught by: " + "; ".join(said) + "."


def rl_label(t: Taught) -> str:
    """What the RL phase learnt from: reward, and what besides it reached the policy then."""
    extra = (["demonstrations re-cloned"] if t.recloned else []) + (["teacher"] if t.teacher_in_rl else [])
    return "RL phase (" + " + ".join(["reward", *extra]) + ")"


def phase_heading(phase: str, t: Taught) -> str:
    """A phase's column heading in the report (``app.measures.phase_sql``'s phase names, which the
    data keeps): pi_sft named after its demonstrations (or, in a run from another run's version,
    after that version), PPO's after what taught the RL phase."""
    number, _, name = phase.partition(" ")
    if name.startswith("pi_sft") and t.start_from:  # not cloned here: the version copied from another run
        return f"{number} start {t.start_from}{name[len('pi_sft'):]}"
    if name.startswith("pi_sft"):
        return f"{number} π_sft ({t.demonstrations or 'no'} demonstrations){name[len('pi_sft'):]}"
    if name.startswith("PPO"):
        return f"{number} {rl_label(t)}{name[len('PPO'):]}"
    return phase


def record(t: Taught) -> dict[str, Any]:
    """For config.json and summary.json: the settings, the sources and the sentence."""
    return {**asdict(t), "teacher_in_rl": t.teacher_in_rl, "sources": sources(t), "line": line(t)}
