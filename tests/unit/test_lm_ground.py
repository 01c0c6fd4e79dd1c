"""The language policy's text grounding: the pointer reads the instruction's words on the screen."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from infra.runtime.policy import PolicyInput, build_policy
from schemas.actions import Click
from schemas.prompt import PromptSpec, instruction_of, uitars_turns
from schemas.uitars import parse_output, render_output
from trainer.sft.lm_config import LMTrainConfig
from trainer.sft.lm_stream import train_step
from trainer.policies.lm.model import tiny_lm_config
from trainer.policies.lm.ground import read
from trainer.policies.lm.pointer import PointerCodec
from trainer.policies.pixel.ground import font_file

FONT = font_file("Arial")
needs_font = pytest.mark.skipif(FONT is None, reason="fontconfig (fc-match) is not installed: no font to render words with")
SIDE, PX = 4, 160  # the tiny policy's 4 x 4 patch grid over a 160 x 160 screen
CFG = tiny_lm_config(pointer=True, coord_mode="1000", image_size=32, patch=8, max_images=1, max_new_tokens=40,
                     ground=True)
LABELS = ("ONE", "TWO")


def screen(where: dict[str, int]) -> np.ndarray:
    """A white screen with each word at the centre of its patch, 13 px, as a MiniWoB button's."""
    img = Image.new("RGB", (PX, PX), "white")
    draw, font = ImageDraw.Draw(img), ImageFont.truetype(FONT, 13)
    cell = PX // SIDE
    for word, k in where.items():
        r, c = divmod(k, SIDE)
        draw.text((c * cell + cell / 2, r * cell + cell / 2), word, font=font, fill="black", anchor="mm")
    return np.asarray(img)


def episode(rng: random.Random) -> tuple[np.ndarray, str, int]:
    """Both labels at two random patches; the instruction names one of them."""
    a, b = rng.sample(range(SIDE * SIDE), 2)
    target = rng.choice(LABELS)
    img = screen({"ONE": a, "TWO": b})
    return img, f"Click button {target}.", a if target == "ONE" else b


def test_the_instruction_is_read_back_from_either_prompt():
    for prompt in ("short", "uitars"):
        spec = PromptSpec(prompt=prompt)
        assert instruction_of(spec, uitars_turns(spec, 'Type "{x}" here.', [], [], None)) == 'Type "{x}" here.'
    assert instruction_of(PromptSpec(), []) is None
    assert instruction_of(PromptSpec(), uitars_turns(PromptSpec(prompt="uitars"), "go", [], [], None)) is None


def test_the_instruction_is_read_back_from_a_template_naming_it_twice_and_not_from_one_without_it():
    twice = PromptSpec(prompt="Task: {instruction}\nAgain, the task: {instruction}\nReply in {language}.")
    for instruction in ("Click ONE.", "", "Task: {instruction}"):
        assert instruction_of(twice, uitars_turns(twice, instruction, [], [], None)) == instruction
    assert instruction_of(twice, uitars_turns(PromptSpec(), "Click ONE.", [], [], None)) is None
    fixed = PromptSpec(prompt="Click whatever you like.")
    assert instruction_of(fixed, uitars_turns(fixed, "Click ONE.", [], [], None)) is None


@needs_font
def test_each_word_is_found_in_the_patch_it_is_written_in():
    img = screen({"ONE": 5, "TWO": 10})
    maps, found = read(img, "Click button ONE, then TWO.", 8, SIDE, FONT, [13])
    assert found == ["Click", "button", "ONE", "then", "TWO"] and maps.shape == (8, SIDE * SIDE)
    assert maps[2].argmax() == 5 and maps[4].argmax() == 10
    assert maps[2, 5] > 0.9 and maps[2, 10] < 0.7  # ONE is not TWO
    assert maps[0].max() < 0.5 and not maps[5:].any()  # "Click" is not on the screen; no sixth word
    low = screen({"ONE": 13})  # row 3, column 1: centre (60, 140)
    tall = np.concatenate([low, np.full((40, PX, 3), 255, np.uint8)])  # not square: patches are 50 px high
    maps, _ = read(tall, "ONE", 1, SIDE, FONT, [13])
    assert maps[0].argmax() == 9  # y 140 lies in the third row of 50 px patches


