"""No test imports a benchmark: a benchmark is run as a module of the installed package
(``python -m benchmarks.<name>``) the way a user runs it, and the logic a test checks lives in the
package proper. The check reads every file under tests/ as text, so code a test writes out and
runs (a driver script in a string) counts too."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")


def offences(source: str, benchmark_modules: list[str]) -> list[str]:
    """The lines of ``source`` that import the benchmarks package, put benchmarks/ on sys.path, or
    import one of ``benchmark_modules`` by its bare name (as a script folder on sys.path allows)."""
    bare = "|".join(re.escape(m) for m in benchmark_modules) or r"(?!)"
    patterns = [re.compile(r"^\s*(from|import)\s+benchmarks\b"),
                re.compile(r"^\s*import\s+[\w.]+(\s+as\s+\w+)?\s*,.*\bbenchmarks\b"),
                re.compile(rf"^\s*(from\s+({bare})\s+import|import\s+({bare})\b)"),
                re.compile(r"sys\.path\b.*benchmarks|benchmarks.*sys\.path\b"),
                re.compile(r"importlib\.import_module\(\s*[\"']benchmarks\b")]
    return [line.strip() for line in source.splitlines() if any(p.search(line) for p in patterns)]


def test_the_check_sees_each_way_of_importing_a_benchmark():
    modules = ["ablate", "bench_main_loop"]
    for bad in ("from benchmarks.bc_holdout import split", "import benchmarks.ablate as ablate",
                "    from ablate import main", "import bench_main_loop",
                'sys.path.insert(0, str(ROOT / "benchmarks"))', 'sys.path.append("benchmarks")',
                "    BENCH = ROOT / 'benchmarks'; sys.path.insert(0, str(BENCH))",
                'importlib.import_module("benchmarks.ablate")'):
        assert offences(bad, modules) == [bad.strip()], bad
    for fine in ("from app.ablation import runs as ablate", "import ablation_helpers",
                 '"""benchmarks/ablate.py measures this"""', "subprocess.run([sys.executable, '-m', 'benchmarks.ablate'])",
                 "sys.path.insert(0, str(tmp_path))"):
        assert offences(fine, modules) == [], fine


def test_no_test_imports_a_benchmark_or_puts_benchmarks_on_sys_path():
    assert BENCHMARKS, "benchmarks/ holds no module: the check would pass on nothing"
    here = Path(__file__).resolve()
    found = {str(p.relative_to(ROOT)): bad for p in sorted((ROOT / "tests").rglob("*.py")) if p.resolve() != here
             for bad in [offences(p.read_text(errors="replace"), BENCHMARKS)] if bad}
    assert not found, ("tests import benchmarks (move the logic into the package, or run the benchmark as "
                       f"`python -m benchmarks.<name>`): {found}")
