"""The GUI-SDK jail: where a desktop episode's shell commands and file reads/writes run.

Every SDK action is confined to the episode's working directory (the *jail*):

- paths: ``jail_path`` resolves a path the agent gave (relative to the jail, or absolute inside
  it) and refuses one that leaves it (``..``, an absolute path elsewhere, a symlink pointing
  out). ``lexical_jail_path`` is the pure half of that check; ``jail_path`` adds the symlink
  half against the real file system. Writes open the final component with ``O_NOFOLLOW``, so a
  symlink swapped in after the check is refused too.
- processes: shell commands run under bubblewrap (``bwrap``): new user, PID, network, IPC and
  UTS namespaces (``--unshare-all``), user ``nobody``, every capability dropped, a read-only
  minimal view of the host (``/usr``, ``/bin``, ``/lib*`` and a few ``/etc`` entries programs
  need, with a synthetic ``passwd``/``group``: no ``/etc/shadow``, ``/etc/ssh``,
  ``/etc/ssl/private``, ``/root`` or ``/home``), a private size-limited ``/tmp``, and the
  episode folder as the only writable place.
- limits (producers.sandboxes.jail_limits): a cgroup per command caps processes (a fork bomb)
  and memory; rlimits cap CPU time and file size; a wall-clock timeout kills the whole PID
  namespace, and afterwards anything left in the cgroup (a ``setsid`` survivor) is killed; a cap
  on captured output kills the command once exceeded.
- fails closed: without a working bwrap or without cgroup limits a shell command is refused
  (recorded on the step) unless weak isolation was explicitly allowed (``allow_weak``), in which
  case ``unshare -n`` (no network, same file system) or nothing is the fallback.
  ``probe_isolation`` says which isolation works here; nothing silently pretends to be isolated.

A refused or failed SDK action raises ``SdkError``; the sandbox records its message on the
step (``StepResult.error``) and the episode goes on.
"""

from __future__ import annotations

import asyncio
import functools
import os
import posixpath
import shutil
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from producers.sandboxes import jail_limits
from producers.sandboxes.jail_limits import Cgroup, Limits


class SdkError(Exception):
    """An SDK action was refused or failed; the message is recorded on the step."""


# ---------------------------------------------------------------- paths


def lexical_jail_path(jail: str, path: str) -> str:
    """Pure: the absolute, normalised path ``path`` names inside ``jail``, or ``SdkError``.

    ``jail`` must be absolute and normalised. Relative paths are taken from the jail; absolute
    ones must already lie inside it. ``..`` is resolved lexically (no file system access).
    """
    if not path or "\x00" in path:
        raise SdkError(f"invalid path {path!r}: empty or contains a NUL byte")
    joined = posixpath.normpath(posixpath.join(jail, path))  # an absolute path replaces jail
    if joined != jail and not joined.startswith(jail.rstrip("/") + "/"):
        raise SdkError(f"path {path!r} leaves the episode's working directory")
    return joined


def jail_path(jail: str | Path, path: str, inside: str | None = None) -> Path:
    """``lexical_jail_path`` plus symlinks: the real path must stay inside the real jail.

    ``inside`` is where the jailed programs see the jail (``/home/agent/work`` under bwrap), so
    an absolute path the agent read off the screen is accepted when it lies under it.
    """
    real_jail = os.path.realpath(jail)
    rel = posixpath.relpath(lexical_jail_path(inside or real_jail, path), inside or real_jail)
    lexical = posixpath.normpath(posixpath.join(real_jail, rel))
    real = os.path.realpath(lexical)  # follows every symlink that exists along the way
    if real != real_jail and not real.startswith(real_jail + "/"):
        raise SdkError(f"path {path!r} resolves through a symlink to outside the working directory")
    return Path(lexical)


def _require_regular(fd: int, path: str) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SdkError(f"{path!r} is not a regular file")


def read_jailed(jail: str | Path, path: str, cap_bytes: int, inside: str | None = None) -> str:
    target = jail_path(jail, path, inside)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not hang us
    except FileNotFoundError:
        raise SdkError(f"no such file: {path!r}") from None
    except IsADirectoryError:
        raise SdkError(f"{path!r} is a directory") from None
    except OSError as e:
        raise SdkError(f"cannot read {path!r}: {e.strerror}") from None
    _require_regular(fd, path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap_bytes + 1)
    text = data[:cap_bytes].decode("utf-8", errors="replace")
    return text + (f"\n[truncated at {cap_bytes} bytes]" if len(data) > cap_bytes else "")


