"""Few demonstrations recorded through the UI, plus RL: the experiment's plan and its table.

One cell is (N, seed): N demonstrations of each chosen task recorded through the Annotate view
by the recorder (``app.ui.record``: Playwright playing the person, no scripted solver) on a
platform of the cell's own (its topic prefix: a later cell never sees an earlier cell's
demonstrations), then ``flywheel demo --demos-from human`` on those tasks for the run's minutes.
N = 0 records nothing and runs the demo with its own settings for tasks without a demonstrator:
random weights, the RL issue's recipe (with the exploration floor the demo turns on from random
weights on MiniWoB++ tasks, which a cell with demonstrations, starting from pi_sft, does not have). The measure is each task's last-100 success from the
run's summary.json (``after``). Pure: command lines, names and the table; app.ablation.few_demos_runs
runs them (``python -m benchmarks.few_demos``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.ablation.runs import spread

NS = (0, 3, 10)
TASKS = ("click-collapsible-2", "click-tab-2", "click-tab-2-hard", "email-inbox-delete")
SEED_STRIDE = 1000  # each seed records its own task seeds: seed S uses S * 1000 + 0 .. N - 1


@dataclass(frozen=True)
class Cell:
    n: int  # demonstrations recorded per task
    seed: int  # the demo's --seed, and which task seeds the recorder plays

    def name(self, tag: str = "") -> str:
        return f"few{tag}-n{self.n}-s{self.seed}"

    def platform_prefix(self, tag: str = "") -> str:
        """The topics the cell's demonstrations are recorded on (the demo reads them there)."""
        return f"{self.name(tag)}."

    def annotator(self, tag: str = "") -> str:
        return self.name(tag)

    def first_task_seed(self) -> int:
        return self.seed * SEED_STRIDE


def cells(ns: list[int], seeds: list[int]) -> list[Cell]:
    """Seed-major: a cut-short experiment still has every N for the seeds it reached."""
    return [Cell(n, s) for s in seeds for n in ns]


def record_argv(python: str, cell: Cell, tasks: list[str], tag: str = "") -> list[str]:
    return [python, "-m", "app.ui.record", "--tasks", ",".join(tasks), "--n", str(cell.n),
            "--annotator", cell.annotator(tag), "--first-seed", str(cell.first_task_seed())]


# the cold start's RFT rounds and PPO epochs the table's seeds ran with (the demo's auto settings
# before 504a869 made the rounds every 8 updates, one pass, and before PPO's epochs went to 4):
# pinned so later seeds run the same recipe
CELL_RFT = ["--rft-every", "4", "--trainer-args=--rft-epochs 2 --epochs 8"]


# what a cell with demonstrations does with them: "clone" them into pi_sft (the cold start, RFT
# rounds re-cloning them), or "guide" the exploration floor's clicks with them from random weights
# (--explore-from human: N = 0's recipe, the floor drawn near where they clicked; never cloned)
USES = ("clone", "guide")


def demo_argv(python: str, cell: Cell, tasks: list[str], minutes: float, report_dir: Path, tag: str = "",
              extra: list[str] | None = None, use: str = "clone") -> list[str]:
    """The demo of one cell; N > 0 clones the cell's recorded demonstrations (only their tasks
    get a cold start) with CELL_RFT's rounds, or with ``use`` "guide" runs N = 0's recipe with
    the floor guided by them; N = 0 is the demo's default for tasks with no demonstrator.
    ``extra`` comes last: its options win (its --trainer-args replaces CELL_RFT's)."""
    if use not in USES:
        raise ValueError(f"use is one of {', '.join(USES)}, got {use!r}")
    with_demos = ["--demos-from", "human", *CELL_RFT] if use == "clone" else ["--explore-from", "human"]
    return [python, "-m", "app.cli", "demo", "--tasks", ",".join(tasks), "--minutes", f"{minutes:g}",
            "--seed", str(cell.seed), "--run-id", cell.name(tag), "--report-dir", str(report_dir),
            "--keep-broker", "--progress-s", "30", *(with_demos if cell.n else []), *(extra or [])]


def streams_argv(python: str) -> list[str]:
    """`flywheel streams` on the cell's platform: routes the recorded successes to flywheel.sft.v1."""
    return [python, "-m", "app.cli", "streams"]


def task_success(summary: dict, tasks: list[str]) -> dict[str, float | None]:
    """Each task's last-100 success from a demo's summary.json (None: the run ended none)."""
    after = summary.get("after") or {}
    return {t: after.get(t) for t in tasks}


def result_row(cell: Cell, tasks: list[str], summary: dict, recorded: dict | None) -> dict:
    """One cell of results.json: the run's per-task success and what the recorder got."""
    return {"n": cell.n, "seed": cell.seed, "run_id": summary.get("run_id"),
            "success": task_success(summary, tasks), "recorded": recorded or {},
            "notes": summary.get("notes", [])}


def table(results: list[dict], tasks: list[str], minutes: float, use: str = "clone") -> list[str]:
    """The markdown table: N demonstrations recorded through the UI × task, mean ± standard
    deviation over seeds of each task's last-100 success, and what the recorder recorded."""
    lines = [f"| N demonstrations recorded through the UI | seeds | {' | '.join(tasks)} | mean over tasks | "
             "recorded demonstrations the page scored a success |",
             "|---" * (len(tasks) + 4) + "|"]
    for n in sorted({r["n"] for r in results}):
        rows = [r for r in results if r["n"] == n]
        per_task = [spread([r["success"].get(t) for r in rows]) for t in tasks]
        means = [_mean([r["success"].get(t) for t in tasks]) for r in rows]
        got = sum(v["success"] for r in rows for v in r["recorded"].values())
        made = sum(v["recorded"] for r in rows for v in r["recorded"].values())
        lines.append(f"| {n} | {len(rows)} | {' | '.join(per_task)} | {spread(means)} | "
                     f"{f'{got} of {made}' if made else '-'} |")
    used = ("only the page's successes are cloned into pi_sft" if use == "clone" else
            "from random weights; only the page's successes guide the exploration floor's clicks, "
            "`--explore-from human`, and none is cloned")
    return [f"Each cell: `flywheel demo --tasks {','.join(tasks)} --minutes {minutes:g}` after N demonstrations "
            "of each task recorded through the Annotate view by the recorder (`python -m app.ui.record`: "
            f"Playwright playing the person, no scripted solver; {used}); "
            "N = 0 from random weights. Last-100 success per task, mean ± standard deviation over seeds.", "",
            *lines]


def _mean(values: list) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None
