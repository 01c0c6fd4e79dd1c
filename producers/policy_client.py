"""How a rollout worker asks a policy for the next action: PolicyClient implementations behind a
registry keyed by name.

- ``random``: uniform clicks on the screen (tests, baselines); log-prob of the pixel it chose.
- ``scripted``: the DOM-reading solvers of ``producers.scripted`` (the cold start's demonstrators;
  with ``noise``, a game's steps are now and then a plausible mistake, DART-style: ``noise_move``).
- ``torch``: an in-process ``infra.runtime.policy`` Policy (implemented in trainer.policies); concurrent requests from the worker's
  sandboxes are micro-batched into one ``act`` call run off the event loop.
- ``http``: a policy server or vLLM speaking OpenAI-compatible chat completions (UI-TARS text
  parsed with ``schemas.uitars.parse_output``), or a pixel policy server's ``/v1/act``.

Invariant: a reply's ``version`` is the version of the weights that produced its decision (the
torch client swaps its policy only between batches), and ``decision.logprob`` is the behaviour
log-prob of exactly ``decision.action``; ``client.sampled`` says whether that action was drawn
from the distribution (False: greedy, temperature 0 or a scripted solver; its steps are kept out of
PPO, see ``schemas.events.Step.sampled``), unless the reply says otherwise for its own decision
(``PolicyReply.sampled``: a demonstration's noise step is a draw).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from producers import scripted
from producers.games import GAMES
from producers.sandboxes.base import Obs
from schemas.actions import Action, Click, Wait
from schemas.blobs import BlobStore
from schemas.events import Observation, PolicyVersion, Step, TaskSpec
from infra.runtime.policy import build_policy, Decision, load_policy_version, past_step_json, past_steps, policy_kind, PolicyInput
from schemas.prompt import PromptSpec, history_window, to_messages, uitars_turns
from infra.runtime.errors import UserError
from schemas.uitars import parse_output
from schemas.codec import validate
from producers.sandboxes.desktop_tasks import get_task
from producers.tasks import explore_points, explore_share

log = logging.getLogger("flywheel.policy_client")


@dataclass
class PolicyRequest:
    task: TaskSpec
    obs: Obs
    step_index: int
    history: list[Step] = field(default_factory=list)
    dom: Any = None  # a DOM snapshot, only for clients with needs_dom (scripted)


@dataclass
class PolicyReply:
    decision: Decision
    version: int
    sampled: bool | None = None  # this decision's ``Step.sampled`` when it differs from the client's


class PolicyClient:
    """Base: name, current version, and the hooks the worker calls."""

    backend = "base"
    needs_dom = False  # True: the worker evaluates scripted.DOM_PROBE_JS and passes it in
    # True: every decision's action is a draw from the distribution its logprob is measured under,
    # as PPO assumes. Said by the client, not by each Decision: the client is what chooses to sample
    # or not (a greedy flag, temperature 0, a scripted solver); the policies and servers it asks
    # are asked either way and do not say which they did.
    sampled = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.version = 0
        # False while acting with weights of its own (a local init): then any published version,
        # version 0 included (pi_sft from the cold start, or the trainer's init), replaces them
        self.adopted = False

    async def act(self, request: PolicyRequest) -> PolicyReply:
        raise NotImplementedError

    async def load_version(self, pv: PolicyVersion, blobs: BlobStore) -> None:
        """Adopt a newer published version (the worker verified it is for this policy)."""
        self.version, self.adopted = pv.version, True

    async def close(self) -> None:
        pass


CLIENT_REGISTRY: dict[str, Callable[..., PolicyClient]] = {}


def register_client(name: str):
    def deco(factory):
        CLIENT_REGISTRY[name] = factory
        return factory
    return deco


def make_client(backend: str, name: str, **options: Any) -> PolicyClient:
    if backend not in CLIENT_REGISTRY:
        raise UserError(f"unknown policy backend {backend!r}; known: {', '.join(sorted(CLIENT_REGISTRY))}")
    return CLIENT_REGISTRY[backend](name=name, **options)


def policy_input(request: PolicyRequest) -> PolicyInput:
    o = request.obs.observation
    return PolicyInput(image=request.obs.image, instruction=o.instruction, screen_width=o.screen_width,
                       screen_height=o.screen_height, history=list(request.history))


# ---------------------------------------------------------------- random and scripted


@register_client("random")
class RandomClient(PolicyClient):
    """Uniform clicks: each a true draw, logged with the uniform distribution's log-prob (sampled)."""

    backend = "random"

    def __init__(self, name: str = "random", seed: int = 0, **_: Any) -> None:
        super().__init__(name)
        self._rng = random.Random(seed)

    async def act(self, request: PolicyRequest) -> PolicyReply:
        o = request.obs.observation
        px, py = self._rng.randrange(o.screen_width), self._rng.randrange(o.screen_height)
        action = Click(x=(px + 0.5) / o.screen_width, y=(py + 0.5) / o.screen_height)
        logprob = -math.log(o.screen_width * o.screen_height)
        return PolicyReply(Decision(action=action, logprob=logprob, thought="random click"), self.version)


