"""The GUI-SDK jail against an escape corpus, with the real bubblewrap and cgroups.

Each case is something an agent's shell command might try; each must be refused or contained,
and what happened must show in what the step records (the output and error the sandbox puts on
``Step.output`` / ``Step.error``, via ``format_shell_result``). Every case is bounded to seconds.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from producers.sandboxes import jail_limits
from producers.sandboxes.jail import JailSpec, SdkError, format_shell_result, probe_isolation, run_shell, weakness
from producers.sandboxes.jail_limits import Limits

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
MARK = "flywheel-escape-marker"


@pytest.fixture
def cgroups(monkeypatch):
    """Every cgroup the jail makes; after each case nothing may be left running in any of them."""
    made: list[jail_limits.Cgroup] = []
    create = jail_limits.Cgroup.create.__func__

    def recording(cls, limits):
        made.append(create(cls, limits))
        return made[-1]
    monkeypatch.setattr(jail_limits.Cgroup, "create", classmethod(recording))
    yield made
    assert made, "the command ran without a cgroup"
    assert [c.remaining() for c in made] == [0] * len(made), "processes outlived their action"


@pytest.fixture
def spec(tmp_path, cgroups):
    (tmp_path / "work").mkdir()
    s = JailSpec(host=str(tmp_path), isolation=probe_isolation(),
                 limits=Limits(pids=32, memory_bytes=128 << 20, cpu_seconds=5, tmp_bytes=1 << 20))
    why = weakness(s)
    if why:
        pytest.skip(f"strong isolation is not available here ({why}); the fail-closed refusal is tested below")
    return s


def shell(spec, command, timeout_s=8.0, output_cap=8192, file_cap=1 << 20):
    result = asyncio.run(run_shell(spec, command, {**ENV, "HOME": spec.home}, timeout_s, output_cap, file_cap))
    output, error = format_shell_result(result, timeout_s, output_cap)
    return result, output, error


def test_no_network(spec):
    _, out, _ = shell(spec, "python3 -c \"import socket; s=socket.socket(); s.settimeout(2); "
                            "print('rc', s.connect_ex(('127.0.0.1', 22)), s.connect_ex(('1.1.1.1', 80)))\"; "
                            "cat /proc/net/dev | tail -n +3 | cut -d: -f1")
    assert "rc 0" not in out and "eth" not in out, out


def test_writes_outside_the_episode_folder_fail(spec, tmp_path):
    target = tmp_path.parent / f"{MARK}-outside"
    _, out, _ = shell(spec, f"for p in /usr/{MARK} /etc/{MARK} /root/{MARK} {target} /home/{MARK}; do "
                            "echo x > $p 2>/dev/null && echo WROTE $p; done; echo done")
    assert "WROTE" not in out and "done" in out, out
    assert not target.exists()


def test_root_only_and_host_secrets_are_not_visible(spec):
    _, out, _ = shell(spec, "for f in /etc/shadow /etc/gshadow /etc/ssh /etc/ssl/private /root /proc/1/environ "
                            "/home/root /etc/hostname; do if cat $f >/dev/null 2>&1 || ls $f >/dev/null 2>&1; then "
                            "echo SEEN $f; fi; done; echo home: $(ls /home); "
                            "cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n' | grep -c FLYWHEEL || true; "
                            "getent passwd | cut -d: -f1 | tr '\\n' ' '")
    seen = [line for line in out.splitlines() if line.startswith("SEEN")]
    # /proc/1/environ is the sandbox's own init (bwrap), not the host's: it may be readable, with
    # nothing of ours in it; everything else must be absent
    assert [s for s in seen if "/proc/1/environ" not in s] == [], out
    assert "root nobody" in out and "FLYWHEEL" not in out
    assert "home: agent" in out  # only the episode's own folder


def test_a_fork_bomb_is_contained_by_the_pids_limit(spec):
    t = time.monotonic()
    result, out, error = shell(spec, "bomb() { bomb | bomb & }; bomb; sleep 2; echo still-here", timeout_s=6)
    assert time.monotonic() - t < 15
    assert "Resource temporarily unavailable" in out, out  # forks refused at the pids limit
    assert result.timed_out or "still-here" in out, out  # the host (and even the shell) went on


def test_a_memory_bomb_is_killed_by_the_memory_limit(spec):
    result, out, error = shell(spec, "python3 -c \"x = bytearray(1 << 30); print('allocated')\"; echo rc=$?")
    assert "allocated" not in out.splitlines() and "rc=137" in out and "Killed" in out, out  # the cgroup's OOM kill


def test_a_process_that_never_exits_is_killed_at_the_timeout(spec):
    t = time.monotonic()
    result, out, error = shell(spec, "while true; do :; done", timeout_s=2)
    assert result.timed_out and "timed out after 2s" in error
    assert time.monotonic() - t < 10


def test_setsid_survivors_do_not_outlive_the_action(spec, tmp_path):
    flag = tmp_path / "work" / "alive"
    result, out, _ = shell(spec, "setsid bash -c 'while true; do date > alive; sleep 0.2; done' & disown; "
                                 "sleep 0.5; echo started")
    assert "started" in out and flag.exists(), out  # the survivor did run
    before = flag.stat().st_mtime_ns
    time.sleep(1.0)
    assert flag.stat().st_mtime_ns == before, "a setsid child kept running after the action returned"


def test_tmp_is_size_limited(spec):
    # files each under the file-size rlimit: it is the tmpfs size (1 MiB here) that stops them
    _, out, _ = shell(spec, "for i in 1 2 3 4; do head -c 400000 /dev/zero > /tmp/fill$i || echo FULL; done; "
                            "du -sk /tmp | cut -f1")
    assert "No space left on device" in out and "FULL" in out, out
    assert int(out.split("FULL")[-1].split()[0]) <= 1024, out


def test_a_huge_file_is_stopped_by_the_file_size_limit(spec):
    _, out, _ = shell(spec, "head -c 3000000 /dev/zero > big; echo rc=$?; stat -c %s big", file_cap=1 << 20)
    assert "rc=153" in out and "1048576" in out, out  # SIGXFSZ at exactly the cap


def test_without_strong_isolation_the_jail_fails_closed(tmp_path):
    (tmp_path / "work").mkdir()
    weak = JailSpec(host=str(tmp_path), isolation="unshare")
    with pytest.raises(SdkError, match="refused"):
        asyncio.run(run_shell(weak, "echo hi", ENV, 5, 1024, 1024))
    allowed = JailSpec(host=str(tmp_path), isolation="none", allow_weak=True)
    result = asyncio.run(run_shell(allowed, "echo hi", ENV, 5, 1024, 1024))
    assert result.output.strip() == "hi"  # explicitly allowed: runs, weakly isolated
    assert os.path.isdir(tmp_path / "work")
