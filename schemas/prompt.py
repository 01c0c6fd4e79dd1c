"""The one definition of a language policy's prompt and context (pure: no torch, no tokenizer).

Rollout (in-process, or over HTTP to `flywheel serve` / vLLM), the trainers (PPO, SFT, CT) and
the vLLM export all build a decision's context here, so the tokens a policy sampled in and the
tokens the trainer scores are the same by construction:

    spec = PromptSpec.from_config(policy_config)
    turns = uitars_turns(spec, instruction, history, history_images, image)
    messages = to_messages(turns, encode_image)   # the OpenAI chat body of an HTTP request
    rendered = render(turns, tok, image_tokens)   # the token ids a model reads (ChatML)

The context follows UI-TARS: one user turn with the system prompt and the instruction, then for
every earlier step a user turn with its screenshot (only the last ``max_images`` screenshots,
counting the current one; older ones are dropped) and the assistant turn the model wrote, then
the current screenshot and an open assistant turn. ``max_images = 0`` is a text-only policy:
no screenshot at all (the only kind vLLM can serve exactly, see trainer.serving.vllm_backend). A
screenshot becomes ``image_tokens`` placeholder tokens whose embeddings a vision adapter fills in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from schemas.uitars import render_output

IM_START, IM_END, IMAGE, PAD = "<|im_start|>", "<|im_end|>", "<|image|>", "<|pad|>"
SPECIALS = (PAD, IM_START, IM_END, IMAGE)

SHORT_PROMPT = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "Output:\nThought: ...\nAction: ...\n\n## User Instruction\n{instruction}"
)


def system_prompt(name: str) -> str:
    """"short", "uitars" (ui_tars.prompt.COMPUTER_USE_DOUBAO) or a template with {instruction}."""
    if name == "short":
        return SHORT_PROMPT
    if name == "uitars":
        from ui_tars.prompt import COMPUTER_USE_DOUBAO
        return COMPUTER_USE_DOUBAO
    return name


@dataclass(frozen=True)
class PromptSpec:
    """What shapes a context, read from a policy's config (so a PolicyVersion carries it)."""

    prompt: str = "short"         # see system_prompt
    max_images: int = 5           # screenshots kept in context, the current one included
    coord_mode: str = "qwen25vl"  # how the model writes coordinates (schemas.uitars.parse_output)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "PromptSpec":
        d = cls()
        return cls(str(config.get("prompt", d.prompt)), int(config.get("max_images", d.max_images)),
                   str(config.get("coord_mode", d.coord_mode)))


@dataclass
class Turn:
    """One chat turn; ``parts`` are text strings and H x W x 3 uint8 images, in order."""

    role: str  # "system" | "user" | "assistant"
    parts: list[Any]


@dataclass
class Rendered:
    """A token sequence ready for the model.

    ``target[i]`` marks tokens that are scored: the assistant turns for SFT, the last response
    for PPO, the screens' transitions for CT (see trainer.sft.ct_samples). ``images`` fill the image
    placeholders in order.
    """

    ids: list[int]
    images: list[Any] = field(default_factory=list)
    target: list[bool] = field(default_factory=list)
    ground: Any = None  # a policy's reading of the current screenshot (trainer.policies.lm.ground), or None


def format_step_output(step, coord_mode: str = "qwen25vl") -> str:
    """The assistant turn of an earlier step: what the model wrote, else rebuilt from the action."""
    if step.raw_output:
        return step.raw_output

    obs = step.observation
    action = "wait()" if step.action is None else step.action
    return render_output(step.thought, action, obs.screen_width, obs.screen_height, coord_mode)


def uitars_turns(spec: PromptSpec, instruction: str, history: list, history_images: list[Any],
                 image: Any) -> list[Turn]:
    """The UI-TARS context for one decision.

    ``history`` are the earlier steps (schemas Step), ``history_images`` their screenshots (None
    when not available); ``image`` is the current screenshot (None: no current screen, as in a
    whole-trajectory CT sample). Every earlier assistant turn stays, so the full action history
    is visible.
    """
    prompt = system_prompt(spec.prompt).format(instruction=instruction, language="English")
    turns = [Turn("user", [prompt])]
    keep_from = len(history) + 1 - spec.max_images  # history index from which screenshots are kept
    for i, (step, img) in enumerate(zip(history, history_images)):
        if i >= keep_from and img is not None:
            turns.append(Turn("user", [img]))
        turns.append(Turn("assistant", [format_step_output(step, spec.coord_mode)]))
    if image is not None and spec.max_images > 0:
        turns.append(Turn("user", [image]))
    return turns


