"""The demo's UI child: its token travels in its environment, never in its arguments (which any
local user reads with `ps`) nor in the line the demo logs when it starts a child."""

from __future__ import annotations

import logging
import subprocess

from app.demo_children import ui_child
from app.ui import cli
from infra.runtime import procs

TOKEN = "Tok3n-" + "s" * 20


def test_the_demos_ui_gets_its_token_in_its_environment_and_no_log_line_has_it(monkeypatch, tmp_path, caplog):
    child = ui_child(4321, TOKEN, tmp_path, {"FLYWHEEL_DATA_DIR": "x"})
    assert not any(TOKEN in arg for arg in child.argv)
    assert child.env[cli.TOKEN_ENV] == TOKEN and child.env["FLYWHEEL_DATA_DIR"] == "x"
    assert "--through-sink" in child.argv  # started before the sink: never opens its data directory

    started: list = []

    class Popen:
        pid = 4242

        def __init__(self, argv, **kw):
            started.append((argv, kw["env"]))

    monkeypatch.setattr(subprocess, "Popen", Popen)
    with caplog.at_level(logging.DEBUG):
        procs.Child.start(child)
    (argv, env), = started
    assert env[cli.TOKEN_ENV] == TOKEN and not any(TOKEN in arg for arg in argv)
    assert caplog.records and not any(TOKEN in r.getMessage() for r in caplog.records)
