"""`flywheel serve --backend vllm`: a vLLM OpenAI server for GPU serving (the `vllm` extra).

vLLM's OpenAI-compatible server already speaks the client protocol of trainer.server
(``/v1/chat/completions`` with ``logprobs``, ``/v1/models``); this module configures and runs
it and follows flywheel.policy.v1 like the torch server does (trainer.reload: sha256 checked,
a tampered version refused and logged, the running one kept).

What vLLM serves: a language policy built on a real checkpoint (config ``pretrained`` = a local
Hugging Face folder, e.g. a UI-TARS / Qwen2.5-VL checkpoint). Each version is exported as that
folder's config and tokenizer plus the version's ``lm.*`` weights; the trainer-side parts
(value head, patch-embedding adapter) stay out, and vLLM uses the checkpoint's own vision
tower. A new version is loaded by restarting the vLLM process on the exported folder: slower
than an in-place weight update, but the same on every vLLM release. The ``policy_version``
field of the torch server is not added by vLLM; clients keep the version they last saw.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from infra.errors import UserError

log = logging.getLogger("flywheel.vllm")


def vllm_available() -> str | None:
    """None when vLLM can be used, else the reason it cannot."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install 'flywheel[vllm]')"
    return None


def export_hf_folder(pv, store, out: Path) -> Path:
    """A vLLM-loadable folder for ``pv``: the base checkpoint's files, this version's LM weights."""
    from safetensors.torch import load, save_file

    from infra.policy import weights_bytes

    base = pv.config.get("pretrained")
    if not base:
        raise UserError(f"{pv.policy} v{pv.version} has no 'pretrained' checkpoint folder in its config; "
                        "the vLLM backend serves policies built on a Hugging Face checkpoint")
    state = load(weights_bytes(pv, store))  # refuses a tampered file
    lm = {k[len("lm."):]: v.contiguous() for k, v in state.items() if k.startswith("lm.")}
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in Path(base).iterdir():  # config, tokenizer, processor files; not the old weights
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".pt")) and f.name != "model.safetensors.index.json":
            shutil.copy2(f, tmp / f.name)
    save_file(lm, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


class VllmProcess:
    """One ``vllm.entrypoints.openai.api_server`` child, restarted on each new version."""

    def __init__(self, name: str, host: str, port: int, extra_args: list[str] | None = None) -> None:
        self.name, self.host, self.port, self.extra = name, host, port, extra_args or []
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def command(self, folder: Path) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                "--served-model-name", self.name, "--host", self.host, "--port", str(self.port),
                "--max-logprobs", "1", *self.extra]

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
    from schemas.blobs import BlobStore
    from trainer.reload import PolicyHolder, PolicyReloader

    store = BlobStore(settings.blob_root)
    proc = VllmProcess(cfg.policy, cfg.host, cfg.port)
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
