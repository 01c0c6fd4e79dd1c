"""Blob store: put/get/exists, verify, fsspec memory:// URLs, and atomic writes under SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import fsspec
import pytest

from schemas.blobs import TMP_MARK, BlobCorrupt, BlobNotFound, BlobStore, sha256_hex

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "local":
        return BlobStore(str(tmp_path / "blobs"))
    return BlobStore(f"memory://blobs-{uuid.uuid4().hex}")


def test_put_get_exists(store):
    ref = store.put(b"hello", "text/plain")
    assert ref.sha256 == sha256_hex(b"hello") and ref.size_bytes == 5 and ref.media_type == "text/plain"
    assert store.exists(ref.sha256)
    assert store.get(ref) == store.get(ref.sha256) == b"hello"
    assert store.put(b"hello", "text/plain") == ref  # idempotent: same bytes, same ref


def test_uri_opens_with_fsspec(store):
    ref = store.put(b"\x00\x01 binary")
    fs, path = fsspec.core.url_to_fs(ref.uri)
    assert fs.cat_file(path) == b"\x00\x01 binary"


def test_missing_and_malformed_names(store):
    missing = "0" * 64
    assert not store.exists(missing)
    with pytest.raises(BlobNotFound):
        store.get(missing)
    for bad in ("../../etc/passwd", "ABC", "", "g" * 64):
        assert not store.exists(bad)
        with pytest.raises(BlobNotFound, match="not a sha256"):
            store.get(bad)


def test_verify_detects_corruption(store):
    ref = store.put(b"original")
    store.fs.pipe_file(store._path(ref.sha256), b"tampered")
    assert store.get(ref) == b"tampered"  # no verify: the caller trusts the store
    with pytest.raises(BlobCorrupt):
        store.get(ref, verify=True)


def test_put_image_records_format_and_size(store):
    from PIL import Image

    img = Image.new("RGB", (40, 30), (200, 10, 10))
    png = store.put_image(img)
    assert (png.media_type, png.width, png.height) == ("image/png", 40, 30)
    assert store.get(png, verify=True)[:8] == b"\x89PNG\r\n\x1a\n"
    jpg = store.put_image(img, "JPEG")
    assert jpg.media_type == "image/jpeg"


def test_concurrent_puts_of_the_same_bytes(tmp_path):
    store = BlobStore(str(tmp_path))
    data = os.urandom(1 << 20)
    refs = []
    threads = [threading.Thread(target=lambda: refs.append(store.put(data))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len({r.sha256 for r in refs}) == 1 and store.get(refs[0], verify=True) == data
    assert not list(tmp_path.glob(f"*/*{TMP_MARK}*"))


# ---------------------------------------------------------------- crash atomicity

_WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from schemas.blobs import BlobStore
    hook = sys.argv[3]
    data = bytes(range(256)) * (int(sys.argv[4]) // 256)
    if hook == "before-rename":
        # stop for good between the write and the rename: the window a non-atomic store exposes
        real_fsync = os.fsync
        def fsync(fd):
            real_fsync(fd)
            print("written", flush=True)
            time.sleep(60)
        os.fsync = fsync
    else:
        print("writing", flush=True)
    BlobStore(sys.argv[2]).put(data)
    print("done", flush=True)
""")


def _expected(size: int) -> bytes:
    return bytes(range(256)) * (size // 256)


def _kill_writer(root: Path, hook: str, size: int, delay_s: float = 0.0) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(REPO), str(root), hook, str(size)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line in ("written", "writing"), line
        time.sleep(delay_s)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _assert_no_bad_final_blob(root: Path, data: bytes) -> None:
    final = root / sha256_hex(data)[:2] / sha256_hex(data)
    assert not final.exists() or final.read_bytes() == data


def test_sigkill_between_write_and_rename_leaves_no_final_blob(tmp_path):
    size = 4 << 20
    data = _expected(size)
    _kill_writer(tmp_path, "before-rename", size)
    sha = sha256_hex(data)
    store = BlobStore(str(tmp_path))
    assert not store.exists(sha)  # the final name was never created
    assert list(tmp_path.glob(f"*/{sha}{TMP_MARK}*"))  # only the temporary
    with pytest.raises(BlobNotFound):
        store.get(sha)
    assert store.put(data).sha256 == sha  # a retry succeeds
    assert store.get(sha, verify=True) == data
    assert store.sweep_temporaries(older_than_s=0) == 1
    assert store.get(sha, verify=True) == data


@pytest.mark.parametrize("delay_s", [0.0, 0.1])
def test_sigkill_during_a_large_write(tmp_path, delay_s):
    size = 64 << 20
    data = _expected(size)
    _kill_writer(tmp_path, "mid-write", size, delay_s)
    _assert_no_bad_final_blob(tmp_path, data)
    store = BlobStore(str(tmp_path))
    store.put(data)
    assert store.get(sha256_hex(data), verify=True) == data


def test_sweep_keeps_fresh_temporaries(tmp_path):
    store = BlobStore(str(tmp_path))
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / f"{'ab' * 32}{TMP_MARK}x").write_bytes(b"partial")
    assert store.sweep_temporaries(older_than_s=3600) == 0
    assert store.sweep_temporaries(older_than_s=0) == 1


def test_sweep_removes_stale_temporaries_of_blobs_and_of_derived_data(tmp_path):
    store = BlobStore(str(tmp_path))
    key = "cd" * 32
    store.put_derived(key, b"maps")
    (tmp_path / "ab").mkdir()
    leftovers = [tmp_path / "ab" / f"{'ab' * 32}{TMP_MARK}x", tmp_path / "derived" / "cd" / f"{key}{TMP_MARK}y"]
    an_hour_ago = time.time() - 3600
    for path in leftovers:
        path.write_bytes(b"partial")
        os.utime(path, (an_hour_ago, an_hour_ago))
    assert store.sweep_temporaries(older_than_s=60) == 2
    assert not any(path.exists() for path in leftovers)
    assert store.get_derived(key) == b"maps"  # the finished file stays