def instruction_of(spec: PromptSpec, turns: list[Turn]) -> str | None:
    """The instruction a context was built for (``uitars_turns``' first turn, read back through
    the prompt template, which may name {instruction} more than once), or None when the first
    turn is not that prompt or the template has no {instruction}."""
    if not turns or turns[0].role != "user" or len(turns[0].parts) != 1 or not isinstance(turns[0].parts[0], str):
        return None
    mark = "\x00"
    pieces = system_prompt(spec.prompt).format(instruction=mark, language="English").split(mark)
    text, copies = turns[0].parts[0], len(pieces) - 1
    size, rest = divmod(len(text) - sum(map(len, pieces)), max(copies, 1))
    if copies == 0 or size < 0 or rest:
        return None
    instruction = text[len(pieces[0]):len(pieces[0]) + size]
    return instruction if instruction.join(pieces) == text else None


def history_window(spec: PromptSpec, n_history: int) -> range:
    """Indices of the earlier steps whose screenshots a context shows."""
    return range(max(0, n_history + 1 - spec.max_images), n_history)


def render(turns: list[Turn], tok, image_tokens: int, open_assistant: bool = True,
           score: str | Callable[[int, Turn], bool] = "assistant") -> Rendered:
    """ChatML rendering: ``<|im_start|>role\\n ... <|im_end|>\\n`` per turn.

    ``tok`` has ``encode(text) -> ids`` and ``special(name) -> id``. ``score`` picks the turns
    whose text and closing ``<|im_end|>`` are target tokens: "assistant" (each assistant turn),
    "last" (only the final assistant turn), "none", or a predicate ``(index, turn) -> bool``.
    Role headers and image placeholders are never targets.
    """
    out = Rendered(ids=[])
    last_assistant = max((i for i, t in enumerate(turns) if t.role == "assistant"), default=-1)

    def emit(ids: list[int], scored: bool) -> None:
        out.ids.extend(ids)
        out.target.extend([scored] * len(ids))

    start, end, nl = tok.special(IM_START), tok.special(IM_END), tok.encode("\n")
    for i, turn in enumerate(turns):
        if callable(score):
            scored = score(i, turn)
        else:
            scored = (score == "assistant" and turn.role == "assistant") or (score == "last" and i == last_assistant)
        emit([start] + tok.encode(turn.role) + nl, False)
        for part in turn.parts:
            if isinstance(part, str):
                emit(tok.encode(part), scored)
            else:
                out.images.append(part)
                emit([tok.special(IMAGE)] * image_tokens, False)
        emit([end], scored)
        emit(nl, False)
    if open_assistant:
        emit([start] + tok.encode("assistant") + nl, False)
    return out


def to_messages(turns: list[Turn], encode_image: Callable[[Any], str]) -> list[dict[str, Any]]:
    """OpenAI chat messages of ``turns``: a text-only turn is a string, else a list of parts.

    ``encode_image`` turns an image part into a URL (``data:image/png;base64,...``); a server
    that decodes it gets the same pixels back (PNG is lossless), so the same tokens.
    """
    messages = []
    for t in turns:
        if all(isinstance(p, str) for p in t.parts) and len(t.parts) == 1:
            messages.append({"role": t.role, "content": t.parts[0]})
            continue
        parts = [{"type": "text", "text": p} if isinstance(p, str)
                 else {"type": "image_url", "image_url": {"url": encode_image(p)}} for p in t.parts]
        messages.append({"role": t.role, "content": parts})
    return messages


def chat_template() -> str:
    """A Jinja chat template that renders text-only messages exactly as ``render`` does (for the
    vLLM export: the served model then reads the tokens it was trained on)."""
    return ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
            "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
