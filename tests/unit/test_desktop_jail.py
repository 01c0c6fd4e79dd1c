"""The desktop jail's path logic, file caps and command line (no process is started)."""

from __future__ import annotations

import asyncio
import os
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.sandboxes import jail, jail_limits
from producers.sandboxes.jail import (
    EPISODE_MOUNT, JailSpec, SdkError, ShellResult, format_shell_result, jail_argv, jail_path,
    lexical_jail_path, read_jailed, run_shell, weakness, write_jailed,
)

JAIL = "/srv/episode/work"


@pytest.mark.parametrize("path, expected", [
    ("a.txt", "/srv/episode/work/a.txt"),
    ("sub/../a.txt", "/srv/episode/work/a.txt"),
    ("./sub//b.txt", "/srv/episode/work/sub/b.txt"),
    (".", JAIL),
    ("/srv/episode/work/x", "/srv/episode/work/x"),
])
def test_paths_inside_the_jail_resolve(path, expected):
    assert lexical_jail_path(JAIL, path) == expected


@pytest.mark.parametrize("path", [
    "..", "../home/x", "sub/../../x", "/etc/passwd", "/srv/episode/workshop/x", "/srv/episode",
    "", "a\x00b",
])
def test_paths_leaving_the_jail_are_refused(path):
    with pytest.raises(SdkError):
        lexical_jail_path(JAIL, path)


@given(st.lists(st.sampled_from(["..", ".", "a", "b", "/", "work", "srv", "episode"]), max_size=8))
def test_a_resolved_path_is_always_inside_the_jail(parts):
    path = "/".join(parts)
    try:
        resolved = lexical_jail_path(JAIL, path)
    except SdkError:
        return
    assert resolved == JAIL or resolved.startswith(JAIL + "/")
    assert posixpath.normpath(resolved) == resolved


def test_symlink_out_of_the_jail_is_refused(tmp_path):
    jail = tmp_path / "work"
    jail.mkdir()
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", jail / "link")
    os.symlink(tmp_path, jail / "dirlink")
    os.symlink("inside.txt", jail / "ok-link")
    (jail / "inside.txt").write_text("fine")
    for path in ("link", "dirlink/secret", "dirlink/x"):
        with pytest.raises(SdkError, match="symlink"):
            jail_path(jail, path)
    assert jail_path(jail, "ok-link") == jail / "ok-link"
    assert read_jailed(jail, "inside.txt", 100) == "fine"


def test_the_inside_mount_point_is_accepted_for_absolute_paths(tmp_path):
    inside = f"{EPISODE_MOUNT}/work"
    assert jail_path(tmp_path, f"{inside}/a.txt", inside) == tmp_path / "a.txt"
    with pytest.raises(SdkError):
        jail_path(tmp_path, str(tmp_path / "a.txt"), inside)  # host path: not what the agent sees
    with pytest.raises(SdkError):
        jail_path(tmp_path, f"{EPISODE_MOUNT}/home/x", inside)


def test_read_and_write_caps(tmp_path):
    assert write_jailed(tmp_path, "a.txt", "hello", cap_bytes=10) == 5
    assert read_jailed(tmp_path, "a.txt", 3).startswith("hel\n[truncated at 3 bytes]")
    with pytest.raises(SdkError, match="exceeds"):
        write_jailed(tmp_path, "b.txt", "x" * 11, cap_bytes=10)
    with pytest.raises(SdkError, match="does not exist"):
        write_jailed(tmp_path, "nodir/b.txt", "x", cap_bytes=10)
    with pytest.raises(SdkError, match="no such file"):
        read_jailed(tmp_path, "missing.txt", 10)
    with pytest.raises(SdkError, match="regular file"):
        read_jailed(tmp_path, ".", 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SdkError, match="regular file"):  # and it did not block
        read_jailed(tmp_path, "fifo", 10)


def test_a_write_never_follows_a_final_symlink(tmp_path):
    jail = tmp_path / "work"
    jail.mkdir()
    os.symlink(tmp_path / "outside.txt", jail / "trap")
    with pytest.raises(SdkError):
        write_jailed(jail, "trap", "x", cap_bytes=10)
    assert not (tmp_path / "outside.txt").exists()


