"""MiniWoB++ as shipped in the ``miniwob`` PyPI package: its task list and a local HTTP server.

The HTML tasks are served straight from the installed package (never copied) by a quiet
threading HTTP server bound to 127.0.0.1 on a free port; one server per process is shared by
every browser sandbox.
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


_server: ThreadingHTTPServer | None = None
_lock = threading.Lock()


def base_url() -> str:
    """Start (once per process) the local server and return its base URL, ending in '/'."""
    global _server
    with _lock:
        if _server is None:
            handler = functools.partial(_QuietHandler, directory=str(html_dir()))
            _server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            _server.daemon_threads = True
            threading.Thread(target=_server.serve_forever, name="miniwob-http", daemon=True).start()
        host, port = _server.server_address[:2]
    return f"http://{host}:{port}/"


def task_url(name: str) -> str:
    if name not in task_names():
        raise UserError(f"unknown MiniWoB++ task {name!r}; the package has {len(task_names())} tasks")
    return f"{base_url()}miniwob/{name}.html"
