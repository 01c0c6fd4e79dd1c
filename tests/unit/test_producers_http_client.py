"""The http PolicyClient against an in-process aiohttp server speaking both APIs."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import web

from infra.runtime.policy import past_step_from_json, past_steps
from producers.policy_client import PolicyRequest, make_client
from producers.sandboxes.base import Obs
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import BlobRef, Observation, TaskSpec
from tests.unit.test_policy_input import recorded


def request() -> PolicyRequest:
    ref = BlobRef(sha256="0" * 64, uri="file:///nowhere", width=160, height=210)
    obs = Obs(observation=Observation(screenshot=ref, screen_width=160, screen_height=210,
                                      instruction="Click the button."),
              image=np.zeros((210, 160, 3), np.uint8))
    return PolicyRequest(task=TaskSpec(task_id="t", suite="miniwob", name="click-test"), obs=obs, step_index=0)


async def serve(seen: list):
    async def chat(req):
        body = await req.json()
        seen.append(body)
        return web.json_response({
            "choices": [{"message": {"role": "assistant",
                                     "content": "Thought: press it\nAction: click(start_box='(80,105)')"},
                         "logprobs": {"content": [{"token": "x", "logprob": -1.5}, {"token": "y", "logprob": -0.5}]}}],
            "policy_version": 4})

    async def act(req):
        body = await req.json()
        seen.append(body)
        return web.json_response({"action": {"type": "click", "x": 0.25, "y": 0.75}, "logprob": -2.0, "value": 0.5,
                                   "policy_version": 9})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/act", act)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("mode", ["chat", "act"])
def test_http_client_both_modes(mode):
    async def main():
        seen: list = []
        runner, url = await serve(seen)
        client = make_client("http", "uitars", base_url=url, mode=mode)
        try:
            reply = await client.act(request())
        finally:
            await client.close()
            await runner.cleanup()
        return reply, seen

    reply, seen = asyncio.run(main())
    if mode == "chat":
        assert reply.version == 4 and reply.decision.logprob == pytest.approx(-2.0)
        assert reply.decision.action is not None and reply.decision.action.type == "click"
        assert reply.decision.thought == "press it" and "Action:" in reply.decision.raw_output
        assert seen[0]["logprobs"] is True
        assert seen[0]["messages"][-1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    else:
        assert reply.version == 9 and reply.decision.action == Click(x=0.25, y=0.75)
        assert reply.decision.value == 0.5
        assert set(seen[0]) == {"image_b64", "instruction", "screen_width", "screen_height", "history"}
        assert seen[0]["history"] == []  # first step of the episode


def test_torch_client_batches_concurrent_requests_under_one_version():
    from producers.policy_client import TorchClient

    class Recording:
        kind, name, version = "pixel", "p", 3

        def __init__(self):
            self.batches = []

        def act(self, inputs, greedy=False):
            from infra.runtime.policy import Decision

            self.batches.append(len(inputs))
            return [Decision(action=Click(x=0.5, y=0.5), logprob=-1.0, value=0.0) for _ in inputs]

    policy = Recording()
    client = TorchClient("p", policy=policy)

    async def main():
        return await asyncio.gather(*(client.act(request()) for _ in range(4)))

    replies = asyncio.run(main())
    assert policy.batches == [4] and all(r.version == 3 for r in replies)


LEAKS = ("miniwob/click-checkboxes.html", "click-checkboxes", "refused: no such element", "shell output", "0.875")
NOT_A_POLICYS = {"url", "window_title", "reward", "done", "error", "output", "logprob", "value", "policy_version",
                 "expert_action", "next_screenshot_sha256", "latency_policy_ms", "latency_env_ms", "sampled"}


def keys_of(value) -> set[str]:
    """Every key of a JSON value, at any depth."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_of(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_of(v)}
    return set()


@pytest.mark.parametrize("mode", ["chat", "act"])
def test_no_page_url_reward_or_error_of_an_earlier_step_leaves_the_worker(mode, tmp_path):
    """Whatever server answers, what the worker sends of the episode so far is the screens, the
    instruction and the policy's own output: the recorded steps' URL, reward, error, SDK output and
    DAgger label stay in the worker."""
    store = BlobStore(str(tmp_path))
    steps = [recorded(0), recorded(1)]
    steps = [s.model_copy(update={"observation": s.observation.model_copy(
        update={"screenshot": store.put(bytes([i]) * 8, "image/png")})}) for i, s in enumerate(steps)]
    steps[1] = steps[1].model_copy(update={"reward": 0.3125})

    async def main():
        seen: list = []
        runner, url = await serve(seen)
        client = make_client("http", "p", base_url=url, mode=mode, blobs=store)
        req = request()
        req.history = steps
        try:
            await client.act(req)
        finally:
            await client.close()
            await runner.cleanup()
        return seen[0]

    body = asyncio.run(main())
    sent = json.dumps(body)
    for leaked in (*LEAKS, "0.3125"):
        assert leaked not in sent, leaked
    if mode == "act":  # the server rebuilds exactly the projection a policy in this process sees
        assert not keys_of(body["history"]) & NOT_A_POLICYS, keys_of(body["history"]) & NOT_A_POLICYS
        assert [past_step_from_json(s) for s in body["history"]] == past_steps(steps)
    else:
        assert sent.count("Thought: I click it.") == 2  # the policy's own earlier output is there
