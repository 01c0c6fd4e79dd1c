"""A Hugging Face causal language model with a value head that writes UI-TARS text.

The model is any ``AutoModelForCausalLM``: a tiny Qwen2 built from a config (unit tests), the
pretrained SmolLM2-135M-Instruct (``"pretrained": "smollm2-135m"``, resolved offline by
trainer.core.pretrained; the main job's default, see ``pretrained_lm_config``) or any local Hugging
Face folder. Screenshots reach it through ``PatchVision``: a patch
embedding over a downscaled screenshot, projected into the LM's embedding space and written over
``image_tokens`` placeholder tokens. (A tiny Qwen2-VL cannot be built offline with a working
processor, so a small adapter keeps tests self-contained; it also makes any text checkpoint a
vision-language policy, its adapter learnt by SFT / PPO. No package installable here ships a
vision-language model or a general image encoder, so the adapter is the vision path, trained
from scratch.) The context of a decision is schemas.prompt's, shared with rollout over HTTP.

PPO (trainer.rl.streaming_ppo / trainer.rl.update): ``step_inputs`` rebuilds each step of a trajectory in the
context it was sampled in (``Rendered``: context + the text the policy wrote), and ``evaluate``
scores a batch of them: the step's log-prob is the sum over its tokens (the behaviour log-prob on
the step event is that sum, so the ratio and the truncated importance weight are the pixel
policy's, per step), its value is the critic's at the last context token (one value per step:
rewards, GAE and the behaviour log-prob are per step, and a per-token critic would be asked
about half-written actions no reward speaks of), its entropy the mean per-token entropy.

Invariant (see base.py): the log-prob ``act`` returns is that of the token sequence
``encode(raw_output) + <|im_end|>`` — exactly what ``evaluate`` scores when the trainer rebuilds
the decision from the step. When sampling produced another tokenization of the same text (or hit
``max_new_tokens`` before ``<|im_end|>``), ``act`` rescores that canonical sequence with one
forward pass, so behaviour and training log-probs always refer to the same tokens.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from infra.runtime.policy import Decision, PolicyInput, screen, screen_or_none, state_at
from schemas.prompt import (
    IM_END, IMAGE, PAD, PromptSpec, Rendered, Turn, format_step_output, history_window, instruction_of, render,
    uitars_turns,
)
from trainer.policies.base import PolicyDefaults
from trainer.policies.lm import ground as lm_ground
from trainer.policies.lm.pointer import PointerCodec, PointerHead, PointerTokenizer
from trainer.policies.lm.text import make_tokenizer
from trainer.policies.pixel.ground import PAGE_FONT, PAGE_SIZES, pin_font
from trainer.sft.lm_config import PRETRAINED_LM
from trainer.core.pretrained import resolve
from schemas.uitars import parse_output


def tiny_lm_config(**overrides: Any) -> dict[str, Any]:
    """A 2-layer, hidden-64 Qwen2 over the byte tokenizer: small enough for unit tests on CPU."""
    cfg = {
        "lm": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
               "tie_word_embeddings": False},
        "pretrained": "",          # a named checkpoint (trainer.core.pretrained) or a local HF folder; overrides "lm"
        "tokenizer": "auto",       # "auto" (the pretrained's, else bytes), "bytes" or a local tokenizer folder
        "image_size": 32,          # screenshots are resized to image_size x image_size
        "patch": 8,                # -> (image_size / patch)^2 image tokens per screenshot
        "max_images": 5,           # UI-TARS keeps the last N screenshots in context
        "max_new_tokens": 96,
        "prompt": "short",         # "short", "uitars" (ui_tars.prompt.COMPUTER_USE_DOUBAO) or a template
        "coord_mode": "qwen25vl",  # how the model writes coordinates (schemas.uitars.parse_output)
        "seed": 0,                 # initial weights of a model built from "lm"
        "pointer": False,          # click coordinates by pointing at a patch (trainer.policies.lm.pointer)
        "ground": False,           # the pointer also reads the instruction's words (trainer.policies.lm.ground)
        "ground_words": 16,        # instruction words matched
        "ground_font": PAGE_FONT,  # the page's CSS font family, resolved by fontconfig (or a font file)
        "ground_sizes": list(PAGE_SIZES),  # px of the page's text
    }
    cfg.update(overrides)
    return cfg


def pretrained_lm_config(**overrides: Any) -> dict[str, Any]:
    """The main job's language policy (trainer.sft.lm_config.PRETRAINED_LM: SmolLM2-135M-Instruct)."""

    return tiny_lm_config(**{**PRETRAINED_LM, **overrides})


