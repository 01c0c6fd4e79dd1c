"""The figure of docs/verifier.md's RL comparison: per starter task, the page's success over time in
the runs rewarded by the page and in those rewarded by the learned verifier, and beside them how
often the verifier called an episode a success in its own runs (where that climbs and the page's
does not, the policy learns the verifier, not the task).

    python -m benchmarks.verifier_rl_figure --page st-floor-s0,st-floor-s1 --verifier st-ver-s0,st-ver-s1 \
        --out docs/verifier-rl/by_task.png

Reads the run's log (FLYWHEEL_DATA_DIR, var/ by default): run it when no demo holds its chDB.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.ablation.plot import plot_by_task
from infra.clickhouse.client import query_client
from infra.runtime.settings import load_settings

WINDOW_S = 120  # seconds per point

# per task and window of the run: the page's success and the scorer's V(s) (the verifier's verdict
# where it decided the task), over the run's ended episodes, from its first one
CURVE_SQL = """
SELECT task_name, intDiv(toUnixTimestamp(scored_at) - t0, {w:UInt32}) AS window,
       count() AS episodes, avg(success) AS page, avg(verdict) AS verdict
FROM scored FINAL,
     (SELECT toUnixTimestamp(min(scored_at)) AS t0 FROM scored FINAL WHERE policy = {p:String}) AS first
WHERE policy = {p:String} AND status = 'ended'
GROUP BY task_name, window ORDER BY task_name, window
"""


def curves(client, policy: str, column: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for task, window, _n, page, verdict in client.query(CURVE_SQL, parameters={"w": WINDOW_S, "p": policy}).result_rows:
        value = page if column == "page" else verdict
        out.setdefault(task, []).append({"seconds": (window + 0.5) * WINDOW_S, "success_rate": float(value)})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--page", required=True, help="run ids rewarded by the page, comma separated")
    ap.add_argument("--verifier", required=True, help="run ids rewarded by the verifier, comma separated")
    ap.add_argument("--out", default="verifier_rl_by_task.png")
    args = ap.parse_args(argv)
    client, _ = query_client(load_settings())
    try:
        results = [{"config": "page's reward: the page's success", "task_curves": curves(client, f"pixel-{r}", "page")}
                   for r in args.page.split(",")]
        for r in args.verifier.split(","):
            results.append({"config": "verifier's reward: the page's success",
                            "task_curves": curves(client, f"pixel-{r}", "page")})
            results.append({"config": "verifier's reward: the verifier's success",
                            "task_curves": curves(client, f"pixel-{r}", "verdict")})
    finally:
        client.close()
    runs = [*args.page.split(","), *[v for v in args.verifier.split(",") for _ in (0, 1)]]  # a verifier run: two results
    for run in dict.fromkeys(run for run, r in zip(runs, results) if not r["task_curves"]):
        print(f"no episode of pixel-{run} in this log: left out of the figure")
    order = [r["config"] for r in results[:1]] + ["verifier's reward: the page's success",
                                                  "verifier's reward: the verifier's success"]
    drawn = plot_by_task(results, Path(args.out), "success", f"{WINDOW_S} s", order)
    print(f"{args.out}: {len(drawn)} tasks")


if __name__ == "__main__":
    main()