def test_bwrap_command_line_binds_only_the_episode_writable():
    spec = JailSpec(host="/var/sb/episode", isolation="bwrap", ro_binds=("/tmp/.X11-unix",))
    argv = jail_argv(spec, ["bash", "-c", "true"])
    assert argv[0] == "bwrap" and argv[-3:] == ["bash", "-c", "true"]
    binds = [argv[i + 1:i + 3] for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [["/var/sb/episode", EPISODE_MOUNT]]
    assert "--unshare-all" in argv and "--die-with-parent" in argv
    assert argv[argv.index("--chdir") + 1] == f"{EPISODE_MOUNT}/work"
    assert ["--ro-bind", "/tmp/.X11-unix", "/tmp/.X11-unix"] == argv[argv.index("/tmp/.X11-unix") - 1:][:3]


def test_fallback_command_lines():
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    assert jail_argv(JailSpec(host="/e", isolation="unshare"), ["ls"]) == [*unshare, "--", "ls"]
    assert jail_argv(JailSpec(host="/e", isolation="none"), ["ls"]) == ["ls"]
    assert JailSpec(host="/e", isolation="none").workdir == "/e/work"


def test_shell_results_become_output_and_error():
    assert format_shell_result(ShellResult(0, "hi\n"), 5, 10) == ("hi\n\n[exit status 0]", None)
    out, err = format_shell_result(ShellResult(None, "x", timed_out=True), 5, 10)
    assert "timed out after 5s" in err
    out, err = format_shell_result(ShellResult(None, "x" * 10, truncated=True), 5, 10)
    assert out.endswith("[output truncated at 10 bytes]") and "exceeded 10 bytes" in err


def test_bwrap_runs_unprivileged_with_a_minimal_read_only_host():
    argv = jail_argv(JailSpec(host="/var/sb/episode", isolation="bwrap"), ["true"])
    sources = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert argv[argv.index("--uid") + 1] == "65534" and argv[argv.index("--gid") + 1] == "65534"
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--new-session" in argv and ["--remount-ro", "/"] == argv[argv.index("--remount-ro"):][:2]
    assert argv[argv.index("--tmpfs") - 2] == "--size"  # /tmp is size-limited
    assert not {"/", "/etc", "/etc/shadow", "/etc/gshadow", "/root", "/home", "/proc"} & set(sources), sources
    assert not [s for s in sources if s.startswith(("/etc/ssh", "/etc/ssl"))], sources
    assert [s for s in sources if not s.startswith(("/usr", "/bin", "/sbin", "/lib", "/etc/", "/var/sb/episode"))
            and "flywheel-jail-etc-" not in s] == []  # system dirs, listed /etc entries, the episode
    assert ["--proc", "/proc"] == argv[argv.index("--proc"):][:2]  # the sandbox's own /proc, not the host's


@pytest.mark.parametrize("isolation", ["unshare", "none"])
def test_weak_isolation_is_refused_before_anything_runs(isolation, tmp_path, monkeypatch):
    async def no_process(*args, **kwargs):
        raise AssertionError("a refused command must not start a process")
    monkeypatch.setattr(jail.asyncio, "create_subprocess_exec", no_process)
    spec = JailSpec(host=str(tmp_path), isolation=isolation)
    assert "no bubblewrap" in weakness(spec)
    with pytest.raises(SdkError, match="refused: no bubblewrap.*fails closed.*allow_weak_isolation"):
        asyncio.run(run_shell(spec, "echo hi", {}, 5, 1024, 1024))


def test_bwrap_without_cgroup_limits_is_weak_too(tmp_path, monkeypatch):
    monkeypatch.setattr(jail_limits, "available", lambda: False)
    spec = JailSpec(host=str(tmp_path), isolation="bwrap")
    with pytest.raises(SdkError, match="refused: no writable cgroup"):
        asyncio.run(run_shell(spec, "echo hi", {}, 5, 1024, 1024))
    monkeypatch.setattr(jail_limits, "available", lambda: True)
    assert weakness(spec) is None
