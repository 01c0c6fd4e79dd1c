"""Pure logic of the producers: offset commits, task files, policy-server replies, scripted solvers."""

from __future__ import annotations

import math

import pytest

from infra.runtime.errors import UserError
from producers import scripted
from producers.episode import episode_id
from producers.offsets import OffsetTracker
from producers.policy_client import CLIENT_REGISTRY, chat_request, make_client, parse_act_reply, parse_chat_reply
from schemas.prompt import PromptSpec
from producers.tasks import build_tasks, read_jsonl
from schemas.actions import Click, Type, Wait


def test_offsets_commit_only_the_contiguous_finished_prefix():
    t = OffsetTracker()
    for o in (10, 11, 12):
        t.taken("tasks", 0, o)
    assert t.finished("tasks", 0, 12) is None  # 10 and 11 still running
    assert t.finished("tasks", 0, 10) == 11
    assert t.finished("tasks", 0, 11) == 13  # 11 and the earlier-finished 12
    assert t.in_flight() == 0


def test_offsets_are_per_partition_and_forgotten_on_revoke():
    t = OffsetTracker()
    t.taken("tasks", 0, 5)
    t.taken("tasks", 1, 7)
    assert t.finished("tasks", 1, 7) == 8
    t.forget("tasks", 0)
    assert t.in_flight() == 0


def test_every_execution_gets_its_own_episode_id_that_names_its_task_and_attempt():
    first, rerun = episode_id("run.click-test.3", 0), episode_id("run.click-test.3", 0)
    assert first != rerun  # a re-run after a crash never shares the interrupted run's id
    assert first.startswith("run.click-test.3:0:") and rerun.startswith("run.click-test.3:0:")
    assert episode_id("run.click-test.3", 1, "abc") == "run.click-test.3:1:abc"
    assert len({episode_id("t", 0) for _ in range(10_000)}) == 10_000


def test_episode_ids_of_the_longest_task_ids_fit_the_schema_and_stay_apart():
    from schemas.events import EpisodeStarted, TaskSpec

    a, b = "x" * 255 + "a", "x" * 255 + "b"  # the schema's longest task ids, equal but for the end
    ids = [episode_id(t, 1000) for t in (a, b)]
    assert all(len(i) <= 256 for i in ids) and ids[0][:-13] != ids[1][:-13]
    assert episode_id(a, 0, "e1") == episode_id(a, 0, "e1")  # still derived from the task id only
    task = TaskSpec(task_id=a, suite="miniwob", name="click-test")
    started = EpisodeStarted(episode_id=ids[0], ts=1.0, task=task, attempt=1000, sandbox="browser",
                             worker_id="w", policy="p", policy_version=0)
    assert started.event_id.startswith(ids[0])


def test_build_tasks_gives_k_seeded_tasks_per_name():
    tasks = build_tasks("miniwob", ["click-test", "click-test-2"], 3, seed=10, prefix="run1")
    assert [(t.name, t.seed) for t in tasks] == [
        ("click-test", 10), ("click-test-2", 10), ("click-test", 11), ("click-test-2", 11),
        ("click-test", 12), ("click-test-2", 12)]  # interleaved
    assert len({t.task_id for t in tasks}) == 6
    with pytest.raises(UserError, match="no-such-task"):
        build_tasks("miniwob", ["no-such-task"], 1)


def test_jsonl_bad_line_names_its_line_number():
    good = '{"task_id": "a", "suite": "miniwob", "name": "click-test", "seed": 1}'
    assert len(read_jsonl([good, "", good.replace('"a"', '"b"')])) == 2
    with pytest.raises(UserError, match=r"tasks.jsonl:2: .*max_steps"):
        read_jsonl([good, good.replace('"seed": 1', '"max_steps": -1')], "tasks.jsonl")
    with pytest.raises(UserError, match=r"f:1: not valid JSON"):
        read_jsonl(["{nope"], "f")
    with pytest.raises(UserError, match=r"f:1: .*unknown miniwob task"):
        read_jsonl([good.replace("click-test", "click-nothing")], "f")


def test_chat_reply_is_parsed_with_summed_logprobs_and_server_version():
    body = {
        "choices": [{"message": {"content": "Thought: the button.\nAction: click(start_box='(80,100)')"},
                     "logprobs": {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -0.25}]}}],
        "policy_version": 7,
    }
    decision, version = parse_chat_reply(body, 160, 210, "qwen25vl")
    assert version == 7 and decision.logprob == pytest.approx(-0.75)
    assert decision.action is not None and decision.action.type == "click" and decision.parse_error is None
    bad = {"choices": [{"message": {"content": "no action here"}, "logprobs": None}]}
    decision, version = parse_chat_reply(bad, 160, 210, "qwen25vl")
    assert decision.action is None and decision.parse_error and version is None


def test_chat_request_carries_instruction_and_image():
    body = chat_request("m", PromptSpec(), "Click the button.", b"\x89PNG", [], [], temperature=1.0, max_tokens=64)
    assert body["logprobs"] is True and "Click the button." in body["messages"][0]["content"]
    assert body["messages"][-1]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


def test_act_reply():
    decision, version = parse_act_reply({"action": {"type": "click", "x": 0.5, "y": 0.25}, "logprob": -3.0,
                                         "value": 0.1, "policy_version": 2})
    assert decision.action == Click(x=0.5, y=0.25) and version == 2 and decision.value == 0.1


def test_registry_has_every_backend():
    assert {"random", "scripted", "torch", "http"} <= set(CLIENT_REGISTRY)


