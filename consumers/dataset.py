"""Pure conversion of a ScoredTrajectory into a chat "messages" training record.

The conversation follows UI-TARS: a system prompt, then the instruction with the first
screenshot; each step is the assistant's "Thought: ... Action: ..." followed by the user turn
carrying the next screenshot. Images are references (blob uri + sha256 + size), never bytes.
Every content item has the same keys (type, text, image, sha256, width, height) so the
records fit one Parquet schema.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from schemas.events import BlobRef, ScoredTrajectory, Step

SYSTEM_PROMPT = (
    "You are a GUI agent. You are given a task and a screenshot. Think step by step, then output "
    "the next action in the format: Thought: ...\\nAction: ..."
)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "image": None, "sha256": None, "width": None, "height": None}


def _image(ref: BlobRef) -> dict[str, Any]:
    return {"type": "image", "text": None, "image": ref.uri, "sha256": ref.sha256,
            "width": ref.width or None, "height": ref.height or None}


def assistant_text(step: Step) -> str:
    if step.raw_output:
        return step.raw_output
    action = orjson.dumps(step.action.model_dump(mode="json")).decode() if step.action else ""
    return f"Thought: {step.thought}\nAction: {action}"


def to_record(scored: ScoredTrajectory, dataset: str) -> dict[str, Any]:
    traj = scored.trajectory
    steps = traj.steps
    instruction = steps[0].observation.instruction if steps else ""
    messages: list[dict[str, Any]] = [{"role": "system", "content": [_text(SYSTEM_PROMPT)]}]
    first = [_text(instruction or traj.task.name)]
    if steps:
        first.append(_image(steps[0].observation.screenshot))
    messages.append({"role": "user", "content": first})
    for i, step in enumerate(steps):
        messages.append({"role": "assistant", "content": [_text(assistant_text(step))]})
        if i + 1 < len(steps):
            messages.append({"role": "user", "content": [_image(steps[i + 1].observation.screenshot)]})
    lo, hi = traj.policy_versions
    return {
        "id": scored.event_id, "episode_id": traj.episode_id, "dataset": dataset, "task": traj.task.name,
        "instruction": instruction, "scorer": scored.scorer, "scorer_version": scored.scorer_version,
        "reward": scored.reward, "verdict": scored.verdict, "success": traj.success, "policy": traj.policy,
        "policy_version_min": lo, "policy_version_max": hi, "num_steps": len(steps), "messages": messages,
    }


_CONTENT = pa.struct([("type", pa.string()), ("text", pa.string()), ("image", pa.string()),
                      ("sha256", pa.string()), ("width", pa.int32()), ("height", pa.int32())])
PARQUET_SCHEMA = pa.schema([
    ("id", pa.string()), ("episode_id", pa.string()), ("dataset", pa.string()), ("task", pa.string()),
    ("instruction", pa.string()), ("scorer", pa.string()), ("scorer_version", pa.string()),
    ("reward", pa.float64()), ("verdict", pa.int8()), ("success", pa.bool_()), ("policy", pa.string()),
    ("policy_version_min", pa.int32()), ("policy_version_max", pa.int32()), ("num_steps", pa.int32()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.list_(_CONTENT))]))),
])


def jsonl_line(record: dict[str, Any]) -> bytes:
    """One JSON line; content items drop their empty keys to stay readable."""
    slim = dict(record)
    slim["messages"] = [{"role": m["role"], "content": [{k: v for k, v in c.items() if v is not None}
                                                        for c in m["content"]]} for m in record["messages"]]
    return orjson.dumps(slim) + b"\n"
