"""A local folder as an object store.

- ``create`` (put-if-absent): the bytes go to a temp file which is then hard-linked to the
  key; ``link`` fails atomically if the key exists, and readers never see half a file. Where the
  file system offers it (Linux ``O_TMPFILE``) the temp file has no name: nothing to remove after
  the link, and nothing left behind by a crash.
- ``overwrite``: temp file + ``rename`` (atomic replace).
- ``if_match``: an exclusive ``flock`` on the current file, etag comparison, then temp file +
  rename; atomic among processes of one machine (the guarantee a local folder can give).
  ``overwrite`` and ``delete`` take the same lock, so they serialise with ``if_match``.
- ``copy``: the source is hard-linked to a temp name, which then replaces the destination like an
  ``overwrite``. No bytes are copied: objects are never changed in place (every write makes a new
  file), so the two keys sharing one file is indistinguishable from a copy (and, as on S3, the
  copy has the source's etag).
Etags identify one written version: inode, mtime in ns and size (every write makes a new inode).
File systems recycle inodes at once and may stamp mtimes with a coarse clock, so each write sets
its temp file's mtime explicitly to a fresh nanosecond timestamp (unique within a process).
The etag a put returns is taken from the temp file before it is published, so it is the etag of
the version this put wrote even if another writer replaces it a moment later.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from lv_core.errors import AlreadyExists, ConfigError, NotFound, PreconditionFailed, StorageError
from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode

_TMP_PREFIX = ".lvtmp-"
_clock_lock = threading.Lock()
_last_ns = 0
#: open flag of an unnamed temp file, linked into place through /proc (0: not here)
_UNNAMED = getattr(os, "O_TMPFILE", 0) if os.path.isdir("/proc/self/fd") else 0
_root_fd: int | None = None  # any folder's descriptor: makes os.link use linkat, which can follow /proc links
_root_fd_lock = threading.Lock()


def _any_dir_fd() -> int:
    global _root_fd
    with _root_fd_lock:
        if _root_fd is None:
            _root_fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return _root_fd


def _fill(fd: int, data: bytes, key: str) -> str:
    """Write ``data`` to the new file ``fd``, stamp it with a fresh mtime, sync it; return its etag.
    Raises StorageError when the file system refuses (e.g. the disk is full): nothing was written."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        ns = _fresh_ns()
        os.utime(fd, ns=(ns, ns))
        os.fsync(fd)
        return _etag(os.fstat(fd))
    except OSError as e:
        raise StorageError(f"cannot write {key!r}: {e.strerror}") from e


def _make_folder(key: str, folder: str | Path) -> None:
    """Make ``folder`` and the folders above it; a folder on the way pruned by a concurrent delete
    meanwhile is left to the caller's next try. Raises StorageError when a file is in the way."""
    try:
        os.makedirs(folder, exist_ok=True)
    except FileNotFoundError:
        pass
    except OSError as e:  # e.g. a parent "folder" of the key is an object
        raise StorageError(f"cannot write {key!r}: {e.strerror}") from e


def _link_new(key: str, src: str, path: Path, **how: Any) -> None:
    """Hard-link ``src`` to ``path`` unless something is there (put-if-absent; ``how``: os.link's options)."""
    try:
        os.link(src, path, **how)
    except FileExistsError as e:
        raise AlreadyExists(key) from e
    except IsADirectoryError as e:
        raise AlreadyExists(f"{key} (a folder)") from e


def _fresh_ns() -> int:
    """A wall-clock timestamp in ns, strictly increasing within this process."""
    global _last_ns
    with _clock_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        return _last_ns


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _discard(tmp: str | Path | None) -> None:
    """Remove a temporary file that did not become an object (None: it did)."""
    if tmp is not None:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


