"""Text grounding for the pixel policy: where on the screenshot each instruction word is written.

Why: several suite tasks name their target by a string the policy must find on screen
(click-option's and click-checkboxes' labels are random strings such as "gHF2pKy";
click-button's are button captions). A hashed word embedding cannot tell what a random string
looks like, and a CNN trained from scratch for minutes does not learn to read. A pretrained VLM
reads the screen (UI-TARS); this small policy gets a fixed, parameter-free stand-in instead: each
instruction word is rendered with the page's font (the file fontconfig picks for ``font``, as
Chromium does for MiniWoB's ``font-family: Arial``) at a few pixel sizes (10 px labels, 13 px
buttons) and matched against the screenshot by normalised cross-correlation. The policy still
sees only pixels and the instruction's text; it learns which words to look for and what to do
where they are (trainer.policies.pixel.model weighs the maps per word).

Output: uint8 [words, G*G], per word the best match whose centre lies in each grid cell
(NCC clipped to [0, 1], times 255). Deterministic for a given font file: ``evaluate`` sees what
``act`` saw as long as the processes that act and those that train resolve the font to the same
file (one machine, or the same fonts installed; ``ground_font`` may also name the file itself).
Without fontconfig the maps are all zero, with a warning. The template sizes are the page's px;
``scale`` resizes them with the screenshot (a grid other than 20 shrinks the 160 px crop).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import subprocess
import zlib
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from infra.runtime.config import ConfigError
from schemas.blobs import BlobStore

log = logging.getLogger(__name__)
_WORD = re.compile(r"-?\w+")  # "-3": use-spinner's negative targets keep their sign
MIN_STD = 0.05  # a window this flat (ink std, 0..1) has no text to match: NCC 0 there
SHARPEN = 20.0  # a word's best-matching cell against the rest: exp(SHARPEN * (match - best match))
# The page's text, the one default of both policies' "ground_font" / "ground_sizes": MiniWoB's
# core.css font family (resolved by fontconfig), its 10 px text and Chromium's 13.33 px buttons.
PAGE_FONT = "Arial"
PAGE_SIZES = (10, 13)


def words(instruction: str, k: int) -> list[tuple[int, int]]:
    """Character spans of the instruction's first ``k`` words (letters, digits, underscores; a
    leading minus sign stays with its number)."""
    return [m.span() for m in _WORD.finditer(instruction)][:k]


def word_features(instruction: str, k: int, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Per word: hashed ids [k, 3] (the word, the one before, the one after; 0 = none) and flags
    [k, 3] (a quote just before, just after, a real word). Neighbours matter because a random
    string's own id says nothing: "Select X and" does."""
    spans = words(instruction, k)
    ids = np.zeros((k, 3), dtype=np.int64)
    flags = np.zeros((k, 3), dtype=np.float32)
    hashed = [1 + zlib.crc32(instruction[a:b].lower().encode()) % (buckets - 1) for a, b in spans]
    for i, (a, b) in enumerate(spans):
        ids[i] = (hashed[i], hashed[i - 1] if i else 0, hashed[i + 1] if i + 1 < len(spans) else 0)
        before, after = instruction[:a].rstrip()[-1:], instruction[b:].lstrip()[:1]
        flags[i] = (before in ('"', "'"), after in ('"', "'"), 1.0)
    return ids, flags


FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".pfa", ".pfb", ".woff", ".woff2")


