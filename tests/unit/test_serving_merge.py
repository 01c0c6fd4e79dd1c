"""Parameter interpolation: theta = sum_k alpha_k * theta_k, with validated inputs."""

from __future__ import annotations

import pytest
import torch

from trainer.serving.merge import MergeError, MergePlan, interpolate, validate_alphas


def sd(scale: float) -> dict[str, torch.Tensor]:
    return {
        "w": torch.full((2, 3), scale),
        "b": torch.arange(3, dtype=torch.float32) * scale,
        "h": torch.tensor([1.0, 2.0], dtype=torch.float16) * scale,
        "steps": torch.tensor([7]),  # an integer buffer: copied, never averaged
    }


def test_interpolate_matches_hand_computed_values():
    out = interpolate([sd(1.0), sd(3.0), sd(-2.0)], [0.5, 0.25, 0.25])
    # 0.5*1 + 0.25*3 + 0.25*(-2) = 0.75
    assert torch.allclose(out["w"], torch.full((2, 3), 0.75))
    assert torch.allclose(out["b"], torch.tensor([0.0, 0.75, 1.5]))
    assert out["h"].dtype == torch.float16 and torch.allclose(out["h"].float(), torch.tensor([0.75, 1.5]))
    assert torch.equal(out["steps"], torch.tensor([7]))


def test_one_hot_alphas_return_that_input_exactly():
    a, b = {"w": torch.randn(4, 4)}, {"w": torch.randn(4, 4)}
    assert torch.equal(interpolate([a, b], [0.0, 1.0])["w"], b["w"])


@pytest.mark.parametrize("alphas, message", [
    ([0.5, 0.6], "sum to 1"),
    ([1.5, -0.5], ">= 0"),
    ([float("nan"), 1.0], ">= 0"),
    ([1.0], "one alpha per version"),
])
def test_bad_alphas_are_refused(alphas, message):
    with pytest.raises(MergeError, match=message):
        validate_alphas(alphas, 2)


def test_alphas_within_tolerance_are_accepted():
    assert validate_alphas([0.3333333, 0.3333333, 0.3333334], 3)


def test_mismatched_keys_shapes_dtypes_are_refused():
    with pytest.raises(MergeError, match="missing"):
        interpolate([{"a": torch.zeros(1)}, {"b": torch.zeros(1)}], [0.5, 0.5])
    with pytest.raises(MergeError, match=r"\(2,\)"):
        interpolate([{"a": torch.zeros(1)}, {"a": torch.zeros(2)}], [0.5, 0.5])
    with pytest.raises(MergeError, match="float16"):
        interpolate([{"a": torch.zeros(1)}, {"a": torch.zeros(1, dtype=torch.float16)}], [0.5, 0.5])
    with pytest.raises(MergeError, match="non-floating"):
        interpolate([{"a": torch.tensor([1])}, {"a": torch.tensor([2])}], [0.5, 0.5])


def test_plan_records_parent_and_recipe():
    plan = MergePlan("p", [3, 5], [0.25, 0.75])
    assert plan.parent == 5
    assert plan.metrics() == {"merge/alpha_v3": 0.25, "merge/alpha_v5": 0.75}


def test_a_version_from_before_fonts_were_pinned_merges_with_a_pinned_one():
    """A grounded version published before ``ground_font_sha256`` existed is unpinned, not
    different; two versions pinned to different fonts are different models."""
    from trainer.serving.merge import differs
    from trainer.policies.pixel.ground import FONT_SHA256

    old, new = {"ground": True, "seed": 0}, {"ground": True, "seed": 1, FONT_SHA256: "a" * 64}
    assert not any(differs(k, old, new) for k in set(old) | set(new))
    assert differs(FONT_SHA256, new, {**new, FONT_SHA256: "b" * 64})
    assert differs("ground", old, {**old, "ground": False})