class LocalStore(ObjectStore):
    """Object store over a folder (keys are relative ``/``-separated paths)."""

    scheme = "file"

    def __init__(self, root: str | os.PathLike[str], *, unnamed: bool = True) -> None:
        """``unnamed``: put-if-absent through unnamed temp files where the file system offers them
        (False: always a named temp file, as on file systems without them)."""
        self.root = Path(root).expanduser().resolve()
        self._unnamed = unnamed and bool(_UNNAMED)  # cleared when this file system refuses unnamed temp files
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot use warehouse folder {self.root}: {e.strerror}") from e

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or any(p in ("", "..", ".") for p in key.split("/")):
            raise StorageError(f"invalid object key {key!r}")
        return self.root / key

    def url(self, key: str = "") -> str:
        return (self.root / key).as_uri() if key else self.root.as_uri()

    def _write_temp(self, key: str, path: Path, data: bytes) -> tuple[str, str]:
        """Write ``data`` to a synced temp file in ``path``'s folder (made if missing); return the
        temp file's path and etag. Plain ``os`` calls on one descriptor: on a commit of many tables
        these writes run in parallel threads, and each extra call is a round for the interpreter lock."""
        folder = str(path.parent)
        tmp = f"{folder}/{_TMP_PREFIX}{uuid.uuid4().hex}"
        for _ in range(20):  # a concurrent delete may prune the (empty) folder we just made
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:
                _make_folder(key, folder)
                continue
            except NotADirectoryError as e:
                raise StorageError(f"cannot write {key!r}: {e.strerror}") from e
            try:
                return tmp, _fill(fd, data, key)
            except BaseException:
                _discard(tmp)
                raise
            finally:
                os.close(fd)
        raise StorageError(f"cannot write {key!r}: its folder keeps disappearing")

    def _create_unnamed(self, key: str, path: Path, data: bytes) -> str | None:
        """put-if-absent through an unnamed temp file linked into place; its etag, or None when this
        file system cannot (then :meth:`put` uses a named temp file)."""
        folder = str(path.parent)
        for _ in range(20):  # a concurrent delete may prune the (empty) folder meanwhile
            try:
                fd = os.open(folder, _UNNAMED | os.O_WRONLY | os.O_CLOEXEC, 0o666)
            except (FileNotFoundError, NotADirectoryError):
                return None  # no folder yet (or a file on the way): the named path makes it, or says why
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    self._unnamed = False
                    return None
                raise StorageError(f"cannot write {key!r}: {e.strerror}") from e
            try:
                etag = _fill(fd, data, key)
                try:
                    _link_new(key, f"/proc/self/fd/{fd}", path, src_dir_fd=_any_dir_fd(), follow_symlinks=True)
                except FileNotFoundError:
                    continue  # the folder was pruned after the file was opened in it: again
                except OSError:
                    self._unnamed = False  # e.g. links through /proc refused here
                    return None
                return etag
            finally:
                os.close(fd)
        return None

    def _link_temp(self, src: str, dst: str, path: Path) -> Path:
        """Hard-link the object at ``src`` to a temp file in ``path``'s folder (made if missing)."""
        source = self._path(src)
        for _ in range(20):  # a concurrent delete may prune the (empty) folder we just made
            tmp = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
            _make_folder(dst, path.parent)
            try:
                os.link(source, tmp, follow_symlinks=False)
                return tmp
            except OSError as e:
                if not source.is_file():  # missing, or a folder (which is not an object)
                    raise NotFound(src) from e
                if not isinstance(e, FileNotFoundError):
                    raise StorageError(f"cannot copy {src!r} to {dst!r}: {e.strerror}") from e
        raise StorageError(f"cannot write {dst!r}: its folder keeps disappearing")

    def _prune(self, folder: Path) -> None:
        """Remove empty folders up to the root (an object store has no empty folders)."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if byte_range is None:
                    data = f.read()
                else:
                    start, end = byte_range
                    f.seek(start)
                    data = f.read(max(0, end - start))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            raise NotFound(key) from e
        return GetResult(data, _etag(st))

    def head(self, key: str) -> ObjectMeta:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError) as e:
            raise NotFound(key) from e
        if not os.path.isfile(self._path(key)):
            raise NotFound(key)
        return ObjectMeta(key, st.st_size, _etag(st), st.st_mtime)

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        if not (mode in (CREATE, OVERWRITE) or isinstance(mode, IfMatch)):
            raise ValueError(f"unknown put mode {mode!r}")
        path = self._path(key)
        if mode == CREATE and self._unnamed:
            made = self._create_unnamed(key, path, data)
            if made is not None:
                return made
        written, etag = self._write_temp(key, path, data)
        tmp: str | None = written  # the temp file still to remove in finally (None once renamed into place)
        try:
            if mode == CREATE:
                _link_new(key, written, path)
                return etag
            if mode == OVERWRITE:
                self._replace_locked(key, path, written)
                tmp = None
                return etag
            assert isinstance(mode, IfMatch)
            self._put_if_match(key, path, written, mode.etag)
            tmp = None
            return etag
        except (IsADirectoryError, NotADirectoryError) as e:
            raise StorageError(f"cannot write {key!r}: {e.strerror}") from e
        finally:
            _discard(tmp)

    def copy(self, src: str, dst: str) -> str:
        path = self._path(dst)
        tmp: Path | None = self._link_temp(src, dst, path)
        try:
            assert tmp is not None
            etag = _etag(os.stat(tmp))
            self._replace_locked(dst, path, tmp)
            tmp = None
            return etag
        except (IsADirectoryError, NotADirectoryError) as e:
            raise StorageError(f"cannot write {dst!r}: {e.strerror}") from e
        finally:
            _discard(tmp)

    def _locked(self, key: str, path: Path) -> int:
        """Open and exclusively lock the file currently at ``path``; return its fd."""
        while True:
            try:
                fd = os.open(path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError) as e:
                raise NotFound(key) from e
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError as e:
                same = False
                if not os.path.lexists(path):
                    os.close(fd)
                    raise NotFound(key) from e
            if same:
                return fd
            os.close(fd)  # replaced while we waited: lock the new file

    def _put_if_match(self, key: str, path: Path, tmp: str | Path, etag: str) -> None:
        try:
            fd = self._locked(key, path)
        except NotFound as e:
            raise PreconditionFailed(f"{key}: object is gone") from e
        try:
            if _etag(os.fstat(fd)) != etag:
                raise PreconditionFailed(f"{key}: etag changed")
            os.replace(tmp, path)
        finally:
            os.close(fd)

    def _replace_locked(self, key: str, path: Path, tmp: str | Path) -> None:
        """Unconditional replace, under the current file's lock so it serialises with ``if_match``."""
        try:
            fd = self._locked(key, path)
        except NotFound:
            os.replace(tmp, path)  # nothing to lock; a racing if_match sees the new file or none
            return
        try:
            os.replace(tmp, path)
        finally:
            os.close(fd)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            fd = self._locked(key, path)
        except NotFound:
            return
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError):  # a folder is not an object
            pass
        finally:
            os.close(fd)
        self._prune(path.parent)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        # Walk only the deepest folder the prefix names, then filter by the rest.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self.root / base_dir if base_dir else self.root
        if not top.is_dir():
            return iter(())
        found: list[ObjectMeta] = []
        for dirpath, dirnames, filenames in os.walk(top):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            dirnames[:] = [d for d in dirnames
                           if (rel_dir + d + "/").startswith(prefix) or prefix.startswith(rel_dir + d + "/")]
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = rel_dir + name
                if not key.startswith(prefix) or (start_after is not None and key <= start_after):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                found.append(ObjectMeta(key, st.st_size, _etag(st), st.st_mtime))
        found.sort(key=lambda m: m.key)
        return iter(found)
