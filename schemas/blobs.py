"""Content-addressed blob store: screenshots and weights are stored by sha256, events carry refs.

A local folder by default, any fsspec URL in production. Layout: ``<root>/<sha[:2]>/<sha>``.

Atomicity: a local write goes to ``<final>.tmp-<uuid>``, is fsynced, then renamed into place
(``os.replace`` is atomic on POSIX) and the folder is fsynced; a crash at any point leaves at
worst a temporary file (ignored by get/exists, removed by ``sweep_temporaries``), never a
half-written blob under its final name. Object stores (S3, GCS) write whole objects atomically,
so other filesystems use ``pipe_file`` directly. Since the name is the content's hash, a put of
bytes already present is a no-op and concurrent puts of the same bytes are harmless.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import time
import uuid
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from schemas.events import BlobRef

_SHA = re.compile(r"^[0-9a-f]{64}$")
TMP_MARK = ".tmp-"


class BlobNotFound(KeyError):
    """No blob with that sha256 in the store (or the name is not a sha256 at all)."""


class BlobCorrupt(ValueError):
    """A stored blob's bytes do not hash to its name."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_local(path: str, data: bytes, fsync: bool) -> None:
    """Write ``data`` to a temporary file and rename it to ``path``, so a reader never sees half of
    it; ``fsync`` also makes the bytes and the rename survive a power loss."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(folder)


class BlobStore:
    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs, self._base = fsspec.core.url_to_fs(self.root)
        self._base = self._base.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        if self.local:
            Path(self._base).mkdir(parents=True, exist_ok=True)

    def _path(self, sha: str) -> str:
        if not isinstance(sha, str) or not _SHA.match(sha):
            # also what keeps "../../etc/passwd" out of the store's paths
            raise BlobNotFound(f"{sha!r} is not a sha256 hex digest")
        return f"{self._base}/{sha[:2]}/{sha}"

    def uri(self, sha: str) -> str:
        if self.local:
            return f"file://{self._path(sha)}"
        protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        return f"{protocol}://{self._path(sha)}"

    def exists(self, sha: str) -> bool:
        try:
            return bool(self.fs.exists(self._path(sha)))
        except BlobNotFound:
            return False

    def put(self, data: bytes, media_type: str = "application/octet-stream", width: int = 0, height: int = 0) -> BlobRef:
        sha = sha256_hex(data)
        path = self._path(sha)
        if not self.fs.exists(path):
            if self.local:
                _write_local(path, data, fsync=True)
            else:  # object stores write whole objects atomically
                self.fs.pipe_file(path, data)
        return BlobRef(sha256=sha, uri=self.uri(sha), media_type=media_type, width=width, height=height,
                       size_bytes=len(data))

    def get(self, ref: BlobRef | str, verify: bool = False) -> bytes:
        """The blob's bytes; ``verify`` re-hashes them (BlobCorrupt when they do not match)."""
        sha = ref.sha256 if isinstance(ref, BlobRef) else ref
        try:
            data = self.fs.cat_file(self._path(sha))
        except FileNotFoundError:
            raise BlobNotFound(sha) from None
        if verify and sha256_hex(data) != sha:
            raise BlobCorrupt(f"blob {sha} does not match its content hash")
        return data

    def _derived_path(self, key: str) -> str:
        if not isinstance(key, str) or not _SHA.match(key):
            raise ValueError(f"a derived-data key is a sha256 hex digest, not {key!r}")
        return f"{self._base}/derived/{key[:2]}/{key}"

    def put_derived(self, key: str, data: bytes) -> None:
        """Store data computed from blobs (a policy's text-grounding maps of a screenshot) under
        ``key``, a sha256 of what it was computed from and how. A cache: written atomically (a
        reader never sees half of it) but not fsynced, since whoever reads it can compute it again."""
        path = self._derived_path(key)
        if self.local:
            _write_local(path, data, fsync=False)
        else:
            self.fs.pipe_file(path, data)

    def get_derived(self, key: str) -> bytes | None:
        """What ``put_derived`` stored under ``key``; None when nothing is."""
        try:
            return self.fs.cat_file(self._derived_path(key))
        except FileNotFoundError:
            return None

    def put_image(self, image, fmt: str = "PNG") -> BlobRef:
        """Store a PIL image; the ref records format (media type) and size."""
        buf = io.BytesIO()
        image.save(buf, format=fmt)
        return self.put(buf.getvalue(), f"image/{fmt.lower()}", image.width, image.height)

    def sweep_temporaries(self, older_than_s: float = 3600.0) -> int:
        """Remove temporary files left by crashed writers (local stores); returns how many."""
        if not self.local:
            return 0
        removed, cutoff, base = 0, time.time() - older_than_s, Path(self._base)
        # put writes under the blob shards (??/), put_derived under derived/??/
        leftovers = [*base.glob(f"??/*{TMP_MARK}*"), *base.glob(f"derived/??/*{TMP_MARK}*")]
        for tmp in leftovers:
            try:
                if tmp.stat().st_mtime < cutoff:
                    tmp.unlink()
                    removed += 1
            except FileNotFoundError:  # another sweeper or the writer itself
                continue
        return removed
