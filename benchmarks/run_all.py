"""Every Flywheel figure against its raw baseline, measured side by side in one run.

    python -m benchmarks.run_all                     # pipeline, Faust's floor, rollout, sink, trainer, codec
    python -m benchmarks.run_all --demo-minutes 15   # + async vs sync demo to the success target
    python -m benchmarks.run_all --write docs/performance.md

Each row runs one benchmark script of this folder as a child process (same broker, same
machine, same minute) and reads the figures it prints; the baseline is measured by the same
script in the same run. A benchmark that fails shows its error in the table instead of a number.
With no broker configured or running, one is started for the run and stopped at its end
(infra/kafka/own_broker.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from app.provenance import add_allow_dirty, commit_to_run
from infra.kafka.own_broker import broker_for_benchmarks

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    figure: str
    value: str
    baseline: str
    ratio: str
    command: str


def run(module: str, *args: str, timeout: float = 900) -> tuple[str, str]:
    """``python -m benchmarks.<module> args`` from the checkout's root; -> (its output, the command shown)."""
    cmd = [sys.executable, "-m", f"benchmarks.{module}", *args]
    shown = f"python -m benchmarks.{module} {' '.join(args)}".strip()
    print(f"# {shown}", flush=True)
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "", shown + f" (timed out after {timeout:.0f}s)"
    text = out.stdout + ("\n" + out.stderr if out.returncode else "")
    print(out.stdout.strip()[-2000:], flush=True)
    if out.returncode:
        print(out.stderr.strip()[-1500:], file=sys.stderr, flush=True)
    return text, shown


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1).replace(",", "")) if m else None


def _row(figure: str, value: float | None, base: float | None, unit: str, cmd: str, text: str) -> Row:
    if value is None or base is None:
        last = (text.strip().splitlines() or ["no output"])[-1][:120]
        return Row(figure, f"failed: {last}", "", "", cmd)
    return Row(figure, f"{value:,.1f} {unit}", f"{base:,.1f} {unit}", f"{value / base:.2f}", cmd)


def bench_streams(args) -> list[Row]:
    text, cmd = run("bench_streams", "--episodes", "8400", "--steps", "10", "--latency-episodes", "60")  # 100,800 events
    worker = _num(r"now worker[^:]*: ([\d,.]+) events/s", text)
    rows = [_row("pipeline: assembler -> scorer -> router fused (1 Faust worker) vs a bare confluent-kafka loop doing the "
                 "same fused work", worker, _num(r"bare confluent-kafka[^:]*: ([\d,.]+) events/s", text),
                 "events/s", cmd, text),
            _row("pipeline (1 Faust worker) vs Faust's floor on the same backlog, same run", worker,
                 _num(r"faust floor[^:]*: ([\d,.]+) events/s", text), "events/s", cmd, text)]
    m = re.search(r"p50 (\d+) ms, p99 (\d+) ms", text)
    rows.append(Row("latency: episode's last event -> its record on flywheel.rl.v1",
                    f"p50 {m.group(1)} ms, p99 {m.group(2)} ms" if m else "failed", "", "", cmd))
    return rows


def bench_faust_floor(args) -> list[Row]:
    text, cmd = run("bench_faust_floor", "--events", "300000")
    return [_row("Faust's floor: one worker's agent that only counts the events it takes (no decode, no send) vs a bare "
                 "confluent-kafka consumer that only counts", _num(r"faust agent[^:]*: ([\d,.]+) events/s", text),
                 _num(r"bare confluent-kafka consumer[^:]*: ([\d,.]+) events/s", text), "events/s", cmd, text)]


def bench_rollout(args) -> list[Row]:
    text, cmd = run("bench_rollout", "--steps", "300", "--rounds", "4", "--sandboxes", "1,2,4")
    rows = []
    for what, pattern in (("the same browser work (click, clock advance, reward read, screenshot)",
                           r"bare Playwright click\+clock\+reward\+screenshot\s+([\d.]+) steps/s \| sandbox.step\s+([\d.]+)"),
                          ("the least a step can be (click + screenshot)",
                           r"bare Playwright click\+screenshot\s+([\d.]+) steps/s \| sandbox.step\s+([\d.]+)")):
        m = re.search(pattern, text)
        rows.append(_row(f"rollout: one browser sandbox step vs bare Playwright doing {what} on the same page",
                         float(m.group(2)) if m else None, float(m.group(1)) if m else None, "steps/s", cmd, text))
    one = _num(r"N=1:\s+([\d.]+) env steps/s", text)
    for n in (2, 4):
        rows.append(_row(f"rollout: {n} sandboxes vs 1 sandbox (scaling on 2 cores)",
                         _num(rf"N={n}:\s+([\d.]+) env steps/s", text), one, "steps/s", cmd, text))
    mem = re.search(r"= (\d+) MiB per sandbox", text)
    rows.append(Row("memory per browser sandbox (renderer USS)", f"{mem.group(1)} MiB" if mem else "failed", "", "", cmd))
    return rows


