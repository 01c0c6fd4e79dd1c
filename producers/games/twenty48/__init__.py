"""2048 (arrow keys): the planning game of the suite. Its heuristic player looks one move ahead."""

from __future__ import annotations

from producers.games.registry import Board, Game, any_arrow, arrow_key, register_game
from schemas.actions import Hotkey

Grid = tuple[tuple[int, ...], ...]

# The corner strategy: big tiles are worth most in the bottom-left corner, along a snake path.
WEIGHTS = ((3, 4, 5, 6), (2, 5, 6, 7), (8, 9, 10, 11), (15, 14, 13, 12))
PREFERENCE = ("down", "left", "right", "up")  # tie order: up pulls big tiles out of the corner


def slide_line(line: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Slide one line towards its start, merging equal neighbours once: (new line, points gained)."""
    tiles = [v for v in line if v]
    out, gained, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            gained += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return tuple(out + [0] * (len(line) - len(out))), gained


def move(grid: Grid, key: str) -> tuple[Grid, int]:
    """The board after sliding towards ``key`` (before the new tile) and the points gained:
    the same rule as game.js."""
    n = len(grid)
    cols = key in ("up", "down")
    lines = [tuple(grid[j][i] for j in range(n)) if cols else grid[i] for i in range(n)]
    rev = key in ("right", "down")
    slid = [slide_line(line[::-1] if rev else line) for line in lines]
    gained = sum(g for _, g in slid)
    new = [line[::-1] if rev else line for line, _ in slid]
    if cols:
        new = [tuple(new[j][i] for j in range(n)) for i in range(n)]
    return tuple(tuple(row) for row in new), gained


def evaluate(grid: Grid, gained: int) -> float:
    empty = sum(v == 0 for row in grid for v in row)
    shape = sum(v * w for row, wrow in zip(grid, WEIGHTS) for v, w in zip(row, wrow))
    return gained + 0.1 * shape + 8 * empty


def player(board: Board) -> Hotkey:
    """The move with the best one-move evaluation among those that change the board."""
    grid: Grid = tuple(tuple(int(v) for v in row) for row in board["grid"])
    best, best_value = PREFERENCE[0], None
    for key in PREFERENCE:
        after, gained = move(grid, key)
        if after == grid:
            continue
        value = evaluate(after, gained)
        if best_value is None or value > best_value:
            best, best_value = key, value
    return Hotkey(key=best)


def slides(board: Board) -> list[Hotkey]:
    """A noisy demonstration's mistakes: any arrow that moves a tile (one that moves none wastes
    the turn and shows nothing to recover from), else every arrow."""
    grid: Grid = tuple(tuple(int(v) for v in row) for row in board["grid"])
    return [Hotkey(key=k) for k in PREFERENCE if move(grid, k)[0] != grid] or any_arrow(board)


GAME = register_game(Game(
    name="games.2048", folder="twenty48",
    instruction="Slide the tiles with the arrow keys. Equal tiles merge and add to your score.",
    controls="arrow keys", max_steps=200, player=player, random_action=arrow_key, mistakes=slides,
    random_mean=1027.07, reference_mean=1719.47,  # benchmarks/games_reference.py --episodes 30 (docs/tasks.md)
))

