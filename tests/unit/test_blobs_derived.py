"""Derived data (a cache computed from blobs) is written atomically like a blob, but only blobs
are fsynced: a lost cache entry is computed again, a lost blob is not."""

from __future__ import annotations

import os

from schemas.blobs import TMP_MARK, BlobStore, sha256_hex


def counting_fsync(monkeypatch) -> list[int]:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd):
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_derived_data_round_trips_without_fsync_or_leftovers(tmp_path, monkeypatch):
    synced = counting_fsync(monkeypatch)
    store, key = BlobStore(str(tmp_path)), sha256_hex(b"screenshot and instruction")
    assert store.get_derived(key) is None
    store.put_derived(key, b"maps")
    store.put_derived(key, b"maps again")  # a recomputation replaces it
    assert store.get_derived(key) == b"maps again"
    assert not synced
    assert not list(tmp_path.rglob(f"*{TMP_MARK}*"))


def test_a_blob_is_fsynced_with_its_folder(tmp_path, monkeypatch):
    synced = counting_fsync(monkeypatch)
    ref = BlobStore(str(tmp_path)).put(b"screenshot")
    assert len(synced) == 2  # the bytes, then the folder holding the rename
    assert (tmp_path / ref.sha256[:2] / ref.sha256).read_bytes() == b"screenshot"
