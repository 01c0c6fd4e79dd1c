"""The vLLM backend: skipped with the reason where vLLM is not installed."""

from __future__ import annotations

import pytest

from trainer.vllm_backend import VllmProcess, vllm_available


def test_vllm_command_line_names_the_model_and_port(tmp_path):
    reason = vllm_available()
    if reason:
        pytest.skip(reason)
    cmd = VllmProcess("ui-tars", "127.0.0.1", 8011).command(tmp_path)
    assert "--served-model-name" in cmd and "ui-tars" in cmd and "8011" in cmd


def test_vllm_missing_is_a_clear_user_error():
    if vllm_available() is None:
        pytest.skip("vLLM is installed here; the missing-vLLM message cannot be shown")
    from infra.errors import UserError
    from trainer.vllm_backend import serve_vllm

    with pytest.raises(UserError, match="vLLM is not installed"):
        serve_vllm(None, None, None)
