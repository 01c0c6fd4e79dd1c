"""The verifier's pure parts: the dataset from the log's rows, the request it serves, its features,
the model's forward and train step, the threshold and confusion table, and the server's answers."""

from __future__ import annotations

import io
import json
import math
import threading
import urllib.error
import urllib.request
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from infra.runtime.config import ConfigError, resolve
from schemas.blobs import BlobStore
from streams.assemble import add_event
from streams.judge import judge_request
from tests.fakes.steps import episode_events
from trainer.verifier.config import VerifierEvalConfig, VerifierServeConfig, VerifierTrainConfig
from trainer.verifier.dataset import (Example, calibration_split, example_from_request, examples_from_rows,
                                      split_by_task)
from trainer.verifier.features import action_counts, featurize, pointer_plane, stack, typed_text
from trainer.verifier.metrics import auc, confusion, per_task, threshold_for_recall
from trainer.verifier.model import VerifierNet, predict, train_step
from trainer.verifier.serve import make_server, score_body
from trainer.verifier.train import balance, fit, fit_calibrated, labels_of

SHA = [f"{i:064x}" for i in range(8)]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: two threads only wait on each other (0.25 s a step on a loaded machine, not 5 ms)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
CLICK = json.dumps({"type": "click", "x": 0.5, "y": 0.25})
TYPE = json.dumps({"type": "type", "content": "hello world"})


def row(ep, task, success, i, screen, action, nxt=None, instruction="click the button"):
    return (ep, task, success, i, instruction, screen, action, nxt)


def test_examples_from_rows_one_per_episode_in_step_order():
    rows = [row("a", "click-test", True, 0, SHA[0], CLICK), row("a", "click-test", True, 1, SHA[1], TYPE, SHA[2]),
            row("b", "enter-text", False, 0, SHA[3], "", SHA[4])]
    a, b = examples_from_rows(rows)
    assert (a.episode_id, a.task, a.label, a.screenshots, a.final_screenshot) == ("a", "click-test", 1, (SHA[0], SHA[1]), SHA[2])
    assert a.actions == ({"type": "click", "x": 0.5, "y": 0.25}, {"type": "type", "content": "hello world"})
    assert a.instruction == "click the button"
    assert (b.label, b.actions, b.final_screenshot) == (0, (None,), SHA[4])


def test_an_episode_with_a_missing_screenshot_is_dropped():
    rows = [row("a", "t", True, 0, "", CLICK), row("b", "t", True, 0, SHA[0], CLICK, None)]
    [b] = examples_from_rows(rows)
    assert b.episode_id == "b" and b.final_screenshot is None


def test_a_served_request_is_the_same_example_as_the_logs_rows():
    """What streams send (judge_request) and what training reads (the rows) meet in one Example."""
    state, traj = None, None
    for ev in episode_events("ep-1", 2):
        state, out = add_event(state, ev, 200.0)
        traj = out or traj
    served = example_from_request(judge_request(traj))
    rows = [row("ep-1", "click-test", True, s.step_index, s.observation.screenshot.sha256,
                s.action.model_dump_json(), s.next_screenshot_sha256, "click") for s in traj.steps]
    [logged] = examples_from_rows(rows)
    assert served == Example(**{**logged.__dict__, "episode_id": "", "label": None})


@pytest.mark.parametrize("request_, message", [
    ([], "JSON object"),
    ({"task": "t", "instruction": "i"}, "lacks steps"),
    ({"task": 1, "instruction": "i", "steps": [{"screenshot": SHA[0]}]}, "strings"),
    ({"task": "t", "instruction": "i", "steps": []}, "non-empty"),
    ({"task": "t", "instruction": "i", "steps": [{"screenshot": "../etc/passwd"}]}, "step 0: screenshot"),
    ({"task": "t", "instruction": "i", "steps": [{"screenshot": SHA[0], "action": "click"}]}, "step 0: action"),
    ({"task": "t", "instruction": "i", "steps": [{"screenshot": SHA[0]}], "final_screenshot": 3}, "final_screenshot"),
])
def test_a_malformed_request_says_what_is_wrong(request_, message):
    with pytest.raises(ValueError, match=message):
        example_from_request(request_)


def ex(task, label, i=0):
    return Example(f"{task}-{label}-{i}", task, "x", (SHA[0],), (None,), None, label)