class PatchVision(nn.Module):
    """Screenshot -> ``(image_size/patch)^2`` embeddings in the LM's hidden space."""

    def __init__(self, image_size: int, patch: int, hidden: int) -> None:
        super().__init__()
        self.image_size, self.n_tokens = image_size, (image_size // patch) ** 2
        self.patchify = nn.Conv2d(3, hidden, patch, patch)
        self.pos = nn.Parameter(torch.zeros(self.n_tokens, hidden))
        self.proj = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden))

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        """H x W x 3 uint8 -> 3 x S x S float32 in [-1, 1]."""
        img = Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
        img = img.resize((self.image_size, self.image_size), Image.BILINEAR)
        return (np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 127.5) - 1.0

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels [N, 3, S, S] -> [N, n_tokens, hidden]."""
        x = self.patchify(pixels).flatten(2).transpose(1, 2)
        return self.proj(x + self.pos)


@dataclass
class Generation:
    token_ids: list[int]
    token_logprobs: list[float]
    text: str
    value: float
    finished: bool  # ended with <|im_end|> rather than max_new_tokens


@dataclass
class LMBatch:
    """Right-padded sequences; ``target`` [B, L-1] marks positions whose next token is scored."""

    ids: torch.Tensor       # [B, L] long
    attn: torch.Tensor      # [B, L] long
    pixels: torch.Tensor    # [N, 3, S, S], N = images in the batch, in sequence order
    target: torch.Tensor    # [B, L-1] bool
    ground: tuple[torch.Tensor, torch.Tensor] | None = None  # maps [B, k, n], word ids [B, k, T] (lm_ground.batch)


class LMPolicy(nn.Module, PolicyDefaults):
    kind = "lm"

    def __init__(self, name: str, config: dict[str, Any], version: int = 0, load_pretrained: bool = True,
                 blob_store=None) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModelForCausalLM

        self.name, self.version, self.config = name, version, pin_font(tiny_lm_config(**config))
        self.blob_store = blob_store  # lets act() show earlier screenshots from the history
        path = ""
        if self.config["pretrained"]:

            path = str(resolve(self.config["pretrained"]))
        tok = self.config["tokenizer"]
        self.tok = make_tokenizer(path or "bytes" if tok == "auto" else tok)
        self.codec = self._pointer_codec()
        if self.codec is not None:
            self.tok = PointerTokenizer(self.tok, self.codec.n)
        torch.manual_seed(int(self.config["seed"]))  # a fresh model is a function of its config
        if path and load_pretrained:
            self.lm = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        elif path:  # weights come from a published version next: the architecture is enough
            self.lm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path, local_files_only=True))
        else:
            lm_cfg = dict(self.config["lm"])
            lm_cfg["vocab_size"] = self.tok.vocab_size
            self.lm = AutoModelForCausalLM.from_config(AutoConfig.for_model(lm_cfg.pop("model_type"), **lm_cfg))
        if self.lm.get_input_embeddings().num_embeddings < self.tok.vocab_size:
            self.lm.resize_token_embeddings(self.tok.vocab_size)
        hidden = self.lm.config.get_text_config().hidden_size
        self.vision = PatchVision(self.config["image_size"], self.config["patch"], hidden)
        self.pointer = PointerHead(hidden) if self.codec is not None else None
        self.ground, self._reads = None, {}
        if self.config["ground"]:
            if int(self.config["ground_words"]) < 1:
                raise ValueError(f"ground_words must be >= 1, got {self.config['ground_words']}")
            if self.codec is None:
                raise ValueError('"ground" weighs the pointer\'s scores: it needs "pointer": true')
            self.ground = lm_ground.GroundHead(hidden, self.codec.side)
        self.value_head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.spec = PromptSpec.from_config(self.config)
        self.eos, self.pad = self.tok.special(IM_END), self.tok.special(PAD)
        self.eval()

    def _pointer_codec(self) -> PointerCodec | None:
        if not self.config["pointer"]:
            return None
        if self.config["coord_mode"] != "1000" or int(self.config["max_images"]) < 1:
            raise ValueError("a pointer policy needs coord_mode '1000' (points relative to the screen) and "
                             f"max_images >= 1, got coord_mode {self.config['coord_mode']!r}, "
                             f"max_images {self.config['max_images']} (or set \"pointer\": false)")
        return PointerCodec(int(self.config["image_size"]) // int(self.config["patch"]))

    def config_dict(self) -> dict[str, Any]:
        return dict(self.config)

    def param_groups(self, lr: float, adapter_lr_mult: float = 1.0) -> list[dict[str, Any]]:
        """Optimiser groups: the pretrained LM at ``lr``; the parts trained from scratch (the
        patch adapter and the value head) at ``lr * adapter_lr_mult``, as LLaVA-style projectors
        are trained at a larger step than the LM they feed."""
        fresh = [*self.vision.parameters(), *self.value_head.parameters(),
                 *(self.pointer.parameters() if self.pointer is not None else []),
                 *(self.ground.parameters() if self.ground is not None else [])]
        return [{"params": list(self.lm.parameters()), "lr": lr}, {"params": fresh, "lr": lr * adapter_lr_mult}]

    @property
    def device(self) -> torch.device:
        return self.value_head.weight.device

    # ------------------------------------------------------------ contexts

    def context(self, inp: PolicyInput) -> list[Turn]:
        return self.context_with_images(inp, self._history_images(inp.history))

    def _history_images(self, history: list) -> list[np.ndarray | None]:
        """Screenshots of earlier steps, only those the context shows (the rest are not read)."""
        keep = set(history_window(self.spec, len(history)))
        return [self._history_image(step) if i in keep else None for i, step in enumerate(history)]

    def context_with_images(self, inp: PolicyInput, history_images: list[np.ndarray | None]) -> list[Turn]:
        return uitars_turns(self.spec, inp.instruction, inp.history, history_images, inp.image)

    def _history_image(self, step) -> np.ndarray | None:
        if self.blob_store is None:
            return None
        return screen_or_none(self.blob_store, step.observation.screenshot)  # a missing one shortens the context

    def render(self, turns: list[Turn], response: str | None = None, score: str = "last") -> Rendered:
        """Render a context; with ``response``, append it (+ <|im_end|>) as the scored answer."""
        if response is not None:
            turns = turns + [Turn("assistant", [response])]
        r = render(self.model_turns(turns), self.tok, self.vision.n_tokens, open_assistant=response is None, score=score)
        if response is not None:  # drop the trailing newline after the answer's <|im_end|>
            n = len(self.tok.encode("\n"))
            del r.ids[-n:], r.target[-n:]
        if self.ground is not None and r.images:
            r.ground = self._read(r.images[-1], instruction_of(self.spec, turns))
        return r

    def _read(self, image: np.ndarray, instruction: str | None) -> tuple[np.ndarray, list[list[int]]] | None:
        """The grounding of the pointer's screenshot (the context's last): per-word maps over its
        patches and the words' token ids; None when the context carries no instruction."""
        if not instruction:
            return None
        arr = np.ascontiguousarray(image)
        key = (hashlib.blake2b(arr.tobytes(), digest_size=16).digest(), arr.shape, instruction)
        if key not in self._reads:  # act may render a context twice, a DPO pair's sides share one
            k = int(self.config["ground_words"])
            maps, found = lm_ground.read(arr, instruction, k, self.codec.side, self.config["ground_font"],
                                         list(self.config["ground_sizes"]))
            self._reads[key] = (maps, lm_ground.word_ids(self.tok, found, k))
            while len(self._reads) > 64:
                self._reads.pop(next(iter(self._reads)))
        return self._reads[key]

    def model_turns(self, turns: list[Turn]) -> list[Turn]:
        """The turns as the model reads them: with a pointer, each written point of an assistant
        turn becomes the location token the model samples (everything that scores text uses this)."""
        if self.codec is None:
            return turns
        return [Turn(t.role, [self.model_text(p) if isinstance(p, str) and t.role == "assistant" else p
                              for p in t.parts]) for t in turns]

    def model_text(self, text: str) -> str:
        """An assistant text as the model reads it: with a pointer, written points are location tokens."""
        return self.codec.to_model(text) if self.codec is not None else text

    def taught_text(self, step) -> str:
        """The assistant turn SFT and CT show for a recorded step. A pointer policy rebuilds it from
        the parsed action: the step may come from another policy whose text has other coordinates
        (pixels, JSON), which read on this grid would point elsewhere."""
        if self.codec is not None and step.action is not None:
            step = step.model_copy(update={"raw_output": None})
        return format_step_output(step, self.config["coord_mode"])

    def decision_sample(self, inp: PolicyInput, raw_output: str) -> Rendered:
        """What the trainer scores for one step: its context and the text the policy wrote."""
        return self.render(self.context(inp), raw_output, score="last")

    # ------------------------------------------------------------ forward passes

    def _embed(self, ids: torch.Tensor, pixels: torch.Tensor, scored: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings with screenshots written over the image placeholders.

        ``scored`` [B, L] marks generated tokens: a model may emit the placeholder id itself,
        and that token is text, not an image slot.
        """
        emb = self.lm.get_input_embeddings()(ids)
        slots = ids == self.tok.special(IMAGE)
        if scored is not None:
            slots &= ~scored
        if pixels.shape[0]:
            img = self.vision(pixels.to(emb.dtype)).reshape(-1, emb.shape[-1])
            emb = emb.masked_scatter(slots.unsqueeze(-1), img)
        return emb

    def _pixels(self, images: list[np.ndarray]) -> torch.Tensor:
        s = self.config["image_size"]
        if not images:
            return torch.zeros(0, 3, s, s, device=self.device)
        return torch.from_numpy(np.stack([self.vision.preprocess(im) for im in images])).to(self.device)

    def make_batch(self, samples: list[Rendered]) -> LMBatch:
        L = max(len(s.ids) for s in samples)
        ids = torch.full((len(samples), L), self.pad, dtype=torch.long)
        attn = torch.zeros((len(samples), L), dtype=torch.long)
        target = torch.zeros((len(samples), L), dtype=torch.bool)
        for i, s in enumerate(samples):
            ids[i, : len(s.ids)] = torch.tensor(s.ids)
            attn[i, : len(s.ids)] = 1
            target[i, : len(s.ids)] = torch.tensor(s.target)
        pixels = self._pixels([im for s in samples for im in s.images])
        return LMBatch(ids.to(self.device), attn.to(self.device), pixels, target[:, 1:].to(self.device),
                       self._ground_batch(samples))

    def _ground_batch(self, samples: list[Rendered]) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.ground is None:
            return None
        out = lm_ground.batch([s.ground for s in samples], int(self.config["ground_words"]), self.codec.n)
        return None if out is None else (out[0].to(self.device), out[1].to(self.device))

    def _pointer_keys(self, hidden: torch.Tensor, ids: torch.Tensor, scored: torch.Tensor | None = None,
                      ground: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple | None:
        """The pointer's keys of the current (last) screenshot's patches, [B, n, d], the
        position of that screenshot's last slot per row, [B], and with ``ground`` the grounding
        head's word keys, words and map features per row; None without a pointer. A row
        without a screenshot gets zero hidden states (its location tokens get one score each)."""
        if self.pointer is None:
            return None
        n = self.vision.n_tokens
        slots = ids == self.tok.special(IMAGE)
        if scored is not None:
            slots &= ~scored
        patches = hidden.new_zeros(hidden.shape[0], n, hidden.shape[-1])
        last = torch.full((hidden.shape[0],), -1, dtype=torch.long, device=hidden.device)
        for b in range(hidden.shape[0]):
            where = slots[b].nonzero().flatten()
            if len(where) >= n:
                patches[b], last[b] = hidden[b, where[-n:]], where[-1]
        read = None
        if self.ground is not None and ground is not None:
            maps, word_ids = ground
            keys, real = self.ground.word_keys(self.lm.get_input_embeddings(), word_ids)
            read = (keys, real, self.ground.features(maps))
        return self.pointer.keys(patches), last, read

    def _logits(self, h: torch.Tensor, keys: tuple | None, rows: torch.Tensor,
                cols: torch.Tensor | None = None) -> torch.Tensor:
        """Next-token logits [N, V] from hidden states [N, H] at (row, position) of the batch;
        with a pointer, the location tokens add the pointer's score of each patch of the row's
        current screenshot, where that screenshot came before (a position before it, as in a CT
        transition, would look ahead: it gets no pointer score)."""
        logits = self.lm.lm_head(h).float()
        if keys is not None:
            k, last, read = keys
            scores = self.pointer.scores(h, k, rows)
            if read is not None:
                word_keys, real, feats = read
                scores = scores + self.ground(h, word_keys[rows], real[rows], feats[rows]).to(scores.dtype)
            if cols is not None:
                seen = (cols >= last[rows]).unsqueeze(-1)
                scores = torch.where(seen, scores, torch.zeros_like(scores))
            base = self.tok.base
            logits[:, base:base + self.codec.n] = logits[:, base:base + self.codec.n] + scores.float()
        return logits

    def evaluate_tokens(self, batch: LMBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token-level log-probs, values and entropies, each [B, L-1], zero off ``batch.target``.

        Position t scores token t+1 given tokens 0..t; values[t] is the critic's estimate of the
        state before that token. Logits are computed only at target positions (a real
        vocabulary is large).
        """
        scored = F.pad(batch.target, (1, 0), value=False)
        emb = self._embed(batch.ids, batch.pixels, scored)
        full = self.lm.model(inputs_embeds=emb, attention_mask=batch.attn).last_hidden_state
        hidden = full[:, :-1]
        values = self.value_head(hidden).squeeze(-1) * batch.target
        logits = self._logits(hidden[batch.target], self._pointer_keys(full, batch.ids, scored, batch.ground),
                              *batch.target.nonzero().unbind(-1))
        logp_all = F.log_softmax(logits, dim=-1)
        next_ids = batch.ids[:, 1:][batch.target]
        logprobs = torch.zeros(batch.target.shape, device=hidden.device, dtype=logp_all.dtype)
        entropy = torch.zeros_like(logprobs)
        logprobs[batch.target] = logp_all.gather(-1, next_ids.unsqueeze(-1)).squeeze(-1)
        entropy[batch.target] = -(logp_all.exp() * logp_all).sum(-1)
        return logprobs, values, entropy

    # ------------------------------------------------------------ PPO (trainer.rl.update)

    def can_represent(self, action: Any, instruction: str | None = None) -> bool:
        """Any step: the policy writes text, and text that did not parse is still its decision."""
        return True

    def use_blob_store(self, store) -> None:
        self.blob_store = store  # act() shows earlier screenshots of an episode, as the trainer rebuilds them

    def step_inputs(self, traj, store) -> list[Rendered]:
        """Each step of ``traj`` in the context it was sampled in, with the text the policy wrote.

        ValueError for a step this policy did not write (no raw output: a scripted or pixel
        step), whose log-prob would not be the behaviour log-prob of these tokens. A step with
        no text, no action and a parse error is the policy's own empty reply (it ended its turn at
        once): it is scored as that ``<|im_end|>``, so PPO sees the failure and can make it rarer.
        """
        images = []
        for step in traj.steps:
            if not step.raw_output and not wrote_nothing(step):
                raise ValueError(f"step {step.step_index} has no raw output: not written by a language policy")
            images.append(screen(store, step.observation.screenshot))
        samples = []
        for i, step in enumerate(traj.steps):
            inp = state_at(traj.steps, i, images[i])
            samples.append(self.render(self.context_with_images(inp, images[:i]), step.raw_output, score="last"))
        return samples

    def evaluate(self, samples: list[Rendered], instructions: list[str] | None = None, actions: list | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per step, differentiable: (log-prob [N] = sum over the response's tokens, value [N] =
        the critic before the first response token, entropy [N] = mean per-token entropy).
        ``instructions`` and ``actions`` are already inside the samples (the pixel policy's call shape)."""
        batch = self.make_batch(samples)
        logprobs, values, entropy = self.evaluate_tokens(batch)
        n = batch.target.sum(-1).clamp(min=1)
        first = batch.target.float().argmax(-1)  # position whose next token is the first of the response
        value = values.gather(-1, first.unsqueeze(-1)).squeeze(-1)
        return logprobs.sum(-1), value, entropy.sum(-1) / n

    @torch.no_grad()
    def response_logprobs(self, contexts: list[list[Turn]], texts: list[str]) -> list[tuple[list[int], list[float]]]:
        """Per-token log-probs of the canonical answer ``encode(text) + <|im_end|>`` after each context."""
        batch = self.make_batch([self.render(turns, text, score="last") for turns, text in zip(contexts, texts)])
        logprobs, _, _ = self.evaluate_tokens(batch)
        out = []
        for i in range(len(texts)):
            where = batch.target[i]
            out.append((batch.ids[i, 1:][where].tolist(), logprobs[i][where].tolist()))
        return out

    def sequence_logprobs(self, samples: list[Rendered]) -> torch.Tensor:
        """Sum of target-token log-probs per sample, [B]."""
        batch = self.make_batch(samples)
        logprobs, _, _ = self.evaluate_tokens(batch)
        return (logprobs * batch.target).sum(-1)

    @torch.no_grad()
    def generate(self, contexts: list[Rendered], greedy: bool = False, temperature: float = 1.0,
                 max_new_tokens: int | None = None) -> list[Generation]:
        """Sample continuations for a batch of open-assistant contexts (left-padded, KV cache).

        Token log-probs are under the model's own distribution (temperature 1), as vLLM reports
        them; ``temperature`` only shapes sampling.
        """
        max_new = max_new_tokens or self.config["max_new_tokens"]
        B, L = len(contexts), max(len(c.ids) for c in contexts)
        ids = torch.full((B, L), self.pad, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, L - len(c.ids):] = torch.tensor(c.ids)
            attn[i, L - len(c.ids):] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        emb = self._embed(ids, self._pixels([im for c in contexts for im in c.images]))
        out = self.lm.model(inputs_embeds=emb, attention_mask=attn, position_ids=pos, use_cache=True)
        h = out.last_hidden_state[:, -1]
        keys = self._pointer_keys(out.last_hidden_state, ids, ground=self._ground_batch(contexts))
        values = self.value_head(h).squeeze(-1).tolist()
        tokens: list[list[int]] = [[] for _ in range(B)]
        logps: list[list[float]] = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        next_pos = pos[:, -1:] + 1
        for _ in range(max_new):
            logp = F.log_softmax(self._logits(h, keys, torch.arange(B, device=h.device)), dim=-1)
            if greedy or temperature <= 0:
                tok = logp.argmax(-1)
            else:
                tok = torch.multinomial(F.softmax(logp / temperature, dim=-1), 1).squeeze(-1)
            lp = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            for i in (~done).nonzero().flatten().tolist():
                tokens[i].append(int(tok[i]))
                logps[i].append(float(lp[i]))
            done |= tok == self.eos
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=attn.device)], dim=1)
            out = self.lm.model(input_ids=tok.unsqueeze(-1), attention_mask=attn, position_ids=next_pos,
                                past_key_values=out.past_key_values, use_cache=True)
            h, next_pos = out.last_hidden_state[:, -1], next_pos + 1
        gens = []
        for i in range(B):
            finished = bool(tokens[i]) and tokens[i][-1] == self.eos
            text = self.tok.decode(tokens[i][:-1] if finished else tokens[i])
            gens.append(Generation(tokens[i], logps[i], text, values[i], finished))
        return gens

    def written(self, model_text: str) -> str:
        """The text the policy reports (UI-TARS's): location tokens written as their points, and a
        point the model wrote in digits moved to its patch's centre, the action the trainer scores."""
        return self.codec.reported(model_text) if self.codec is not None else model_text

    def canonical(self, gen: Generation) -> bool:
        """Whether the sampled tokens are exactly what the trainer rebuilds from the written text:
        ``encode(text) + <|im_end|>``."""
        return gen.finished and self.tok.encode(self.model_text(self.written(gen.text))) + [self.eos] == gen.token_ids

    # ------------------------------------------------------------ the Policy protocol

    @torch.no_grad()
    def act(self, inputs: list[PolicyInput], greedy: bool = False) -> list[Decision]:
        turns = [self.context(inp) for inp in inputs]
        gens = self.generate([self.render(t) for t in turns], greedy=greedy)
        logprobs = [sum(g.token_logprobs) for g in gens]
        redo = [i for i, g in enumerate(gens) if not self.canonical(g)]
        if redo:  # keep the invariant: the log-prob is that of the tokens the trainer will rebuild
            rescored = self.response_logprobs([turns[i] for i in redo], [self.written(gens[i].text) for i in redo])
            for i, (_, lps) in zip(redo, rescored):
                logprobs[i] = sum(lps)
        return [self._decision(g, lp, inp) for g, lp, inp in zip(gens, logprobs, inputs)]

    def _decision(self, gen: Generation, logprob: float, inp: PolicyInput) -> Decision:
        text = self.written(gen.text)
        try:
            parsed = parse_output(text, inp.screen_width, inp.screen_height, coord_mode=self.config["coord_mode"])
        except Exception as exc:  # the parser's contract is to flag, but a crash must not stop a rollout
            return Decision(None, logprob, gen.value, "", text, f"{type(exc).__name__}: {exc}")
        return Decision(parsed.action, logprob, gen.value, parsed.thought, text, parsed.error)


def wrote_nothing(step) -> bool:
    """A language policy's empty reply: no text, hence no action, and the parser said so. A
    scripted or pixel step always carries an action."""
    return not step.raw_output and step.action is None and step.parse_error is not None


def build_lm_policy(name: str = "lm", config: dict[str, Any] | None = None, **kwargs: Any) -> LMPolicy:
    return LMPolicy(name, config or {}, **kwargs)
