"""The Disagreements view over a real chDB log (in the test's own folder) where a verifier decided
every task: its JSON lists exactly the episodes the verifier and the page disagree on, with the
confusion table per task; a run no verifier decided says so; each listed episode opens in the
replay. No broker needed: the UI reads the data directory, as it does for a finished run."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from app.ui.server import make_app
from infra.runtime.settings import load_settings
from tests.integration.disagreement_rows import (EPISODES, FALSE_NEGATIVES, FALSE_POSITIVES, JUDGED_RUN, PAGE_RUN,
                                                 write_log)

TOKEN = "t" * 24


def _get_all(settings, paths: list[str]) -> list[tuple[int, object]]:
    async def go():
        out = []
        async with TestClient(TestServer(make_app(settings, TOKEN))) as client:
            for path in paths:
                resp = await client.get(path, headers={"X-Flywheel-Token": TOKEN})
                out.append((resp.status, await (resp.json() if resp.status == 200 else resp.text())))
        return out
    return asyncio.run(go())


def test_the_view_lists_exactly_the_disagreeing_episodes(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path)})
    write_log(settings)
    paths = [f"/api/disagreements?run={JUDGED_RUN}", f"/api/disagreements?run={JUDGED_RUN}&kind=false_positive",
             f"/api/disagreements?run={JUDGED_RUN}&kind=false_negative&task=click-b",
             f"/api/disagreements?run={PAGE_RUN}", "/api/disagreements",
             "/api/disagreements?task=x'%20OR%201=1", "/api/disagreements?kind=all", "/api/episodes/a-fp"]
    (s_all, both), (s_fp, fp), (s_fn, fn_b), (s_page, page), (s_any, any_run), (s_bad, bad), (s_kind, kind), \
        (s_replay, replay) = _get_all(settings, paths)
    assert (s_all, s_fp, s_fn, s_page, s_any, s_replay) == (200,) * 6, (both, page, replay)

    assert both["verifier_used"] and not both["truncated"]
    assert sorted(e["episode_id"] for e in both["episodes"]) == sorted(FALSE_POSITIVES | FALSE_NEGATIVES)
    assert all(e["scorer"] == "rule-v1" for e in both["episodes"])  # the page-only rescore is not a verifier's
    by_id = {e["episode_id"]: e for e in both["episodes"]}
    assert by_id["a-fp"]["page_success"] is False and by_id["a-fp"]["verifier_success"] is True
    assert abs(by_id["a-fp"]["judge_outcome"] - (2 * EPISODES["a-fp"][2] - 1)) < 1e-3  # MiniWoB++'s scale
    assert by_id["b-fn"]["page_success"] is True and by_id["b-fn"]["verifier_success"] is False
    tasks = {t["task_name"]: (t["tp"], t["fp"], t["tn"], t["fn"]) for t in both["tasks"]}
    assert tasks == {"click-a": (1, 1, 1, 0), "click-b": (1, 1, 0, 1)}
    assert both["total"]["judged"] == 6 and both["total"]["false_positive_rate"] == round(2 / 3, 4)

    assert sorted(e["episode_id"] for e in fp["episodes"]) == sorted(FALSE_POSITIVES)
    assert [e["episode_id"] for e in fn_b["episodes"]] == ["b-fn"]
    assert not page["verifier_used"] and page["episodes"] == [] and page["tasks"] == []
    assert sorted(e["episode_id"] for e in any_run["episodes"]) == sorted(FALSE_POSITIVES | FALSE_NEGATIVES)

    assert s_bad == 400 and "task" in bad and s_kind == 400 and "kind" in kind
    assert [s["step_index"] for s in replay["steps"]] == [0, 1]  # the row's link opens its replay
