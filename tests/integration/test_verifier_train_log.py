"""`flywheel verifier train` reads a log the sink wrote (chDB in the test's own folder, screenshots
in its blob store) and evaluates on the held-out task: EPISODES_SQL against the real tables."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from PIL import Image

from consumers.rows import COLUMNS, row_for
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.blobs import BlobStore
from streams.assemble import add_event
from tests.fakes.steps import episode_events
from trainer.verifier.config import VerifierTrainConfig
from trainer.verifier.train import train


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), color).save(buf, "PNG")
    return buf.getvalue()


def trajectory(episode_id: str, task: str, success: bool, screens: list[str]):
    state, traj = None, None
    for ev in episode_events(episode_id, 2, success=success):
        if ev.kind == "step":
            ev = ev.model_copy(update={
                "observation": ev.observation.model_copy(update={"screenshot": ev.observation.screenshot.model_copy(
                    update={"sha256": screens[ev.step_index]})}),
                "next_screenshot_sha256": screens[ev.step_index + 1]})
        if ev.kind == "started":
            ev = ev.model_copy(update={"task": ev.task.model_copy(update={"name": task})})
        state, out = add_event(state, ev, 200.0)
        traj = out or traj
    return traj


def test_train_reads_the_log_and_evaluates_the_held_out_task(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a second thread only waits on the first
    try:
        _train_and_check(tmp_path)
    finally:
        torch.set_num_threads(before)


def _train_and_check(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path)})
    store = BlobStore(settings.blob_root)
    grey, ok, bad = (store.put(png(c)).sha256 for c in ((90, 90, 90), (0, 200, 0), (200, 0, 0)))
    trajs = [trajectory(f"{task}-{i}", task, i % 2 == 0, [grey, grey, ok if i % 2 == 0 else bad])
             for task in ("click-test", "click-button", "held-task") for i in range(8)]
    client = make_client(settings)
    try:
        for traj in trajs:
            for kind, event in [("trajectories", traj)] + [("steps", s) for s in traj.steps]:
                table, values = row_for(kind, event)
                client.insert(table, [values], column_names=COLUMNS[table])
    finally:
        client.close()
    out = tmp_path / "verifier.pt"
    report = train(settings, VerifierTrainConfig(holdout=["held-task"], out=str(out), side=16, epochs=3, batch_size=8,
                                                 calibration_fraction=0.25))
    assert report["train_tasks"] == ["click-button", "click-test"] and report["holdout"] == ["held-task"]
    held = report["tasks"]["held-task"]
    assert held["episodes"] == 8 and held["tp"] + held["fn"] == 4 and held["fp"] + held["tn"] == 4
    assert out.exists() and json.loads(Path(f"{out}.eval.json").read_text())["tasks"]["ALL"]["episodes"] == 8