def test_split_by_task_holds_out_whole_tasks_and_calibration_keeps_a_share():
    examples = [ex("a", 1), ex("b", 0), ex("a", 0), ex("c", 1)]
    train, held = split_by_task(examples, ["b", "c"])
    assert {e.task for e in train} == {"a"} and {e.task for e in held} == {"b", "c"}
    fit_set, cal = calibration_split([ex("a", 1, i) for i in range(10)], 0.2, seed=0)
    assert len(cal) == 2 and len(fit_set) == 8 and not set(cal) & set(fit_set)


def test_the_held_out_tasks_are_a_comma_separated_list_as_the_other_commands_lists():
    assert resolve(VerifierTrainConfig, {"holdout": " click-test, click-button,"}).holdout == ["click-test", "click-button"]
    assert resolve(VerifierEvalConfig, {}, {"FLYWHEEL_HOLDOUT": "click-test"}).holdout == ["click-test"]
    assert resolve(VerifierEvalConfig, {}).holdout == []  # none: the model's own


def test_balance_caps_each_task_and_verdict():
    examples = [ex("a", 1, i) for i in range(5)] + [ex("a", 0, i) for i in range(2)] + [ex("b", 1, i) for i in range(4)]
    kept = balance(examples, 3, seed=0)
    assert sorted((e.task, e.label) for e in kept) == [("a", 0)] * 2 + [("a", 1)] * 3 + [("b", 1)] * 3


def test_threshold_is_the_highest_with_the_recall_asked():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.95, 0.85]
    labels = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    t = threshold_for_recall(scores, labels, 0.9)
    assert t == 0.1 and confusion(scores, labels, t)["recall"] == 0.9
    assert threshold_for_recall([0.2, 0.9], [1, 0], 0.9) == 0.2
    with pytest.raises(ValueError, match="no successful"):
        threshold_for_recall([0.5], [0], 0.9)


def test_confusion_and_per_task():
    table = per_task(["a", "a", "a", "b"], [0.9, 0.8, 0.1, 0.7], [1, 0, 0, 1], 0.5)
    assert table["a"] == {"episodes": 3, "tp": 1, "fp": 1, "tn": 1, "fn": 0, "fpr": 0.5, "recall": 1.0, "auc": 1.0}
    assert math.isnan(table["b"]["fpr"]) and table["b"]["recall"] == 1.0 and math.isnan(table["b"]["auc"])
    assert table["ALL"]["episodes"] == 4 and table["ALL"]["tp"] == 2
    assert table["ALL"]["auc"] == 0.75  # of the 4 (success, failure) pairs, 0.7 < 0.8 is the one misranked


def test_auc_is_the_share_of_success_failure_pairs_ranked_right_ties_half():
    assert auc([0.3, 0.3, 0.3], [1, 0, 0]) == 0.5  # a constant score ranks nothing
    assert auc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == (2 + 1.5) / 4
    assert auc([0.1, 0.9], [1, 0]) == 0.0
    assert math.isnan(auc([0.4, 0.6], [1, 1]))


def png(color, size=32) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def store(tmp_path):
    return BlobStore(str(tmp_path / "blobs"))


def test_features_show_the_screens_the_pointer_and_the_typed_words(store):
    start, green = store.put(png((0, 0, 255))).sha256, store.put(png((0, 255, 0))).sha256
    red = store.put(png((255, 0, 0))).sha256
    e = Example("e", "t", "type hello", (start, red), ({"type": "click", "x": 0.5, "y": 0.5},
                {"type": "type", "content": "hello"}), green, 1)
    f = featurize(e, store.get, 16, 64)
    assert f.image.shape == (11, 16, 16)
    assert f.image[2].min() == 255 and f.image[:2].max() == 0  # the first screen: blue
    assert f.image[3].min() == 255 and f.image[4:6].max() == 0  # the last action's: red
    assert f.image[7].min() == 255 and f.image[6].max() == 0 and f.image[8].max() == 0  # the final screen: green
    assert f.image[9, 8, 8] == 255 and f.image[9, 0, 0] == 0  # every pointer action
    assert f.image[10].max() == 0  # the last action typed: no point
    clicked_last = featurize(Example("e", "t", "x", (start,), ({"type": "click", "x": 0.0, "y": 0.0},), None, 1),
                             store.get, 16, 64)
    assert clicked_last.image[10, 0, 0] == 255 and (clicked_last.image[6:9] == clicked_last.image[3:6]).all()
    assert typed_text(e.actions) == "hello" and f.typed == f.words[1:]
    counts = action_counts([{"type": "click"}, None])
    assert counts[0] == 0.5 and counts[-2] == 0.5 and math.isclose(counts[-1], math.log(3), rel_tol=1e-6)
    assert pointer_plane([{"type": "drag", "x1": 0.0, "y1": 0.0, "x2": 1.0, "y2": 1.0}], 8)[0, 7, 7] == 255


