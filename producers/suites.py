"""Task suites registered by name: which tasks a run trains on, and what they need.

``default`` is the main job's suite (docs/tasks.md says why each task is in): multi-step tasks a
screenshot policy can solve in principle, with scripted solvers (producers.scripted) to play the
annotators of the cold start. ``quick`` is the one-click pair CI runs. ``starter`` holds 1-2 click
MiniWoB++ tasks in no other suite and with no solver: the demo learns them from reward alone, from
random weights (docs/tasks.md gives the random policy's success on each); ``multistep`` does the same
with 2-4 click tasks that random clicks solve 1-10% of the time. ``games`` holds the browser
games written for Flywheel (producers.games: scores as rewards, 50-500 steps, heuristic players as
demonstrators and as the normalisation's reference). A suite name is accepted
wherever task names are (``--tasks default``), and any registered MiniWoB++ task still runs
when named itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.runtime.errors import UserError
from producers.games import GAMES
from producers.games.registry import ARROWS


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: tuple[str, ...]
    action_types: tuple[str, ...]  # the pixel policy heads the tasks need (its ``action_types``)
    max_steps: int  # a step budget every task's scripted solution fits in
    about: str
    family: str = "miniwob"  # the TaskSpec.suite its tasks are built with (the sandbox's family of pages)
    keys: tuple[str, ...] = ()  # what these tasks press with a hotkey (``hotkeys``)
    # (command, policy kind) -> the options `flywheel bc` or `flywheel train` begin with on these tasks (``child_args``)
    child_args: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    # the chance of a mistake per step of the cold start's scripted demonstrations (`flywheel demo
    # --demo-noise`, left on auto): DART-style noise, only the games draw mistakes
    demo_noise: float = 0.0
    # DAgger during PPO (`flywheel demo --expert-coef`, `--dagger-every`, left on auto): the weight
    # of the solvers' labels beside PPO's loss and the PPO updates between rounds fitting them; a
    # teacher during RL, so no suite turns it on by default (issue 56): named arms a user asks for
    expert_coef: float = 0.0
    dagger_every: int = 0
    # RFT rounds when `flywheel demo --rft-every` is left on auto (the policy kind's, ``auto_rft``):
    # False keeps them out of a suite whose RL is teacher-free, since a round re-clones the cold
    # start's demonstrations beside the policy's own successes
    rft_on_auto: bool = True


SUITES: dict[str, Suite] = {}

def hotkeys() -> tuple[str, ...]:
    """Every key a registered suite's tasks press, in registration order (the arrows of the games):
    what a policy kind's hotkey head presses (``PolicyKind.task_config``'s ``keys``)."""
    return tuple(dict.fromkeys(k for s in SUITES.values() for k in s.keys))


def register(suite: Suite) -> Suite:
    SUITES[suite.name] = suite
    return suite


register(Suite(
    name="quick", tasks=("click-test", "click-test-2"), action_types=("click",), max_steps=4,
    about="the one-click pair: CI's short end-to-end run"))

register(Suite(
    name="default",
    tasks=(
        # one step: read the screen against the instruction
        "click-button", "focus-text-2",
        # two steps; click-button-sequence's screen does not change after ONE: needs memory
        "click-button-sequence", "click-collapsible", "click-option", "scroll-text-2",
        # typing, text copied from the instruction: 3 and 5 steps
        "enter-text", "enter-password", "login-user",
        # variable length: 1-7 and 1-11 steps
        "click-checkboxes", "use-spinner",
    ),
    action_types=("click", "type", "scroll", "press_enter", "finished"),
    max_steps=14,
    about="UI-TARS-2 in miniature: multi-step MiniWoB++ with typing, scrolling and variable lengths"))


register(Suite(
    name="starter",
    tasks=(
        # one click, the target named by the instruction: a label, a colour, a symbol, a kind of widget
        "click-test-transfer", "click-dialog-2", "click-link", "click-color", "unicode-test", "click-widget",
        # one click, the target read from the page: the text field, the tab's number, the shape drawn
        "focus-text", "click-tab", "identify-shape",
        # one or two clicks: open the tab or the folder that hides the target first
        "click-tab-2-easy", "navigate-tree",
    ),
    action_types=("click",),
    max_steps=5,
    about="short click tasks with no scripted solver: learnt from reward alone, from random weights"))


register(Suite(
    name="multistep",
    tasks=(
        # open what hides the target, then click it: a section, a menu (and its submenu), a tab, an
        # email (or its row's trash icon)
        "click-collapsible-2", "click-menu", "click-menu-2", "click-tab-2", "click-tab-2-hard",
        "email-inbox-delete",
        # set a value, then Submit; win a game against a partly random opponent
        "use-slider", "tic-tac-toe",
    ),
    # clicks only: from random weights every other head's steps (Enter, scroll, typing, finished)
    # are failures that dilute the rare successes (docs/tasks.md, "The multistep suite")
    action_types=("click",),
    max_steps=8,
    about="2-4 click tasks with no scripted solver that random clicks solve 1-10% of the time: "
          "learnt from reward alone, from random weights"))


register(Suite(
    name="games", tasks=tuple(sorted(GAMES)), action_types=("click", "hotkey"),
    max_steps=max(g.max_steps for g in GAMES.values()), family="games", keys=ARROWS,
    about="browser games scored every step: 2048 and snake by arrow keys, a minesweeper-like by clicks",
    child_args={
        # three games in one CNN: at the pixel kind's 1e-2 the clone matched 38% of the heuristic's
        # held-out snake steps, at 1e-3 75% (docs/tasks.md, "Cloning three games")
        ("bc", "pixel"): ("--lr", "1e-3", "--epochs", "20"),
        # batches of long episodes: 64-step minibatches made 64 Adam steps an update and the KL from
        # the policy the update started at reached 0.4 (docs/tasks.md, "Cloning three games")
        ("train", "pixel"): ("--max-batch-steps", "1024", "--epochs", "4", "--minibatch-size", "256",
                             "--target-kl", "0.02"),
    },
    # snake's clone from demonstrations with 15-20% mistakes played 0.25-0.39 against 0.04-0.13
    # from clean ones (docs/tasks.md, "Demonstrations with mistakes")
    demo_noise=0.2,
    # teacher-free by default (issue 56): the cold start clones the heuristics' (noisy)
    # demonstrations, then RL learns from the scores alone: no expert term, no DAgger rounds, no RFT
    # rounds re-cloning the demonstrations. The heuristics' labels during RL are named arms
    # (`flywheel demo --expert-coef 1 --dagger-every 2`): fitting them every 2 updates took snake's
    # agreement with its heuristic from 0.41-0.53 to 0.79 and its score to 0.22-0.29, 2048 to
    # 0.77-0.89, where PPO with the heuristic's labels in its loss but no rounds held 0.04-0.23
    # and 0.36-0.50 (docs/tasks.md, "DAgger rounds"): a teacher during RL either way, so those
    # figures measure imitation of the heuristic, not RL
    expert_coef=0.0, dagger_every=0, rft_on_auto=False))


def family(task: str, default: str) -> str:
    """The TaskSpec.suite a task name is built with: its suite's family, else ``default``."""
    return next((s.family for s in SUITES.values() if task in s.tasks), default)


