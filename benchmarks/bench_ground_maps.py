"""What the trainer saves by reading each step's text-grounding maps instead of matching again.

The acting policy (rollout) computes a screenshot's maps as it acts and stores them beside the
screenshot (trainer.policies.pixel.ground.stored_match_maps); the trainer rebuilds each step's
input from the stored screenshot. This times the trainer's rebuild of N distinct screens, with
the maps read from the blob store against computed again (the raw baseline), in one run.

    python -m benchmarks.bench_ground_maps --screens 200
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from schemas.blobs import BlobStore
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


if __name__ == "__main__":
    main()
