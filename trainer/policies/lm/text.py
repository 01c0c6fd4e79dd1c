"""Tokenizers for the language-model policy; the prompt and context are schemas.prompt's.

Two tokenizers behind one small interface (``encode``, ``decode``, ``special``, ``vocab_size``):

- ``ByteTokenizer``: 256 byte tokens plus four ChatML-style specials. It needs no download and
  no training, round-trips any UTF-8 text exactly, and so lets tests and fresh tiny models run
  offline. (A BPE trained at build time would give shorter sequences, but its vocabulary would
  depend on the corpus it saw; bytes keep a published version rebuildable from its config alone.)
- ``HFTokenizer``: ``AutoTokenizer.from_pretrained(local_path)`` for a checkpoint (SmolLM2's, see
  trainer.core.pretrained, or a folder a user supplies); the specials it lacks are added (the model's
  embeddings are resized to match).
"""

from __future__ import annotations

from typing import Sequence

# re-exported: the one definition of the prompt and context lives in schemas.prompt
from schemas.prompt import (  # noqa: F401
    IM_END, IM_START, IMAGE, PAD, SHORT_PROMPT, SPECIALS, PromptSpec, Rendered, Turn, format_step_output, render,
    system_prompt, to_messages, uitars_turns,
)


class ByteTokenizer:
    """UTF-8 bytes are tokens 0..255; the specials follow."""

    def __init__(self) -> None:
        self._special = {name: 256 + i for i, name in enumerate(SPECIALS)}
        self.vocab_size = 256 + len(SPECIALS)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def special(self, name: str) -> int:
        return self._special[name]

    def piece(self, token_id: int) -> tuple[str, list[int]]:
        """One token as (text, its bytes), the way OpenAI log-prob entries show it."""
        if token_id < 256:
            return bytes([token_id]).decode("utf-8", errors="replace"), [token_id]
        name = SPECIALS[token_id - 256]
        return name, list(name.encode())


class HFTokenizer:
    """A Hugging Face tokenizer from a local folder, with our specials added if missing."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        missing = [s for s in SPECIALS if s not in self.tok.get_vocab()]
        if missing:
            self.tok.add_special_tokens({"additional_special_tokens": missing})
        self.vocab_size = len(self.tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def special(self, name: str) -> int:
        return self.tok.convert_tokens_to_ids(name)

    def piece(self, token_id: int) -> tuple[str, list[int]]:
        text = self.tok.decode([token_id])
        return text, list(text.encode("utf-8"))


def make_tokenizer(spec: str) -> ByteTokenizer | HFTokenizer:
    return ByteTokenizer() if spec == "bytes" else HFTokenizer(spec)
