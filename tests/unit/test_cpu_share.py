"""The main job's own measure of each process's CPU: a child's tree counted under its name, from
the moment the measure began, and this process apart."""

from __future__ import annotations

import selectors
import subprocess
import sys

from infra.runtime.cpu_share import CpuShare


def test_a_busy_child_is_counted_under_its_name_and_an_idle_one_near_zero():
    # the child burns its 0.6 CPU-s between the two samples, whatever the machine's load: it starts
    # when told (after the first sample) and says when it is done (before the second), where a
    # fixed 2-second wait under a loaded test run caught it part-way (0.39 CPU-s)
    burn = ("import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
            "while time.process_time() - t < 0.6: pass\nprint('done', flush=True)\ntime.sleep(30)")
    busy = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        share = CpuShare()
        share.sample({"busy": busy.pid, "idle": idle.pid}, own="me")
        busy.stdin.write("go\n")
        busy.stdin.flush()
        with selectors.DefaultSelector() as sel:  # epoll: select() refuses a descriptor past 1023 (a long xdist worker)
            sel.register(busy.stdout, selectors.EVENT_READ)
            assert sel.select(60.0), "the busy child said nothing in 60 s"  # bounded: a hung child fails the test
        assert busy.stdout.readline().strip() == "done"  # its 0.6 CPU-s are spent
        share.sample({"busy": busy.pid, "idle": idle.pid}, own="me")
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    got = {name: seconds for name, seconds, _ in share.rows()}
    assert got["busy"] >= 0.4 and got["idle"] < 0.3 and got["me"] < 0.5, got
    assert share.rows()[0][0] == "busy"
    text = share.markdown()
    assert "| busy |" in text and "| all |" in text and "cores" in text
