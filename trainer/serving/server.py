"""`flywheel serve`: the current policy version over HTTP, hot-reloaded from flywheel.policy.v1.

Endpoints:
- ``POST /v1/chat/completions``: OpenAI-compatible, for language policies (trainer.serving.openai_chat);
- ``POST /v1/act``: ``{"image_b64", "instruction", "screen_width", "screen_height", "greedy"?,
  "history"?: [earlier step: {"observation": {"screenshot", "screen_width", "screen_height",
  "instruction"}, "thought", "raw_output", "action"}]}`` (``infra.runtime.policy.past_step_json``)
  -> ``{"action": unified action JSON | null, "logprob", "value", "policy_version", "thought",
  "raw_output", "parse_error"}``, for any policy kind (the pixel policy's endpoint). For a
  language policy with ``history`` the context is exactly the one the trainer rebuilds from the
  steps (earlier screenshots read from the shared blob store), so its log-prob needs no care;
- ``GET /v1/models``, ``GET /healthz``.

Concurrent requests are batched dynamically (trainer.serving.batching); every batch runs on one policy
version, the one ``holder.policy`` held when the batch started. Versions are hot-reloaded after
their sha256 is checked; a refused version is logged and listed on /healthz while the previous
one keeps serving (trainer.serving.reload). The server commits no offsets and writes nothing to Kafka.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from infra.runtime.metrics import process_metrics
from infra.runtime.config import opt
from trainer.rl.config import place
from infra.runtime.errors import UserError
from trainer.serving.batching import DynamicBatcher
from trainer.serving.openai_chat import BadRequest, ChatParams, chat_response, decode_image, parse_messages, parse_params
from infra.runtime.policy import PastStep, build_policy, load_policy_version, past_step_from_json, policy_kind, PolicyInput
from trainer.serving.reload import PolicyHolder, PolicyReloader
from schemas.codec import DecodeError
from schemas.blobs import BlobStore

ACT_PATHS = frozenset({"/v1/act", "/v1/chat/completions"})
log = logging.getLogger("flywheel.serve")
RELOADER = web.AppKey("reloader", object)


@dataclass
class ServeConfig:
    policy: str = opt("lm", "name of the policy to serve (its key on flywheel.policy.v1)")
    kind: str = opt("lm", "policy kind to build while no version is published yet (a registered kind: lm, pixel)")
    init_config: str = opt("", "JSON model config of that version-0 policy (empty: the kind's defaults)")
    backend: str = opt("torch", "torch: in-process model; vllm: a vLLM OpenAI server (the vllm extra)",
                       choices=("torch", "vllm"))
    host: str = opt("127.0.0.1", "address to listen on")
    port: int = opt(8000, "port to listen on (the rollout worker's HTTP policy client defaults to 8000)")
    max_batch: int = opt(8, "most requests run in one forward pass (1 turns batching off)")
    max_wait_ms: float = opt(5.0, "how long a request waits for others to share its forward pass")
    max_completion: int = opt(512, "largest max_tokens a chat request may ask for")
    device: str = opt("cpu", "torch device of the model (cpu, cuda, cuda:1, ...)")
    vllm_dtype: str = opt("float32", "--backend vllm: the dtype vLLM computes in. float32 serves the trained "
                          "policy (its greedy replies and log-probs match the torch policy's); bfloat16 is a "
                          "little faster but shifts log-probs by up to 0.1-0.2 per token (docs/language-policy.md)",
                          choices=("float32", "bfloat16", "float16"))
    follow: bool = opt(True, "follow flywheel.policy.v1 and hot-reload new versions")
    catchup_timeout_s: float = opt(60.0, "how long start-up waits to load the latest published version")


@dataclass
class ChatItem:
    turns: list
    params: ChatParams


@dataclass
class ActItem:
    inp: PolicyInput
    greedy: bool


class PolicyServer:
    """Request handling around a ``PolicyHolder``; the reloader (if any) swaps its policy."""

    def __init__(self, holder: PolicyHolder, cfg: ServeConfig) -> None:
        self.holder, self.cfg = holder, cfg
        self.chat = DynamicBatcher(self._run_chat, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms,
                                   key=lambda it: (it.params.greedy, it.params.temperature, it.params.max_tokens))
        self.act = DynamicBatcher(self._run_act, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms,
                                  key=lambda it: it.greedy, executor=self.chat.executor)  # one model, one thread
        self.started = time.time()
        self.prom = process_metrics("serve")  # on this server's own /metrics

    # ------------------------------------------------------------ batch functions (worker thread)

    def _run_chat(self, items: list[ChatItem]) -> list[dict[str, Any]]:
        policy, version = self.holder.policy, self.holder.version
        if not policy_kind(policy.kind).chat:  # then a ChatPolicy
            raise BadRequest(f"policy {self.holder.name} is a {self.holder.kind} policy: use POST /v1/act")
        p = items[0].params
        contexts = [policy.render(it.turns) for it in items]
        gens = policy.generate(contexts, greedy=p.greedy, temperature=p.temperature, max_new_tokens=p.max_tokens)
        tokens: list[list[tuple[int, float]] | None] = [None] * len(items)
        if p.logprobs:
            for i, g in enumerate(gens):
                if policy.canonical(g):
                    tokens[i] = list(zip(g.token_ids, g.token_logprobs))
            redo = [i for i, t in enumerate(tokens) if t is None]
            if redo:  # report the canonical tokens, whose sum the trainer recomputes (see lm.py)
                for i, (ids, lps) in zip(redo, policy.response_logprobs([items[i].turns for i in redo],
                                                                        [policy.written(gens[i].text) for i in redo])):
                    tokens[i] = list(zip(ids, lps))
        out = []
        for i, g in enumerate(gens):
            entries = None if tokens[i] is None else [(*policy.tok.piece(t), lp) for t, lp in tokens[i]]
            out.append(chat_response(self.holder.name, version, policy.written(g.text), g.finished, g.value, entries,
                                     len(contexts[i].ids)))
        return out

    def _run_act(self, items: list[ActItem]) -> list[dict[str, Any]]:
        policy, version = self.holder.policy, self.holder.version
        decisions = policy.act([it.inp for it in items], greedy=items[0].greedy)
        return [{
            "action": d.action.model_dump(mode="json") if d.action is not None else None,
            "logprob": d.logprob, "value": d.value, "policy_version": version, "thought": d.thought,
            "raw_output": d.raw_output, "parse_error": d.parse_error,
        } for d in decisions]

    # ------------------------------------------------------------ HTTP handlers

    async def chat_completions(self, request: web.Request) -> web.Response:
        body = await _json(request)
        try:
            item = ChatItem(parse_messages(body.get("messages")), parse_params(body, self.cfg.max_completion))
            return web.json_response(await self.chat.submit(item))
        except BadRequest as exc:
            return _error(400, str(exc))

    async def act_endpoint(self, request: web.Request) -> web.Response:
        body = await _json(request)
        try:
            item = ActItem(_act_input(body), bool(body.get("greedy", False)))
            return web.json_response(await self.act.submit(item))
        except BadRequest as exc:
            return _error(400, str(exc))

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.holder.name, "object": "model", "created": int(self.holder.loaded_at or self.started),
            "owned_by": "flywheel", "policy_version": self.holder.version, "kind": self.holder.kind}]})

    async def healthz(self, request: web.Request) -> web.Response:
        reloader = request.app.get(RELOADER)
        ok = self.holder.policy is not None
        return web.json_response({
            "status": "ok" if ok else "loading", "policy": self.holder.name, "kind": self.holder.kind,
            "policy_version": self.holder.version, "loaded_at": self.holder.loaded_at,
            "refused": self.holder.refused, "reloader_error": getattr(reloader, "error", None),
            "batches": self.chat.stats.batches + self.act.stats.batches,
            "mean_batch": _mean_batch(self.chat.stats, self.act.stats),
        }, status=200 if ok else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        self.prom["flywheel_serve_policy_version"].labels(policy=self.holder.name).set(self.holder.version)
        return web.Response(body=generate_latest(self.prom.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @web.middleware
    async def _measured(self, request: web.Request, handler):
        """Requests to act on (/v1/act, chat) counted by result and timed, on /metrics."""
        if request.path not in ACT_PATHS:
            return await handler(request)
        t0, status = time.perf_counter(), 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:  # aiohttp's own answers (a body that is no JSON: 400)
            status = exc.status
            raise
        finally:
            self.prom["flywheel_serve_requests_total"].labels(result=str(status)).inc()
            self.prom["flywheel_serve_latency_seconds"].observe(time.perf_counter() - t0)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=32 * 1024 * 1024, middlewares=[self._measured, _errors_as_json])
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/act", self.act_endpoint)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics)

        async def start(app: web.Application) -> None:
            await self.chat.start()
            await self.act.start()

        async def stop(app: web.Application) -> None:
            await self.chat.close()
            await self.act.close()
            self.chat.executor.shutdown(wait=False)

        app.on_startup.append(start)
        app.on_cleanup.append(stop)
        return app


def _act_input(body: dict[str, Any]) -> PolicyInput:
    try:
        w, h = int(body["screen_width"]), int(body["screen_height"])
        image = body["image_b64"]
    except (KeyError, TypeError, ValueError):
        raise BadRequest("expected image_b64, instruction, screen_width, screen_height") from None
    if not isinstance(image, str) or w <= 0 or h <= 0:
        raise BadRequest("image_b64 must be a base64 string and the screen size positive")
    instruction = body.get("instruction", "")
    if not isinstance(instruction, str):
        raise BadRequest("instruction must be a string")
    return PolicyInput(decode_image(image), instruction, w, h, history=_history(body.get("history", [])))


def _history(raw: Any) -> list[PastStep]:
    """Earlier steps of the episode as a policy may see them (``past_step_json``'s form): the LM
    policy's UI-TARS context, as in training."""

    if not isinstance(raw, list):
        raise BadRequest("history must be a list of earlier steps")
    try:
        return [past_step_from_json(s) for s in raw]
    except DecodeError as exc:
        raise BadRequest(f"history: {exc}") from None


def _mean_batch(*stats) -> float:
    batches = sum(s.batches for s in stats)
    return sum(s.items for s in stats) / batches if batches else 0.0


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise web.HTTPBadRequest(text=json.dumps({"error": {"message": "body is not JSON"}}),
                                 content_type="application/json") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text=json.dumps({"error": {"message": "body must be a JSON object"}}),
                                 content_type="application/json")
    return body


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error" if status == 400
                                        else "server_error"}}, status=status)


