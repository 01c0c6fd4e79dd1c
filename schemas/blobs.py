"""Content-addressed blob store: screenshots and weights are stored by sha256, events carry refs.

A local folder by default, any fsspec URL in production. Writes are atomic: the bytes go to a
temporary name and are renamed into place, so a crash never leaves a half-written blob under its
final name. Layout: ``<root>/<sha[:2]>/<sha>``.
"""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from pathlib import Path

import fsspec

from schemas.events import BlobRef


class BlobNotFound(KeyError):
    """No blob with that sha256 in the store."""


class BlobCorrupt(ValueError):
    """A stored blob's bytes do not hash to its name."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs, self._base = fsspec.core.url_to_fs(self.root)
        self.local = self.fs.protocol in ("file", ("file", "local")) or "file" in self.fs.protocol
        if self.local:
            Path(self._base).mkdir(parents=True, exist_ok=True)

    def _path(self, sha: str) -> str:
        return f"{self._base}/{sha[:2]}/{sha}"

    def uri(self, sha: str) -> str:
        return f"file://{self._path(sha)}" if self.local else f"{self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]}://{self._path(sha)}"

    def exists(self, sha: str) -> bool:
        return self.fs.exists(self._path(sha))

    def put(self, data: bytes, media_type: str = "application/octet-stream", width: int = 0, height: int = 0) -> BlobRef:
        sha = sha256_hex(data)
        path = self._path(sha)
        if not self.fs.exists(path):
            if self.local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.tmp-{uuid.uuid4().hex}"
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:  # object stores write whole objects atomically
                self.fs.pipe_file(path, data)
        return BlobRef(sha256=sha, uri=self.uri(sha), media_type=media_type, width=width, height=height,
                       size_bytes=len(data))

    def get(self, ref: BlobRef | str, verify: bool = False) -> bytes:
        sha = ref.sha256 if isinstance(ref, BlobRef) else ref
        try:
            data = self.fs.cat_file(self._path(sha))
        except FileNotFoundError:
            raise BlobNotFound(sha) from None
        if verify and sha256_hex(data) != sha:
            raise BlobCorrupt(f"blob {sha} does not match its content hash")
        return data

    def put_image(self, image, fmt: str = "PNG") -> BlobRef:
        """Store a PIL image; the ref records format and size."""
        buf = io.BytesIO()
        image.save(buf, format=fmt)
        return self.put(buf.getvalue(), f"image/{fmt.lower()}", image.width, image.height)
