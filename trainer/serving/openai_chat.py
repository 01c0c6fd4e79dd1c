"""OpenAI chat-completions wire format <-> the LM policy's turns and generations (pure functions).

Requests: ``messages`` whose ``content`` is a string or a list of ``{"type": "text", "text"}`` and
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` parts; ``temperature``
(0 = greedy), ``max_tokens`` / ``max_completion_tokens``, ``logprobs``. Responses follow the
OpenAI schema, with ``choices[0].logprobs.content[]`` per token and two non-standard top-level
fields: ``policy_version`` (the weights that wrote the answer) and ``value`` (the critic's
estimate of the state). With ``finish_reason == "stop"`` the content log-probs end with the
``<|im_end|>`` token, so their sum is the behaviour log-prob the trainer recomputes.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from schemas.prompt import Turn


class BadRequest(ValueError):
    """The request cannot be served; the message goes back to the client with HTTP 400."""


ROLES = ("system", "user", "assistant")
MAX_IMAGE_BYTES = 16 * 1024 * 1024


def decode_image(data: str) -> np.ndarray:
    """A data: URL (or bare base64) of a PNG/JPEG -> H x W x 3 uint8."""
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        if ";base64" not in header:
            raise BadRequest("image data URLs must be base64 (data:image/png;base64,...)")
    elif data.startswith(("http://", "https://", "file:")):
        raise BadRequest("only data: URLs are accepted for images (the server fetches nothing)")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("image is not valid base64") from None
    if len(raw) > MAX_IMAGE_BYTES:
        raise BadRequest(f"image is {len(raw)} bytes; the limit is {MAX_IMAGE_BYTES}")
    try:
        return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
    except (UnidentifiedImageError, OSError) as exc:
        raise BadRequest(f"image could not be decoded: {exc}") from None


def encode_image(image: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def parse_messages(messages: Any) -> list[Turn]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}]: expected an object with role in {ROLES}")
        content = m.get("content")
        if isinstance(content, str):
            parts: list[Any] = [content]
        elif isinstance(content, list):
            parts = [_part(p, i, j) for j, p in enumerate(content)]
        else:
            raise BadRequest(f"messages[{i}].content must be a string or a list of parts")
        turns.append(Turn(m["role"], parts))
    if turns[-1].role == "assistant":
        raise BadRequest("the last message must not be the assistant's: the server writes the next turn")
    return turns


def _part(p: Any, i: int, j: int) -> Any:
    kind = p.get("type") if isinstance(p, dict) else None
    if kind == "text" and isinstance(p.get("text"), str):
        return p["text"]
    if kind == "image_url":
        url = p.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str):
            raise BadRequest(f"messages[{i}].content[{j}].image_url.url must be a string")
        return decode_image(url)
    raise BadRequest(f"messages[{i}].content[{j}]: expected a text or image_url part")


@dataclass
class ChatParams:
    greedy: bool
    temperature: float
    max_tokens: int | None
    logprobs: bool


def parse_params(body: dict[str, Any], max_tokens_limit: int) -> ChatParams:
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    if body.get("stream"):
        raise BadRequest("streaming responses are not supported")
    temperature = body.get("temperature", 1.0)
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise BadRequest("temperature must be a number >= 0")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_limit):
        raise BadRequest(f"max_tokens must be an integer in [1, {max_tokens_limit}]")
    return ChatParams(greedy=temperature == 0, temperature=float(temperature) or 1.0,
                      max_tokens=max_tokens, logprobs=bool(body.get("logprobs")))


def token_entry(token: str, token_bytes: list[int], logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": token_bytes, "top_logprobs": []}


def chat_response(model: str, version: int, text: str, finished: bool, value: float,
                  tokens: list[tuple[str, list[int], float]] | None, prompt_tokens: int) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop" if finished else "length",
        "logprobs": None if tokens is None else {"content": [token_entry(*t) for t in tokens]},
    }
    completion = len(tokens) if tokens is not None else 0
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                  "total_tokens": prompt_tokens + completion},
        "policy_version": version,
        "value": value,
    }
