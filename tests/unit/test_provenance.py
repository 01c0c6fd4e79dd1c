"""app.provenance: a benchmark records the commit it ran and refuses uncommitted changes to tracked
files unless told (--allow-dirty); untracked files do not count. In a temporary git repository."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess

import pytest

from app.provenance import add_allow_dirty, checkout_state, commit_to_run, record

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: no repository to read")


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_clean_checkout_records_its_commit(repo, tmp_path_factory):
    (repo / "notes.txt").write_text("untracked: not code that ran")
    state = commit_to_run(repo, allow_dirty=False)
    assert state == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": []}
    out = tmp_path_factory.mktemp("out") / "run"
    assert json.loads(record(out, state).read_text()) == state


def test_uncommitted_changes_are_refused_by_name_unless_allowed(repo):
    (repo / "code.py").write_text("x = 2\n")
    with pytest.raises(SystemExit, match=r"code\.py.*--allow-dirty"):
        commit_to_run(repo, allow_dirty=False)
    assert commit_to_run(repo, allow_dirty=True)["dirty"] == ["code.py"]
    _git(repo, "add", "code.py")  # staged but not committed is still not the commit
    with pytest.raises(SystemExit):
        commit_to_run(repo, allow_dirty=False)


def test_outside_a_checkout_there_is_no_commit_to_name(tmp_path):
    assert checkout_state(tmp_path) == {"commit": None, "dirty": []}


def test_the_flag():
    ap = argparse.ArgumentParser()
    add_allow_dirty(ap)
    assert ap.parse_args(["--allow-dirty"]).allow_dirty and not ap.parse_args([]).allow_dirty
