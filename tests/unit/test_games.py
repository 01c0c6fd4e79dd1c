"""The games suite's pure parts: the registry, the normalisation, how a page's score becomes a
step's reward and an episode's outcome, the heuristic players' rules, and task building."""

from __future__ import annotations

import random

import pytest

from producers import scripted
from producers.episode import outcome
from producers.games import GAMES, get_game, normalised_score
from producers.games.mines import deduce
from producers.games.mines import player as mines_player
from producers.games.registry import HERE, Game, any_arrow, arrow_key, click_cell
from producers.games.snake import player as snake_player
from producers.games.twenty48 import move, slide_line
from producers.games.twenty48 import player as player_2048
from producers.sandboxes.base import StepResult
from producers.sandboxes.pages import PAGES, game_reading
from producers.suites import get_suite, plan
from producers.tasks import SUITE_SANDBOX, build_tasks, episode_timeout_s, known_tasks
from schemas.actions import Click, Hotkey
from schemas.codec import decode, encode
from schemas.events import EpisodeEnded, TaskSpec

VIEW = {"x": 0.0, "y": 50.0, "width": 160.0, "height": 210.0}


def code(path) -> str:
    """A game script without its comment lines."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))


def test_three_games_of_two_kinds_with_pages_and_stated_references():
    assert len(GAMES) >= 3
    assert {g.controls for g in GAMES.values()} == {"arrow keys", "clicks on the grid"}
    assert (HERE / "index.html").is_file()  # the one page every game is shown by
    for game in GAMES.values():
        assert game.name.startswith("games.") and 50 <= game.max_steps <= 500
        assert (HERE / game.folder / "game.js").is_file() and game.page == f"index.html?game={game.folder}"
        assert game.reference_mean > game.random_mean
        js = code(HERE / game.folder / "game.js")
        assert game.instruction in js  # the page shows the line the registry states
        assert "Math.random" not in js and "Date" not in js  # the seed and the page clock only


def test_the_harness_has_no_other_source_of_randomness_or_time():
    js = code(HERE / "common.js")
    assert "Math.random" not in js and "Date" not in js and "performance.now" not in js


def test_a_game_outside_the_step_range_or_below_random_is_refused():
    base = dict(name="games.x", folder="snake", instruction="", controls="arrow keys", player=lambda b: None,
                random_action=arrow_key, mistakes=any_arrow, random_mean=1.0, reference_mean=2.0)
    Game(**{**base, "max_steps": 50})
    with pytest.raises(ValueError, match="50..500"):
        Game(**{**base, "max_steps": 501})
    with pytest.raises(ValueError, match="must exceed"):
        Game(**{**base, "max_steps": 100, "reference_mean": 1.0})
    with pytest.raises(ValueError, match="unknown game"):
        get_game("games.none")


def test_normalised_score_is_zero_at_random_and_one_at_the_reference():
    for game in GAMES.values():
        assert normalised_score(game, game.random_mean) == pytest.approx(0.0)
        assert normalised_score(game, game.reference_mean) == pytest.approx(1.0)
        mid = (game.random_mean + game.reference_mean) / 2
        assert normalised_score(game, mid) == pytest.approx(0.5)


def test_a_step_reward_is_the_score_change_and_the_episode_ends_at_game_over_or_the_limit():
    game = get_game("games.snake")
    r = game_reading(game.name, score=5.0, over=False, steps=10, last_score=3.0)
    assert (r.reward, r.done, r.score) == (2.0, False, 5.0)
    assert r.normalised_score == pytest.approx(normalised_score(game, 5.0))
    assert game_reading(game.name, 5.0, True, 10, 5.0).done
    assert game_reading(game.name, 5.0, False, game.max_steps, 5.0).done
    assert not game_reading(game.name, 5.0, False, game.max_steps - 1, 5.0).done
    assert game_reading(game.name, game.reference_mean, False, 1, 0.0).success
    assert not game_reading(game.name, game.random_mean, False, 1, 0.0).success


def test_the_page_families_are_registered_by_the_task_families_the_browser_runs():
    assert set(PAGES) == {s for s, sandbox in SUITE_SANDBOX.items() if sandbox == "browser"}
    assert PAGES["games"].names() == tuple(sorted(GAMES))
    task = TaskSpec(task_id="t", suite="games", name="games.2048", seed=12345678901234567890)
    assert '"12345678901234567890"' in PAGES["games"].start_js(task)  # taken whole, as text
    miniwob = PAGES["miniwob"].read(task, [True, 0.8, 1.0, ""], 3, 0.0)
    assert (miniwob.reward, miniwob.done, miniwob.success, miniwob.score) == (0.8, True, True, None)
    assert PAGES["miniwob"].read(task, [False, 0.8, 1.0, ""], 3, 0.0).reward == 0.0


def _result(**kw) -> StepResult:
    return StepResult(obs=None, **kw)  # type: ignore[arg-type]


def test_a_game_episode_is_worth_its_normalised_score_wherever_it_stops():
    last = _result(reward=4.0, done=False, success=True, score=30.0, normalised_score=1.2)
    for reason in ("done", "step_budget", "timeout"):
        assert outcome(reason, last) == (1.2, True, 30.0, 1.2)


def test_a_verifier_task_keeps_its_reward_when_done_and_nothing_otherwise():
    done = _result(reward=0.7, done=True, success=True)
    assert outcome("done", done) == (0.7, True, None, None)
    assert outcome("step_budget", _result(reward=0.0, done=False)) == (0.0, False, None, None)
    assert outcome("timeout", None) == (0.0, False, None, None)


def test_events_from_before_scores_still_decode():
    old = EpisodeEnded(episode_id="e", ts=1.0, num_steps=3, outcome_reward=1.0, success=True)
    raw = encode(old).replace(b',"score":null', b"").replace(b',"normalised_score":null', b"")
    assert b"score" not in raw
    back = decode(raw, EpisodeEnded)
    assert back.score is None and back.normalised_score is None


# ---------------------------------------------------------------- 2048


def test_2048_lines_merge_once_towards_their_start():
    assert slide_line((2, 2, 2, 2)) == ((4, 4, 0, 0), 8)
    assert slide_line((0, 2, 0, 2)) == ((4, 0, 0, 0), 4)
    assert slide_line((4, 4, 8, 0)) == ((8, 8, 0, 0), 8)
    assert slide_line((2, 4, 8, 16)) == ((2, 4, 8, 16), 0)


def test_2048_moves_in_the_four_directions():
    grid = ((2, 0, 0, 2), (0, 0, 0, 0), (0, 0, 0, 0), (2, 0, 0, 0))
    assert move(grid, "left")[0][0] == (4, 0, 0, 0)
    assert move(grid, "right")[0][0] == (0, 0, 0, 4)
    assert move(grid, "up")[0][0][0] == 4 and move(grid, "up")[1] == 4
    assert move(grid, "down")[0][3][0] == 4


def test_2048_player_only_plays_moves_that_change_the_board():
    grid = ((2, 4, 8, 16), (4, 8, 16, 32), (8, 16, 32, 64), (0, 0, 0, 0))  # only up and down change it
    assert player_2048({"grid": grid}).key in ("up", "down")
    assert player_2048({"grid": ((0, 0, 0, 0),) * 3 + ((2, 2, 0, 0),)}).key == "left"  # merges in the corner


# ---------------------------------------------------------------- mines


def test_mines_deduction_finds_certain_mines_and_safe_cells():
    assert deduce(["1#", "##"]) == (set(), set())  # one mine among three hidden cells: nothing certain
    assert deduce(["11", "1#"]) == ({(1, 1)}, set())  # every 1 sees one hidden cell only
    # the 0 clears (1,1) and (2,1); the 1 beside them then has one hidden neighbour left: the mine
    assert deduce(["1##", "1##", "0##"]) == ({(0, 1)}, {(1, 1), (2, 1)})


def test_mines_player_clicks_a_certain_safe_cell_else_the_least_likely_mine():
    board = {"rows": ["1##", "1##", "0##"], "cell": 20, "mines": 1, "view": VIEW}
    assert mines_player(board) == click_cell(board, 1, 1)
    # the 1 in the corner leaves one mine among 3 cells (1/3); the far cells share the other 2 of 10
    board = {"rows": ["1###", "####", "####", "####"], "cell": 20, "mines": 3, "view": VIEW}
    far = mines_player(board)
    assert far not in (click_cell(board, 0, 1), click_cell(board, 1, 0), click_cell(board, 1, 1))


def test_clicks_land_on_cell_centres_of_the_task_area():
    board = {"rows": ["#" * 8] * 8, "cell": 20, "mines": 10, "view": VIEW}
    c = click_cell(board, 0, 0)
    assert (c.x * 160, c.y * 210) == pytest.approx((10, 60))
    draws = {(a.x, a.y) for a in (get_game("games.mines").random_action(random.Random(k), board) for k in range(400))}
    assert len(draws) == 64 and isinstance(click_cell(board, 7, 7), Click)


# ---------------------------------------------------------------- snake


def test_snake_player_goes_for_the_apple_and_never_into_a_wall():
    board = {"size": 10, "cell": 16, "snake": [[4, 5], [3, 5], [2, 5]], "apple": [4, 1], "dir": [1, 0]}
    assert snake_player(board) == Hotkey(key="up")
    board = {"size": 10, "cell": 16, "snake": [[9, 5], [8, 5], [7, 5]], "apple": [0, 0], "dir": [1, 0]}
    assert snake_player(board).key in ("up", "down")


def test_random_policy_of_the_arrow_games_draws_every_arrow():
    assert {arrow_key(random.Random(k), {}).key for k in range(50)} == {"up", "down", "left", "right"}


# ---------------------------------------------------------------- suite and tasks


def test_the_games_suite_builds_games_tasks_run_by_the_browser():
    suite = get_suite("games")
    assert suite.family == "games" and set(suite.tasks) == set(GAMES)
    assert suite.max_steps == max(g.max_steps for g in GAMES.values())
    tasks = build_tasks("miniwob", ["games", "click-test"], episodes=2, seed=5, prefix="r")
    assert [(t.suite, t.name, t.seed) for t in tasks[:4]] == [
        ("games", "games.2048", 5), ("games", "games.mines", 5), ("games", "games.snake", 5), ("miniwob", "click-test", 5)]
    assert set(known_tasks("games")) == set(GAMES)
    assert plan(["games"]).tasks == suite.tasks and plan(["games"]).action_types == ("click", "hotkey")
    assert plan(["games", "default"]).action_types[-1] == "hotkey"  # the default suite's order, then the games'
    assert "hotkey" not in plan(["default"]).action_types


def test_a_games_episode_gets_the_wall_clock_its_step_limit_needs():
    # the main job steps a sandbox every ~0.35 s on 2 cores: a flat 60 s cut a 200-step 2048 episode
    # by the clock, so its score depended on the machine's load, not on its step limit
    suite = get_suite("games")
    games = build_tasks("games", ["games"], episodes=1, max_steps=suite.max_steps, prefix="r")
    assert {t.timeout_s for t in games} == {300.0} and all(t.timeout_s >= g.max_steps for g in GAMES.values()
                                                            for t in games)
    assert {t.timeout_s for t in build_tasks("miniwob", ["default"], episodes=1, max_steps=14)} == {60.0}
    assert build_tasks("miniwob", ["click-test"], episodes=1, max_steps=10, timeout_s=5.0)[0].timeout_s == 5.0
    assert episode_timeout_s(10_000) == 3600.0  # the schema's most


def test_the_demonstrator_plays_games_from_the_board_the_probe_carries():
    board = {"grid": ((0, 0, 0, 0),) * 3 + ((2, 2, 0, 0),), "view": VIEW}
    assert scripted.solve("games.2048", "", {"elements": [], "game": board}) == Hotkey(key="left")
    assert scripted.solve("games.2048", "", {"elements": [], "game": None}).type == "wait"
    assert "flywheelGame.board()" in scripted.DOM_PROBE_JS


def test_a_worker_busy_with_long_episodes_keeps_its_tasks():
    # the feeder polls when a slot frees; librdkafka evicts a consumer that has not polled for
    # max.poll.interval.ms (300 s by default), and its tasks would be played again
    from producers.rollout import RolloutConfig, consumer_overrides
    from schemas.events import MAX_TASK_TIMEOUT_S

    timings = consumer_overrides(RolloutConfig())
    longest_game = build_tasks("games", ["games"], episodes=1, max_steps=get_suite("games").max_steps)[0].timeout_s
    assert timings["max.poll.interval.ms"] > 1000 * max(MAX_TASK_TIMEOUT_S, longest_game, 300)
    assert timings["session.timeout.ms"] <= timings["max.poll.interval.ms"] <= 86_400_000  # librdkafka's rules
