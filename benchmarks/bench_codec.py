"""Encode+decode throughput of a typical Step event through schemas.codec vs plain orjson.

Run: python -m benchmarks.bench_codec [--n 20000]
Prints events/s for each path measured side by side in one run, and the ratios. The plain
orjson path is the floor: dumps+loads of the equivalent dict with no validation at all.
"""

from __future__ import annotations

import argparse
import time

import orjson
from pydantic import TypeAdapter

from schemas.actions import Click
from schemas.codec import decode, encode
from schemas.events import BlobRef, EpisodeEvent, Observation, Step


def typical_step() -> Step:
    shot = BlobRef(sha256="ab" * 32, uri="file:///data/blobs/ab/" + "ab" * 32, media_type="image/png",
                   width=1280, height=720, size_bytes=183_224)
    obs = Observation(screenshot=shot, screen_width=1280, screen_height=720,
                      instruction="Click on the 'Submit' button, then type your name.",
                      url="file:///miniwob/click-button.html")
    thought = "The Submit button is at the bottom left of the form; I will click it to proceed."
    return Step(episode_id="ep-6f1c2a4e9b7d4c1f", ts=1_760_000_000.25, step_index=3, started_at=1_760_000_000.0,
                observation=obs, thought=thought, action=Click(x=0.3125, y=0.6944),
                raw_output=f"Thought: {thought}\nAction: click(point='<point>402 506</point>')",
                policy="pixel-ppo", policy_version=12, logprob=-1.734, value=0.412, reward=0.0,
                latency_policy_ms=41.7, latency_env_ms=120.3, next_screenshot_sha256="cd" * 32)


def rate(fn, n: int) -> float:
    fn()  # warm caches (adapters, schema build)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    n = parser.parse_args().n
    step = typical_step()
    data = encode(step)
    as_dict = orjson.loads(data)
    step_adapter = TypeAdapter(Step)
    union_adapter = TypeAdapter(EpisodeEvent)
    assert decode(data, EpisodeEvent) == step

    paths = {
        "plain orjson dumps+loads (dict, no validation)": lambda: orjson.loads(orjson.dumps(as_dict)),
        "codec encode+decode (EpisodeEvent union)": lambda: decode(encode(step), EpisodeEvent),
        "codec decode only": lambda: decode(data, EpisodeEvent),
        "codec encode only": lambda: encode(step),
        "pydantic validate_json (union adapter)": lambda: union_adapter.validate_json(data),
        "orjson.loads + validate_python (union)": lambda: union_adapter.validate_python(orjson.loads(data)),
        "orjson.loads + Step.model_validate": lambda: step_adapter.validate_python(orjson.loads(data)),
        "Step.model_validate_json": lambda: Step.model_validate_json(data),
        "orjson.dumps(model_dump())": lambda: orjson.dumps(step.model_dump()),
        "pydantic serializer to_json": lambda: step.__pydantic_serializer__.to_json(step),
    }
    print(f"typical Step event: {len(data)} bytes, n={n}, best of 3")
    results = {name: rate(fn, n) for name, fn in paths.items()}
    base = results["plain orjson dumps+loads (dict, no validation)"]
    for name, r in results.items():
        print(f"  {name:50s} {r:12,.0f} events/s   {base / r:6.2f}x slower than plain orjson")
    codec = results["codec encode+decode (EpisodeEvent union)"]
    print(f"ratio: codec encode+decode = {codec:,.0f}/s, plain orjson = {base:,.0f}/s, "
          f"validated path is {base / codec:.2f}x slower")


if __name__ == "__main__":
    main()