@register_client("scripted")
class ScriptedClient(PolicyClient):
    backend = "scripted"
    needs_dom = True
    sampled = False  # demonstrations: a solver's action, not a draw; logprob 0.0 is no policy's probability

    def __init__(self, name: str = "scripted", noise: float = 0.0, **_: Any) -> None:
        super().__init__(name)
        if problem := noise_error(noise, "demonstration noise"):
            raise UserError(problem)
        self.noise = noise

    async def act(self, request: PolicyRequest) -> PolicyReply:
        task = request.task
        if task.suite == "desktop":  # desktop tasks carry their own scripted solution

            spec = get_task(task.name)
            plan = spec.solve(spec.params(task.seed, dict(task.params)))
            action = plan[request.step_index] if request.step_index < len(plan) else Wait()
        else:
            noisy = noise_move(request, self.noise)
            if noisy is not None:
                return PolicyReply(noisy, self.version, sampled=True)
            action = scripted.solve(task.name, request.obs.observation.instruction, request.dom or {})
        return PolicyReply(Decision(action=action, logprob=0.0, thought=scripted.thought(action)), self.version)


def noise_error(noise: float, name: str = "--demo-noise") -> str | None:
    """What is wrong with a demonstration's noise, a chance per step in [0, 1), or None."""
    return None if 0.0 <= noise < 1.0 else f"{name} is a chance per step in [0, 1), got {noise}"


def noise_move(request: PolicyRequest, noise: float) -> Decision | None:
    """DART's noise in a game's demonstration: with chance ``noise`` this step is a mistake drawn
    uniformly from the game's plausible moves other than the heuristic's own (``Game.mistakes``;
    logged with that draw's log-prob) instead of the heuristic's move, so the episode visits
    states the heuristic's own play never reaches and shows its recovery from them; BC imitates
    the heuristic's steps only (``Trajectory.noise_steps``). None: the heuristic moves (no noise
    asked, not a game, no board, no other move, or the first step: the demonstrator's own first
    move keeps every noisy trajectory a demonstration, never a sampled policy's episode). The draw
    is a function of the task, its seed and the step, so a retried episode repeats it."""
    game = GAMES.get(request.task.name)
    board = (request.dom or {}).get("game") if isinstance(request.dom, dict) else None
    if noise <= 0.0 or game is None or not board or request.step_index == 0:
        return None
    rng = random.Random(f"noise:{request.task.name}:{request.task.seed}:{request.step_index}")
    if rng.random() >= noise:
        return None
    choices = game.mistakes(board)
    if choices:
        own = game.player(board)
        choices = [m for m in choices if m != own]
    if not choices:
        return None
    action = rng.choice(choices)
    return Decision(action=action, logprob=-math.log(len(choices)), thought=scripted.thought(action))


# ---------------------------------------------------------------- in-process torch


