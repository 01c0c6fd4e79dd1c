"""The main job's own measure of each process's CPU: a child's tree counted under its name, from
the moment the measure began, and this process apart."""

from __future__ import annotations

import subprocess
import sys
import time

from infra.runtime.cpu_share import CpuShare


def test_a_busy_child_is_counted_under_its_name_and_an_idle_one_near_zero():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(5)"
    busy = subprocess.Popen([sys.executable, "-c", burn])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        share = CpuShare()
        share.sample({"busy": busy.pid, "idle": idle.pid}, own="me")
        time.sleep(2.0)  # the busy child burns its 0.6 CPU-s within this
        share.sample({"busy": busy.pid, "idle": idle.pid}, own="me")
    finally:
        busy.kill()
        idle.kill()
    got = {name: seconds for name, seconds, _ in share.rows()}
    assert got["busy"] >= 0.4 and got["idle"] < 0.3 and got["me"] < 0.5, got
    assert share.rows()[0][0] == "busy"
    text = share.markdown()
    assert "| busy |" in text and "| all |" in text and "cores" in text