def synthetic(store, n):
    """Episodes whose last screen is green on success, red on failure: learnable in a few epochs."""
    grey, ok, bad = (store.put(png(c)).sha256 for c in ((128, 128, 128), (0, 200, 0), (200, 0, 0)))
    return [Example(f"e{i}", "t", "do it", (grey,), ({"type": "click", "x": 0.5, "y": 0.5},), ok if i % 2 else bad,
                    i % 2) for i in range(n)]


def test_forward_shapes_and_a_train_step_lowers_the_loss(store):
    torch.manual_seed(0)  # unseeded, a random init once left the loss level after 8 steps (0.6979 vs 0.6975)
    examples = synthetic(store, 8)
    batch = stack([featurize(e, store.get, 16, 64) for e in examples])
    model = VerifierNet(side=16, buckets=64)
    assert model(batch).shape == (8,) and predict(model, batch).shape == (8,)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    labels = labels_of(examples)
    first = train_step(model, opt, batch, labels)
    for _ in range(8):
        last = train_step(model, opt, batch, labels)
    assert last < first
    assert len(batch.take([1, 3])) == 2


def test_fit_learns_a_visible_verdict(store):
    examples = synthetic(store, 16)
    batch = stack([featurize(e, store.get, 16, VerifierNet().config["buckets"]) for e in examples])
    model = fit(batch, labels_of(examples), VerifierTrainConfig(side=16, epochs=8, batch_size=8, lr=1e-2))
    scores = predict(model, batch).numpy()
    labels = np.array([e.label for e in examples])
    assert scores[labels == 1].min() > scores[labels == 0].max()



def test_fit_calibrated_fits_without_the_calibration_share_and_chooses_the_threshold_on_it(store):
    examples = [replace(e, task=f"t{i % 4}") for i, e in enumerate(synthetic(store, 40))]
    cfg = VerifierTrainConfig(holdout=["-"], side=16, epochs=8, batch_size=8, lr=1e-2, min_recall=1.0,
                              calibration_fraction=0.25)
    seen: list[list[str]] = []

    def batch_of(episodes):
        seen.append([e.episode_id for e in episodes])
        return stack([featurize(e, store.get, 16, VerifierNet().config["buckets"]) for e in episodes]), list(episodes)

    model, threshold = fit_calibrated(examples, cfg, batch_of)
    fitted, calibration = seen
    assert not set(fitted) & set(calibration) and len(fitted) + len(calibration) == len(examples)
    assert 0 < len(calibration) < len(fitted)
    cal = [e for e in examples if e.episode_id in calibration]
    scores = predict(model, batch_of(cal)[0]).tolist()
    # the recall asked (1.0) on that share: the lowest score of its successes, not of the fitted episodes'
    assert threshold == min(s for s, e in zip(scores, cal) if e.label == 1)
    assert any(s < threshold for s, e in zip(scores, cal) if e.label == 0)

