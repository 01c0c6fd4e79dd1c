"""The policy interface every model implements (pixel CNN, Hugging Face LM), its registry, and
the two functions rollout workers, policy servers and trainers build policies with:

    policy = build_policy("pixel", "pixel-miniwob", config)
    policy = load_policy_version(pv, BlobStore(settings.blob_root))

Each kind is a plug-in (``PolicyKind``): a package under trainer.policies exports one, found by
name through the entry-point group ``flywheel.policies`` (pyproject.toml) or ``register_kind``, so
this low layer never imports the trainer and a user's own package can add a kind. Callers reach
a kind's facts and job steps through ``policy_kind(name)``, never by testing its name. A policy is a ``torch.nn.Module``; its weights travel as a
safetensors file of ``state_dict()`` in the content-addressed blob store.

Invariant: ``act`` returns, for each decision, the behaviour log-prob of exactly the action it
returns (the sum over the action's factors / tokens) under the weights of ``self.version``;
the rollout worker stores it on the step so the trainer can correct off-policy data.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
from dataclasses import dataclass, field, fields
from importlib.metadata import entry_points
from typing import Any, Protocol

import numpy as np

from infra.runtime.errors import UserError
from schemas.actions import Action
from schemas.blobs import BlobNotFound, BlobStore
from schemas.codec import DecodeError, validate
from schemas.events import BlobRef, Observation, PolicyVersion, Step

log = logging.getLogger("flywheel.policy")


@dataclass(frozen=True)
class SeenScreen:
    """An earlier screen as the policy saw it: its screenshot (a reference into the blob store),
    its size and the instruction shown with it."""

    screenshot: BlobRef
    screen_width: int
    screen_height: int
    instruction: str


@dataclass(frozen=True)
class PastStep:
    """An earlier step of the episode as a policy may see it: the screen it acted on and its own
    output there (thought, raw text, parsed action; None when the text did not parse). Nothing the
    environment or the pipeline recorded beside it (reward, done, error, SDK output, page URL,
    window title, log-prob, value, timings) reaches a policy: it could learn to read them."""

    observation: SeenScreen
    thought: str
    raw_output: str
    action: Any


SEEN_FIELDS = tuple(f.name for f in fields(SeenScreen))  # Observation's fields a policy may see


def past_step(step: Step | PastStep) -> PastStep:
    """The projection of a recorded step onto what a policy may see (a PastStep stays as it is)."""
    if isinstance(step, PastStep):
        return step
    o = step.observation
    return PastStep(observation=SeenScreen(o.screenshot, o.screen_width, o.screen_height, o.instruction),
                    thought=step.thought, raw_output=step.raw_output, action=step.action)


def past_steps(history: Any) -> list[PastStep]:
    return [past_step(s) for s in history]


def past_step_json(step: Step | PastStep) -> dict[str, Any]:
    """An earlier step as it leaves a rollout worker for a policy server (``/v1/act``'s
    ``history``): its projection (``past_step``) and nothing else, so a server not ours never
    receives what a policy must not see."""
    p = past_step(step)
    o = p.observation
    return {"observation": {"screenshot": o.screenshot.model_dump(mode="json"), "screen_width": o.screen_width,
                            "screen_height": o.screen_height, "instruction": o.instruction},
            "thought": p.thought, "raw_output": p.raw_output,
            "action": None if p.action is None else p.action.model_dump(mode="json")}


def past_step_from_json(raw: Any) -> PastStep:
    """``past_step_json``'s form back as a PastStep (DecodeError, a ValueError, naming the bad
    field). Keys beyond that form, such as an older worker's whole Step, are dropped unread."""
    if not isinstance(raw, dict) or not isinstance(raw.get("observation"), dict):
        raise DecodeError("observation", raw, "an earlier step needs its observation (screenshot, screen size)")
    seen = {k: v for k, v in raw["observation"].items() if k in SEEN_FIELDS}
    o = validate(seen, Observation)
    texts = {k: raw.get(k, "") for k in ("thought", "raw_output")}
    for key, text in texts.items():
        if not isinstance(text, str):
            raise DecodeError(key, text, "expected a string")
    action = None if raw.get("action") is None else validate(raw["action"], Action)
    return PastStep(observation=SeenScreen(o.screenshot, o.screen_width, o.screen_height, o.instruction),
                    action=action, **texts)


