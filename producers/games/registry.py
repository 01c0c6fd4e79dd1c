"""The games suite's registry, keyed by task name: what the sandbox, the demonstrators, the
benchmark and the normalisation need to know of each game.

A game is one package under ``producers.games`` holding its ``game.js`` (on the shared harness
``common.js``) and a ``Game`` registered here; every game is shown by the one shared page,
``index.html?game=<folder>``. Its score is read from the page
after every step (``flywheelGame.state()``); a step's reward is the change of the score and an
episode ends at game over or after ``max_steps`` steps. Scores are normalised per game:
0 = the mean final score of the uniform random policy over the game's actions (``random_action``),
1 = the mean of its scripted heuristic (``player``), both measured in the real browser by
benchmarks/games_reference.py (docs/tasks.md has the command and the numbers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from schemas.actions import Click, Hotkey

HERE = Path(__file__).parent
ARROWS = ("up", "down", "left", "right")  # the hotkeys the arrow-key games read

Board = dict[str, Any]  # flywheelGame.board(): what the screen shows, as data


@dataclass(frozen=True)
class Game:
    name: str  # the task name, "games.<short name>"
    folder: str  # its package folder under producers/games, holding game.js
    instruction: str  # the line the page shows above the board (the page is its source)
    controls: str  # "arrow keys" | "clicks on the grid"
    max_steps: int  # the episode's step limit (50..500); game over may come first
    player: Callable[[Board], Any]  # the scripted heuristic: the board -> one unified action
    random_action: Callable[[random.Random, Board], Any]  # one draw of the random policy
    mistakes: Callable[[Board], list[Any]]  # a noisy demonstration's moves (DART): plausible, none a no-op
    random_mean: float  # mean final score of random_action over episodes (normalised 0)
    reference_mean: float  # mean final score of player (normalised 1)

    def __post_init__(self) -> None:
        if not 50 <= self.max_steps <= 500:
            raise ValueError(f"{self.name}: max_steps {self.max_steps} is outside 50..500")
        if not self.reference_mean > self.random_mean:
            raise ValueError(f"{self.name}: the reference mean must exceed the random mean")

    @property
    def page(self) -> str:
        """The page's path under the games' server: the shared page, told which game to load."""
        return f"index.html?game={self.folder}"


GAMES: dict[str, Game] = {}


def register_game(game: Game) -> Game:
    if not (HERE / game.folder / "game.js").is_file():
        raise ValueError(f"{game.name}: no game.js in {HERE / game.folder}")
    GAMES[game.name] = game
    return game


def get_game(name: str) -> Game:
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; known: {', '.join(sorted(GAMES))}")
    return GAMES[name]


def normalised_score(game: Game, score: float) -> float:
    """``score`` on the game's scale: 0 = the random policy's mean, 1 = the reference's."""
    return (score - game.random_mean) / (game.reference_mean - game.random_mean)


def arrow_key(rng: random.Random, board: Board) -> Hotkey:
    """The random policy of the arrow-key games: one of the four arrows, uniformly."""
    return Hotkey(key=rng.choice(ARROWS))


def any_arrow(board: Board) -> list[Hotkey]:
    """Every arrow: the mistakes left when no move is better than another."""
    return [Hotkey(key=k) for k in ARROWS]


def click_cell(board: Board, row: int, col: int) -> Click:
    """A click at the centre of a grid cell, normalised to the task area (``board["view"]``)."""
    view, cell = board["view"], board["cell"]
    return Click(x=(view["x"] + (col + 0.5) * cell) / view["width"],
                 y=(view["y"] + (row + 0.5) * cell) / view["height"])