@pytest.fixture
def served(store):
    model = VerifierNet(side=16, buckets=64)
    server = make_server(model, 0.4, store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, model
    server.shutdown()
    server.server_close()


def post(server, body: bytes, path="/score"):
    req = urllib.request.Request(f"http://127.0.0.1:{server.server_port}{path}", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_score_body_answers_a_request_and_refuses_bad_input(store):
    model, sha = VerifierNet(side=16, buckets=64), store.put(png((1, 2, 3))).sha256
    request = {"task": "t", "instruction": "i", "steps": [{"screenshot": sha, "action": None}]}
    status, reply = score_body(json.dumps({"request": request}).encode(), model, 0.4, store.get)
    assert status == 200 and 0.0 <= reply["score"] <= 1.0 and reply["threshold"] == 0.4
    assert score_body(b"{nope", model, 0.4, store.get)[1]["error"].startswith("the body is not JSON")
    assert "must be a JSON object" in score_body(b'{"trajectory": {}}', model, 0.4, store.get)[1]["error"]
    missing = {**request, "steps": [{"screenshot": SHA[7]}]}
    assert "not in the verifier's blob store" in score_body(json.dumps({"request": missing}).encode(), model, 0.4, store.get)[1]["error"]
    junk = store.put(b"not a png").sha256
    broken = {**request, "steps": [{"screenshot": junk}]}
    status, reply = score_body(json.dumps({"request": broken}).encode(), model, 0.4, store.get)
    assert status == 400 and "not a readable image" in reply["error"]


def test_the_server_answers_bad_input_with_400_and_goes_on(served, store):
    server, _ = served
    sha = store.put(png((9, 9, 9))).sha256
    good = json.dumps({"request": {"task": "t", "instruction": "i", "steps": [{"screenshot": sha}]}}).encode()
    for bad in (b"{nope", b"[]", json.dumps({"request": {"task": "t"}}).encode()):
        status, reply = post(server, bad)
        assert status == 400 and reply["error"]
    status, reply = post(server, good)
    assert status == 200 and 0.0 <= reply["score"] <= 1.0
    assert post(server, good, "/elsewhere")[0] == 404
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/health", timeout=10) as resp:
        assert json.loads(resp.read()) == {"ok": True, "threshold": 0.4}


@pytest.mark.parametrize("x", ["Infinity", "-Infinity", "1e308"])
def test_a_pointer_coordinate_that_is_not_finite_is_bad_input(store, x):
    """json.loads reads Infinity, and 1e308 times the side overflows: a 400 saying so, not a
    handler that dies without a reply."""
    sha = store.put(png((1, 2, 3))).sha256
    body = ('{"request": {"task": "t", "instruction": "i", "steps": [{"screenshot": "%s", '
            '"action": {"type": "click", "x": %s, "y": 0.5}}]}}' % (sha, x)).encode()
    status, reply = score_body(body, VerifierNet(side=16, buckets=64), 0.4, store.get)
    assert status == 400 and "finite" in reply["error"]


def test_a_screenshot_too_large_to_decode_is_bad_input(store, monkeypatch):
    """PIL refuses an image past twice MAX_IMAGE_PIXELS (a decompression bomb) with an error of
    its own, not an OSError: the server answers it as an unreadable image."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # the 32 x 32 screenshot is past 2 x 100
    sha = store.put(png((1, 2, 3))).sha256
    body = json.dumps({"request": {"task": "t", "instruction": "i", "steps": [{"screenshot": sha}]}}).encode()
    status, reply = score_body(body, VerifierNet(side=16, buckets=64), 0.4, store.get)
    assert status == 400 and "not a readable image" in reply["error"]


@pytest.mark.parametrize("bad", [{"holdout": []}, {"side": 8}, {"epochs": 0}, {"batch_size": 0}, {"lr": 0.0},
                                 {"minutes": float("nan")}, {"min_recall": 0.0}, {"min_recall": 1.5},
                                 {"calibration_fraction": 1.0}, {"per_task_label_cap": 0}])
def test_a_verifier_training_config_that_could_only_fail_later_is_refused_at_start(bad):
    with pytest.raises(ConfigError):
        VerifierTrainConfig(**{"holdout": ["click-test"], **bad}).validate()
    assert VerifierTrainConfig(holdout=["click-test"]).validate().holdout == ["click-test"]


def test_the_verifiers_eval_and_serve_configs_refuse_what_they_cannot_use():
    with pytest.raises(ConfigError, match="port"):
        VerifierServeConfig(port=70000).validate()
    with pytest.raises(ConfigError, match="model"):
        VerifierEvalConfig(model="").validate()
    assert VerifierServeConfig(port=0).validate().port == 0


def test_a_model_saved_on_the_older_feature_layout_is_refused_with_a_clear_error(tmp_path):
    from infra.runtime.errors import UserError
    from trainer.verifier.train import load, save

    current = tmp_path / "now.pt"
    save(current, VerifierNet(side=16, buckets=64), 0.5, ["a"], ["b"])
    model, blob = load(current)
    assert blob["config"]["image_channels"] == 11 and model.config == blob["config"]
    unrecorded = tmp_path / "unrecorded.pt"  # the current layout saved without saying so still loads
    torch.save({**blob, "config": {k: v for k, v in blob["config"].items() if k != "image_channels"}}, unrecorded)
    assert load(unrecorded)[0].config == blob["config"]
    older = tmp_path / "older.pt"
    blob = torch.load(current, weights_only=True)
    blob["config"].pop("image_channels")  # saved before the layout was recorded, on 7 planes
    blob["state_dict"]["convs.0.weight"] = blob["state_dict"]["convs.0.weight"][:, :7]
    torch.save(blob, older)
    with pytest.raises(UserError, match="7 image planes.*train it again"):
        load(older)
