"""The multi-turn pixel policy: for every action type and a history, ``evaluate`` reproduces the
log-prob ``act`` returned; the history changes what the policy sees; typed text is copied from
the instruction."""

import numpy as np
import pytest
import torch

from infra.runtime.policy import PolicyInput, build_policy
from schemas import actions as A
from schemas.events import BlobRef, Observation, Step
from trainer.policies.pixel.inputs import span_mask, token_spans
from tests.unit.pixel_inputs import random_inputs

TYPES = ["click", "type", "press_enter", "scroll", "finished", "hotkey", "left_double", "right_single"]
INSTRUCTION = 'Enter the username "bob" and the password "k1a" into the text fields and press login.'
REF = BlobRef(sha256="0" * 64, uri="file:///blob", media_type="image/png", width=160, height=210)


def step(i, action, instruction=INSTRUCTION):
    return Step(episode_id="e", ts=1.0, step_index=i, started_at=1.0,
                observation=Observation(screenshot=REF, screen_width=160, screen_height=210, instruction=instruction),
                action=action, policy="p", policy_version=0, logprob=0.0)


HISTORY = [step(0, A.Click(x=0.5, y=0.6)), step(1, A.Type(content="bob")), step(2, A.Scroll(x=0.1, y=0.9, direction="up")),
           step(3, A.PressEnter())]


def _policy(grid=8):
    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {"action_types": TYPES, "grid": grid, "channels": [4, 8, 8], "seed": 1})
    with torch.no_grad():  # the heads start at zero (uniform); make them non-trivial
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return policy


def _inputs(n=12):
    return random_inputs(n, INSTRUCTION, lambda k: HISTORY[:k % (len(HISTORY) + 1)])


def _force(policy, name):
    with torch.no_grad():
        policy.type_head.weight.zero_()
        policy.type_head.bias.zero_()
        policy.type_head.bias[policy.types.index(name)] = 30.0


@pytest.mark.parametrize("name", TYPES)
def test_evaluate_reproduces_the_behaviour_logprob_of_every_action_type(name):
    policy = _policy()
    _force(policy, name)
    inputs = _inputs()
    decisions = policy.act(inputs)
    assert {d.action.type for d in decisions} == {name}
    obs = torch.stack([policy.preprocess(i.image, i.history) for i in inputs])
    logprob, value, entropy = policy.evaluate(obs, [i.instruction for i in inputs], [d.action for d in decisions])
    torch.testing.assert_close(logprob, torch.tensor([d.logprob for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(value, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    assert torch.isfinite(entropy).all() and (entropy > 0).all()
    if name in ("click", "type", "scroll", "hotkey", "left_double", "right_single"):  # an argument is chosen too
        assert all(d.logprob < -1e-3 for d in decisions)
    logprob.sum().backward()  # the masked branches leave finite gradients
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)


def test_typed_text_is_a_span_of_the_instruction_and_duplicates_add_up():
    policy = _policy()
    _force(policy, "type")
    for d in policy.act(_inputs(20)):
        assert d.action.content and d.action.content in INSTRUCTION
    # the same word twice: its probability is the sum over both spans
    instruction = 'Type "go" then "go".'
    mask = span_mask(instruction, "go", 16, 4)
    assert mask.sum() == 2 and [s for s in token_spans(instruction, 16)][1] == (5, 6)
    assert policy.can_represent(A.Type(content="bob"), INSTRUCTION)
    assert not policy.can_represent(A.Type(content="alice"), INSTRUCTION)
    obs = policy.preprocess(np.zeros((210, 160, 3), np.uint8))[None]
    with pytest.raises(ValueError, match="cannot score"):
        policy.evaluate(obs, [INSTRUCTION], [A.Type(content="alice")])


def test_history_is_drawn_into_the_observation():
    policy = _policy(grid=8)
    image = np.zeros((210, 160, 3), np.uint8)
    empty, seen = policy.preprocess(image), policy.preprocess(image, HISTORY[:2])
    assert torch.equal(empty[0], seen[0]) and not empty[1:].any()
    cell = policy._cell_of(HISTORY[0].action)
    row, col = divmod(cell, 8)
    assert seen[1, row * 8, col * 8] == 255 and seen[1].sum() == 255 * 64  # one 8 x 8 cell
    assert seen[2].sum() == 0  # the last action was a type, not a click
    counts = seen[3].flatten()[:policy.n_summary]
    k = len(TYPES)
    assert counts[0] == 2 and counts[1 + TYPES.index("click")] == 1 and counts[1 + k + TYPES.index("type")] == 1
    bob = [i for i, (a, b) in enumerate(token_spans(INSTRUCTION, 48)) if INSTRUCTION[a:b] == "bob"][0]
    assert counts[1 + 2 * k + bob] == 1  # "bob" was typed once
    # the same screen with and without history: the policy can tell them apart
    out = policy(torch.stack([empty, seen]), [INSTRUCTION] * 2)
    assert not torch.allclose(out["type"][0], out["type"][1])


def test_default_config_is_click_only_and_uniform():
    policy = build_policy("pixel", "p", {"grid": 4})
    d = policy.act([PolicyInput(np.zeros((210, 160, 3), np.uint8), "Click it.", 160, 210, history=HISTORY[:1])])[0]
    assert isinstance(d.action, A.Click) and d.logprob == pytest.approx(np.log(1 / 16), abs=1e-5)
    assert not policy.can_represent(A.Type(content="x"))
