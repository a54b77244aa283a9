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
import re
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from modelbuild.errors import EnvironmentFailure, ModelbuildError, last_line
from modelbuild.fsutil import fsync_folder
from modelbuild.hashing import sha256_file

REMOTE_ENV = "MODELBUILD_REMOTE_CACHE"
MODE_ENV = "MODELBUILD_CACHE_MODE"
MODES = ("read", "readwrite", "off")


@dataclass
class Remote:
    url: str
    mode: str = "readwrite"  # read: pull requests take from the team cache and never write
    notes: list[str] = field(default_factory=list)  # what a person should know, said once each
    taken: int = 0  # results this run took from the remote
    given: int = 0  # results this run gave it
    _fs: object = None
    _root: str = ""
    _local: bool = False  # a shared folder, not an object store
    _broken: bool = False
    _mismatched: set[str] = field(default_factory=set)  # digests whose remote bytes failed their check
    # keep the connection for the next Remote of this URL in this process: a cluster's worker runs many stages,
    # and a fresh S3 client costs 0.1-0.2 s, more than the stage's transfers
    reuse: bool = False

    @property
    def writable(self) -> bool:
        return self.mode == "readwrite"

    def get_entry(self, key: str) -> bytes | None:
        def read(fs) -> bytes | None:
            try:
                return fs.cat_file(self._entry_path(key))
            except FileNotFoundError:  # a miss, the common case: not a failure of the remote
                return None

        return self._guard(read)

    def get_object(self, digest: str, dest: Path) -> bool:
        """Download an object to `dest`; False (and nothing at dest) when the remote's bytes are not `digest`'s."""

        def download(fs) -> bool:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
            os.close(fd)
            try:
                fs.get_file(self._object_path(digest), tmp)
                if sha256_file(Path(tmp)) != digest:
                    self._mismatched.add(digest)  # the next put replaces it
                    self.note(f"remote cache: object {digest[:12]} does not match its digest; rebuilding instead")
                    return False
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, dest)
                fsync_folder(dest.parent)
                return True
            finally:
                Path(tmp).unlink(missing_ok=True)

        return bool(self._guard(download))

    def put(self, objects: dict[str, Path], key: str, entry: bytes) -> None:
        """Upload objects not there yet, then the entry last: a reader sees a complete result or none. An
        object there whose size is not its file's (a writer stopped halfway), or whose bytes failed their
        digest this run, is replaced: the team's cache heals instead of refusing that result forever."""

        def upload(fs) -> None:
            self._upload_objects(fs, objects)
            self._write(fs, self._entry_path(key), lambda name: fs.pipe_file(name, entry))
            self.given += 1

        if self.writable:
            self._guard(upload)

    def put_objects(self, objects: dict[str, Path]) -> None:
        """Upload objects not there yet, with no entry: the inputs a cluster's worker takes by digest."""
        if self.writable:
            self._guard(lambda fs: self._upload_objects(fs, objects))

    @property
    def broken(self) -> bool:
        """The remote failed this run and is off for the rest of it (its note says why)."""
        return self._broken

    def _upload_objects(self, fs, objects: dict[str, Path]) -> None:
        for digest, path in objects.items():
            target = self._object_path(digest)
            if digest in self._mismatched or _size(fs, target) != path.stat().st_size:
                self._write(fs, target, lambda name: fs.put_file(str(path), name))  # noqa: B023  (called here)
                self._mismatched.discard(digest)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def summary(self) -> str:
        writes = f"{self.given} given" if self.writable else "read only"
        return f"remote cache {redact(self.url)}: {self.taken} results taken, {writes}"

    # helpers
    def _object_path(self, digest: str) -> str:
        return f"{self._root}/objects/{digest[:2]}/{digest}"

    def _entry_path(self, key: str) -> str:
        return f"{self._root}/actions/{key[:2]}/{key}.json"

    def _write(self, fs, target: str, write) -> None:
        """write(name) puts a file's bytes at `name`; in a shared folder under a temporary name renamed to
        `target`, so a reader never opens a file half written (an object store's upload is whole or none)."""
        if not self._local:
            write(target)
            return
        partial = f"{target}.{uuid.uuid4().hex}.tmp"
        try:
            write(partial)
            os.replace(partial, target)
        finally:
            Path(partial).unlink(missing_ok=True)

    def _guard(self, action):
        """Run one remote operation; a failure turns the remote off for the rest of the run, with one note."""
        if self._broken:
            return None
        try:
            return action(self._filesystem())
        except Exception as err:  # fsspec backends raise their SDK's own errors: any of them means "unavailable"
            self._broken = True
            self.note(
                f"remote cache {redact(self.url)} unavailable ({type(err).__name__}: "
                f"{redact(str(err).splitlines()[0] if str(err) else '')}); building locally"
            )
            return None

    def _filesystem(self):
        reused = _CONNECTIONS.get(_connection_key(self.url)) if self.reuse else None
        if self._fs is None and reused is not None:
            self._fs, self._root, self._local = reused
        if self._fs is None:
            import fsspec  # only builds with a remote pay for it; configured() checked it is there

            # a fresh instance: fsspec would otherwise reuse one made under another run's environment
            self._local = (fsspec.core.split_protocol(self.url)[0] or "file") in ("file", "local")
            self._fs, self._root = fsspec.core.url_to_fs(
                self.url, skip_instance_cache=True, **({"auto_mkdir": True} if self._local else {})
            )
            self._root = self._root.rstrip("/")
            if self.reuse:
                _CONNECTIONS[_connection_key(self.url)] = (self._fs, self._root, self._local)
        return self._fs


