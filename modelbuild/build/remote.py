"""The remote cache: the store's objects and action entries in a place a team shares, through fsspec (S3 first;
a shared folder, GCS or HTTP by the same code).

The layout is the local store's: <url>/objects/ab/<sha256> and <url>/actions/ab/<key>.json. A build uploads
a result's objects before its entry, so a reader never finds an entry whose objects are missing; every
object downloaded is checked against its digest before the local store takes it, so a library is never
loaded on the remote's word. Credentials come from the environment (fsspec's and the cloud SDK's own
variables), never from the recipe, and never appear in a message.

The remote is an accelerator, not a dependency: when it cannot be reached, the build goes on locally and
says so once.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from modelbuild.hashing import sha256_file

REMOTE_ENV = "MODELBUILD_REMOTE_CACHE"
MODE_ENV = "MODELBUILD_CACHE_MODE"
MODES = ("read", "readwrite", "off")


class RemoteUnavailable(Exception):
    """The remote could not be read or written (network, credentials, a missing package)."""


@dataclass
class Remote:
    url: str
    mode: str = "readwrite"  # read: pull requests take from the team cache and never write
    notes: list[str] = field(default_factory=list)  # what a person should know, said once each
    _fs: object = None
    _root: str = ""
    _broken: bool = False

    @property
    def writable(self) -> bool:
        return self.mode == "readwrite"

    def get_entry(self, key: str) -> bytes | None:
        return self._guard(lambda fs: fs.cat_file(self._entry_path(key)) if fs.exists(self._entry_path(key)) else None)

    def get_object(self, digest: str, dest: Path) -> bool:
        """Download an object to `dest`; False (and nothing at dest) when the remote's bytes are not `digest`'s."""
        def download(fs) -> bool:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
            os.close(fd)
            try:
                fs.get_file(self._object_path(digest), tmp)
                if sha256_file(Path(tmp)) != digest:
                    self.note(f"remote cache: object {digest[:12]} does not match its digest; rebuilding instead")
                    return False
                os.replace(tmp, dest)
                return True
            finally:
                Path(tmp).unlink(missing_ok=True)
        return bool(self._guard(download))

    def put(self, objects: dict[str, Path], key: str, entry: bytes) -> None:
        """Upload objects not there yet, then the entry last: a reader sees a complete result or none."""
        def upload(fs) -> None:
            for digest, path in objects.items():
                target = self._object_path(digest)
                if not fs.exists(target):
                    fs.put_file(str(path), target)
            fs.pipe_file(self._entry_path(key), entry)
        if self.writable:
            self._guard(upload)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    # helpers
    def _object_path(self, digest: str) -> str:
        return f"{self._root}/objects/{digest[:2]}/{digest}"

    def _entry_path(self, key: str) -> str:
        return f"{self._root}/actions/{key[:2]}/{key}.json"

    def _guard(self, action):
        """Run one remote operation; a failure turns the remote off for the rest of the run, with one note."""
        if self._broken:
            return None
        try:
            return action(self._filesystem())
        except Exception as err:  # fsspec backends raise their SDK's own errors: any of them means "unavailable"
            self._broken = True
            self.note(f"remote cache {redact(self.url)} unavailable ({type(err).__name__}: "
                      f"{redact(str(err).splitlines()[0] if str(err) else '')}); building locally")
            return None

    def _filesystem(self):
        if self._fs is None:
            try:
                import fsspec  # only builds with a remote pay for it
            except ModuleNotFoundError:
                raise RemoteUnavailable("fsspec is not installed (pip install 'modelbuild[remote]')") from None
            self._fs, self._root = fsspec.core.url_to_fs(self.url)
            self._root = self._root.rstrip("/")
        return self._fs


def redact(text: str) -> str:
    """Text without anything that looks like a credential in a URL (user:secret@host)."""
    import re

    return re.sub(r"//[^/@\s]+@", "//***@", text)


def configured(url: str | None, mode: str | None) -> Remote | None:
    """The remote from the environment first (CI sets it), then the recipe; None when there is none or it is off."""
    url = os.environ.get(REMOTE_ENV) or url
    mode = os.environ.get(MODE_ENV) or mode or "readwrite"
    if not url or mode == "off":
        return None
    return Remote(url, mode)
