"""Text-grounding maps are computed once per screenshot: the acting policy stores them beside the
screenshot and the trainer reads them back (trainer.policies.pixel.ground.stored_match_maps)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from schemas.blobs import BlobStore
from trainer.policies.pixel import ground
from trainer.policies.pixel.model import PixelPolicy

INSTRUCTION = 'Click on the "gHF2pKy" button.'


def screen() -> np.ndarray:
    img = Image.new("RGB", (160, 210), "white")
    path = ground.font_file("Arial")
    if path is None:
        pytest.skip("no fontconfig here: the grounding maps are all zero, nothing to store")
    ImageDraw.Draw(img).text((30, 100), "gHF2pKy", font=ImageFont.truetype(path, 13), fill="black")
    return np.asarray(img)


def test_the_trainer_reads_the_maps_the_acting_policy_stored(tmp_path, monkeypatch):
    store = BlobStore(str(tmp_path / "blobs"))
    acting = PixelPolicy("p", {"ground": True})
    acting.use_blob_store(store)
    image = screen()
    seen = acting.preprocess(image, [], INSTRUCTION)
    assert seen[-2].any(), "the grounding plane found the word"  # the check below compares something real
    stored = list((tmp_path / "blobs" / "derived").rglob("*"))
    assert any(p.is_file() for p in stored), "the acting policy stored its maps"

    def no_matching(*args, **kwargs):
        raise AssertionError("the trainer matched the templates again")

    monkeypatch.setattr(ground, "match_maps", no_matching)
    trainer = PixelPolicy("p", {"ground": True})
    rebuilt = trainer.preprocess(image, [], INSTRUCTION, store)
    assert torch_equal(seen, rebuilt)


def test_another_screenshot_instruction_or_config_is_computed_not_read(tmp_path, monkeypatch):
    store = BlobStore(str(tmp_path / "blobs"))
    image = screen()
    PixelPolicy("p", {"ground": True}).preprocess(image, [], INSTRUCTION, store)
    calls = []
    real = ground.match_maps
    monkeypatch.setattr(ground, "match_maps", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    moved = image.copy()
    moved[120:124, 80:84] = 0  # inside the cropped task area
    PixelPolicy("p", {"ground": True}).preprocess(moved, [], INSTRUCTION, store)
    PixelPolicy("p", {"ground": True}).preprocess(image, [], INSTRUCTION.replace("gHF2pKy", "Submit"), store)
    PixelPolicy("p", {"ground": True, "ground_sizes": [10]}).preprocess(image, [], INSTRUCTION, store)
    assert len(calls) == 3


def test_a_damaged_or_unwritable_store_falls_back_to_computing(tmp_path):
    image = screen()
    gray = np.asarray(Image.fromarray(image).convert("L").resize((160, 160)), dtype=np.uint8)
    args = (gray, INSTRUCTION, 8, 20, "Arial", [10, 13])
    expected = ground.match_maps(*args)

    class Broken:
        def get_derived(self, key):
            return b"short"  # a truncated entry

        def put_derived(self, key, data):
            raise OSError("disk full")

    assert np.array_equal(ground.stored_match_maps(Broken(), *args), expected)
    assert np.array_equal(ground.stored_match_maps(None, *args), expected)  # no store
    with pytest.raises(ValueError):
        BlobStore(str(tmp_path)).put_derived("../../etc/passwd", b"x")


def torch_equal(a, b) -> bool:
    return bool((a == b).all())
