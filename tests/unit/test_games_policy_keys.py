"""The pixel policy of a games run presses the games' keys: built the way a run builds it (the run
plan's heads, the kind's task config), it can represent every action the games' random policies
emit, arrows included; a suite without a hotkey head keeps the policy's defaults."""

import random
import types

import numpy as np

from infra.runtime.policy import PastStep, SeenScreen, build_policy, policy_kind
from producers.games import GAMES
from producers.games.registry import ARROWS
from producers.suites import hotkeys, plan
from schemas.actions import Click, Hotkey, Type
from schemas.events import BlobRef
from trainer.policies.pixel.config import pixel_config
from trainer.policies.pixel.inputs import history_summary, summary_size


def test_a_games_run_builds_a_pixel_policy_that_presses_the_arrows():
    heads = plan(["games"]).action_types
    policy = build_policy("pixel", "p", policy_kind("pixel").task_config(heads, {}, keys=hotkeys()))
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


def _history(*actions):
    return [types.SimpleNamespace(action=a) for a in actions]


def test_with_last_key_the_history_strip_names_the_arrow_pressed_last():
    pixel_types, keys = ["click", "hotkey"], list(ARROWS)
    plain = history_summary(_history(Hotkey(key=keys[0])), pixel_types, "", 4, 2)
    told = [history_summary(_history(Hotkey(key=keys[0]), Hotkey(key=k)), pixel_types, "", 4, 2, keys) for k in keys]
    assert plain.size == summary_size(2, 4) and told[0].size == summary_size(2, 4, len(keys))
    tails = [list(t[-len(keys):]) for t in told]
    assert tails == [[int(i == j) for i in range(len(keys))] for j in range(len(keys))]
    typed = history_summary(_history(Type(content="alpha"), Hotkey(key=keys[1])), ["type", "hotkey"],
                            "Type alpha", 4, 2, keys)  # a type head's token counts sit before the keys
    assert list(typed[1 + 2 * 2:1 + 2 * 2 + 4]) == [0, 1, 0, 0] and list(typed[-len(keys):]) == tails[1]
    after_click = history_summary(_history(Hotkey(key=keys[0]), Click(x=0.5, y=0.5)), pixel_types, "", 4, 2, keys)
    assert not after_click[-len(keys):].any()  # the last action was no key


def test_last_key_is_on_for_a_hotkey_policy_and_widens_only_it():
    heads = plan(["games"]).action_types
    config = policy_kind("pixel").task_config(heads, {}, keys=hotkeys())
    assert config["last_key"] is True and "last_key" not in pixel_config(plan(["default"]).action_types)
    told = build_policy("pixel", "p", config)
    plain = build_policy("pixel", "p", {**config, "last_key": False})
    assert told.n_summary == plain.n_summary + len(ARROWS)
    clicks = build_policy("pixel", "p", pixel_config(("click",), {"last_key": True}))
    assert clicks.n_summary == build_policy("pixel", "p", pixel_config(("click",))).n_summary
    image = np.zeros((210, 160, 3), np.uint8)
    screen = SeenScreen(BlobRef(sha256="0" * 64, uri="file:///b/0"), 160, 210, "Play.")
    steps = [PastStep(observation=screen, thought="", raw_output="", action=Hotkey(key=ARROWS[1]))]
    strip = told.preprocess(image, steps, "Play.")[-1].ravel()
    assert list(strip[told.n_summary - len(ARROWS):told.n_summary]) == [int(i == 1) for i in range(len(ARROWS))]


def test_bc_and_the_main_job_give_a_games_pixel_policy_the_arrows():
    """The kind knows no suite: `flywheel bc`'s config and the main job's (app.phases.kind_config)
    hand it the keys the suites press."""
    from types import SimpleNamespace

    from app.phases import kind_config
    from trainer.sft.bc_config import BCConfig

    cloned = BCConfig(suite="games").policy_overrides()
    run = kind_config(SimpleNamespace(policy_kind="pixel", policy_overrides=lambda: {}), plan(["games"]).action_types)
    for config in (cloned, run):
        assert config["keys"] == list(ARROWS) and config["last_key"] is True
