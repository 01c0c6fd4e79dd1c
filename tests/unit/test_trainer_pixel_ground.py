"""Text grounding for the pixel policy: each instruction word's match map peaks where the word is
written in the page's font; a grounded policy scores its own actions exactly; and it learns to
click a random string named by the instruction, which the hashed-word policy cannot."""

import random
import string

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from infra.runtime.policy import PolicyInput, build_policy
from schemas import actions as A
from schemas.events import BlobRef, Observation, Step
from trainer.sft.bc import Examples, bc_train
from trainer.policies.pixel.ground import MIN_STD, best_maps, font_file, match_maps, template, word_features, words

FONT = font_file("Arial")
needs_font = pytest.mark.skipif(FONT is None, reason="fontconfig (fc-match) or a font for Arial is not installed")
GROUNDED = {"action_types": ["click", "type", "finished"], "ground": True, "coords": True}


def screen(labels, size=10):
    """A 160 x 210 MiniWoB-like screenshot: a yellow instruction bar, then ``labels`` {text: (x, y)}
    in task-area pixels; returns the RGB array."""
    img = Image.new("RGB", (160, 210), "white")
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, 159, 49), fill=(255, 255, 0))
    font = ImageFont.truetype(FONT, size)
    for text, (x, y) in labels.items():
        draw.text((x, 50 + y), text, font=font, fill="black")
    return np.asarray(img)


