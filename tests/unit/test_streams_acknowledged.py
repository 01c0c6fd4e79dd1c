"""A send the broker did not acknowledge ends the Faust worker before Faust can commit past it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streams.app import EXIT_DELIVERY_FAILED

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio
from streams.app import acknowledged

async def main():
    ok, bad = asyncio.get_running_loop().create_future(), asyncio.get_running_loop().create_future()
    ok.set_result("delivered")
    await acknowledged([ok])
    print("acknowledged ok", flush=True)
    bad.set_exception(RuntimeError("KafkaTimeoutError: dead letter not delivered"))
    await acknowledged([ok, bad])
    print("carried on after a lost dead letter", flush=True)

asyncio.run(main())
"""


def test_a_failed_delivery_exits_at_once_and_a_good_one_carries_on():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "acknowledged ok" in proc.stdout
    assert "carried on" not in proc.stdout
    assert proc.returncode == EXIT_DELIVERY_FAILED, proc.stderr[-2000:]
