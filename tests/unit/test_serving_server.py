"""The HTTP policy server in-process (no broker): OpenAI chat completions, /v1/act, errors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer

from trainer.serving.openai_chat import encode_image
from infra.runtime.policy import build_policy
from trainer.serving.reload import PolicyHolder
from trainer.serving.server import PolicyServer, ServeConfig, encode_png_b64

IMG = np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def lm():
    return build_policy("lm", "lm-srv", {"max_new_tokens": 8})


def with_client(holder: PolicyHolder, fn, **cfg):
    async def main():
        server = PolicyServer(holder, ServeConfig(**{"max_wait_ms": 20.0, **cfg}))
        async with TestClient(TestServer(server.app())) as client:
            return await fn(client, server)
    return asyncio.run(asyncio.wait_for(main(), 120))


def chat_body(text: str = "click OK", **extra):
    return {"model": "lm-srv", "logprobs": True, "messages": [
        {"role": "user", "content": [{"type": "text", "text": text},
                                     {"type": "image_url", "image_url": {"url": encode_image(IMG)}}]}], **extra}


def test_chat_completion_with_logprobs_and_policy_version(lm):
    holder = PolicyHolder("lm-srv")
    holder.swap(lm, None)

    async def fn(client, server):
        r = await client.post("/v1/chat/completions", json=chat_body(max_tokens=6))
        return r.status, await r.json()

    status, body = with_client(holder, fn)
    assert status == 200, body
    choice = body["choices"][0]
    assert body["object"] == "chat.completion" and body["policy_version"] == 0
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")
    entries = choice["logprobs"]["content"]
    assert entries and all(e["logprob"] <= 0 for e in entries)
    assert body["usage"]["completion_tokens"] == len(entries)


def test_chat_logprobs_sum_to_the_policys_decision_logprob(lm):
    """Greedy, so the server and a direct recomputation score the same text."""
    holder = PolicyHolder("lm-srv")
    holder.swap(lm, None)

    async def fn(client, server):
        r = await client.post("/v1/chat/completions", json=chat_body(temperature=0))
        return await r.json()

    body = with_client(holder, fn)
    text = body["choices"][0]["message"]["content"]
    from trainer.serving.openai_chat import parse_messages

    turns = parse_messages(chat_body()["messages"])
    _, lps = lm.response_logprobs([turns], [text])[0]
    total = sum(e["logprob"] for e in body["choices"][0]["logprobs"]["content"])
    assert total == pytest.approx(sum(lps), abs=1e-3)  # truncated answers are reported canonically too


def test_concurrent_chat_requests_are_batched(lm):
    holder = PolicyHolder("lm-srv")
    holder.swap(lm, None)

    async def fn(client, server):
        rs = await asyncio.gather(*(client.post("/v1/chat/completions", json=chat_body(f"task {i}", max_tokens=4))
                                    for i in range(4)))
        assert all(r.status == 200 for r in rs)
        health = await (await client.get("/healthz")).json()
        return server.chat.stats, health

    stats, health = with_client(holder, fn, max_wait_ms=200.0)
    assert stats.items == 4 and stats.batches < 4 and health["status"] == "ok"


def test_act_endpoint_for_the_pixel_policy():
    holder = PolicyHolder("px")
    holder.swap(build_policy("pixel", "px", {}), None)

    async def fn(client, server):
        body = {"image_b64": encode_png_b64(IMG), "instruction": "click the button", "screen_width": 80,
                "screen_height": 60}
        r = await client.post("/v1/act", json=body)
        chat = await client.post("/v1/chat/completions", json=chat_body())
        models = await (await client.get("/v1/models")).json()
        return r.status, await r.json(), chat.status, models

    status, body, chat_status, models = with_client(holder, fn)
    assert status == 200, body
    assert body["action"]["type"] in ("click", "wait", "finished", "scroll", "type", "hotkey", "left_double",
                                      "right_single", "drag")
    assert body["logprob"] <= 0 and body["policy_version"] == 0
    assert chat_status == 400  # chat completions are for language policies
    assert models["data"][0]["id"] == "px" and models["data"][0]["kind"] == "pixel"


@pytest.mark.parametrize("body, fragment", [
    ({"messages": []}, "non-empty"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     "data: URLs"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n=1"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, "last message"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
     "could not be decoded"),
])
def test_bad_requests_get_400_with_a_reason(lm, body, fragment):
    holder = PolicyHolder("lm-srv")
    holder.swap(lm, None)

    async def fn(client, server):
        r = await client.post("/v1/chat/completions", json=body)
        bad = await client.post("/v1/act", data=b"not json")
        return r.status, await r.json(), bad.status

    status, out, bad_status = with_client(holder, fn)
    assert status == 400 and fragment in out["error"]["message"]
    assert bad_status == 400


@pytest.mark.parametrize("form", ["projected", "older worker's Step"])
def test_act_endpoint_for_the_lm_policy_uses_the_episode_history(lm, form):
    from schemas.actions import Click
    from schemas.events import BlobRef, Observation, Step
    from infra.runtime.policy import PolicyInput, past_step_json

    holder = PolicyHolder("lm-srv")
    holder.swap(lm, None)
    obs = Observation(screenshot=BlobRef(sha256="ab" * 32, uri="file:///nowhere"), screen_width=80, screen_height=60)
    earlier = Step(episode_id="e", ts=1.0, step_index=0, started_at=1.0, observation=obs, action=Click(x=0.1, y=0.2),
                   raw_output="Thought: first\nAction: click(point='<point>8 12</point>')", policy="lm-srv",
                   policy_version=0, logprob=-1.0)

    async def fn(client, server):
        body = {"image_b64": encode_png_b64(IMG), "instruction": "go", "screen_width": 80, "screen_height": 60,
                "history": [past_step_json(earlier) if form == "projected" else earlier.model_dump(mode="json")]}
        r = await client.post("/v1/act", json=body)
        bad = await client.post("/v1/act", json={**body, "history": [{"kind": "step"}]})
        return await r.json(), bad.status

    out, bad_status = with_client(holder, fn)
    assert bad_status == 400
    inp = PolicyInput(IMG, "go", 80, 60, history=[earlier])
    assert "Thought: first" in lm.tok.decode(lm.decision_sample(inp, out["raw_output"]).ids)
    with torch.no_grad():
        recomputed = float(lm.sequence_logprobs([lm.decision_sample(inp, out["raw_output"])]))
    assert out["logprob"] == pytest.approx(recomputed, abs=1e-3)


def test_metrics_count_act_requests_by_result_and_time_them():
    """/metrics is prometheus-client's text format: parsed back, it holds each answered request."""
    from prometheus_client.parser import text_string_to_metric_families

    holder = PolicyHolder("px")
    holder.swap(build_policy("pixel", "px", {}), None)

    async def fn(client, server):
        body = {"image_b64": encode_png_b64(IMG), "instruction": "click the button", "screen_width": 80,
                "screen_height": 60}
        assert (await client.post("/v1/act", json=body)).status == 200
        assert (await client.post("/v1/act", json=body)).status == 200
        assert (await client.post("/v1/act", data=b"not json")).status == 400
        await client.get("/healthz")  # not an act request: not counted
        r = await client.get("/metrics")
        return r.status, r.headers["Content-Type"], await r.text()

    status, ctype, text = with_client(holder, fn)
    assert status == 200 and ctype.startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("flywheel_serve_requests_total", (("result", "200"),))] == 2
    assert samples[("flywheel_serve_requests_total", (("result", "400"),))] == 1
    assert samples[("flywheel_serve_latency_seconds_count", ())] == 3
    assert samples[("flywheel_serve_policy_version", (("policy", "px"),))] == 0