@register_client("torch")
class TorchClient(PolicyClient):
    """Wraps an infra.runtime.policy Policy; requests arriving together are acted on as one batch."""

    backend = "torch"

    def __init__(self, name: str, kind: str = "pixel", config: dict[str, Any] | None = None,
                 greedy: bool = False, policy: Any = None, blobs: BlobStore | None = None, threads: int = 1,
                 **_: Any) -> None:
        super().__init__(name)
        if threads > 0:
            import torch  # heavy: only the torch backend needs it

            # One intra-op thread: the worker's batches are small and its sandboxes' browsers need
            # the other cores. More threads spin-wait for each other on a busy machine: a batch of
            # one took 9x the CPU with 2 threads as with 1 beside 4 pages (benchmarks/bench_main_loop.py).
            torch.set_num_threads(threads)
        if policy is None:

            policy = build_policy(kind, name, config or {})
        self.blobs = blobs
        self.policy = self._with_blobs(policy)
        self.version = int(policy.version)
        self.greedy = greedy
        self._pending: list[tuple[PolicyInput, float, list, asyncio.Future]] = []
        self._flushing = False

    async def act(self, request: PolicyRequest) -> PolicyReply:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((policy_input(request), explore_share(request.task), explore_points(request.task), fut))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        return await fut

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let the other sandboxes' requests of this tick join the batch
            while self._pending:
                batch, self._pending = self._pending, []
                policy = self.policy  # one batch, one version: a reload swaps between batches
                explore, at = [b[1] for b in batch], [b[2] for b in batch]
                # only a batch that explores passes it: every kind has act(inputs, greedy), a kind
                # whose ``explores`` is set takes ``explore`` and ``explore_at`` too (the demo refuses
                # --explore for others)
                extra = ((explore, at) if any(at) else (explore,)) if any(explore) else ()
                try:
                    decisions = await asyncio.to_thread(policy.act, [b[0] for b in batch], self.greedy, *extra)
                except Exception as exc:  # noqa: BLE001 - each waiting episode gets the error
                    for *_, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                version = int(policy.version)
                for (*_, fut), decision in zip(batch, decisions):
                    if not fut.done():
                        fut.set_result(PolicyReply(decision, version))
        finally:
            self._flushing = False

    async def load_version(self, pv: PolicyVersion, blobs: BlobStore) -> None:
        # load_policy_version re-checks the sha256 of the bytes it loads
        self.blobs = self.blobs or blobs
        self.policy = self._with_blobs(await asyncio.to_thread(load_policy_version, pv, blobs))
        self.version, self.adopted = pv.version, True

    @property
    def sampled(self) -> bool:
        return not self.greedy  # greedy: the policy's argmax, asked of every batch

    def _with_blobs(self, policy: Any) -> Any:
        if self.blobs is not None:
            policy.use_blob_store(self.blobs)  # a language policy shows earlier screenshots, as the trainer rebuilds them
        return policy


# ---------------------------------------------------------------- HTTP (policy server / vLLM)


def png_data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def chat_request(model: str, spec: PromptSpec, instruction: str, png: bytes, history: list[Step],
                 history_pngs: list[bytes | None], *, temperature: float, max_tokens: int) -> dict[str, Any]:
    """An OpenAI-compatible chat-completions body for one decision: schemas.prompt's context
    (the one the trainer rebuilds), screenshots as PNG data URLs (lossless: the server decodes
    the pixels the trainer loads from the blob store). ``history_pngs[i]`` is step i's screenshot,
    None outside the context's window."""
    turns = uitars_turns(spec, instruction, past_steps(history), history_pngs, png)  # what a policy may see
    return {"model": model, "messages": to_messages(turns, png_data_url), "logprobs": True,
            "temperature": temperature, "max_tokens": max_tokens}


def act_request(o: Observation, png: bytes, history: list[Step]) -> dict[str, Any]:
    """A ``/v1/act`` body: the screenshot, the instruction, the screen size and the episode so far
    (so a language policy acts in exactly the context it is trained in) as a policy may see it
    (``past_step_json``): no page URL, reward, error or label of an earlier step leaves the worker."""
    return {"image_b64": base64.b64encode(png).decode("ascii"), "instruction": o.instruction,
            "screen_width": o.screen_width, "screen_height": o.screen_height,
            "history": [past_step_json(step) for step in history]}


def parse_chat_reply(body: dict[str, Any], width: int, height: int, coord_mode: str) -> tuple[Decision, int | None]:
    """choices[0] -> Decision (UI-TARS text parsed; log-prob = sum of token log-probs)."""

    choice = body["choices"][0]
    text = choice["message"]["content"] or ""
    tokens = ((choice.get("logprobs") or {}).get("content")) or []
    logprob = float(sum(t["logprob"] for t in tokens))
    parsed = parse_output(text, width, height, coord_mode=coord_mode)
    decision = Decision(action=parsed.action, logprob=logprob, thought=parsed.thought, raw_output=text,
                        parse_error=parsed.error)
    version = body.get("policy_version")
    return decision, int(version) if isinstance(version, int) else None


