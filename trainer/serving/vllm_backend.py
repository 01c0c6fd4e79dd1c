"""`flywheel serve --backend vllm`: a vLLM OpenAI server for GPU serving (the `vllm` extra).

vLLM's OpenAI-compatible server already speaks the client protocol of trainer.serving.server
(``/v1/chat/completions`` with ``logprobs``, ``/v1/models``); this module configures and runs
it and follows flywheel.policy.v1 like the torch server does (trainer.serving.reload: sha256 checked,
a tampered version refused and logged, the running one kept).

What vLLM serves must be the trained policy, token for token, or nothing (``export_hf_folder``):

- the version's language model (its ``lm.*`` weights, the config with the vocabulary resized
  for the added specials) and its tokenizer with those specials;
- a chat template that renders messages exactly as schemas.prompt ``render`` does, so vLLM
  reads the tokens the policy was trained on (the HTTP client builds its messages from
  schemas.prompt too), and ``<|im_end|>`` as the end of a turn;
- not the value head: serving needs no critic (the trainer recomputes values) and vLLM's
  OpenAI server reports none; the step's ``value`` is then empty.

Refused, with the reason: a policy that reads screenshots (``max_images > 0``): its patch
adapter is not an architecture vLLM can run, and serving the language model without it would
be another policy; and a policy without a Hugging Face tokenizer (the tiny byte-tokenizer
models). A text-only policy (``max_images: 0``) built on a pretrained checkpoint is served.

A new version is loaded by restarting the vLLM process on the exported folder: slower than an
in-place weight update, but the same on every vLLM release. The ``policy_version`` field of the
torch server is not added by vLLM; clients keep the version they last saw.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

from infra.runtime.errors import UserError
from infra.runtime.policy import policy_kind
from schemas.blobs import BlobStore

log = logging.getLogger("flywheel.vllm")


def vllm_available() -> str | None:
    """None when vLLM can be used, else the reason it cannot."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install 'flywheel[vllm]')"
    return None


def export_hf_folder(pv, store, out: Path) -> Path:
    """A vLLM-loadable folder for ``pv`` (see the module docstring), written atomically by its
    kind (trainer.policies.lm.hf_export); a kind with no Hugging Face model refuses."""
    return policy_kind(pv.kind).export_hf(pv, store, out)


class VllmProcess:
    """One ``vllm.entrypoints.openai.api_server`` child, restarted on each new version.

    ``dtype`` is passed on: vLLM's "auto" computes a float32 checkpoint in bfloat16, which on an
    H100 changed 13 of 32 greedy replies of the exported SmolLM2 policy and moved token
    log-probs by up to 0.19 (benchmarks/gpu_lm.py); float32 matched all 32."""

    def __init__(self, name: str, host: str, port: int, extra_args: list[str] | None = None,
                 dtype: str = "float32") -> None:
        self.name, self.host, self.port, self.extra, self.dtype = name, host, port, extra_args or [], dtype
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def command(self, folder: Path) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                "--served-model-name", self.name, "--host", self.host, "--port", str(self.port),
                "--max-logprobs", "1", "--dtype", self.dtype, *self.extra]

    def restart(self, folder: Path) -> None:
        with self._lock:
            self.stop()
            log.info("starting vLLM on %s", folder)
            self.proc = subprocess.Popen(self.command(folder))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


def serve_vllm(settings, cfg, stop: threading.Event) -> int:
    reason = vllm_available()
    if reason:
        raise UserError(reason)
    # local: loads confluent-kafka, needed only on this path
    from trainer.serving.reload import PolicyHolder, PolicyReloader

    store = BlobStore(settings.blob_root)
    proc = VllmProcess(cfg.policy, cfg.host, cfg.port, dtype=cfg.vllm_dtype)
    root = settings.data_path / "vllm" / cfg.policy

    def load(pv):
        folder = export_hf_folder(pv, store, root / f"v{pv.version}")
        proc.restart(folder)
        return folder

    holder = PolicyHolder(cfg.policy)
    reloader = PolicyReloader(settings, holder, load)
    reloader.start()
    if not reloader.caught_up.wait(cfg.catchup_timeout_s) or holder.policy is None:
        log.warning("no loadable version of %s published yet; vLLM starts with the first one", cfg.policy)
    try:
        while not stop.is_set():
            time.sleep(1.0)
    finally:
        reloader.stop()
        proc.stop()
    return 0
