"""One prompt and context (schemas.prompt) for rollout over HTTP, `flywheel serve` and the
trainer: the chat request for a step yields exactly the tokens the trainer scores for it."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestServer
from PIL import Image
from serving_fixtures import scored_trajectory

from infra.runtime.policy import PolicyInput, build_policy
from producers.policy_client import PolicyRequest, chat_request, make_client
from producers.sandboxes.base import Obs
from schemas.blobs import BlobStore
from schemas.events import PolicyVersion
from schemas.prompt import PromptSpec, history_window
from trainer.serving.openai_chat import parse_messages
from trainer.policies.pixel.ground import font_file
from trainer.serving.reload import PolicyHolder
from trainer.serving.server import PolicyServer, ServeConfig

CONFIG = {"max_new_tokens": 8, "max_images": 2}  # a window shorter than the history: dropped screenshots too


@pytest.fixture
def store(tmp_path):
    return BlobStore(str(tmp_path / "blobs"))


@pytest.fixture(scope="module")
def policy():
    return build_policy("lm", "lm-t", CONFIG)


def pixels(store, ref) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(store.get(ref))).convert("RGB"))


def test_the_chat_request_renders_to_the_tokens_the_trainer_scores(policy, store):
    traj = scored_trajectory(store, "ep", n_steps=4).trajectory
    steps, trained = traj.steps, policy.step_inputs(traj, store)
    spec = PromptSpec.from_config(policy.config)
    for k, step in enumerate(steps):
        window = set(history_window(spec, k))
        pngs = [store.get(s.observation.screenshot) if i in window else None for i, s in enumerate(steps[:k])]
        body = chat_request("lm-t", spec, step.observation.instruction, store.get(step.observation.screenshot),
                            steps[:k], pngs, temperature=1.0, max_tokens=8)
        served = policy.render(parse_messages(body["messages"]))  # what `flywheel serve` feeds the model
        n_context = trained[k].target.index(True)
        assert served.ids == trained[k].ids[:n_context]
        assert len(served.images) == len(trained[k].images) == min(k + 1, 2)
        for a, b in zip(served.images, trained[k].images):
            assert np.array_equal(a, b)


def http_decision_and_rebuilt_logprob(policy, store) -> tuple[float, float]:
    """Rollout's HTTP client -> the policy server -> the step the trainer rebuilds: the decision's
    behaviour log-prob and the trainer's."""
    traj = scored_trajectory(store, "ep", n_steps=3).trajectory
    history, current = traj.steps[:2], traj.steps[2]
    holder = PolicyHolder(policy.name)
    holder.swap(policy, None)

    async def main():
        server = PolicyServer(holder, ServeConfig(max_wait_ms=1.0))
        async with TestServer(server.app()) as ts:
            client = make_client("http", policy.name, base_url=str(ts.make_url("")), blobs=store, temperature=0.0)
            # the client adopts the published version's prompt spec (max_images=2 here, 5 by default)
            await client.load_version(PolicyVersion(policy=policy.name, version=0, kind="lm", uri="file:///x",
                                                    sha256="0" * 64, created_at=1.0, config=policy.config_dict()), store)
            assert client.spec.max_images == 2
            obs = Obs(observation=current.observation, image=pixels(store, current.observation.screenshot))
            try:
                return await client.act(PolicyRequest(task=traj.task, obs=obs, step_index=2, history=list(history)))
            finally:
                await client.close()

    reply = asyncio.run(asyncio.wait_for(main(), 120))
    d = reply.decision
    step = current.model_copy(update={"raw_output": d.raw_output, "logprob": d.logprob})
    rebuilt = traj.model_copy(update={"steps": [*history, step]})
    with torch.no_grad():
        logprob, _, _ = policy.evaluate(policy.step_inputs(rebuilt, store)[2:])
    return d.logprob, float(logprob[0])


