"""The sandbox's browser launch runs under the host's launch deadline, not the per-call one.

A cold Chromium start on a loaded 2-core machine can take longer than a page call (10 s): CI
once failed on exactly that. These tests use a stand-in host (no browser needed): its launch
takes longer than a call may, but less than the host's deadline.
"""

from __future__ import annotations

import asyncio

import pytest

from producers.sandboxes.base import SandboxCrashed
from producers.sandboxes.browser import BrowserSandbox
from schemas.blobs import BlobStore


class _SlowHost:
    """Launches in ``delay_s``; its browser refuses contexts (the test stops at new_context)."""

    def __init__(self, delay_s: float, launch_timeout_s: float) -> None:
        self.delay_s, self.launch_timeout_s = delay_s, launch_timeout_s

    async def browser(self):
        await asyncio.sleep(self.delay_s)
        return _NoContexts(), 1


class _NoContexts:
    async def new_context(self, **_):
        raise RuntimeError("stand-in browser: no contexts")


def _start(tmp_path, delay_s: float, launch_timeout_s: float) -> str:
    sandbox = BrowserSandbox(BlobStore(str(tmp_path)), host=_SlowHost(delay_s, launch_timeout_s), call_timeout_s=0.1)
    with pytest.raises(SandboxCrashed) as err:
        asyncio.run(sandbox.start())
    return str(err.value)


def test_a_launch_slower_than_a_call_but_within_the_hosts_deadline_is_waited_for(tmp_path):
    # Launch takes 0.3 s > the 0.1 s call timeout; the sandbox gets past it to new_context.
    assert "new_context" in _start(tmp_path, delay_s=0.3, launch_timeout_s=1.0)


def test_a_launch_past_the_hosts_deadline_is_a_hung_browser(tmp_path):
    message = _start(tmp_path, delay_s=5.0, launch_timeout_s=0.2)
    assert message.startswith("browser hung: launch took more than")
