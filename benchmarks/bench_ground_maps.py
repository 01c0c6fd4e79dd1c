"""What text grounding costs: the trainer's rebuild of a step, and the policy's act with and without it.

1. The acting policy (rollout) computes a screenshot's maps as it acts and stores them beside the
   screenshot (trainer.policies.pixel.ground.stored_match_maps); the trainer rebuilds each step's
   input from the stored screenshot. This times the trainer's rebuild of N distinct screens, with
   the maps read from the blob store against computed again (the raw baseline), in one run.
2. The pixel policy's act on one screen, as the main job builds it for the default suite and for
   the games (both grounded), beside the games' policy grounded on its instruction's first 4 words
   (`--policy-config '{"ground_words": 4}'`) and without grounding (`'{"ground": false}'`), each
   game's own instruction on the same screens; CPU time, the configurations in turns so a slow
   spell of the machine falls on each alike.

    python -m benchmarks.bench_ground_maps --screens 200
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from infra.runtime.policy import PolicyInput
from producers.games import GAMES
from producers.suites import get_suite, hotkeys
from schemas.blobs import BlobStore
from trainer.policies.pixel.config import pixel_config
from trainer.policies.pixel.ground import font_file
from trainer.policies.pixel.model import PixelPolicy


def screens(n: int, seed: int = 0) -> list[tuple[np.ndarray, str]]:
    """n screens of a MiniWoB++-like size with a random word drawn somewhere, and its instruction."""
    rng = random.Random(seed)
    font = ImageFont.truetype(font_file("Arial"), 13)
    out = []
    for _ in range(n):
        word = "".join(rng.choice("abcdefghijkLMNOPQ") for _ in range(7))
        img = Image.new("RGB", (160, 210), "white")
        ImageDraw.Draw(img).text((rng.randrange(5, 100), rng.randrange(55, 190)), word, font=font, fill="black")
        out.append((np.asarray(img), f'Click on the "{word}" button.'))
    return out


def rebuild(policy: PixelPolicy, items, store) -> float:
    t = time.perf_counter()
    for image, instruction in items:
        policy.preprocess(image, [], instruction, store)
    return (time.perf_counter() - t) / len(items) * 1000


def act_costs(items, rounds: int = 3) -> dict[str, float]:
    """CPU ms per act (one screen, one torch thread as the rollout's policy has) of each
    configuration, the main job's config for its suite: CPU time, so other work on the machine
    does not enter it."""
    torch.set_num_threads(1)

    def config(suite: str, **over) -> dict:
        return pixel_config(get_suite(suite).action_types, over, hotkeys())

    games = [g.instruction for g in GAMES.values()]
    arms = {"default suite (as built: grounded)": (PixelPolicy("bench", config("default")), None),
            "games (as built: grounded)": (PixelPolicy("bench", config("games")), games),
            "games grounded on their first 4 words": (PixelPolicy("bench", config("games", ground_words=4)), games),
            "games without grounding": (PixelPolicy("bench", config("games", ground=False)), games)}
    total = dict.fromkeys(arms, 0.0)
    for r in range(rounds):
        for name, (policy, instructions) in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):
            t = time.process_time()
            for k, (image, instruction) in enumerate(items):
                policy.act([PolicyInput(image, instructions[k % len(instructions)] if instructions else instruction,
                                        image.shape[1], image.shape[0])])
            total[name] += time.process_time() - t
    return {name: t / (rounds * len(items)) * 1000 for name, t in total.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--screens", type=int, default=200)
    args = ap.parse_args()
    items = screens(args.screens)
    with tempfile.TemporaryDirectory() as root:
        store = BlobStore(root)
        acting = PixelPolicy("bench", {"ground": True})
        acting.use_blob_store(store)
        act_ms = rebuild(acting, items, None)  # what acting costs with the store (computes and writes)
        trainer = PixelPolicy("bench", {"ground": True})
        computed_ms = rebuild(trainer, items, None)
        read_ms = rebuild(trainer, items, store)
    print(f"{args.screens} screens: acting (match + store) {act_ms:.2f} ms/step; trainer rebuild with the maps "
          f"computed again {computed_ms:.2f} ms/step, read from the store {read_ms:.2f} ms/step "
          f"({computed_ms / read_ms:.1f}x less trainer time per step)")
    acts = act_costs(items)
    grounded = acts["games (as built: grounded)"]
    for name, ms in acts.items():
        print(f"act, one screen: {name:<38} {ms:6.2f} CPU ms ({ms / grounded:.2f} of the games' grounded act)")


if __name__ == "__main__":
    main()