def test_a_decision_over_http_is_scored_by_the_trainer_at_its_behaviour_logprob(policy, store):
    behaviour, rebuilt = http_decision_and_rebuilt_logprob(policy, store)
    assert rebuilt == pytest.approx(behaviour, abs=1e-3)


@pytest.mark.skipif(font_file("Arial") is None, reason="fontconfig (fc-match) is not installed: no text grounding")
def test_a_grounded_pointer_reads_the_same_words_over_http_as_in_the_trainer(store):
    """The server takes the instruction back from the chat's first turn (schemas.prompt
    instruction_of): the grounding it adds to the pointer is the trainer's."""
    torch.manual_seed(0)
    policy = build_policy("lm", "lm-g", {**CONFIG, "max_new_tokens": 40, "pointer": True, "coord_mode": "1000",
                                         "ground": True})
    with torch.no_grad():
        policy.ground.kinds.fill_(0.05)  # the term moves the pointer's scores by a few logits
    traj = scored_trajectory(store, "ep", n_steps=2).trajectory
    step, spec = traj.steps[1], PromptSpec.from_config(policy.config)
    body = chat_request("lm-g", spec, step.observation.instruction, store.get(step.observation.screenshot),
                        traj.steps[:1], [store.get(traj.steps[0].observation.screenshot)], temperature=1.0,
                        max_tokens=8)
    served = policy.render(parse_messages(body["messages"]))
    trained = policy.step_inputs(traj.model_copy(update={"steps": [traj.steps[0], step.model_copy(
        update={"raw_output": "Action: wait()"})]}), store)[1]
    assert served.ground is not None and trained.ground is not None and served.ground[0].any()
    assert np.array_equal(served.ground[0], trained.ground[0]) and served.ground[1] == trained.ground[1]
    behaviour, rebuilt = http_decision_and_rebuilt_logprob(policy, store)
    assert rebuilt == pytest.approx(behaviour, abs=1e-3)


def test_the_chat_client_refuses_to_drop_screenshots_it_cannot_read(store):
    steps = scored_trajectory(store, "ep", n_steps=2).trajectory.steps
    client = make_client("http", "lm-t")  # no blob store
    with pytest.raises(RuntimeError, match="needs the blob store"):
        client._history_pngs(steps[:1])


def test_an_empty_reply_is_trained_on_as_its_end_of_turn_and_a_scripted_step_is_refused(policy, store):
    """The language policy may end its turn at once (an empty reply, no action): PPO must see that
    step, scored as the one ``<|im_end|>`` it sampled; a step without text that carries an action
    was written by someone else (scripted, pixel) and is refused."""
    traj = scored_trajectory(store, "ep", n_steps=3).trajectory
    empty = traj.steps[1].model_copy(update={"raw_output": "", "action": None, "thought": "",
                                             "parse_error": "empty model output"})
    rebuilt = traj.model_copy(update={"steps": [traj.steps[0], empty, traj.steps[2]]})
    samples = policy.step_inputs(rebuilt, store)
    assert sum(samples[1].target) == 1 and samples[1].ids[-1] == policy.eos  # only its <|im_end|>
    with torch.no_grad():
        logprob = policy.evaluate(samples)[0]
        step = empty.observation
        inp_turns = policy.context_with_images(
            PolicyInput(pixels(store, step.screenshot), step.instruction, step.screen_width, step.screen_height,
                        history=[traj.steps[0]]), [pixels(store, traj.steps[0].observation.screenshot)])
        (_, eos_lp), = policy.response_logprobs([inp_turns], [""])
    assert len(eos_lp) == 1 and float(logprob[1]) == pytest.approx(eos_lp[0], abs=1e-4) and eos_lp[0] < 0
    scripted = traj.steps[1].model_copy(update={"raw_output": ""})  # an action, no text
    with pytest.raises(ValueError, match="no raw output"):
        policy.step_inputs(traj.model_copy(update={"steps": [traj.steps[0], scripted]}), store)
