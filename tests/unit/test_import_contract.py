"""The import contract (.importlinter) names packages, covers every infra package, and holds."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _layer_names() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    layers = [ln.strip() for ln in cfg["importlinter:contract:layers"]["layers"].splitlines() if ln.strip()]
    return [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]


def test_contract_names_packages_and_covers_infra():
    """Every layer is a package (a folder with __init__.py), never a module list, and every
    folder of infra/ is in a layer, so a new module needs no edit of the contract."""
    names = _layer_names()
    for name in names:
        folder = ROOT / name.replace(".", "/")
        assert (folder / "__init__.py").exists(), f"layer {name!r} of .importlinter is not a package"
    infra_modules = [p for p in (ROOT / "infra").glob("*.py") if p.stem != "__init__"]
    assert not infra_modules, f"infra/ holds modules outside its layer packages: {infra_modules}"
    infra_packages = {f"infra.{p.name}" for p in (ROOT / "infra").iterdir() if (p / "__init__.py").exists()}
    missing = infra_packages - set(names)
    assert not missing, f"add these infra packages to a layer of .importlinter: {sorted(missing)}"


def test_import_contract_holds():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports (import-linter) is not installed: it is in the test extra", pytrace=False)
    proc = subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
