"""`flywheel bc --demos-from`: which policies' demonstrations are cloned (human:<name> of the Annotate view)."""

from __future__ import annotations

from types import SimpleNamespace

from trainer.sft.bc import demonstrated_by, select_demos


def scored(eid: str, policy: str, task: str = "click-test", success: bool = True):
    traj = SimpleNamespace(episode_id=eid, policy=policy, success=success, steps=[object()],
                           task=SimpleNamespace(name=task))
    return SimpleNamespace(verdict=1 if success else 0, trajectory=traj)


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
