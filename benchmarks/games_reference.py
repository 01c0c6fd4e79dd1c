"""The games suite's normalisation: mean final score of the random policy and of the scripted
heuristic per game, played in the real browser sandbox (headless Chromium, fake clock).

    python -m benchmarks.games_reference [--episodes 20] [--games games.2048,games.mines,games.snake]
                                         [--seed 100000] [--sandboxes 2]

Episode k of a game runs from seed ``seed + k`` for both policies (the random policy's own draws
from a generator seeded by that seed too), so a rerun prints the same numbers. The random policy
is uniform over the game's actions (``Game.random_action``: the four arrows, or a click on any
cell); the heuristic is ``Game.player``, the demonstrator of the cold start. Each episode ends at
game over or at the game's step limit. Printed per game and policy: mean +- standard error of the
final score, and mean episode length; the means are the ``random_mean`` and ``reference_mean``
the registry states (producers/games/*/__init__.py, docs/tasks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time

from app.measures import mean_se
from producers.games import GAMES, get_game
from producers.games.registry import Game
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

BOARD_JS = "flywheelGame.board()"


async def play(sandbox: BrowserSandbox, game: Game, seed: int, policy: str) -> tuple[float, int]:
    """One episode: (final score, steps)."""
    rng = random.Random(seed)
    await sandbox.reset(TaskSpec(task_id=f"ref.{seed}", suite="games", name=game.name, seed=seed,
                                 max_steps=game.max_steps))
    for steps in range(1, game.max_steps + 1):
        board = await sandbox.query(BOARD_JS)
        action = game.player(board) if policy == "heuristic" else game.random_action(rng, board)
        result = await sandbox.step(action)
        if result.done:
            break
    return float(result.score), steps


async def measure(game: Game, policy: str, seeds: list[int], sandboxes: list[BrowserSandbox]) -> list[tuple[float, int]]:
    queue = list(seeds)
    out: dict[int, tuple[float, int]] = {}

    async def worker(sandbox: BrowserSandbox) -> None:
        while queue:
            seed = queue.pop(0)
            out[seed] = await play(sandbox, game, seed, policy)

    await asyncio.gather(*(worker(s) for s in sandboxes))
    return [out[s] for s in seeds]


async def main(names: list[str], episodes: int, seed: int, n_sandboxes: int) -> None:
    host = BrowserHost()
    blobs = BlobStore(tempfile.mkdtemp(prefix="games-ref-"))
    sandboxes = [BrowserSandbox(blobs, host=host) for _ in range(n_sandboxes)]
    try:
        for s in sandboxes:
            await s.start()
        seeds = [seed + k for k in range(episodes)]
        print(f"{'game':<12} {'policy':<10} {'episodes':>8} {'final score':>20} {'steps':>7} {'s/episode':>9}")
        for name in names:
            game = get_game(name)
            for policy in ("random", "heuristic"):
                t0 = time.perf_counter()
                results = await measure(game, policy, seeds, sandboxes)
                mean, se = mean_se([score for score, _ in results])  # measure plays at least one episode
                steps = sum(n for _, n in results) / len(results)
                wall = (time.perf_counter() - t0) / len(results)
                print(f"{name:<12} {policy:<10} {len(results):>8} {mean:>11.2f} +- {se or 0.0:>6.2f} {steps:>7.1f} {wall:>9.1f}",
                      flush=True)
    finally:
        for s in sandboxes:
            await s.close()
        await host.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per game and policy")
    parser.add_argument("--games", default=",".join(sorted(GAMES)), help="comma-separated game task names")
    parser.add_argument("--seed", type=int, default=100_000, help="the first episode's seed")
    parser.add_argument("--sandboxes", type=int, default=2, help="sandboxes playing at once (one Chromium)")
    args = parser.parse_args()
    if args.episodes < 1 or args.sandboxes < 1:
        parser.error("--episodes and --sandboxes must be >= 1")
    asyncio.run(main([n for n in args.games.split(",") if n], args.episodes, args.seed, args.sandboxes))
