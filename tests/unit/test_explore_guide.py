"""The guided exploration floor (--explore-from human): the demonstrations recorded through the UI
say where a task's floor clicks (app.curriculum.guide_points -> the task param explore_at -> the
pixel policy's guide_floor), the policy draws from that mixture and logs its log-prob, and nothing
of them is cloned; a bad guide is refused where a task is checked."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from app.curriculum import TaskFeed, guide_points
from app.demo_config import DemoConfig
from app.taught import Taught, line
from infra.runtime.errors import UserError
from infra.runtime.policy import PastStep, PolicyInput, SeenScreen, build_policy
from producers.tasks import EXPLORE, EXPLORE_AT, MAX_EXPLORE_POINTS, build_tasks, check_task, explore_points
from schemas import actions as A
from trainer.policies.pixel.model import GUIDE_UNIFORM, guide_floor, mix_floor
from tests.unit.pixel_inputs import random_inputs

GRID = 20


def cell_at(x: float, y: float) -> int:  # the whole screen, 20 x 20 cells
    return min(int(y * GRID), GRID - 1) * GRID + min(int(x * GRID), GRID - 1)


def test_the_guided_floor_puts_its_mass_near_the_steps_demonstrated_clicks_and_keeps_every_cell():
    points = [(0, 0.02, 0.02), (1, 0.52, 0.52)]  # step 0 clicked cell (0, 0), step 1 cell (10, 10)
    f0, f1 = guide_floor(points, 0, cell_at, GRID), guide_floor(points, 1, cell_at, GRID)
    for f in (f0, f1):
        assert f.shape == (GRID * GRID,) and f.sum() == pytest.approx(1.0) and f.min() > 0
        assert f.min() == pytest.approx(GUIDE_UNIFORM / GRID ** 2)  # the uniform share everywhere
    assert f0[0] == f0.max() and f1[10 * GRID + 10] == f1.max()
    assert f0.reshape(GRID, GRID)[:2, :2].sum() == pytest.approx(1 - GUIDE_UNIFORM + 4 * GUIDE_UNIFORM / 400)
    assert f1.reshape(GRID, GRID)[9:12, 9:12].sum() == pytest.approx(1 - GUIDE_UNIFORM + 9 * GUIDE_UNIFORM / 400)
    # a step where no demonstration clicked (it typed, or had ended): uniform; so without points
    assert np.allclose(guide_floor(points, 5, cell_at, GRID), 1 / 400)
    assert np.allclose(guide_floor([], 0, cell_at, GRID), 1 / 400)
    # a point at the page's corner weighs as much as one in its middle
    both = guide_floor([(3, 0.0, 0.0), (3, 0.52, 0.52)], 3, cell_at, GRID).reshape(GRID, GRID)
    assert both[:2, :2].sum() == pytest.approx(both[9:12, 9:12].sum() - 5 * GUIDE_UNIFORM / 400)


def test_the_mixture_with_a_guide_is_the_guides_and_without_one_the_uniform_floor():
    logits = torch.randn(2, 3, 400) * 4
    e = torch.tensor([0.4, 0.0])
    floor = torch.from_numpy(np.stack([guide_floor([(0, 0.02, 0.02)], 0, cell_at, GRID)] * 2))
    p = mix_floor(logits, e, floor).exp()
    assert torch.allclose(p.sum(-1), torch.ones(2, 3), atol=1e-5)
    assert torch.allclose(p[0], 0.6 * torch.softmax(logits[0], -1) + 0.4 * floor[0].float(), atol=1e-6)
    assert torch.allclose(p[1], torch.softmax(logits[1], -1), atol=1e-6)  # e = 0: the policy's own
    uniform = mix_floor(logits, e).exp()
    assert torch.allclose(uniform[0], 0.6 * torch.softmax(logits[0], -1) + 0.4 / 400, atol=1e-6)


def _inputs(n: int, steps: int = 0) -> list[PolicyInput]:
    from schemas.events import BlobRef

    screen = SeenScreen(BlobRef(sha256="0" * 64, uri="file:///nowhere", width=160, height=210), 160, 210, "Click the tab")
    past = [PastStep(observation=screen, thought="", raw_output="", action=A.Click(x=0.1, y=0.5))
            for _ in range(steps)]
    return random_inputs(n, "Click the tab", lambda k: past)


def test_a_guided_decision_is_drawn_near_the_guide_and_logs_the_mixtures_log_prob():
    policy = build_policy("pixel", "p", {"seed": 3})
    inputs = _inputs(64, steps=1)  # the second step of its episode
    x, y = policy._cell_centre(5 * policy.grid + 7)
    guide = [(0, 0.99, 0.99), (1, x, y)]  # step 1 clicked cell (5, 7)
    torch.manual_seed(0)
    decisions = policy.act(inputs, explore=[0.9] * 64, explore_at=[guide] * 64)
    near = [d for d in decisions if abs(policy._cell_of(d.action) // policy.grid - 5) <= 1
            and abs(policy._cell_of(d.action) % policy.grid - 7) <= 1]
    assert len(near) > 32  # 0.9 * 0.8 of the draws go to the 9 cells around it; uniform would put ~1.4 there
    obs = torch.stack([policy.preprocess(i.image, i.history, i.instruction) for i in inputs])
    with torch.no_grad():
        lp_policy, _, _ = policy.evaluate(obs, [i.instruction for i in inputs], [d.action for d in decisions])
    floor = torch.from_numpy(guide_floor(guide, 1, policy._cell_at, policy.grid))
    cells = torch.tensor([policy._cell_of(d.action) for d in decisions])
    want = torch.logaddexp(math.log(0.1) + lp_policy, math.log(0.9) + torch.log(floor[cells]).float())
    assert torch.allclose(torch.tensor([d.logprob for d in decisions]), want, atol=1e-4)
    # greedy is the policy's own argmax: a guide never moves it
    greedy = policy.act(inputs, greedy=True, explore=[0.9] * 64, explore_at=[guide] * 64)
    assert [d.action for d in greedy] == [d.action for d in policy.act(inputs, greedy=True)]


def test_the_guide_floors_the_click_head_only_and_the_other_pointer_heads_stay_uniform(monkeypatch):
    policy = build_policy("pixel", "p", {"seed": 3, "action_types": ["click", "scroll"]})
    seen = {}
    monkeypatch.setattr(policy, "decide", lambda obs, instr, greedy, explore, floor: seen.setdefault("floor", floor))
    guide = [(0, 0.5, 0.6)]
    policy.act(_inputs(2), explore=[0.5, 0.5], explore_at=[guide, []])
    floor, click, scroll = seen["floor"], policy.pointers.index("click"), policy.pointers.index("scroll")
    assert floor.shape == (2, 2, policy.grid ** 2)
    assert torch.allclose(floor[0, click], torch.from_numpy(guide_floor(guide, 0, policy._cell_at, policy.grid)))
    assert torch.allclose(floor[1, click], torch.full_like(floor[1, click], 1 / policy.grid ** 2))  # no guide
    assert torch.allclose(floor[:, scroll], torch.full_like(floor[:, scroll], 1 / policy.grid ** 2))
    built = policy._guides[(tuple(guide), 0)]  # built once per (guide, step), read again after
    policy.act(_inputs(2), explore=[0.5, 0.5], explore_at=[guide, guide])
    assert len(policy._guides) == 2 and policy._guides[(tuple(guide), 0)] is built  # and the empty guide's
    policy.act(_inputs(2), explore=[0.5, 0.5], explore_at=[[list(p) for p in guide], []])  # JSON's lists
    assert len(policy._guides) == 2 and not built.flags.writeable
    logits = torch.randn(2, 2, policy.grid ** 2)
    p = mix_floor(logits, torch.tensor([0.5, 0.5]), floor).exp()  # a floor shaped as the logits
    assert torch.allclose(p[0, click], 0.5 * torch.softmax(logits[0, click], -1) + 0.5 * floor[0, click].float(), atol=1e-6)
    assert torch.allclose(p.sum(-1), torch.ones(2, 2), atol=1e-5)


def test_the_guide_is_read_from_the_demonstrations_pointer_actions_per_task_and_step():
    def demo(task, *actions):
        steps = [SimpleNamespace(step_index=k, action=a) for k, a in enumerate(actions)]
        return SimpleNamespace(trajectory=SimpleNamespace(task=SimpleNamespace(name=task), steps=steps))

    demos = [demo("click-tab-2", A.Click(x=0.2, y=0.05), A.PressEnter(), A.Click(x=0.6, y=0.9)),
             demo("click-tab-2", None, A.Scroll(x=0.3, y=0.4, direction="down")),
             demo("email-inbox-delete", A.Type(content="hi"))]
    got = guide_points(demos)
    assert got == {"click-tab-2": [[0, 0.2, 0.05], [2, 0.6, 0.9]]}  # clicks only: the floor guides the click head
    long = guide_points([demo("t", *[A.Click(x=1.0, y=1.0)] * 10)] * 3, cap=4)["t"]
    assert [p[0] for p in long] == [0, 1, 2, 3]  # in turn from each step: late steps keep theirs


def test_the_feed_sends_the_guide_only_with_a_floor_and_only_for_the_tasks_it_has():
    sent: list = []
    guide = {"click-tab-2": [[0, 0.2, 0.05]]}
    feed = TaskFeed(["click-tab-2", "click-menu", "click-test"], queue=12, seed=0, max_steps=8, run="r.rl",
                    send=lambda specs: sent.extend(specs) or len(specs), max_per_task=100, explore=0.5, points=guide)
    feed.refill(0, {"click-test": (0.9, 30)}, {})
    by = {t: [s.params for s in sent if s.name == t] for t in ("click-tab-2", "click-menu", "click-test")}
    assert by["click-tab-2"] and all(p == {EXPLORE: 0.5, EXPLORE_AT: [[0, 0.2, 0.05]]} for p in by["click-tab-2"])
    assert by["click-menu"] and all(p == {EXPLORE: 0.5} for p in by["click-menu"])  # uniform: no guide for it
    assert by["click-test"] and all(p == {} for p in by["click-test"])  # solved: no floor, no guide
    for s in sent:
        check_task(s)


@pytest.mark.parametrize("bad", [
    "0,1,2", [[0, 1.0]], [[0.5, 1.0, 1.0]], [[True, 1.0, 1.0]], [[0, float("nan"), 1.0]], [[0, -1.0, 1.0]],
    [[-1, 1.0, 1.0]], [[0, 1.0, "2"]], [[0, 1.5, 0.5]], [[0, float("inf"), 0.5]], [[10_000, 0.5, 0.5]],
    [[0, [0.5], 0.5]], [[[0, 0.5, 0.5]]], {"0": [0.5, 0.5]}, [(0, 1.0, 1.0)], [[0, 1.0, 1.0]] * (MAX_EXPLORE_POINTS + 1)])
def test_a_task_with_a_bad_guide_is_refused_where_tasks_are_checked(bad):
    task = build_tasks("miniwob", ["click-tab-2"], 1, params={EXPLORE: 0.5, EXPLORE_AT: [[1, 0, 0.5]]})[0]
    assert explore_points(task) == [(1, 0.0, 0.5)]
    task.params[EXPLORE_AT] = bad
    with pytest.raises(ValueError, match=EXPLORE_AT):
        check_task(task)


def test_the_demo_refuses_a_guide_without_a_floor_or_without_demonstrations_and_names_it_as_a_source():
    from app.demo import explore_guide

    from app.demo_config import effective

    with pytest.raises(UserError, match="--explore-from human guides the exploration floor, which is off"):
        DemoConfig(explore_from="human", explore=0.0).validate()
    with pytest.raises(UserError, match="which is off"):  # auto is off after a cold start: pi_sft clicks as they did
        effective(DemoConfig(tasks=["click-button"], explore_from="human"), frozenset({"click-button"}))
    for kind, curriculum in (("lm", True), ("pixel", False)):
        with pytest.raises(UserError, match="explores \\(pixel\\) and the curriculum"):
            DemoConfig(explore_from="human", policy_kind=kind, curriculum=curriculum).validate()
    DemoConfig(explore_from="human", explore=0.5).validate()
    cfg = DemoConfig(tasks=["click-tab-2"], explore_from="human")
    recorded = [SimpleNamespace(trajectory=SimpleNamespace(task=SimpleNamespace(name=t),
                                                           steps=[SimpleNamespace(step_index=0, action=A.Click(x=0.1, y=0.2))]))
                for t in ("click-tab-2", "click-menu")]
    assert explore_guide(cfg, recorded) == {"click-tab-2": [[0, 0.1, 0.2]]}  # the run's tasks only
    assert explore_guide(DemoConfig(tasks=["click-tab-2"]), recorded) == {}  # not asked
    with pytest.raises(UserError, match="no recorded demonstration with a click"):
        explore_guide(cfg, recorded[1:])
    said = line(Taught("", 0.0, 0, 0.0, 0, sil_coef=0.5, explore_from="human"))
    assert "human demonstrations guiding the exploration floor's clicks (not cloned)" in said