@functools.lru_cache(maxsize=8)
def font_file(family: str) -> str | None:
    """The font file for ``family``: itself when it is a file's path, else the file fontconfig
    resolves it to. Chromium on Linux resolves CSS families through fontconfig too, so where
    the family is missing both use the same substitute (here "Arial" is DejaVu Sans or
    Liberation Sans). None, with a warning, without fontconfig. ConfigError (a ValueError) for
    a path that is no file: fontconfig would quietly answer its default font, and that would be
    pinned."""
    if os.path.isfile(family):
        return family
    if "/" in family or "\\" in family or family.lower().endswith(FONT_SUFFIXES):
        raise ConfigError(f"text grounding: ground_font {family!r} names a font file that does not exist here")
    try:
        out = subprocess.run(["fc-match", "-f", "%{file}\n%{family}", family], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("fontconfig cannot resolve %r (%s): text grounding maps stay empty", family, exc)
        return None
    path, _, found = out.stdout.partition("\n")
    if family.lower() not in found.lower():
        log.info("text grounding: %r resolves to %s (%s), the substitute the browser uses too", family, found, path)
    return path.strip() or None


FONT_SHA256 = "ground_font_sha256"  # the config key recording the font file a policy was built with


@functools.lru_cache(maxsize=8)
def font_sha256(family: str) -> str:
    """sha256 of the font file ``family`` resolves to on this machine ("" where none does)."""
    path = font_file(family)
    if path is None:
        return ""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def pin_font(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the hash of the font its text grounding reads recorded (``FONT_SHA256``),
    for a policy with ``"ground"`` on. A policy's inputs are a function of that file: a version
    built where "Arial" is Liberation Sans and acted or trained where it is DejaVu Sans would see
    other maps than it learnt from. So a config that already records a hash (a published
    version's) must find the same file here; ConfigError (a ValueError) otherwise, naming both,
    and the loader keeps what it has (a rollout worker its current version, a trainer does not
    start)."""
    if not config.get("ground"):
        return config
    here = font_sha256(str(config["ground_font"]))
    pinned = config.get(FONT_SHA256)
    if pinned is not None and pinned != here:
        found = font_file(str(config["ground_font"])) or "no file (fontconfig missing)"
        raise ConfigError(f"text grounding: this policy was built with ground_font {config['ground_font']!r} resolving to a "
                         f"file of sha256 {pinned[:16] or 'none'}..., here it resolves to {found} "
                         f"(sha256 {here[:16] or 'none'}...): its maps would differ from those it learnt from. Install "
                         "the same font, or name one file present on every machine in ground_font")
    return {**config, FONT_SHA256: here}


@functools.lru_cache(maxsize=4096)
def template(word: str, path: str, size: int) -> np.ndarray:
    """``word`` rendered in ``path`` at ``size`` px: ink in [0, 1], tightly cropped plus 1 px."""
    font = ImageFont.truetype(path, size)
    left, top, right, bottom = font.getbbox(word)
    img = Image.new("L", (right - left + 2, bottom - top + 2), 255)
    ImageDraw.Draw(img).text((1 - left, 1 - top), word, font=font, fill=0)
    return (255 - np.asarray(img, dtype=np.float64)) / 255.0


# ~26 MB at the pixel policy's 160 x 160, ~35 MB at MiniWoB's whole 160 x 210 screen (the language
# policy's); an entry grows with the screen (4 MB at 800 x 600): the suites' fixed words stay,
# random labels come and go
@functools.lru_cache(maxsize=128)
def _kernel(word: str, path: str, size: int, shape: tuple[int, int]) -> tuple[np.ndarray, int, int, float] | None:
    """The zero-mean template's spectrum at ``shape`` (flipped: a product is a correlation), its
    height, width and norm; None when it does not fit or has no ink."""
    t = template(word, path, size)
    th, tw = t.shape
    t0 = t - t.mean()
    norm = float(np.sqrt((t0 * t0).sum()))
    if th > shape[0] or tw > shape[1] or norm == 0:
        return None
    return np.fft.rfft2(t0[::-1, ::-1], s=shape), th, tw, norm


def _box_sums(integral: np.ndarray, h: int, w: int) -> np.ndarray:
    """Sums over every h x w window (top-left indexed) from an integral image with a zero row/col."""
    return integral[h:, w:] - integral[:-h, w:] - integral[h:, :-w] + integral[:-h, :-w]


def best_maps(gray: np.ndarray, instruction: str, k: int, family: str, sizes: list[int],
              scale: float = 1.0) -> np.ndarray:
    """float [words, H, W] in [0, 1]: per instruction word (first k), the best NCC over ``sizes``
    (page px; times ``scale``, the screenshot's resize factor) of the word centred at each pixel
    of the ``gray`` [H, W] uint8 image. No words (or no font): [0, H, W]."""
    shape = gray.shape[:2]
    path = font_file(family)
    spans = words(instruction, k)
    if path is None or not spans:
        return np.zeros((0, *shape))
    ink = (255.0 - gray.astype(np.float64)) / 255.0
    integral = np.pad(ink, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    integral2 = np.pad(ink * ink, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    spectrum = np.fft.rfft2(ink)  # numpy's FFT: single-threaded, no contention with torch's pool
    out = np.zeros((len(spans), *shape))
    first: dict[str, int] = {}  # a word met again has the map it had ("the", "snake" twice)
    for i, (a, b) in enumerate(spans):
        word = instruction[a:b]
        if word in first:
            out[i] = out[first[word]]
            continue
        first[word] = i
        best = out[i]
        for size in sizes:
            kernel = _kernel(word, path, max(1, round(size * scale)), shape)
            if kernel is None:
                continue
            spec, th, tw, norm = kernel
            # circular correlation by FFT; the positions where the word fits whole do not wrap:
            # corr[y + th - 1, x + tw - 1] = sum t0[u, v] * ink[y + u, x + v]
            full = np.fft.irfft2(spectrum * spec, s=shape)
            num = full[th - 1:, tw - 1:]  # valid top-left positions
            n = th * tw
            s1, s2 = _box_sums(integral, th, tw), _box_sums(integral2, th, tw)
            var = np.maximum(s2 - s1 * s1 / n, 0.0)
            # NCC = num / (norm * std * sqrt(n)) where the window has ink enough to match, else 0
            den = np.sqrt(var)
            den *= norm
            ncc = np.zeros_like(num)
            np.divide(num, den, out=ncc, where=var > n * MIN_STD ** 2)
            y0, x0 = th // 2, tw // 2  # the word's centre
            region = best[y0:y0 + ncc.shape[0], x0:x0 + ncc.shape[1]]
            np.maximum(region, ncc, out=region)
    return np.clip(out, 0.0, 1.0, out=out)


def match_maps(gray: np.ndarray, instruction: str, k: int, grid: int, family: str, sizes: list[int],
               scale: float = 1.0) -> np.ndarray:
    """uint8 [k, grid*grid]: per instruction word (first k), the best NCC in each cell of the
    ``gray`` [S, S] uint8 image (S = 8 * grid), over ``sizes`` (page px; times ``scale``, the
    screenshot's resize factor). Rows past the last word are 0."""
    side = gray.shape[0]
    out = np.zeros((k, grid * grid), dtype=np.uint8)
    best = best_maps(gray, instruction, k, family, sizes, scale)
    if not len(best):
        return out
    cell = side // grid
    pooled = best.reshape(len(best), grid, cell, grid, cell).max(axis=(2, 4))
    out[:len(best)] = np.round(pooled * 255).astype(np.uint8).reshape(len(best), -1)
    return out


def maps_key(gray: np.ndarray, instruction: str, k: int, grid: int, family: str, sizes: list[int],
             scale: float = 1.0) -> str:
    """sha256 naming ``match_maps``'s result for these arguments: the image's pixels, the words,
    the grid and the font file itself (its hash, not its family's name)."""
    h = hashlib.sha256(b"flywheel-ground-maps-v1")
    h.update(repr((instruction, k, grid, font_sha256(family), [float(x) for x in sizes], round(float(scale), 9),
                   gray.shape, str(gray.dtype))).encode())
    h.update(np.ascontiguousarray(gray).tobytes())
    return h.hexdigest()


def stored_match_maps(store: BlobStore | None, gray: np.ndarray, instruction: str, k: int, grid: int, family: str,
                      sizes: list[int], scale: float = 1.0) -> np.ndarray:
    """``match_maps``, computed once per screenshot: read from ``store``'s derived data
    (schemas.blobs.BlobStore.get_derived) when the acting policy stored them, else computed and
    stored. The rollout computes each step's maps as it acts and the trainer reads them back
    instead of matching the templates again. Best effort: without a store, with an entry of the
    wrong size or when the store cannot be written, the maps are computed here as before."""
    if store is None:
        return match_maps(gray, instruction, k, grid, family, sizes, scale)
    key = maps_key(gray, instruction, k, grid, family, sizes, scale)
    try:
        data = store.get_derived(key)
    except OSError as exc:
        log.warning("grounding maps not read from the blob store (%s): computing them", exc)
        data = None
    if data is not None and len(data) == k * grid * grid:
        return np.frombuffer(data, dtype=np.uint8).reshape(k, grid * grid).copy()
    found = match_maps(gray, instruction, k, grid, family, sizes, scale)
    try:
        store.put_derived(key, found.tobytes())
    except OSError as exc:
        log.warning("grounding maps not stored (%s): the trainer will compute them again", exc)
    return found


def map_features(maps: torch.Tensor, side: int) -> torch.Tensor:
    """Match maps [N, k, side*side] in [0, 1] -> [N, k, 3, side*side]: each word's map, its
    sharpened map (1 at the word's best cell, about 0 elsewhere) and that map's row maxima (the
    word's whole line: a checkbox sits left of its label). Both policies weigh these per word."""
    n, k, cells = maps.shape
    sharp = torch.exp(SHARPEN * (maps - maps.amax(-1, keepdim=True)))
    row = sharp.view(n, k, side, side).amax(-1, keepdim=True).expand(-1, -1, -1, side)
    return torch.stack([maps, sharp, row.reshape(n, k, cells)], 2)