def test_which_clients_sample_their_actions():
    """Step.sampled comes from the client: a uniform draw and a sampling server are samples; a
    scripted solver and a chat server at temperature 0 (greedy decoding) are not."""
    assert make_client("random", "p").sampled
    assert not make_client("scripted", "p").sampled
    assert make_client("http", "p").sampled and not make_client("http", "p", temperature=0.0).sampled
    assert make_client("http", "p", mode="act", temperature=0.0).sampled  # /v1/act is never asked for greedy
    assert not make_client("http", "p", temperature=0.7).sampled  # tempered: its log-prob is the untempered one


def test_greedy_is_refused_for_a_backend_that_would_sample_anyway():
    from infra.runtime.config import ConfigError
    from producers.rollout import RolloutConfig

    assert RolloutConfig(policy_backend="torch", greedy=True).greedy
    with pytest.raises(ConfigError, match="--greedy takes the torch backend's most likely action; the http backend"):
        RolloutConfig(policy_backend="http", greedy=True)


def _dom(*els):
    return {"width": 160, "height": 210, "elements": list(els)}


def test_scripted_enter_text_clicks_types_then_submits():
    instruction = 'Enter "Ann" into the text field and press Submit.'
    field = {"tag": "input", "id": "tt", "text": "", "value": "", "focused": False, "x": 10, "y": 60, "w": 100, "h": 20}
    submit = {"tag": "button", "id": "subbtn", "text": "Submit", "value": "", "focused": False, "x": 10, "y": 90,
              "w": 50, "h": 20}
    first = scripted.solve("enter-text", instruction, _dom(field, submit))
    assert isinstance(first, Click) and math.isclose(first.x, 60 / 160)
    assert scripted.solve("enter-text", instruction, _dom({**field, "focused": True}, submit)) == Type(content="Ann")
    last = scripted.solve("enter-text", instruction, _dom({**field, "value": "Ann"}, submit))
    assert isinstance(last, Click) and math.isclose(last.y, 100 / 210)
    assert scripted.solve("no-solver", instruction, _dom()) == Wait()


def test_scripted_thoughts_say_what_and_why_never_the_tasks_name():
    """A language policy cloned from the demonstrations writes their Thought before each action:
    a task name there would teach it to name the task it must read off the screen."""
    from producers.scripted import SOLVERS
    from schemas.actions import Finished, Hotkey, PressEnter, Scroll

    instruction = 'Enter "Ann" into the text field and press Submit.'
    field = {"tag": "input", "id": "tt", "text": "", "value": "", "focused": False, "x": 10, "y": 60, "w": 100, "h": 20}
    submit = {"tag": "button", "id": "subbtn", "text": "Submit", "value": "", "focused": False, "x": 10, "y": 90,
              "w": 50, "h": 20}
    actions = [scripted.solve("enter-text", instruction, _dom(f, submit))
               for f in (field, {**field, "focused": True}, {**field, "value": "Ann"})]
    actions += [Scroll(x=0.5, y=0.5, direction="down"), Hotkey(key="ctrl a"), PressEnter(), Finished(), Wait(), None]
    thoughts = [scripted.thought(a) for a in actions]
    names = [n for n in SOLVERS if len(n) > 3]
    assert names and not [(t, n) for t in thoughts for n in names if n in t or n.replace("-", " ") in t]
    assert all(t and "scripted" not in t for t in thoughts)
    assert thoughts[1] == "The field is focused and the instruction gives its text: I type 'Ann'."
    assert thoughts[0] == thoughts[2] != thoughts[1]  # the same kind of step, the same reason
    assert "down" in thoughts[3] and "ctrl a" in thoughts[4]


def test_scripted_client_follows_a_desktop_tasks_own_plan():
    import asyncio

    import numpy as np

    from producers.policy_client import PolicyRequest, make_client
    from producers.sandboxes.base import Obs
    from producers.sandboxes.desktop_tasks import get_task
    from schemas.events import BlobRef, Observation, TaskSpec

    task = TaskSpec(task_id="d", suite="desktop", name="desktop.type-in-editor", seed=3)
    spec = get_task(task.name)
    plan = spec.solve(spec.params(3, {}))
    obs = Obs(Observation(screenshot=BlobRef(sha256="0" * 64, uri="file:///x"), screen_width=8, screen_height=8),
              np.zeros((8, 8, 3), np.uint8))
    client = make_client("scripted", "scripted")
    got = [asyncio.run(client.act(PolicyRequest(task=task, obs=obs, step_index=i))).decision.action
           for i in range(len(plan) + 1)]
    assert got == [*plan, Wait()]


def test_a_published_version_0_replaces_a_local_init_labelled_0():
    """pi_sft (or the trainer's init) is version 0; a rollout worker that built its own weights
    also says version 0 and must still load it, else it acts with weights nobody trained and the
    trainer's ratios against its log-probs explode (seen: NaN weights after the first update)."""
    import asyncio

    from producers.policy_client import RandomClient
    from producers.policy_watch import newer
    from schemas.events import PolicyVersion

    client = RandomClient(name="p")
    v0 = PolicyVersion(policy="p", version=0, kind="pixel", uri="file:///w", sha256="0" * 64, created_at=1.0)
    assert client.version == 0 and newer(v0, client)
    asyncio.run(client.load_version(v0, None))
    assert not newer(v0, client) and newer(v0.model_copy(update={"version": 1}), client)
    assert not newer(v0.model_copy(update={"policy": "q", "version": 5}), client)  # another policy's