@needs_font
def test_screens_smaller_than_the_grid_and_grey_screens_read_without_error():
    for shape in [(4, 200, 3), (3, 3, 3), (1, 50, 3), (7, 7, 3)]:
        maps, found = read(np.full(shape, 255, np.uint8), "Click ONE", 2, 8, FONT, [10])
        assert maps.shape == (2, 64) and not maps.any() and found == ["Click", "ONE"]
    grey = screen({"ONE": 6})[..., 0]
    maps, _ = read(grey, "ONE", 1, SIDE, FONT, [13])
    assert maps[0].argmax() == 6


def test_grounding_needs_the_pointer():
    with pytest.raises(ValueError, match="pointer"):
        build_policy("lm", "g", tiny_lm_config(ground=True))


@needs_font
def test_act_and_the_trainer_score_the_same_grounded_decision():
    torch.manual_seed(0)
    policy = build_policy("lm", "ground-test", CFG)
    with torch.no_grad():
        policy.ground.kinds.fill_(0.1)  # make the term matter
    rng = random.Random(1)
    inputs = [PolicyInput(img, text, PX, PX, history=[]) for img, text, _ in (episode(rng) for _ in range(4))]
    decisions = policy.act(inputs)
    samples = [policy.decision_sample(i, d.raw_output) for i, d in zip(inputs, decisions)]
    assert all(s.ground is not None for s in samples)
    logprob, _, _ = policy.evaluate(samples)
    assert logprob.tolist() == pytest.approx([d.logprob for d in decisions], abs=1e-3)
    without = [policy.render(policy.context(i), d.raw_output, score="last") for i, d in zip(inputs, decisions)]
    for s in without:
        s.ground = None
    assert policy.sequence_logprobs(without).tolist() != pytest.approx(logprob.tolist(), abs=1e-3)


def clone(ground: bool, steps: int = 80) -> float:
    """SFT of the tiny pointer policy on 64 screens, then greedy success on 32 unseen ones."""
    torch.manual_seed(0)
    policy = build_policy("lm", "ground-learn", {**CFG, "ground": ground})
    codec, rng = PointerCodec(SIDE), random.Random(0)
    samples = []
    for _ in range(64):
        img, text, k = episode(rng)
        x, y = codec.centre(k)
        answer = render_output("", Click(x=x / 1000, y=y / 1000), PX, PX, "1000")
        samples.append(policy.render(policy.context(PolicyInput(img, text, PX, PX, history=[])), answer, score="last"))
    optimizer = torch.optim.AdamW(policy.param_groups(3e-3, 1.0), lr=3e-3)
    cfg = LMTrainConfig(lr=3e-3, minibatch_samples=16)
    for _ in range(steps):
        train_step(policy, optimizer, rng.sample(samples, 16), cfg)
    test = [episode(random.Random(100 + i)) for i in range(32)]
    decisions = policy.act([PolicyInput(img, text, PX, PX, history=[]) for img, text, _ in test], greedy=True)
    hits = 0
    for d, (_, _, k) in zip(decisions, test):
        action = parse_output(d.raw_output, PX, PX, coord_mode="1000").action
        hits += action is not None and codec.patch(action.x * 1000, action.y * 1000) == k
    return hits / len(test)


@needs_font
def test_with_grounding_sft_learns_which_label_to_click():
    """Two labels on the screen, the instruction names one: without reading, the best a policy
    can do is one of the two (0.5); with the maps it learns to take the named one."""
    grounded = clone(True)
    assert grounded >= 0.8, grounded
    assert clone(False) <= 0.65


def test_a_grounded_language_policy_pins_its_font_file_and_refuses_another():
    from trainer.policies.pixel.ground import FONT_SHA256, font_sha256

    config = build_policy("lm", "g", CFG).config_dict()
    assert config[FONT_SHA256] == font_sha256(CFG["ground_font"])
    with pytest.raises(ValueError, match="its maps would differ from those it learnt from"):
        build_policy("lm", "g", {**config, FONT_SHA256: "0" * 64})
