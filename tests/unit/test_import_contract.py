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


PACKAGES = ("app", "infra", "trainer", "producers", "streams", "consumers", "schemas")  # every layer of .importlinter


def local_imports_without_reason(path: Path) -> list[int]:
    """Lines of in-house imports inside a function whose group of import lines has no comment.

    A group is the run of consecutive import lines the import belongs to; a comment on one of
    its lines or on the line just above covers the whole group (STYLE: explicit imports at the
    top, function-local only where an import is heavy and optional or breaks a cycle, saying so).
    """
    import ast

    lines = path.read_text().split("\n")
    bad = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "level", 0):
                continue
            module = node.names[0].name if isinstance(node, ast.Import) else node.module
            if module.split(".")[0] not in PACKAGES:
                continue
            first = node.lineno
            while lines[first - 2].strip().startswith(("from ", "import ")):
                first -= 1
            last = node.end_lineno
            while last < len(lines) and lines[last].strip().startswith(("from ", "import ")):
                last += 1
            group = lines[first - 2:last]
            if not any("#" in line for line in group):
                bad.append(node.lineno)
    return sorted(set(bad))


def test_local_imports_say_why(tmp_path):
    """Every function-local in-house import carries a comment saying why it is local."""
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\ndef f():\n    from infra.runtime import errors\n\n"
                      "def g():\n    # local: loads torch\n    from trainer.rl import ppo\n    import schemas.codec\n")
    assert local_imports_without_reason(sample) == [4]  # the check can fail
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    roots = set(cfg["importlinter"]["root_packages"].split())
    assert set(PACKAGES) == roots, f"the check covers {sorted(PACKAGES)}, the contract {sorted(roots)}"
    offenders = [f"{p.relative_to(ROOT)}:{line}" for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
                 for line in local_imports_without_reason(p)]
    assert not offenders, "function-local imports with no comment saying why: " + ", ".join(offenders)