def bench_sink(args) -> list[Row]:
    text, cmd = run("bench_sink", "--episodes", "14000")
    return [_row("sink: consume+decode+map+insert+commit vs a bare consume+orjson+rows+insert+commit loop (105k events)",
                 _num(r"sink \(consume[^:]*: ([\d,.]+) rows/s", text), _num(r"bare loop \([^)]*\):\s+([\d,.]+) rows/s", text),
                 "rows/s", cmd, text)]


def bench_trainer(args) -> list[Row]:
    text, cmd = run("bench_trainer", "--rate", "8", "--updates", "6")
    try:
        data = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
    except (IndexError, ValueError):
        return [_row("trainer", None, None, "", cmd, text)]
    return [
        Row("trainer: idle fraction while trajectories flow at 8/s", f"{data['idle_fraction']:.2f}", "0 (never waits)",
            "", cmd),
        Row("trainer: PPO update per 32-trajectory batch (pixel policy)", f"{data['update_time_s_per_batch_mean']:.2f} s",
            "", "", cmd),
    ]


def bench_codec(args) -> list[Row]:
    text, cmd = run("bench_codec", "--n", "20000")
    m = re.search(r"codec encode\+decode = ([\d,]+)/s, plain orjson = ([\d,]+)/s", text)
    return [_row("codec: typed Step encode+decode vs plain orjson dumps+loads of the same dict",
                 float(m.group(1).replace(",", "")) if m else None, float(m.group(2).replace(",", "")) if m else None,
                 "events/s", cmd, text)]


def demo_speedup(args) -> list[Row]:
    """Wall-clock to the success target, asynchronous vs synchronous, both measured now."""
    times: dict[str, dict] = {}
    cmds = []
    for mode in ("async", "sync"):
        run_id = f"bench-{mode}-{int(time.time())}"
        cmd = [sys.executable, "-m", "app.cli", "demo", "--minutes", str(args.demo_minutes), "--until-target",
               "--run-id", run_id, "--tasks", "quick", "--max-steps", "1", "--cold-start-demos", "0",
               "--value-pretrain-batches", "0", "--explore", "0", *(["--sync"] if mode == "sync" else [])]
        shown = " ".join(["flywheel", *cmd[3:]])
        cmds.append(shown)
        print(f"# {shown}", flush=True)
        subprocess.run(cmd, cwd=ROOT, timeout=args.demo_minutes * 60 + 900)
        data_dir = Path(os.environ.get("FLYWHEEL_DATA_DIR", ROOT / "var"))
        summary = data_dir / "reports" / run_id / "summary.json"
        times[mode] = json.loads(summary.read_text()) if summary.exists() else {}
    rows = []
    for task in ("click-test", "click-test-2"):
        a = times["async"].get("seconds_to_target", {}).get(task)
        s = times["sync"].get("seconds_to_target", {}).get(task)
        if a and s:
            rows.append(Row(f"async vs sync: wall-clock to the {task} target (speed-up = sync/async)",
                            f"{a / 60:.1f} min", f"{s / 60:.1f} min (sync)", f"{s / a:.2f}", "; ".join(cmds)))
        else:
            rows.append(Row(f"async vs sync: {task} target", f"async {a or 'not reached'}",
                            f"sync {s or 'not reached'}", "", "; ".join(cmds)))
    return rows


def markdown(rows: list[Row], seconds: float) -> str:
    head = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()}, "
            f"{os.cpu_count()} cores, in {seconds / 60:.1f} min.", "",
            "| figure | Flywheel | raw baseline | ratio | command |", "|---|---|---|---|---|"]
    return "\n".join(head + [f"| {r.figure} | {r.value} | {r.baseline} | {r.ratio} | `{r.command}` |" for r in rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="streams,faust_floor,rollout,sink,trainer,codec", help="comma-separated benchmarks")
    ap.add_argument("--demo-minutes", type=float, default=0.0, help="also run async and sync demos to the target")
    ap.add_argument("--write", default="", help="replace the results block of this Markdown file")
    add_allow_dirty(ap)
    args = ap.parse_args()
    commit = commit_to_run(ROOT, args.allow_dirty)
    t0 = time.time()
    benches = {"streams": bench_streams, "faust_floor": bench_faust_floor, "rollout": bench_rollout, "sink": bench_sink,
               "trainer": bench_trainer, "codec": bench_codec}
    rows: list[Row] = []
    with broker_for_benchmarks():
        for name in args.only.split(","):
            rows += benches[name](args)
        if args.demo_minutes:
            rows += demo_speedup(args)
    table = markdown(rows, time.time() - t0) + f"\n\nMeasured at commit {commit['commit']}" + (
        f" with uncommitted changes to {', '.join(commit['dirty'])}" if commit["dirty"] else "") + "."
    print("\n" + table)
    if args.write:
        path = Path(args.write)
        text = path.read_text() if path.exists() else ""
        begin, end = "<!-- results:begin -->", "<!-- results:end -->"
        block = f"{begin}\n{table}\n{end}"
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), block, text, flags=re.S) if begin in text else text + "\n" + block + "\n"
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
