"""The language policy as a Hugging Face folder vLLM serves token for token (trainer.serving.vllm_backend
says what goes in and what is refused)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors.torch import load

from infra.runtime.errors import UserError
from infra.runtime.policy import build_policy, weights_bytes
from schemas.prompt import IM_END, chat_template


def export_refusal(config: dict) -> str | None:
    """Why a language policy with this config cannot be served exactly by vLLM, else None."""
    if int(config.get("max_images", 5)) > 0:
        return ("this policy reads screenshots through its patch-embedding adapter, which vLLM cannot run; "
                "serving its language model alone would be another policy. Serve it with --backend torch, "
                "or train a text-only policy (policy config max_images: 0, pointer: false) for vLLM")
    if not config.get("pretrained") or config.get("tokenizer", "auto") == "bytes":
        return ("this policy uses the byte tokenizer of the tiny test models, which vLLM cannot load; "
                "build it on a checkpoint (--pretrained smollm2-135m or a Hugging Face folder)")
    return None


def export_hf_folder(pv, store, out: Path) -> Path:
    """A vLLM-loadable folder for ``pv``, written atomically."""
    reason = export_refusal(pv.config)
    if reason:
        raise UserError(f"refusing to export {pv.policy} v{pv.version} to vLLM: {reason}")
    state = load(weights_bytes(pv, store))  # refuses a tampered file
    policy = build_policy(pv.kind, pv.policy, pv.config)
    policy.load_state_dict(state, strict=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.lm.save_pretrained(str(tmp))
    tok = policy.tok.tok
    tok.chat_template = chat_template()
    tok.save_pretrained(str(tmp))
    eos = policy.tok.special(IM_END)
    policy.lm.generation_config.eos_token_id = eos
    policy.lm.generation_config.save_pretrained(str(tmp))
    (tmp / "flywheel-version.json").write_text(json.dumps({"policy": pv.policy, "version": pv.version,
                                                          "sha256": pv.sha256, "eos_token_id": eos}))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out
