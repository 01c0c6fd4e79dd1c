"""`flywheel verifier serve`: the trained verifier behind the judge protocol (streams.judge).

    POST /score  {"request": <streams.judge.judge_request>}  ->  200 {"score": P(success), "threshold": t}
    GET  /health                                             ->  200 {"ok": true, "threshold": t}

Screenshots are read from the blob store by their sha256 (the one the rollout wrote them to:
``--data-dir`` or ``--blob-url``). Bad input (not JSON, not a request, a screenshot the store
does not have or that is not an image) is answered 400 with ``{"error": "..."}`` saying what is
wrong, and the server goes on; the streams' HttpJudge retries and then dead-letters that
trajectory instead of scoring it. ``score_body`` is the pure part; the handler only moves bytes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image, UnidentifiedImageError

from schemas.blobs import BlobNotFound, BlobStore
from trainer.verifier.dataset import example_from_request
from trainer.verifier.features import featurize, stack
from trainer.verifier.model import VerifierNet, predict

log = logging.getLogger("flywheel.verifier")

MAX_BODY_BYTES = 1 << 20  # a request is a few KiB per hundred steps


def score_body(body: bytes, model: VerifierNet, threshold: float, load: Callable[[str], bytes]) -> tuple[int, dict]:
    """(HTTP status, JSON reply) for one request body."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return 400, {"error": f"the body is not JSON: {exc}"}
    if not isinstance(payload, dict) or "request" not in payload:
        return 400, {"error": "the body must be a JSON object {\"request\": {...}} (streams.judge.judge_request)"}
    try:
        example = example_from_request(payload["request"])
        features = featurize(example, load, model.config["side"], model.config["buckets"])
    except ValueError as exc:
        return 400, {"error": str(exc)}
    except BlobNotFound as exc:
        return 400, {"error": f"a screenshot is not in the verifier's blob store: {exc}"}
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:  # the bomb is no OSError
        return 400, {"error": f"a screenshot is not a readable image: {exc}"}
    score = float(predict(model, stack([features]))[0])
    return 200, {"score": score, "threshold": threshold}


def make_server(model: VerifierNet, threshold: float, store: BlobStore, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.rstrip("/") == "/health":
                self._reply(200, {"ok": True, "threshold": threshold})
            else:
                self._reply(404, {"error": "POST /score; GET /health"})

        def do_POST(self):
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                return self._reply(411, {"error": "a Content-Length is required"})
            if int(length) > MAX_BODY_BYTES:
                return self._reply(413, {"error": f"the body exceeds {MAX_BODY_BYTES} bytes"})
            body = self.rfile.read(int(length))
            if self.path.rstrip("/") not in ("", "/score"):
                return self._reply(404, {"error": "POST /score; GET /health"})
            status, reply = score_body(body, model, threshold, store.get)
            if status != 200:
                log.warning("verifier: %d %s", status, reply["error"][:200])
            self._reply(status, reply)

        def _reply(self, status: int, reply: dict) -> None:
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):  # the warning above says what matters
            pass

    return ThreadingHTTPServer((host, port), Handler)
