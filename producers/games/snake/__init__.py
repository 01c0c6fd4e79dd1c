"""Snake (arrow keys, on the page's clock): the reactive game of the suite, where the world
moves whether or not the player acts. Its heuristic player takes the shortest path to the apple
when it can still reach its tail afterwards, else the move that leaves it the most room."""

from __future__ import annotations

from collections import deque

from producers.games.registry import Board, Game, any_arrow, arrow_key, register_game
from schemas.actions import Hotkey

Point = tuple[int, int]
MOVES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def step(snake: list[Point], to: Point, apple: Point | None) -> list[Point]:
    """The snake after its head moves to ``to`` (it grows when it eats)."""
    return [to] + (snake if to == apple else snake[:-1])


def reachable(size: int, start: Point, blocked: set[Point]) -> dict[Point, int]:
    """Breadth-first distances from ``start`` over free cells."""
    dist = {start: 0}
    todo = deque([start])
    while todo:
        x, y = todo.popleft()
        for dx, dy in MOVES.values():
            p = (x + dx, y + dy)
            if 0 <= p[0] < size and 0 <= p[1] < size and p not in blocked and p not in dist:
                dist[p] = dist[(x, y)] + 1
                todo.append(p)
    return dist


def moves(board: Board) -> list[tuple[str, Point, list[Point]]]:
    """(arrow, the head's next cell, the snake after it) of every move that does not lose at once;
    an arrow back onto the snake is left out (the game ignores it: the snake goes on straight)."""
    size = int(board["size"])
    snake = [tuple(p) for p in board["snake"]]
    apple = tuple(board["apple"]) if board["apple"] is not None else None
    back = (-board["dir"][0], -board["dir"][1])
    out = []
    for key, (dx, dy) in MOVES.items():
        to = (snake[0][0] + dx, snake[0][1] + dy)
        after = step(snake, to, apple)
        if (dx, dy) != back and 0 <= to[0] < size and 0 <= to[1] < size and to not in after[1:]:
            out.append((key, to, after))
    return out


def turns(board: Board) -> list[Hotkey]:
    """A noisy demonstration's mistakes: any move that does not lose at once (else any arrow)."""
    return [Hotkey(key=key) for key, _, _ in moves(board)] or any_arrow(board)


def player(board: Board) -> Hotkey:
    size = int(board["size"])
    apple = tuple(board["apple"]) if board["apple"] is not None else None
    options = []
    for key, to, after in moves(board):
        room = reachable(size, to, set(after[1:-1]))  # the tail end moves on
        safe = after[-1] in room or len(after) <= 2
        to_apple = reachable(size, to, set(after[1:])).get(apple, size * size) if apple else size * size
        options.append((not safe, to_apple, -len(room), key))
    if not options:
        return Hotkey(key="up")  # every move loses
    return Hotkey(key=min(options)[3])


GAME = register_game(Game(
    name="games.snake", folder="snake",
    instruction="Steer the snake with the arrow keys to eat the red apples. Do not hit a wall or the snake.",
    controls="arrow keys", max_steps=300, player=player, random_action=arrow_key, mistakes=turns,
    random_mean=0.10, reference_mean=22.17,  # benchmarks/games_reference.py --episodes 30 (docs/tasks.md)
))
