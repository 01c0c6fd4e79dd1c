"""Shared helpers for browser tests: one event loop in a thread, one Chromium for the module."""

from __future__ import annotations

import asyncio
import shutil
import threading

import pytest


def require_chromium() -> None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("Chromium is not installed (apt-get install chromium)")


class LoopThread:
    """An asyncio loop running in a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def browser_sandbox(tmp_path_factory):
    """A module's one browser sandbox and the loop it runs on (a generator for a module fixture):
    yields (loop, sandbox), then closes the sandbox, its Chromium and the loop."""
    from producers.sandboxes.browser import BrowserSandbox  # Playwright: only browser tests need it
    from producers.sandboxes.browser_host import BrowserHost
    from schemas.blobs import BlobStore

    require_chromium()
    loop = LoopThread()
    host = BrowserHost()
    sandbox = BrowserSandbox(BlobStore(str(tmp_path_factory.mktemp("blobs"))), host=host)
    loop.run(sandbox.start())
    yield loop, sandbox
    loop.run(sandbox.close())
    loop.run(host.close())
    loop.stop()