def write_jailed(jail: str | Path, path: str, content: str, cap_bytes: int, inside: str | None = None) -> int:
    data = content.encode("utf-8")
    if len(data) > cap_bytes:
        raise SdkError(f"file_write of {len(data)} bytes exceeds the {cap_bytes}-byte cap")
    target = jail_path(jail, path, inside)
    if not target.parent.is_dir():
        raise SdkError(f"directory of {path!r} does not exist")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except IsADirectoryError:
        raise SdkError(f"{path!r} is a directory") from None
    except OSError as e:
        raise SdkError(f"cannot write {path!r}: {e.strerror}") from None
    _require_regular(fd, path)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return len(data)


# ---------------------------------------------------------------- isolation


@functools.lru_cache(maxsize=1)
def probe_isolation() -> str:
    """"bwrap" | "unshare" | "none": the strongest isolation that actually works here."""
    def works(argv: list[str]) -> bool:
        try:
            return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    if shutil.which("bwrap") and works(["bwrap", *_bwrap_system_args(), "--unshare-all", "true"]):
        return "bwrap"
    if shutil.which("unshare") and works([*_unshare_argv(), "true"]):
        return "unshare"
    return "none"


def _unshare_argv() -> list[str]:
    """Root needs only a network namespace; others map themselves to root in a user namespace
    (where xterm cannot chown its pty: GUI terminals need bwrap or root)."""
    return ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]


# /etc entries jailed programs need (shells, the dynamic loader, Debian's alternatives, fonts
# and toolkit settings for the GUI apps); nothing else of the host's /etc is visible
ETC_ENTRIES = ("alternatives", "fonts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "localtime",
               "bash.bashrc", "profile", "inputrc", "X11", "gtk-3.0", "xdg", "mime.types", "locale.alias",
               "terminfo", "magic", "mousepad")