@dataclass
class PolicyInput:
    """What the agent sees at one step: the screenshot, the instruction, and its own earlier steps.
    Every earlier step is projected (``past_step``) on construction, wherever the input is built
    (rollout, policy server, trainer), so no policy can read what it must not see."""

    image: np.ndarray  # H x W x 3 uint8 screenshot, the observation's screen size
    instruction: str
    screen_width: int
    screen_height: int
    history: list[PastStep] = field(default_factory=list)  # earlier steps of this episode, in order

    def __post_init__(self) -> None:
        self.history = past_steps(self.history)


def state_at(steps: list[Step], i: int, image: np.ndarray, instruction: str = "") -> PolicyInput:
    """Step ``i`` of an episode as its policy saw it: ``image`` (its screen), its instruction
    (``instruction`` where the step has none) and the steps before it."""
    obs = steps[i].observation
    return PolicyInput(image, obs.instruction or instruction, obs.screen_width, obs.screen_height, history=list(steps[:i]))


def screen(store: BlobStore, ref: BlobRef | str) -> np.ndarray:
    """A stored screenshot as policies take it: H x W x 3 uint8 RGB (BlobNotFound where it is gone)."""
    from PIL import Image  # local: Pillow only where pixels are read

    return np.asarray(Image.open(io.BytesIO(store.get(ref))).convert("RGB"))


_UNREADABLE = itertools.count(1)  # screenshots screen_or_none could not read, in this process (next() is atomic)
_SAID_EACH = 5  # the first few are logged each; then one line every _SAID_EVERY, with the count
_SAID_EVERY = 100


def screen_or_none(store: BlobStore, ref: BlobRef | str) -> np.ndarray | None:
    """``screen``, or None (logged) where the screenshot cannot be read: a caller that can go on
    without it (a shorter context, a skipped sample) does. A store that lost many (a blob folder
    pruned under a long log) is said in a line every hundred, not one a step."""
    try:
        return screen(store, ref)
    except Exception as exc:  # noqa: BLE001 - gone, truncated or not an image: the same for the caller
        n = next(_UNREADABLE)
        if n <= _SAID_EACH or n % _SAID_EVERY == 0:
            log.warning("screenshot %s unavailable (%d so far in this process): %s",
                        getattr(ref, "sha256", ref)[:12], n, exc)
        return None


@dataclass
class Decision:
    """What the agent does at one step."""

    action: Any  # schemas.actions.Action, or None when the output did not parse
    logprob: float
    value: float | None = None
    thought: str = ""
    raw_output: str = ""
    parse_error: str | None = None