@web.middleware
async def _errors_as_json(request: web.Request, handler):
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except UserError as exc:
        return _error(400, str(exc))
    except Exception as exc:  # one failed request must not take the server down
        log.exception("request to %s failed", request.path)
        return _error(500, f"{type(exc).__name__}: {exc}")


def encode_png_b64(image) -> str:
    """Client helper: H x W x 3 uint8 -> the base64 PNG ``/v1/act`` expects."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def serve_forever(app: web.Application, host: str, port: int) -> None:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("serving on http://%s:%d", host, port)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def torch_loader(store, device: str):
    """PolicyVersion -> a verified, loaded policy on ``device`` (refuses a sha256 mismatch)."""

    def load(pv):
        policy = place(load_policy_version(pv, store), device, "flywheel serve")  # refused: the reloader keeps its current one
        policy.use_blob_store(store)  # a policy that shows earlier screenshots of an episode finds them there
        return policy
    return load


def build_server(settings, cfg: ServeConfig):
    """The server with its reloader started and caught up (or a version-0 policy if none is published)."""

    store = BlobStore(settings.blob_root)
    holder = PolicyHolder(cfg.policy)
    try:
        init = json.loads(cfg.init_config) if cfg.init_config else {}
    except json.JSONDecodeError as exc:
        raise UserError(f"init_config is not JSON: {exc}") from None
    fresh = place(build_policy(cfg.kind, cfg.policy, init), cfg.device, "flywheel serve")
    holder.swap(fresh, None)  # unpublished: any published version, v0 included, replaces it
    reloader = None
    if cfg.follow:
        reloader = PolicyReloader(settings, holder, torch_loader(store, cfg.device))
        reloader.start()
        if not reloader.caught_up.wait(cfg.catchup_timeout_s):
            log.warning("policy topic not read to its end after %.0fs; serving %s v%d meanwhile",
                        cfg.catchup_timeout_s, holder.name, max(holder.version, 0))
    if not holder.published:
        log.info("no published version of %s: serving a fresh %s policy as v0", cfg.policy, cfg.kind)
    server = PolicyServer(holder, cfg)
    app = server.app()
    if reloader is not None:
        app[RELOADER] = reloader
        app.on_cleanup.append(lambda app: _stop_reloader(reloader))
    return server, app


async def _stop_reloader(reloader) -> None:
    reloader.stop()
    await asyncio.to_thread(reloader.join, 5)
