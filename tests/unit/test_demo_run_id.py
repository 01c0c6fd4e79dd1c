"""A data dir takes a demo's run id once: a run id whose versions, checkpoint or claim the data dir
holds is refused before anything starts (its rows would mix with the new run's), and a run id
that could not name topics and folders is refused as bad input."""

from __future__ import annotations

import pytest

from app import demo
from app.demo import claim_run_id
from app.demo_config import DemoConfig
from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings


@pytest.fixture()
def settings(tmp_path, monkeypatch):
    published: set[str] = set()
    monkeypatch.setattr(demo, "_published", lambda settings, policy: policy in published)
    s = load_settings({"data_dir": str(tmp_path)}, env={})
    s.published = published  # the stand-in broker's policies with versions
    return s


def test_a_fresh_run_id_is_claimed_and_a_second_claim_refused(settings):
    claim_run_id(settings, "r1", "pixel-r1")
    assert (settings.data_path / "runs" / "r1" / "started.txt").read_text().strip()
    with pytest.raises(UserError, match="was used before .*claimed by a demo"):
        claim_run_id(settings, "r1", "pixel-r1")  # a second demo of the same id, or a run stopped early
    claim_run_id(settings, "r2", "pixel-r2")  # another id is unaffected


def test_a_kept_checkpoint_or_published_versions_refuse_the_run_id_without_claiming_it(settings):
    (settings.checkpoint_root / "pixel-old").mkdir(parents=True)  # a broker started afresh knows nothing of it
    with pytest.raises(UserError, match="has a trainer checkpoint"):
        claim_run_id(settings, "old", "pixel-old")
    settings.published.add("pixel-used")
    with pytest.raises(UserError, match="has published versions"):
        claim_run_id(settings, "used", "pixel-used")
    assert not (settings.data_path / "runs" / "old").exists() and not (settings.data_path / "runs" / "used").exists()


@pytest.mark.parametrize("run_id", ["../x", "a/b", ".hidden", "-x", "a b", "x" * 101, "é"])
def test_a_run_id_that_cannot_name_topics_and_folders_is_refused(run_id):
    with pytest.raises(UserError, match="--run-id names the run's topics and folders"):
        DemoConfig(run_id=run_id).validate()


def test_the_run_ids_in_use_are_accepted():
    for run_id in ("abl-g52-full-s0", "mj31-s0", "20261129-101334-ab12", "x" * 100, "a.b_c-d"):
        assert DemoConfig(run_id=run_id).validate().run_id == run_id


def test_episodes_on_a_clickhouse_server_refuse_the_run_id(settings, monkeypatch):
    """A server's rows outlive the data dir: a fresh data dir and broker do not free the id."""
    from dataclasses import replace

    asked = []
    monkeypatch.setattr(demo, "_scored_on_server", lambda s, policy: asked.append(policy) or policy == "pixel-old")
    claim_run_id(settings, "old", "pixel-old")  # embedded chDB: its rows are in this data dir, the claim covers them
    assert not asked
    server = replace(settings, clickhouse_url="http://clickhouse:8123")
    with pytest.raises(UserError, match="ClickHouse server holds episodes of pixel-old"):
        claim_run_id(server, "old2", "pixel-old")
    claim_run_id(server, "new", "pixel-new")
    assert asked == ["pixel-old", "pixel-new"]
