"""The pixel policy of a games run presses the games' keys: built the way a run builds it (the run
plan's heads, the kind's task config), it can represent every action the games' random policies
emit, arrows included; a suite without a hotkey head keeps the policy's defaults."""

import random

from infra.runtime.policy import build_policy, policy_kind
from producers.games import GAMES
from producers.games.registry import ARROWS
from producers.suites import pixel_config, plan
from schemas.actions import Hotkey


def test_a_games_run_builds_a_pixel_policy_that_presses_the_arrows():
    heads = plan(["games"]).action_types
    policy = build_policy("pixel", "p", policy_kind("pixel").task_config(heads, {}))
    assert list(policy.cfg["keys"]) == list(ARROWS)
    rng = random.Random(0)
    board = {"rows": ["#" * 10] * 10, "cell": 16, "view": {"x": 0, "y": 50, "width": 160, "height": 210}}
    for game in GAMES.values():
        for _ in range(20):
            action = game.random_action(rng, board)
            assert policy.can_represent(action, game.instruction), (game.name, action)
    assert all(policy.can_represent(Hotkey(key=k)) for k in ARROWS)


def test_suites_without_a_hotkey_head_keep_the_default_keys_and_overrides_win():
    assert "keys" not in pixel_config(plan(["default"]).action_types)
    assert pixel_config(("hotkey",), {"keys": ["tab"]})["keys"] == ["tab"]