def parse_act_reply(body: dict[str, Any]) -> tuple[Decision, int | None]:
    """A policy server's /v1/act reply -> Decision. ``action`` is null when a language policy's
    output did not parse: the step is still recorded, with the parse error."""

    action = None if body.get("action") is None else validate(body["action"], Action)
    value = body.get("value")
    decision = Decision(action=action, logprob=float(body["logprob"]),
                        value=None if value is None else float(value),
                        thought=body.get("thought") or "", raw_output=body.get("raw_output") or "",
                        parse_error=body.get("parse_error") or (None if action is not None else "no action"))
    version = body.get("policy_version")
    return decision, int(version) if isinstance(version, int) else None


@register_client("http")
class HttpClient(PolicyClient):
    backend = "http"

    def __init__(self, name: str, base_url: str = "http://127.0.0.1:8000", mode: str = "chat",
                 blobs: BlobStore | None = None, timeout_s: float = 60.0, temperature: float = 1.0,
                 max_tokens: int = 256, coord_mode: str = "qwen25vl", prompt: str = "short", max_images: int = 5,
                 **_: Any) -> None:
        super().__init__(name)
        if mode not in ("chat", "act"):
            raise ValueError(f"http policy mode must be 'chat' or 'act', not {mode!r}")
        self.base_url, self.mode, self.blobs = base_url.rstrip("/"), mode, blobs
        self.timeout_s, self.temperature, self.max_tokens = timeout_s, temperature, max_tokens
        # the context's shape; a published language policy's own config replaces it (load_version)
        self.spec = PromptSpec(prompt, max_images, coord_mode)
        self._session: Any = None

    @property
    def sampled(self) -> bool:
        # chat: temperature 0 is greedy decoding (trainer.serving.openai_chat, vLLM), and another temperature
        # than 1 draws from a tempered distribution while the log-prob is the policy's own; /v1/act
        # samples, as this client never sends it "greedy"
        return self.mode != "chat" or self.temperature == 1.0

    async def load_version(self, pv: PolicyVersion, blobs: BlobStore) -> None:
        await super().load_version(pv, blobs)
        spec = policy_kind(pv.kind).prompt_spec(pv.config)
        if spec is not None:  # a kind that reads a prompt: ask in exactly the context this version is trained in
            self.spec = spec

    def _history_pngs(self, history: list[Step]) -> list[bytes | None]:
        window = set(history_window(self.spec, len(history)))
        if window and self.blobs is None:
            raise RuntimeError("the chat policy client needs the blob store to show earlier screenshots")
        return [self.blobs.get(s.observation.screenshot) if i in window else None for i, s in enumerate(history)]

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        async with self._session.post(self.base_url + path, json=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"policy server {self.base_url}{path}: HTTP {resp.status}: {(await resp.text())[:300]}")
            return await resp.json()

    def _png(self, obs: Obs) -> bytes:
        ref = obs.observation.screenshot
        if self.blobs is not None and self.blobs.exists(ref.sha256):
            return self.blobs.get(ref)
        import io
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(obs.image).save(buf, format="PNG")
        return buf.getvalue()

    async def act(self, request: PolicyRequest) -> PolicyReply:
        o = request.obs.observation
        png = await asyncio.to_thread(self._png, request.obs)
        if self.mode == "chat":
            pngs = await asyncio.to_thread(self._history_pngs, request.history)
            body = chat_request(self.name, self.spec, o.instruction, png, request.history, pngs,
                                temperature=self.temperature, max_tokens=self.max_tokens)
            decision, version = parse_chat_reply(await self._post("/v1/chat/completions", body),
                                                 o.screen_width, o.screen_height, self.spec.coord_mode)
        else:
            decision, version = parse_act_reply(await self._post("/v1/act", act_request(o, png, request.history)))
        if version is not None:
            self.version = max(self.version, version)
            return PolicyReply(decision, version)
        return PolicyReply(decision, self.version)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
