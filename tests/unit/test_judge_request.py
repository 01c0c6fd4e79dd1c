"""The judge sees only what a policy may see: no label leaves the streams in a judge's request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from schemas.codec import to_dict
from streams.assemble import add_event
from streams.judge import HttpJudge, JudgeError, judge_request
from tests.fakes.steps import episode_events

# Labels, and what a trajectory knows that the policy did not see; each set to a sentinel below.
LABEL_FIELDS = ("success", "outcome_reward", "reward", "score", "normalised_score", "end_reason", "value",
                "logprob", "expert_action", "status", "infra_failure", "components", "verdict")
SENTINELS = ("0.123456789", "987.654321", "0.4242424242", "0.31415926", "0.27182818", "SENTINEL-END")


def labelled_trajectory():
    """A trajectory whose labels hold sentinel values no honest request contains."""
    state, traj = None, None
    for ev in episode_events("ep-1", 3, success=True):
        state, out = add_event(state, ev, 200.0)
        traj = out or traj
    steps = [s.model_copy(update={"reward": 0.31415926, "value": 0.27182818}) for s in traj.steps]
    return traj.model_copy(update={"steps": steps, "success": True, "outcome_reward": 0.123456789,
                                   "score": 987.654321, "normalised_score": 0.4242424242,
                                   "end_reason": "SENTINEL-END"})


def keys_of(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_of(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_of(v)}
    return set()


def leaks(request: dict) -> list[str]:
    """The label fields and sentinel values found anywhere in ``request`` serialised."""
    text = json.dumps(request)
    return sorted(set(LABEL_FIELDS) & keys_of(request)) + [s for s in SENTINELS if s in text]


def test_the_request_carries_no_label():
    assert leaks(judge_request(labelled_trajectory())) == []


def test_the_leak_check_finds_labels_when_someone_re_adds_them():
    """What the request was before: the whole trajectory. The check must catch it (else it proves nothing)."""
    traj = labelled_trajectory()
    assert {"success", "outcome_reward", "reward", "0.123456789", "987.654321"} <= set(leaks(to_dict(traj)))
    assert "success" in leaks({**judge_request(traj), "success": traj.success})


def test_the_request_is_what_the_policy_saw_and_did():
    traj = labelled_trajectory()
    req = judge_request(traj)
    assert set(req) == {"task", "instruction", "steps", "final_screenshot"}
    assert req["task"] == "click-test" and req["instruction"] == "click"
    assert [s["screenshot"] for s in req["steps"]] == [s.observation.screenshot.sha256 for s in traj.steps]
    assert [s["action"]["type"] for s in req["steps"]] == ["click", "type", "click"]
    assert req["final_screenshot"] == traj.steps[-1].next_screenshot_sha256


class _Capture(BaseHTTPRequestHandler):
    bodies: list = []
    reply = b'{"score": 0.75}'
    status = 200

    def do_POST(self):
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def capture():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    _Capture.bodies, _Capture.status, _Capture.reply = [], 200, b'{"score": 0.75}'
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_http_judge_posts_the_request_only(capture):
    traj = labelled_trajectory()
    score = HttpJudge(f"http://127.0.0.1:{capture.server_port}/score", timeout_s=5).judge(traj)
    assert score == 0.75
    [body] = _Capture.bodies
    assert body == {"request": judge_request(traj)} and leaks(body) == []


def test_http_judge_raises_after_retries_when_nobody_answers(capture):
    port = capture.server_port
    capture.shutdown()
    capture.server_close()
    with pytest.raises(JudgeError, match="failed 2 times"):
        HttpJudge(f"http://127.0.0.1:{port}/score", timeout_s=1, retries=2).judge(labelled_trajectory())


def test_http_judge_does_not_ask_again_when_the_judge_refuses_the_request(capture):
    """A 400 says the request is bad: asking again cannot help, so it fails at once with the judge's reason."""
    _Capture.status, _Capture.reply = 400, b'{"error": "instruction must be a string"}'
    with pytest.raises(JudgeError, match=r"refused the request \(400\): instruction must be a string"):
        HttpJudge(f"http://127.0.0.1:{capture.server_port}/score", timeout_s=5, retries=3).judge(labelled_trajectory())
    assert len(_Capture.bodies) == 1


def test_http_judge_asks_again_when_the_judge_fails_inside(capture):
    _Capture.status, _Capture.reply = 503, b'{"error": "busy"}'
    with pytest.raises(JudgeError, match="failed 2 times"):
        HttpJudge(f"http://127.0.0.1:{capture.server_port}/score", timeout_s=5, retries=2).judge(labelled_trajectory())
    assert len(_Capture.bodies) == 2