@functools.lru_cache(maxsize=1)
def _synthetic_etc() -> str:
    """A folder with the passwd/group the jail sees: root and nobody, no real accounts."""
    d = tempfile.mkdtemp(prefix="flywheel-jail-etc-")
    os.chmod(d, 0o755)
    Path(d, "passwd").write_text("root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                 f"nobody:x:65534:65534:agent:{EPISODE_MOUNT}/home:/bin/bash\n")
    Path(d, "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    return d


def _bwrap_system_args(tmp_bytes: int = Limits().tmp_bytes) -> list[str]:
    """A read-only minimal host: system directories (top-level symlinks of a merged /usr kept as
    symlinks), the listed /etc entries, a synthetic passwd/group, a private size-limited /tmp."""
    args: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for entry in ETC_ENTRIES:
        if os.path.exists(f"/etc/{entry}"):
            args += ["--ro-bind", f"/etc/{entry}", f"/etc/{entry}"]
    for name in ("passwd", "group"):
        args += ["--ro-bind", f"{_synthetic_etc()}/{name}", f"/etc/{name}"]
    return args + ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]


EPISODE_MOUNT = "/home/agent"  # where bwrap shows the episode folder: same paths in every sandbox


@dataclass(frozen=True)
class JailSpec:
    """An episode folder (``host``) holding ``work/`` (the jail proper) and ``home/``."""

    host: str
    isolation: str = "bwrap"
    ro_binds: tuple[str, ...] = ()  # e.g. the X socket folder and the Xauthority file for GUI apps
    allow_weak: bool = False  # run shell commands even without bwrap + cgroup limits
    limits: Limits = field(default_factory=Limits)

    @property
    def root(self) -> str:
        """The episode folder as jailed programs see it."""
        return EPISODE_MOUNT if self.isolation == "bwrap" else self.host

    @property
    def workdir(self) -> str:
        return f"{self.root}/work"

    @property
    def home(self) -> str:
        return f"{self.root}/home"


def jail_argv(spec: JailSpec, argv: list[str]) -> list[str]:
    """Pure: the command line that runs ``argv`` inside ``spec`` (cwd: the work folder)."""
    if spec.isolation == "bwrap":
        binds = ["--bind", spec.host, spec.root]
        for path in spec.ro_binds:
            binds += ["--ro-bind", path, path]
        binds += ["--remount-ro", "/"]  # the sandbox's own root: nothing but the binds above is writable
        return ["bwrap", *_bwrap_system_args(spec.limits.tmp_bytes), *binds, "--unshare-all",
                "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
                "--die-with-parent", "--new-session", "--chdir", spec.workdir, "--", *argv]
    if spec.isolation == "unshare":
        return [*_unshare_argv(), "--", *argv]
    return list(argv)


# ---------------------------------------------------------------- shell


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None  # None when it was killed (timeout or output cap)
    output: str  # stdout and stderr interleaved, at most the cap
    timed_out: bool = False
    truncated: bool = False


def weakness(spec: JailSpec) -> str | None:
    """Why running a shell command in ``spec`` would be weakly isolated, or None."""
    if spec.isolation != "bwrap":
        return f"no bubblewrap sandbox here (isolation={spec.isolation})"
    if not jail_limits.available():
        return "no writable cgroup for process and memory limits"
    return None


def _in_child(cgroup: Cgroup | None, limits: Limits) -> None:  # between fork and exec
    if cgroup is not None:
        cgroup.join()
    jail_limits.set_rlimits(limits)


async def run_shell(spec: JailSpec, command: str, env: dict[str, str], timeout_s: float,
                    output_cap: int, file_cap: int) -> ShellResult:
    """Run ``command`` with bash inside the jail; kill the whole process group on timeout/cap.

    Refused (``SdkError``) when the jail would be weak and ``spec.allow_weak`` is off."""
    why = weakness(spec)
    if why and not spec.allow_weak:
        raise SdkError(f"shell command refused: {why}; the jail fails closed "
                       "(allow_weak_isolation runs it with weaker isolation)")
    limits = Limits(**{**spec.limits.__dict__, "file_bytes": file_cap})
    cgroup = Cgroup.create(limits) if why is None else None
    try:
        return await _run_limited(spec, command, env, timeout_s, output_cap, limits, cgroup)
    finally:
        if cgroup is not None:
            cgroup.kill_all()  # a setsid survivor or a stray child: nothing outlives its action
            for _ in range(50):
                if not cgroup.remaining():
                    break
                await asyncio.sleep(0.02)
            cgroup.remove()


async def _run_limited(spec: JailSpec, command: str, env: dict[str, str], timeout_s: float, output_cap: int,
                       limits: Limits, cgroup: Cgroup | None) -> ShellResult:
    proc = await asyncio.create_subprocess_exec(
        *jail_argv(spec, ["bash", "-c", command]), cwd=f"{spec.host}/work", env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        preexec_fn=functools.partial(_in_child, cgroup, limits))
    buf = bytearray()
    timed_out = truncated = False

    async def pump() -> None:
        nonlocal truncated
        while chunk := await proc.stdout.read(65536):
            buf.extend(chunk)
            if len(buf) > output_cap:
                truncated = True
                return

    async def finish() -> None:
        await pump()
        if not truncated:
            await proc.wait()

    try:
        await asyncio.wait_for(finish(), timeout_s)
    except asyncio.TimeoutError:
        timed_out = True
    if timed_out or truncated:
        _kill_group(proc.pid)
    try:
        # Python 3.11's wait() returns only once stdout reached EOF, and a reader we stopped at
        # the cap may be paused: drain what the killed command left in the pipe.
        await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.wait()), 5)
        code = proc.returncode
    except asyncio.TimeoutError:  # a process that escaped the group still holds the pipe
        proc._transport.close()  # no public way to give up on the pipe; this also kills bash
        code = None
    text = bytes(buf[:output_cap]).decode("utf-8", errors="replace")
    return ShellResult(exit_code=None if (timed_out or truncated) else code, output=text,
                       timed_out=timed_out, truncated=truncated)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def format_shell_result(result: ShellResult, timeout_s: float, output_cap: int) -> tuple[str, str | None]:
    """(output shown to the agent, error recorded on the step or None)."""
    if result.timed_out:
        return result.output, f"shell command timed out after {timeout_s:g}s and was killed"
    if result.truncated:
        return (result.output + f"\n[output truncated at {output_cap} bytes]",
                f"shell output exceeded {output_cap} bytes; the command was killed")
    return result.output + f"\n[exit status {result.exit_code}]", None
