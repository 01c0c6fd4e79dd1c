"""The import contract (.importlinter) covers every infra module, and it holds."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runtime_layer() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = [ln.strip() for ln in cfg["importlinter:contract:layers"]["layers"].splitlines() if ln.strip()]
    runtime = next(layer for layer in layers if "infra.settings" in layer)
    return {m.strip() for m in runtime.split(":")}


def test_every_infra_module_is_in_a_layer():
    modules = {f"infra.{p.stem}" for p in (ROOT / "infra").glob("*.py") if p.stem != "__init__"}
    modules |= {f"infra.{p.name}" for p in (ROOT / "infra").iterdir()
                if p.is_dir() and (p / "__init__.py").exists() and p.name != "app"}
    missing = modules - _runtime_layer()
    assert not missing, f"add these infra modules to the runtime layer of .importlinter: {sorted(missing)}"


def test_import_contract_holds():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports (import-linter) is not installed: it is in the test extra", pytrace=False)
    proc = subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
