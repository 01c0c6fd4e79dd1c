"""MiniWoB++ as shipped in the ``miniwob`` PyPI package: its task list and a local HTTP server.

The HTML tasks are served straight from the installed package (never copied) by a quiet
threading HTTP server bound to 127.0.0.1 on a free port; one server per process and folder is
shared by every browser sandbox.
"""

from __future__ import annotations

import functools
import inspect
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infra.runtime.errors import UserError

TASK_WIDTH, TASK_HEIGHT = 160, 210  # MiniWoB's #wrap: instruction bar + task area
WINDOW_WIDTH, WINDOW_HEIGHT = 500, 320  # the viewport the miniwob package itself uses


def html_dir() -> Path:
    """The package's ``html`` folder (core/, common/, miniwob/)."""
    try:
        import miniwob
    except ImportError as exc:
        raise UserError("the miniwob package is not installed (pip install miniwob)") from exc
    path = Path(miniwob.__file__).parent / "html"
    if not (path / "miniwob").is_dir():
        raise UserError(f"the miniwob package has no html/miniwob folder under {path.parent}")
    return path


@functools.lru_cache(maxsize=1)
def task_names() -> tuple[str, ...]:
    """Every MiniWoB++ task the package registers (its gymnasium env classes), sorted."""
    from miniwob.environment import MiniWoBEnvironment
    from miniwob.envs import miniwob_envs

    names = {
        cls.subdomain
        for _, cls in inspect.getmembers(miniwob_envs, inspect.isclass)
        if issubclass(cls, MiniWoBEnvironment) and getattr(cls, "subdomain", None)
    }
    folder = html_dir() / "miniwob"
    return tuple(sorted(n for n in names if (folder / f"{n}.html").is_file()))


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


_servers: dict[str, ThreadingHTTPServer] = {}
_lock = threading.Lock()


def serve(directory: Path) -> str:
    """Start (once per process and folder) a local server of ``directory``; return its base URL,
    ending in '/'. The games suite (producers.games) serves its pages through this too."""
    key = str(directory)
    with _lock:
        if key not in _servers:
            handler = functools.partial(_QuietHandler, directory=key)
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name="page-http", daemon=True).start()
            _servers[key] = server
        host, port = _servers[key].server_address[:2]
    return f"http://{host}:{port}/"


def base_url() -> str:
    """The MiniWoB++ server's base URL (started on first use)."""
    return serve(html_dir())


def task_url(name: str) -> str:
    if name not in task_names():
        raise UserError(f"unknown MiniWoB++ task {name!r}; the package has {len(task_names())} tasks")
    return f"{base_url()}miniwob/{name}.html"
