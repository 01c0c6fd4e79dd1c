"""The torch devices a device test runs on: the CPU always, a GPU where torch sees one (skipped
with the reason elsewhere; benchmarks/gpu_lm.py's notes say how they ran on a lent GPU)."""

from __future__ import annotations

import pytest
import torch

NO_CUDA = f"no CUDA device here (torch {torch.__version__}, CUDA build {torch.version.cuda}): the GPU variant runs where torch sees one"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA))]
