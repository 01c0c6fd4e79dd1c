"""A minesweeper-like (clicks on a grid): the reasoning game of the suite, read from numbers.
Its heuristic player deduces safe cells from the numbers and, where none is certain, guesses
the hidden cell least likely to hold a mine."""

from __future__ import annotations

import random

from producers.games.registry import Board, Game, click_cell, register_game
from schemas.actions import Click

Cell = tuple[int, int]


def neighbours(rows: list[str], r: int, c: int) -> list[Cell]:
    return [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < len(rows) and 0 <= c + dc < len(rows[0])]


def deduce(rows: list[str]) -> tuple[set[Cell], set[Cell]]:
    """(certain mines, certain safe cells) by the two single-number rules, to a fixed point:
    a number whose known mines are all there makes its other hidden neighbours safe; a number
    that needs every hidden neighbour makes them all mines."""
    mines: set[Cell] = set()
    safe: set[Cell] = set()
    changed = True
    while changed:
        changed = False
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                if ch == "#":
                    continue
                hidden = [p for p in neighbours(rows, r, c) if rows[p[0]][p[1]] == "#"]
                known = [p for p in hidden if p in mines]
                unknown = [p for p in hidden if p not in mines and p not in safe]
                if not unknown:
                    continue
                if int(ch) == len(known):
                    safe.update(unknown)
                    changed = True
                elif int(ch) - len(known) == len(unknown):
                    mines.update(unknown)
                    changed = True
    return mines, safe


def mine_odds(rows: list[str], total_mines: int, mines: set[Cell]) -> dict[Cell, float]:
    """A rough chance that each undecided hidden cell is a mine: the largest share any number
    next to it leaves for its undecided neighbours, else the share left for the whole board."""
    hidden = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "#"]
    undecided = [p for p in hidden if p not in mines]
    base = (total_mines - len(mines)) / max(len(undecided), 1)
    odds = {p: None for p in undecided}
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch == "#":
                continue
            around = [p for p in neighbours(rows, r, c) if rows[p[0]][p[1]] == "#"]
            open_ = [p for p in around if p not in mines]
            if open_:
                share = (int(ch) - (len(around) - len(open_))) / len(open_)
                for p in open_:
                    odds[p] = share if odds[p] is None else max(odds[p], share)
    return {p: base if v is None else v for p, v in odds.items()}


def player(board: Board) -> Click:
    """A certain safe cell (the first in reading order), else the least likely mine."""
    rows = list(board["rows"])
    mines, safe = deduce(rows)
    if safe:
        r, c = min(safe)
    else:
        odds = mine_odds(rows, int(board["mines"]), mines)
        r, c = min(odds, key=lambda p: (odds[p], p))
    return click_cell(board, r, c)


def random_cell(rng: random.Random, board: Board) -> Click:
    """The random policy: a click on any cell, uniformly (an open one does nothing)."""
    return click_cell(board, rng.randrange(len(board["rows"])), rng.randrange(len(board["rows"][0])))


def guesses(board: Board) -> list[Click]:
    """A noisy demonstration's mistakes: a click on any hidden cell not known to hold a mine (a
    guess where the heuristic deduced or weighed the odds; it may hit a mine)."""
    rows = list(board["rows"])
    mines, _ = deduce(rows)
    return [click_cell(board, r, c) for r, row in enumerate(rows) for c, ch in enumerate(row)
            if ch == "#" and (r, c) not in mines]


GAME = register_game(Game(
    name="games.mines", folder="mines",
    instruction="Click the hidden cells that hold no mine. The numbers count the mines around a cell.",
    controls="clicks on the grid", max_steps=150, player=player, random_action=random_cell, mistakes=guesses,
    random_mean=3.57, reference_mean=46.70,  # benchmarks/games_reference.py --episodes 30 (docs/tasks.md)
))