class Policy(Protocol):
    """Everything the trainers (PPO, BC, RFT, DPO, merge), the policy server and the rollout call
    on a policy, whatever its kind; a kind's own extras stay inside its package. A policy is a
    ``torch.nn.Module``, so the module methods below are torch's. Methods that make no sense for a
    kind get their defaults from ``trainer.policies.base.PolicyDefaults``."""

    kind: str  # the registered kind that built it
    name: str
    version: int

    def act(self, inputs: list[PolicyInput], greedy: bool = False) -> list[Decision]:
        """Sample (or argmax) one decision per input, batched."""

    def config_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the model before loading its weights."""

    def can_represent(self, action: Any, instruction: str | None = None) -> bool:
        """Whether ``evaluate`` can score ``action`` (given the step's ``instruction``, if known)."""

    def step_inputs(self, traj: Any, store: BlobStore) -> list[Any]:
        """Each step of a ``Trajectory`` as ``evaluate`` takes it, rebuilt as ``act`` saw it;
        ValueError for a step this policy cannot score, BlobNotFound for a missing screenshot."""

    def bootstrap_input(self, traj: Any, store: BlobStore) -> Any | None:
        """The input of the state after the last step, for the value a truncated episode
        bootstraps from (None: none; the trainer uses the last state's value)."""

    def evaluate(self, inputs: Any, instructions: list[str], actions: list[Any]) -> tuple[Any, Any, Any]:
        """Re-score stored actions on ``step_inputs``' inputs: (logprob [N], value [N], entropy [N]),
        differentiable; the log-prob is the one ``act`` returned for that action."""

    def values(self, inputs: Any, instructions: list[str]) -> Any:
        """V(s) [N] of ``bootstrap_input``'s inputs."""

    def param_groups(self, lr: float, head_lr_mult: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups: the parts trained from scratch at ``head_lr_mult`` * ``lr``."""

    def use_blob_store(self, store: BlobStore) -> None:
        """Where ``act`` finds the earlier screenshots of an episode's history (if it shows them)."""

    # torch.nn.Module's, which every policy is
    training: bool
    def parameters(self) -> Any: ...
    def named_parameters(self) -> Any: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> Any: ...
    def train(self, mode: bool = True) -> Any: ...
    def eval(self) -> Any: ...
    def to(self, device: Any) -> Any: ...
    def requires_grad_(self, requires_grad: bool = True) -> Any: ...


class ChatPolicy(Policy, Protocol):
    """A policy that writes text (a kind whose ``chat`` is true): what the policy server's
    ``/v1/chat/completions`` and the text trainers (`flywheel sft`, CT: trainer.sft) call besides
    the ``Policy`` methods."""

    tok: Any  # its tokenizer: ``piece(token id)`` -> (text, bytes) of one token
    spec: Any  # the schemas.prompt.PromptSpec it is asked in
    vision: Any  # its screenshot encoder: ``n_tokens`` placeholder tokens per image

    def render(self, turns: list[Any], response: str | None = None, score: str = "last") -> Any:
        """A chat context (schemas.prompt turns) as the model's tokens and images; with
        ``response``, that answer appended and scored."""

    def model_turns(self, turns: list[Any]) -> list[Any]:
        """The turns as the model reads them (its own coordinate tokens in assistant turns)."""

    def context_with_images(self, inp: PolicyInput, history_images: list[Any]) -> list[Any]:
        """The turns of one decision's context, with the earlier screenshots given."""

    def taught_text(self, step: Any) -> str:
        """The assistant turn SFT and CT show for a recorded step."""

    def make_batch(self, samples: list[Any]) -> Any:
        """Rendered samples as one padded batch for ``evaluate_tokens``."""

    def evaluate_tokens(self, batch: Any) -> tuple[Any, Any, Any]:
        """Token-level log-probs, values and entropies of a batch, differentiable."""

    def generate(self, contexts: list[Any], greedy: bool = False, temperature: float = 1.0,
                 max_new_tokens: int | None = None) -> list[Any]:
        """One reply per context: token ids, their log-probs, the text, the value, finished."""

    def canonical(self, gen: Any) -> bool:
        """Whether a reply's tokens are the canonical tokenization of its text (their log-probs stand)."""

    def response_logprobs(self, contexts: list[Any], texts: list[str]) -> list[tuple[list[int], list[float]]]:
        """The canonical tokens of each text after its context, and their log-probs."""

    def written(self, model_text: str) -> str:
        """The reply as the agent's text (the model's own coordinate tokens written out)."""


@dataclass(frozen=True)
class DemoPPO:
    """The main job's automatic PPO settings for one kind, after a cold start or from random
    weights (``PolicyKind.demo_ppo``); a user's --ppo-lr, --target-kl, --rft-every and
    --dpo-minutes override them."""

    lr: float  # PPO's learning rate (0: the trainer's default)
    target_kl: float  # the KL at which PPO stops an update's epochs (0: every epoch runs)
    rft_every: int  # PPO updates between rejection-sampling rounds (0: none)
    dpo_share: float  # the share of the run's minutes given to DPO at its end (0: none)
    rft_epochs: int = 0  # passes over a round's steps (0: the trainer's default)
    epochs: int = 0  # PPO's epochs over each batch (0: the trainer's default)


class PolicyKind(Protocol):
    """A policy kind as a plug-in: how to build its policies and every fact or job step the
    trainers, the server, the rollout and the app would otherwise branch on its name for.
    Each kind's package exports one (``trainer.policies.<kind>.kind``), registered by name
    through the entry points below or ``register_kind``; ``trainer.policies.base.KindDefaults``
    holds the defaults a minimal kind keeps. Importing a kind object imports no model."""

    name: str
    accelerated: bool  # trains and serves on a GPU (device cuda); False: on the CPU only, where it builds its inputs
    rft: bool  # the PPO trainer's rejection-sampling rounds fine-tune it (False: its fine-tuning is another job)
    # its evaluate scores any action it is handed (DAgger's expert labels, --expert-coef), not only
    # the one its own sample holds
    scores_actions: bool
    chat: bool  # its policies write text and answer chat completions (``ChatPolicy``)
    # its act takes a per-input exploration floor (``act(inputs, greedy, explore, explore_at)``: that
    # share of its clicks uniform, or near the guide's points, logged with the mixture's log-prob;
    # --explore, --explore-from)
    explores: bool
    # its policy has action-type heads sized by the run's action types (task_config's
    # ``action_types``, --actions); False: it writes its actions as text
    sized_heads: bool
    bc_epochs: int  # `flywheel bc`'s defaults for this kind
    bc_lr: float
    bc_minibatch_size: int
    dpo_lr: float  # `flywheel dpo`'s defaults for this kind
    dpo_micro_batch: int  # pairs per forward pass (0: the whole minibatch)
    demo_ppo_args: tuple[str, ...]  # extra `flywheel train` arguments of the main job
    demo_dpo_args: tuple[str, ...]  # extra `flywheel dpo` arguments of the main job

    def build(self, name: str, config: dict[str, Any] | None) -> Policy:
        """A fresh policy (random init from ``config['seed']``, or its pretrained start), version 0."""

    def full_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """A published config with the defaults of its time filled in (keys added since)."""

    def train_config(self, pretrained: str, seed: int, extra: dict[str, Any]) -> dict[str, Any]:
        """The config `flywheel train` builds a fresh policy from (``extra``: --policy-config)."""

    def bc_config(self, action_types: tuple[str, ...], pretrained: str, seed: int,
                  extra: dict[str, Any], *, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        """The config `flywheel bc` clones into, for tasks needing ``action_types`` and pressing ``keys``."""

    def task_config(self, action_types: tuple[str, ...], overrides: dict[str, Any], *,
                    keys: tuple[str, ...] = ()) -> dict[str, Any]:
        """How this kind reads MiniWoB++ pages, with heads for ``action_types`` and a hotkey head
        pressing ``keys`` (the tasks' keys: producers.suites.hotkeys), ``overrides`` last. The
        tasks' facts come from the caller: a kind's package knows no suite."""

    def clone(self, policy: Policy, demos: list[Any], store: BlobStore, cfg: Any) -> Any:
        """Behaviour cloning of ``policy`` on ``demos`` (ScoredTrajectory) as ``cfg`` (a BCConfig)
        says -> ``trainer.policies.base.Cloned`` (losses, metrics, greedy match, skipped)."""

    def dpo_pairs(self, policy: Policy, pairs: list[Any], store: BlobStore) -> tuple[Any, Any]:
        """Preference pairs as this kind scores them (trainer.dpo.inputs) and the skipped by reason."""

    def demo_ppo(self, cold_start: bool) -> DemoPPO:
        """The main job's automatic PPO settings, after a cold start or from random weights."""

    def prompt_spec(self, config: dict[str, Any]) -> Any | None:
        """The schemas.prompt.PromptSpec a version with ``config`` is asked in (None: it reads no prompt)."""

    def export_hf(self, pv: PolicyVersion, store: BlobStore, out: Any) -> Any:
        """A Hugging Face folder of ``pv`` for vLLM (UserError when this kind has none)."""


ENTRY_POINT_GROUP = "flywheel.policies"  # kind name -> its PolicyKind object, loaded on first use

KINDS: dict[str, PolicyKind] = {}


def register_kind(kind: PolicyKind) -> PolicyKind:
    """Make ``kind`` known by its name (the entry points register the installed kinds on first use)."""
    KINDS[kind.name] = kind
    return kind


def kind_names() -> list[str]:
    """Every kind this process can build: the registered and the installed (entry points)."""
    return sorted(set(KINDS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def policy_kind(kind: str) -> PolicyKind:
    """The plug-in of ``kind``; UserError naming the known kinds when there is none."""
    if kind not in KINDS:
        found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        if kind not in found:
            raise UserError(f"unknown policy kind {kind!r}; known: {', '.join(kind_names())}")
        register_kind(found[kind].load())
    return KINDS[kind]


class PolicyIntegrityError(UserError):
    """Downloaded weights do not hash to the sha256 their PolicyVersion announced."""


def build_policy(kind: str, name: str, config: dict[str, Any] | None = None) -> Policy:
    """A fresh policy of ``kind`` (random init from ``config['seed']``), version 0."""
    return policy_kind(kind).build(name, config)


def weights_bytes(pv: PolicyVersion, store: BlobStore) -> bytes:
    """The safetensors bytes of ``pv``, refused unless they hash to ``pv.sha256``."""
    try:
        data = store.get(pv.sha256)
    except BlobNotFound:
        raise UserError(f"weights of {pv.policy} v{pv.version} not found in the blob store "
                        f"(sha256 {pv.sha256}, uri {pv.uri})") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != pv.sha256:
        raise PolicyIntegrityError(
            f"refusing weights of {pv.policy} v{pv.version}: {pv.uri} hashes to {actual}, "
            f"but the policy version announced {pv.sha256} (tampered or corrupt file)")
    return data


def load_policy_version(pv: PolicyVersion, store: BlobStore) -> Policy:
    """Download, verify and load the weights of a published version."""
    from safetensors.torch import load as load_safetensors

    data = weights_bytes(pv, store)
    policy = build_policy(pv.kind, pv.policy, pv.config)
    policy.load_state_dict(load_safetensors(data), strict=True)  # type: ignore[attr-defined]
    policy.version = pv.version
    policy.eval()
    return policy