def child_args(command: str, tasks: list[str] | tuple[str, ...], kind: str) -> tuple[str, ...]:
    """The options `flywheel <command>` (bc, train) starts from when it trains policy ``kind``
    on ``tasks``: those of each suite that holds every one of the tasks (a run mixing suites
    gets the commands' own defaults: the games' rates would slow the default suite's cloning).
    The user's --bc-args or --trainer-args come after them (the last option wins)."""
    return tuple(a for s in SUITES.values() if tasks and all(t in s.tasks for t in tasks)
                 for a in s.child_args.get((command, kind), ()))


def setting(tasks: list[str] | tuple[str, ...], name: str) -> float:
    """A suite's setting ``name`` (``demo_noise``, ``expert_coef``, ``dagger_every``) on ``tasks``:
    that of a suite holding every one of them (the largest, if several do), else 0 (off)."""
    return max((getattr(s, name) for s in SUITES.values() if tasks and all(t in s.tasks for t in tasks)), default=0)


def auto_rft(tasks: list[str] | tuple[str, ...]) -> bool:
    """Whether RFT rounds left on auto (the policy kind's) may run on ``tasks``: not where a suite
    holding every one of them keeps them out (``rft_on_auto``: the games); a run mixing suites
    keeps the kind's."""
    return all(s.rft_on_auto for s in SUITES.values() if tasks and all(t in s.tasks for t in tasks))


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise UserError(f"unknown task suite {name!r}; known: {', '.join(sorted(SUITES))}")
    return SUITES[name]


def expand(names: list[str]) -> list[str]:
    """Task names with every suite name replaced by its tasks, in order, without repeats."""
    out: list[str] = []
    for name in names:
        for task in SUITES[name].tasks if name in SUITES else (name,):
            if task not in out:
                out.append(task)
    return out


@dataclass(frozen=True)
class RunPlan:
    """What a run over some suite and task names needs: its tasks, the policy heads, a step budget."""

    tasks: tuple[str, ...]
    action_types: tuple[str, ...]
    max_steps: int


def plan(names: list[str], max_steps: int = 0, actions: tuple[str, ...] | list[str] = ()) -> RunPlan:
    """The tasks ``names`` stand for, the action heads they need (the union of the suites that
    hold them, in the order the suites list them; a task in no suite gets the default suite's
    heads; ``actions``, when given, instead: a task in no suite may need fewer, a suite's task keeps
    its suite's heads, a UserError otherwise) and the step budget
    (``max_steps`` when > 0, else the largest budget of those suites)."""
    tasks = expand(names)
    if not tasks:
        raise UserError("no tasks given (a suite: --tasks default, or task names)")
    holding = [s for s in SUITES.values() if s.name in names or any(t in s.tasks for t in tasks)]
    homeless = [t for t in tasks if not any(t in s.tasks for s in holding)]
    holders = holding + [SUITES["default"]] * bool(homeless)  # no holder: every task is homeless
    known = dict.fromkeys(a for s in SUITES.values() for a in s.action_types)  # in registration order
    unknown = [a for a in actions if a not in known]
    if unknown:
        raise UserError(f"--actions {','.join(unknown)}: the policy has heads for {', '.join(known)} only")
    # a suite's tasks need its heads (the games' arrows): --actions may add to them, not take them away
    missing = [a for a in known if actions and a not in actions and any(a in s.action_types for s in holding)]
    if missing:
        raise UserError(f"--actions leaves out {', '.join(missing)}, which the suites holding these tasks need; "
                        "--actions is for tasks in no suite")
    wanted = set(actions) if actions else {a for s in holders for a in s.action_types}
    heads = tuple(a for a in known if a in wanted)
    return RunPlan(tuple(tasks), heads, max_steps if max_steps > 0 else max(s.max_steps for s in holders))
