"""The tables docs/tasks.md gives for a games run, from ClickHouse: per game and phase the
normalised score (mean +- standard error, episodes, mean length), and, for a run with expert
labels, the policy's agreement with the heuristic on its own states per bucket of versions.

    python -m benchmarks.games_table --run-id i48a [--split 10] [--bucket 5]

Reads the platform's ClickHouse (FLYWHEEL_DATA_DIR / FLYWHEEL_CLICKHOUSE_URL, as `flywheel sql`);
the queries are app.demo_queries.game_phases and expert_agreement, printed with the tables.
"""

from __future__ import annotations

import argparse

from app.demo_queries import expert_agreement, game_phases
from app.report import query
from infra.runtime.settings import load_settings
from trainer.sft.rft import annotator_of


def markdown(cols: list[str], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(str(v) for v in r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True, help="the demo's --run-id (its policy is pixel-<run-id>)")
    ap.add_argument("--policy-kind", default="pixel", help="the demo's --policy-kind (the policy's name prefix)")
    ap.add_argument("--split", type=int, default=10, help="PPO's first phase is v1 to this version")
    ap.add_argument("--bucket", type=int, default=5, help="versions per row of the agreement table")
    args = ap.parse_args(argv)
    if args.split < 1 or args.bucket < 1:
        ap.error("--split and --bucket are versions: at least 1")
    settings = load_settings()
    policy = f"{args.policy_kind}-{args.run_id}"
    for title, sql in (("Normalised score per phase", game_phases(policy, annotator_of(policy), args.split)),
                       ("Agreement with the heuristic on the policy's own states (key presses)",
                        expert_agreement(policy, args.bucket))):
        cols, rows = query(settings, sql)
        print(f"## {title}\n\n{markdown(cols, rows) if rows else '(no rows)'}\n\n```sql\n{sql}\n```\n")


if __name__ == "__main__":
    main()
