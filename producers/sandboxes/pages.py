"""The task pages the browser sandbox runs, one kind per task family (``TaskSpec.suite``),
registered by name: where a task's page is, how an episode starts on it, and how the page's
state after a step becomes the step's reward, end and score.

- ``miniwob``: MiniWoB++ from the installed package, seeded the way its own environment does
  (``Math.seedrandom``, ``core.setDataMode``, ``core.startEpisodeReal``); reward and done are the
  task's own (``WOB_DONE_GLOBAL``, ``WOB_REWARD_GLOBAL``, ``WOB_RAW_REWARD_GLOBAL``), read at the end.
- ``games``: the games written for Flywheel (producers.games), started by
  ``flywheelGame.start(seed)``; the score is read after every step and a step's reward is its
  change; the episode ends at game over or at the game's step limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from producers.games import GAMES, get_game, normalised_score
from producers.games.registry import HERE as GAMES_DIR
from producers.sandboxes.miniwob_server import serve, task_names, task_url
from schemas.events import TaskSpec

# Leaves no focus behind: the last episode's focused field would show a focus ring on the new
# screen, and a replay from the seed would not look the same.
_BLUR = "if (document.activeElement) document.activeElement.blur();"


@dataclass(frozen=True)
class Reading:
    """What one read of the page's state says about the step that led to it."""

    reward: float
    done: bool
    success: bool
    score: float | None = None  # a game's running score
    normalised_score: float | None = None


class TaskPages(Protocol):
    ready_js: str  # evaluates to true once the episode's problem is built
    state_js: str  # evaluates to what ``read`` takes

    def names(self) -> tuple[str, ...]: ...
    def url(self, name: str) -> str: ...
    def path(self, name: str) -> str: ...  # the page's path, as Observation.url shows it
    def start_js(self, task: TaskSpec) -> str: ...  # starts an episode; evaluates to [ready, instruction]
    def read(self, task: TaskSpec, state: Any, steps: int, last_score: float) -> Reading: ...


class MiniwobPages:
    ready_js = "WOB_TASK_READY"
    state_js = "[WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL, String(WOB_REWARD_REASON)]"

    def names(self) -> tuple[str, ...]:
        return task_names()

    def url(self, name: str) -> str:
        return task_url(name)

    def path(self, name: str) -> str:
        return f"miniwob/{name}.html"

    def start_js(self, task: TaskSpec) -> str:
        mode = str(task.params.get("data_mode", "train"))
        return ("(() => { " + _BLUR + " if (window.jQuery) jQuery(':animated').finish();"
                f" Math.seedrandom({json.dumps(task.seed)}); core.setDataMode({json.dumps(mode)});"
                " core.startEpisodeReal(); const u = core.getUtterance();"
                " return [WOB_TASK_READY, typeof u === 'string' ? u : u.utterance]; })()")

    def read(self, task: TaskSpec, state: Any, steps: int, last_score: float) -> Reading:
        done, reward, raw = bool(state[0]), state[1], state[2]
        return Reading(reward=float(reward) if done else 0.0, done=done, success=done and float(raw) > 0)


class GamePages:
    ready_js = "true"
    state_js = "flywheelGame.state()"

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(GAMES))

    def url(self, name: str) -> str:
        return serve(GAMES_DIR) + get_game(name).page

    def path(self, name: str) -> str:
        return f"games/{get_game(name).page}"

    def start_js(self, task: TaskSpec) -> str:
        # the seed as text: the page hashes its decimal digits, so any integer is taken exactly
        return f"(() => {{ {_BLUR} return [true, flywheelGame.start({json.dumps(str(task.seed))})]; }})()"

    def read(self, task: TaskSpec, state: Any, steps: int, last_score: float) -> Reading:
        return game_reading(task.name, float(state["score"]), bool(state["over"]), steps, last_score)


def game_reading(name: str, score: float, over: bool, steps: int, last_score: float) -> Reading:
    """A game's step: the reward is the score's change; done at game over or at the step limit;
    a success is a score at or above the reference's mean (normalised 1)."""
    game = get_game(name)
    normalised = normalised_score(game, score)
    return Reading(reward=score - last_score, done=over or steps >= game.max_steps, success=normalised >= 1.0,
                   score=score, normalised_score=normalised)


PAGES: dict[str, TaskPages] = {"miniwob": MiniwobPages(), "games": GamePages()}