def centre_cell(text, x, y, size=10, grid=20):
    left, top, right, bottom = ImageFont.truetype(FONT, size).getbbox(text)
    cx, cy = x + (left + right) / 2, y + (top + bottom) / 2
    return int(cy // 8) * grid + int(cx // 8)


@needs_font
def test_each_word_peaks_where_it_is_written():
    labels = {"gHF2pKy": (30, 20), "AU": (30, 60), "Submit": (90, 120)}
    gray = np.asarray(Image.fromarray(screen(labels)).convert("L"))[50:]
    instruction = "Select AU, gHF2pKy and click Submit."
    maps = match_maps(gray, instruction, 8, 20, "Arial", [10, 13])
    spans = words(instruction, 8)
    assert [instruction[a:b] for a, b in spans] == ["Select", "AU", "gHF2pKy", "and", "click", "Submit"]
    for text, (x, y) in labels.items():
        row = maps[[instruction[a:b] for a, b in spans].index(text)]
        assert int(row.argmax()) == centre_cell(text, x, y), text
        assert row.max() > 0.9 * 255
    absent = maps[0]  # "Select" is not on the screen
    assert absent.max() < 0.75 * 255
    assert not maps[len(spans):].any()  # no word, no map


@needs_font
def test_the_fft_maps_are_the_normalised_cross_correlation_at_every_position():
    """best_maps against NCC computed window by window, on a small screen with a word met twice:
    the FFT, the box sums, the flat-window rule and the word-centre placement all checked, and a
    repeated word gets the map of its first occurrence."""
    gray = np.asarray(Image.fromarray(screen({"ok no": (4, 3)})).convert("L"))[50:80, :48]
    instruction = "ok no ok"
    got = best_maps(gray, instruction, 4, "Arial", [10])
    assert got.shape == (3, 30, 48) and np.array_equal(got[0], got[2])
    ink = (255.0 - gray.astype(np.float64)) / 255.0
    for i, word in enumerate(["ok", "no"]):
        t = template(word, FONT, 10)
        th, tw = t.shape
        t0 = t - t.mean()
        want = np.zeros(gray.shape)
        for y in range(gray.shape[0] - th + 1):
            for x in range(gray.shape[1] - tw + 1):
                w = ink[y:y + th, x:x + tw]
                var = ((w - w.mean()) ** 2).sum()
                if var > th * tw * MIN_STD ** 2:
                    want[y + th // 2, x + tw // 2] = (t0 * w).sum() / np.sqrt((t0 * t0).sum() * var)
        np.testing.assert_allclose(got[i], np.clip(want, 0, 1), atol=1e-9)
    assert got[0].max() > 0.9 and got[1].max() > 0.9


@needs_font
def test_blank_screen_and_empty_instruction_give_empty_maps():
    blank = np.full((160, 160), 255, dtype=np.uint8)
    assert not match_maps(blank, "Click on the ok button.", 8, 20, "Arial", [10, 13]).any()
    assert not match_maps(blank, "", 8, 20, "Arial", [10, 13]).any()


def test_word_features_carry_neighbours_and_quotes():
    ids, flags = word_features('Click on the "ok" button', 6, 4096)
    assert flags[:5, 2].all() and not flags[5:].any()
    # the quotes next to "ok" (and to its neighbours); nothing before the first word nor after the last
    assert flags[:5, 0].tolist() == [0, 0, 0, 1, 1] and flags[:5, 1].tolist() == [0, 0, 1, 1, 0]
    assert ids[3, 1] == ids[2, 0] and ids[3, 2] == ids[4, 0] and ids[0, 1] == 0 and ids[4, 2] == 0
    assert [ids[k, 0] for k in range(2)] == [word_features("click On", 2, 4096)[0][k, 0] for k in range(2)]  # case-blind ids
    assert words("Select -3 with the spinner", 8)[1] == (7, 9)  # a negative number keeps its sign


def test_type_pointer_quote_flags_need_a_quote():
    from trainer.policies.pixel.inputs import token_features

    _, flags = token_features('Enter "bob" now', 8, 4096)
    # tokens: Enter " bob " now; the first has nothing before it, the last nothing after it
    assert flags[:5, 0].tolist() == [0, 0, 1, 0, 1] and flags[:5, 1].tolist() == [1, 0, 1, 0, 0]


@needs_font
def test_training_rebuilds_the_grounding_plane_acting_saw(tmp_path):
    """``step_inputs`` (what PPO, BC and RFT train on) rebuilds each step from the stored
    screenshot and the earlier steps exactly as ``act`` preprocessed it, grounding plane included."""
    from schemas.blobs import BlobStore
    from schemas.events import TaskSpec, Trajectory

    policy = build_policy("pixel", "p", GROUNDED)
    store, instruction = BlobStore(str(tmp_path)), "Select AU and click Submit."
    images = [screen({"AU": (20, 30), "Submit": (20, 90)}), screen({"AU": (60, 10)})]
    steps, seen = [], []
    for i, (image, action) in enumerate(zip(images, [A.Click(x=0.2, y=0.4), A.Finished()])):
        ref = store.put_image(Image.fromarray(image))
        seen.append(policy.preprocess(image, list(steps), instruction))  # what act() builds
        steps.append(Step(episode_id="e", ts=1.0, step_index=i, started_at=1.0, action=action, policy="p",
                          policy_version=0, logprob=0.0, observation=Observation(
                              screenshot=ref, screen_width=160, screen_height=210, instruction=instruction)))
    traj = Trajectory(episode_id="e", task=TaskSpec(task_id="t", suite="miniwob", name="click-option"), sandbox="s",
                      worker_id="w", policy="p", steps=steps, status="ended", success=True, started_at=1.0, ended_at=2.0)
    rebuilt = policy.step_inputs(traj, store)
    for want, got in zip(seen, rebuilt):
        assert torch.equal(want, got)
    assert rebuilt[0][policy.n_image].any() and not torch.equal(rebuilt[0][policy.n_image], rebuilt[1][policy.n_image])


@needs_font
@pytest.mark.parametrize("name", ["click", "type", "finished"])
def test_grounded_policy_reproduces_its_logprob(name):
    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {**GROUNDED, "seed": 2})
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))
        policy.type_head.bias.zero_()
        policy.type_head.weight.zero_()
        policy.type_head.bias[policy.types.index(name)] = 30.0
    instruction = 'Enter "AU" and click Submit.'
    ref = BlobRef(sha256="0" * 64, uri="file:///blob", media_type="image/png", width=160, height=210)
    earlier = Step(episode_id="e", ts=1.0, step_index=0, started_at=1.0, action=A.Click(x=0.3, y=0.5),
                   observation=Observation(screenshot=ref, screen_width=160, screen_height=210, instruction=instruction),
                   policy="p", policy_version=0, logprob=0.0)
    inputs = [PolicyInput(screen({"AU": (10 + 20 * k, 30 + 10 * k)}), instruction, 160, 210,
                          history=[earlier] if k % 2 else []) for k in range(6)]
    decisions = policy.act(inputs)
    obs = torch.stack([policy.preprocess(i.image, i.history, i.instruction) for i in inputs])
    assert obs.shape[1] == policy.n_image + 2  # screenshot + pointer planes, grounding, counts
    assert obs[:, policy.n_image].any()
    logprob, value, _ = policy.evaluate(obs, [i.instruction for i in inputs], [d.action for d in decisions])
    torch.testing.assert_close(logprob, torch.tensor([d.logprob for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(value, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    logprob.sum().backward()
    if name == "click":  # the click's location depends on the grounding weights
        assert policy.word_out.weight.grad.abs().sum() > 0


def _task(rng):
    """Two checkboxes labelled with random strings on random rows; the instruction names one and
    the demonstration clicks its box, left of the label: (image, instruction, target cell)."""
    names = ["".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(2, 7))) for _ in range(2)]
    rows = rng.sample(range(5, 130, 14), 2)
    labels = {n: (rng.randint(20, 60), r) for n, r in zip(names, rows)}
    image = Image.fromarray(screen(labels))
    for r in rows:
        ImageDraw.Draw(image).rectangle((4, 50 + r, 11, 50 + r + 7), outline="black")
    target = rng.randrange(2)
    return np.asarray(image), f"Select {names[target]} and click Submit.", (rows[target] + 4) // 8 * 20


@needs_font
def test_grounding_lets_behaviour_cloning_click_the_box_of_the_named_random_string():
    rng = random.Random(0)
    train, test = [_task(rng) for _ in range(160)], [_task(rng) for _ in range(60)]
    hits = {}
    for grounded in (False, True):
        torch.manual_seed(0)
        policy = build_policy("pixel", "p", {"action_types": ["click"], "ground": grounded, "channels": [4, 8, 16]})

        def click(cell):
            x, y = policy._cell_centre(cell)
            return A.Click(x=x, y=y)

        obs = torch.stack([policy.preprocess(img, (), ins) for img, ins, _ in train])
        bc_train(policy, Examples(obs, [t[1] for t in train], [click(t[2]) for t in train], ["t"] * len(train)), 15, 1e-2, 32)
        decisions = policy.act([PolicyInput(img, ins, 160, 210) for img, ins, _ in test], greedy=True)
        # on the named label's box: its cell or a horizontal neighbour
        hits[grounded] = np.mean([abs(policy._cell_of(d.action) - cell) <= 1 for d, (_, _, cell) in zip(decisions, test)])
    assert hits[True] >= 0.85, hits
    assert hits[False] <= 0.6, hits


def test_a_grounded_policy_pins_its_font_file_and_refuses_another(tmp_path):
    """The config records the hash of the font file the maps are read in; a policy rebuilt from
    it (a published version on another machine) must find the same file, else a clear error."""
    from trainer.policies.pixel.ground import FONT_SHA256, font_sha256

    policy = build_policy("pixel", "p", GROUNDED)
    pinned = policy.config_dict()[FONT_SHA256]
    assert pinned == font_sha256("Arial") and (pinned != "") == (FONT is not None)
    assert build_policy("pixel", "p", policy.config_dict()).config_dict()[FONT_SHA256] == pinned  # the same file
    other = tmp_path / "Other.ttf"
    other.write_bytes(b"not the page's font")
    with pytest.raises(ValueError, match=r"ground_font 'Arial' resolving to a file of sha256 .*here it resolves to "):
        build_policy("pixel", "p", {**policy.config_dict(), FONT_SHA256: font_sha256(str(other))})
    assert FONT_SHA256 not in build_policy("pixel", "p", {**GROUNDED, "ground": False}).config_dict()  # nothing read


def test_a_font_path_that_is_no_file_is_refused_not_pinned_to_fontconfigs_default(tmp_path):
    """fontconfig answers its default font for any name it does not know, a path included; a
    typo in ``ground_font`` must not be pinned as that default."""
    for missing in (str(tmp_path / "NoSuch.ttf"), str(tmp_path / "fonts" / "Arial"), "Arial.otf", "C:\\Fonts\\arial"):
        with pytest.raises(ValueError, match="names a font file that does not exist here"):
            build_policy("pixel", "p", {**GROUNDED, "ground_font": missing})
    real = tmp_path / "Mine.ttf"
    real.write_bytes(b"a font file of one's own")
    from trainer.policies.pixel.ground import FONT_SHA256, font_sha256

    assert build_policy("pixel", "p", {**GROUNDED, "ground_font": str(real)}).config_dict()[FONT_SHA256] == font_sha256(str(real))
