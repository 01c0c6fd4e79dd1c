"""`flywheel bc --demos-from`: which policies' demonstrations are cloned (human:<name> of the Annotate view)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from schemas.events import ScoredTrajectory, TaskSpec, Trajectory
from trainer.sft.bc import demonstrated_by, select_demos


def scored(eid: str, policy: str, task: str = "click-test", success: bool = True):
    traj = SimpleNamespace(episode_id=eid, policy=policy, success=success, steps=[object()],
                           task=SimpleNamespace(name=task))
    return SimpleNamespace(verdict=1 if success else 0, trajectory=traj)


def demonstration(eid: str, policy: str, task: str) -> ScoredTrajectory:
    traj = Trajectory(episode_id=eid, task=TaskSpec(task_id=eid, suite="miniwob", name=task), sandbox="browser",
                      worker_id="ui-annotate", policy=policy, steps=[], status="ended", success=True, started_at=1.0,
                      ended_at=2.0)
    return ScoredTrajectory(trajectory=traj, scorer="rule-v1", scorer_version="1", reward=1.0, components={},
                            verdict=1, rl_eligible=False, scored_at=3.0)


def test_a_family_takes_every_member_and_a_name_only_itself():
    assert demonstrated_by("human:alice", ["human"]) and demonstrated_by("human:bob", ["human"])
    assert demonstrated_by("human:alice", ["human:alice"]) and not demonstrated_by("human:bob", ["human:alice"])
    assert not demonstrated_by("humanoid", ["human"]) and not demonstrated_by("scripted-pixel-r1", ["human"])
    assert demonstrated_by("scripted-pixel-r1", []) and demonstrated_by("human:alice", [])


def test_select_demos_keeps_only_the_sources_successes():
    records = [scored("e1", "human:alice"), scored("e2", "scripted"), scored("e3", "human:bob"),
               scored("e4", "human:carol", success=False), scored("e5", "human:dan", task="enter-text")]
    assert [s.trajectory.episode_id for s in select_demos(records, ["click-test"], 10, ["human"])] == ["e1", "e3"]
    assert [s.trajectory.episode_id for s in select_demos(records, ["click-test"], 10)] == ["e1", "e2", "e3"]
    assert [s.trajectory.episode_id for s in select_demos(records, ["click-test"], 1, ["human"])] == ["e1"]


def test_the_demo_cold_start_from_human_demonstrations(monkeypatch, tmp_path):
    """--demos-from human: the people's demonstrations of the planned tasks are copied onto the
    run's sft topic (acknowledged) and `flywheel bc` is asked for human ones only."""
    from app import demo_config, phases
    from infra.runtime.settings import load_settings

    produced, argvs = [], []

    class Producer:
        def produce(self, topic, key, value, on_delivery):
            produced.append((topic, key))
            on_delivery(None, None)

        def flush(self, _timeout=None):
            return 0

    monkeypatch.setattr(phases, "make_producer", lambda _s: Producer())  # phases imports it by name
    monkeypatch.setattr(phases, "_run_step", lambda name, argv, env, logs, **kw: argvs.append(argv) or "published")
    demos = [demonstration("e1", "human:alice", "click-dialog"), demonstration("e2", "human:bob", "enter-text")]
    asked = demo_config.DemoConfig(tasks=["click-dialog", "click-test"], demos_from="human")
    cfg, cold, _ = demo_config.effective(asked, frozenset(s.trajectory.task.name for s in demos))
    assert cold.demonstrated == ("click-dialog",) and cold.rl_only == ("click-test",)
    settings = load_settings({"data_dir": str(tmp_path), "topic_prefix": "demo-r1."})
    n = phases.import_demonstrations(settings, demos, list(cold.demonstrated), phases.PhaseClock())
    assert n == 1 and produced == [("demo-r1.flywheel.sft.v1", b"e1")]
    phases.clone(cfg, {}, "pixel-r1", list(cold.demonstrated), ("click",), tmp_path / "logs", phases.PhaseClock())
    argv = argvs[0]
    handed = json.loads(Path(argv[argv.index("--config") + 1]).read_text())  # bc's configuration, whole
    assert handed["demos_from"] == ["human"] and handed["tasks"] == ["click-dialog"]


def test_a_game_below_the_heuristics_mean_is_cloned_when_the_scorer_called_it_v1():
    # a game's success is reaching the heuristic's mean; V(s)=1 comes from half of it (scoring 1.3)
    game = scored("g1", "scripted", task="games.snake")
    game.trajectory.success = False
    assert [s.trajectory.episode_id for s in select_demos([game], ["games.snake"], 10)] == ["g1"]
    game.verdict = 0
    assert select_demos([game], ["games.snake"], 10) == []
