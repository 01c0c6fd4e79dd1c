"""The browser launch is bounded by the host's launch deadline, not by the per-call one, and a
launch that times out leaves nothing half-started.

A cold Chromium start on a loaded 2-core machine can take longer than a page call (10 s): CI
once failed on exactly that. No browser here: a stand-in host for the sandbox, and a stand-in
Playwright driver for the real host.
"""

from __future__ import annotations

import asyncio

import playwright.async_api
import pytest

from producers.sandboxes.base import SandboxCrashed
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from schemas.blobs import BlobStore


class _SlowHost:
    """Launches in ``delay_s``; its browser refuses contexts (the test stops at new_context)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def browser(self):
        await asyncio.sleep(self.delay_s)
        return _NoContexts(), 1


class _NoContexts:
    async def new_context(self, **_):
        raise RuntimeError("stand-in browser: no contexts")


def test_a_launch_slower_than_a_call_is_waited_for(tmp_path):
    # the launch takes 0.3 s, three call timeouts; the sandbox gets past it, to new_context
    sandbox = BrowserSandbox(BlobStore(str(tmp_path)), host=_SlowHost(0.3), call_timeout_s=0.1)
    with pytest.raises(SandboxCrashed, match="during new_context"):
        asyncio.run(sandbox.start())


class _Driver:
    """A stand-in for async_playwright(): ``hang`` says which step never returns."""

    def __init__(self, hang: str) -> None:
        self.hang, self.stopped, self.exited = hang, False, False
        self.chromium = self

    def __call__(self):
        return self

    async def start(self):
        if self.hang == "driver":
            await asyncio.sleep(3600)
        return self

    async def launch(self, **_):
        if self.hang == "chromium":
            await asyncio.sleep(3600)
        raise AssertionError("not reached")

    async def stop(self):
        self.stopped = True

    async def __aexit__(self, *_):
        self.exited = True


@pytest.mark.parametrize("hang", ["driver", "chromium"])
def test_a_launch_past_the_hosts_deadline_is_a_hung_browser_and_its_driver_is_stopped(monkeypatch, hang):
    driver = _Driver(hang)
    monkeypatch.setattr(playwright.async_api, "async_playwright", driver)
    host = BrowserHost(executable="/bin/sh", launch_timeout_s=0.2)
    with pytest.raises(SandboxCrashed, match=r"^browser hung: launch took more than 0.2s$"):
        asyncio.run(host.browser())
    assert host._pw is None and not host.connected  # the next launch starts afresh
    assert (driver.exited, driver.stopped) == ((True, False) if hang == "driver" else (False, True))
