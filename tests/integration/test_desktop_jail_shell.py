"""GUI-SDK shell commands in the jail: timeout, output cap, file-size cap, no network, no escape."""

from __future__ import annotations

import asyncio
import time

import pytest

from producers.sandboxes.jail import JailSpec, probe_isolation, run_shell

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "work").mkdir()
    return JailSpec(host=str(tmp_path), isolation=probe_isolation())


def shell(spec, command, timeout_s=10.0, output_cap=4096, file_cap=1 << 20):
    return asyncio.run(run_shell(spec, command, {**ENV, "HOME": spec.home}, timeout_s, output_cap, file_cap))


def test_runs_in_the_work_folder(spec, tmp_path):
    result = shell(spec, "pwd; echo hi > made.txt; echo err >&2; exit 3")
    assert result.exit_code == 3 and not result.timed_out
    assert result.output.splitlines() == [spec.workdir, "err"]
    assert (tmp_path / "work" / "made.txt").read_text() == "hi\n"


def test_timeout_kills_the_whole_process_tree(spec):
    t = time.monotonic()
    result = shell(spec, "sleep 30 & sleep 30; echo never", timeout_s=1.0)
    assert result.timed_out and result.exit_code is None
    assert "never" not in result.output
    assert time.monotonic() - t < 8


def test_output_cap_kills_a_chatty_command(spec):
    t = time.monotonic()
    result = shell(spec, "yes", output_cap=1000, timeout_s=20)
    assert result.truncated and len(result.output) == 1000
    assert time.monotonic() - t < 8  # killed at the cap, not at the timeout


def test_file_size_cap(spec, tmp_path):
    result = shell(spec, "head -c 100000 /dev/zero > big.bin", file_cap=1000)
    assert result.exit_code != 0
    assert (tmp_path / "work" / "big.bin").stat().st_size <= 1000


def test_no_network(spec):
    if spec.isolation == "none":
        pytest.skip("neither bwrap nor `unshare -rn` works here: SDK commands have the host network")
    code = ("import socket; s = socket.socket(); s.settimeout(2)\n"
            "print('rc', s.connect_ex(('1.1.1.1', 80)))\n"
            "print('ifaces', sorted(n for _, n in socket.if_nameindex()))")
    result = shell(spec, f"python3 -c \"{code}\"")
    assert "rc 0" not in result.output
    assert "ifaces ['lo']" in result.output, result.output


def test_bwrap_hides_the_host_and_allows_writes_only_in_the_episode(spec, tmp_path):
    if spec.isolation != "bwrap":
        pytest.skip(f"bubblewrap is not usable here (isolation={spec.isolation})")
    outside = tmp_path.parent / "outside-marker"
    outside.write_text("MARKER-7f3a")
    result = shell(spec, f"cat {outside}; touch /usr/x; touch /etc/x; ls /root; id -u; touch ../home-ok; "
                         "echo shadow: $(head -c 5 /etc/shadow 2>/dev/null | wc -c)")
    assert "MARKER-7f3a" not in result.output and "shadow: 0" in result.output
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert "65534" in result.output
    assert (tmp_path / "home-ok").exists()  # the episode folder itself is writable