_CONNECTIONS: dict[tuple, tuple] = {}  # (URL, the environment that configures it) -> (filesystem, root, local)


def _connection_key(url: str) -> tuple:
    """What a connection was made from: the URL and the variables that carry credentials and endpoints."""
    prefixes = ("AWS_", "FSSPEC_", "GOOGLE_", "GCS", "AZURE_")
    return url, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefixes)))


def _size(fs, path: str) -> int | None:
    try:
        return fs.info(path)["size"]
    except FileNotFoundError:
        return None


def redact(text: str) -> str:
    """Text without anything that looks like a credential in a URL (user:secret@host)."""
    return re.sub(r"//[^/@\s]+@", "//***@", text)


def configured(url: str | None, recipe_mode: str = "readwrite", chosen_mode: str | None = None) -> Remote | None:
    """The remote, or None when there is none or it is off. The URL from the environment first (CI sets it),
    then the recipe; the mode from the command line, then the environment, then the recipe."""
    url = os.environ.get(REMOTE_ENV) or url
    mode = chosen_mode or os.environ.get(MODE_ENV) or recipe_mode
    if mode not in MODES:
        raise ModelbuildError(f"{MODE_ENV}={mode!r} is not a cache mode (fix: one of {', '.join(MODES)})")
    if not url or mode == "off":
        return None
    _check_protocol(url)
    return Remote(url, mode)


def _check_protocol(url: str) -> None:
    """Fail before building when the remote cannot work here at all: a broken set-up is not a slow network."""
    try:
        import fsspec  # as in _filesystem: the [remote] extra, paid for only by builds that use a remote
    except ModuleNotFoundError:
        raise EnvironmentFailure(
            f"the remote cache {redact(url)} needs fsspec (fix: pip install 'modelbuild[remote]')"
        ) from None
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise ModelbuildError(
            f"the remote cache {redact(url)}: fsspec knows no protocol {protocol!r} (fix: "
            "s3://bucket/prefix, gs://bucket/prefix or a folder path)"
        ) from None
    except ImportError as err:
        raise EnvironmentFailure(
            f"the remote cache {redact(url)} needs a package this Python lacks: "
            f"{last_line(err)} (fix: pip install 'modelbuild[remote]')"
        ) from None
