"""The only module that touches a table location: staged data, commit files, checkpoints (design §2).

Files are created in exclusive mode and never overwritten or renamed, so a name seen once always means
the same bytes; that is what makes a crash leave only unreferenced files behind. Locations are local
paths or `file://` URIs, handled with the os module, or any URI pyarrow's filesystems understand
(`s3://`, `s3a://` is read as `s3://`, `gs://`, `hdfs://`). Object stores have no exclusive create in
pyarrow, so there uniqueness rests on the txn id in every name.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import stat
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from acidtables.core.canonical import canonical_json
from acidtables.core.errors import InvalidArgumentError

METADATA_DIR = "_acidtables"
DATA_DIR = "data"
#: written at creation, exclusively: the id of the one table that owns this location. Every operation
#: that deletes (drop, cleanup, vacuum) reads it first and refuses when it names another table.
OWNER_MARKER = f"{METADATA_DIR}/owner.json"
#: written when a table was dropped with its data: its location is free again once no transaction of the
#: dropped table can still be running (its leases have expired)
DROPPED_MARKER = f"{METADATA_DIR}/dropped.json"
#: how Hive and Spark spell a NULL partition value in a directory name
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: A transaction's data files live under data/_acid_txn=<txn id>/. A `name=value` directory, because
#: Hive-style partition discovery (Spark's, for one) walks up from a file through such directories and
#: takes the first other one as the table's root: so every staged file of a table shares one root,
#: data/, and a reader can scan them all at once (acidtables.spark.scan).
STAGING_PREFIX = "_acid_txn="
#: Each write of a transaction (one Spark job, one data source task set) gets its own directory under the
#: staging dir, so writes never meet; also `name=value`, for the same reason.
WRITE_PREFIX = "_acid_write="
#: the directory levels between data/ and a staged file's partition directories, named as Hive-style
#: partition discovery names them: a reader that scans data/ sees them as two extra string columns
STAGING_LEVELS = (STAGING_PREFIX.rstrip("="), WRITE_PREFIX.rstrip("="))
#: at most this many footers kept between a staged file's description and its proof (parquet_footer):
#: a write of more files reads the oldest ones' footers a second time at their proof
_FOOTERS_KEPT = 4096


def content_checksum(content: Any) -> str:
    """SHA-256 of a JSON document's content in one canonical spelling: what checkpoints and archive
    segments carry, so a torn or edited file is recognised instead of trusted."""
    return hashlib.sha256(canonical_json(content)).hexdigest()


def txn_of_staging_dir(name: str) -> str | None:
    """The txn id a directory under data/ belongs to; None for anything that is not a staging directory."""
    if not name.startswith(STAGING_PREFIX) or len(name) == len(STAGING_PREFIX):
        return None
    return name.removeprefix(STAGING_PREFIX)


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the location
    size_bytes: int
    modified_at: float  # seconds since the epoch


#: up to this many files an object store is asked about one request each (`Storage.missing`); past
#: it, one recursive listing answers for them all. A listing returns 1,000 keys a request, so it wins
#: once the files asked about are more than a few (bench/README.md, "Missing files").
STAT_LIMIT = 16

#: characters Hadoop-based readers (Spark) take for glob syntax in a path: a table there could be
#: written but not read back
GLOB_CHARACTERS = frozenset("{}[]*?\\")


def normalize_location(location: str) -> str:
    """The one spelling of a table location that readers list files under: local paths absolute, with
    no `//`, `.` or `..` (Hadoop cleans paths up that way, and a file's key must match its listing)."""
    location = location.strip()
    if "://" not in location:
        return os.path.normpath(os.path.abspath(location))
    parts = urlsplit(location)
    if parts.scheme == "file":
        return "file://" + os.path.normpath(parts.path or "/")
    return location.rstrip("/")


#: an S3-protocol endpoint other than AWS (MinIO, Ceph, a test server): http(s)://host:port. Credentials
#: and region come from the usual AWS_* variables, which pyarrow reads itself.
S3_ENDPOINT = "ACIDTABLES_S3_ENDPOINT"


@dataclass(frozen=True)
class ObjectStore:
    """Where s3:// and s3a:// locations live: one reading of the environment for both readers of the
    bytes, pyarrow here and Hadoop's S3A in Spark, so they cannot reach different stores."""

    #: an S3-protocol endpoint other than AWS (MinIO, Ceph, moto), or None for AWS itself
    endpoint: str | None
    region: str

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ObjectStore:
        env = os.environ if env is None else env
        endpoint = env.get(S3_ENDPOINT, "").strip() or None
        return ObjectStore(endpoint, env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")


def _object_store(uri: str) -> tuple[Any, str]:
    """pyarrow's file system for a URI and the path inside it; s3:// honours ACIDTABLES_S3_ENDPOINT."""
    from pyarrow import fs as pafs

    store = ObjectStore.from_env()
    parts = urlsplit(uri)
    if parts.scheme == "s3" and store.endpoint:
        filesystem = pafs.S3FileSystem(endpoint_override=store.endpoint, region=store.region)
        return filesystem, f"{parts.netloc}{parts.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, str(path)


def _stat_missing(path: str) -> bool:
    """Whether a local file is gone: only FileNotFoundError (or a file where a directory should be)
    means so; any other OSError (permission, I/O) propagates."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    return not stat.S_ISREG(found.st_mode)


def _local_root(location: str) -> Path | None:
    if "://" not in location:
        return Path(location)
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(parts.path)
    return None


class Storage:
    """Bytes at a table location; paths given to it are relative to the location."""

    def __init__(self, location: str) -> None:
        self.location = normalize_location(location)
        self._root = _local_root(self.location)
        self._fs: Any = None
        self._base = ""
        self._footers: dict[str, Any] = {}
        self._data_dir_checked = False
        if self._root is None:
            uri = self.location.replace("s3a://", "s3://", 1)
            try:
                self._fs, self._base = _object_store(uri)
            except Exception as exc:  # ArrowInvalid / ArrowNotImplementedError: not a file system pyarrow knows
                scheme = self.location.split("://", 1)[0]
                raise InvalidArgumentError(
                    f"location {self.location}: {scheme}:// is not a file system acidtables can use ({exc}); use a "
                    "local path, file://, s3:// or s3a://, gs://, hdfs:// or abfs://"
                ) from None

    # --- paths ---------------------------------------------------------------------------------------

    def absolute(self, relative: str) -> str:
        """The URI (or local path) of a file, for Spark and for users."""
        if "://" in relative or relative.startswith("/"):
            return relative
        return f"{self.location}/{relative}"

    def relative(self, path: str) -> str:
        """A path under the location, relative to it; anything else is returned unchanged."""
        for base in (self.location, str(self._root) if self._root else None):
            if base and path.startswith(base + "/"):
                return path[len(base) + 1 :]
        if path.startswith("file://") and self._root is not None:
            return self.relative(urlsplit(path).path)
        return path

    def staging_dir(self, txn_id: str) -> str:
        """Where a transaction writes its data files: one directory per transaction, never shared."""
        return f"{DATA_DIR}/{STAGING_PREFIX}{txn_id}"

    def new_write_dir(self, txn_id: str) -> str:
        """A fresh directory for one write of transaction `txn_id`, relative to the location: the only
        place a writer may put the files it stages. Refuses when data/ is a file someone else put there
        (acidtables never deletes what it did not write)."""
        if not self._data_dir_checked and self.file_size(DATA_DIR) is not None:
            raise InvalidArgumentError(
                f"{self.absolute(DATA_DIR)} is a file, where the table keeps its data directory; move it away "
                "(acidtables never deletes what it did not write)"
            )
        self._data_dir_checked = True  # once per Storage, not per write: nothing of ours replaces data/
        return f"{self.staging_dir(txn_id)}/{WRITE_PREFIX}{uuid.uuid4().hex[:16]}"

    @property
    def is_local(self) -> bool:
        """A local file system (or file://), not an object store."""
        return self._root is not None

    def data_root(self) -> str:
        """The directory every staged file lies under (the base path for a reader's partition discovery)."""
        return self.absolute(DATA_DIR)

    def partition_dirs(self, path: str, depth: int) -> list[str] | None:
        """The `name=value` directory names of a file that lies where `new_write_dir` puts files, with
        `depth` partition levels; None for a file anywhere else (or whose staging levels are escaped, so a
        reader's discovery would not read them back as written)."""
        segments = path.split("/")
        if len(segments) != depth + 4 or segments[0] != DATA_DIR:
            return None
        txn, write = segments[1], segments[2]
        if not (txn.startswith(STAGING_PREFIX) and write.startswith(WRITE_PREFIX)) or "%" in txn + write:
            return None
        return segments[3:-1]

    def staged_by(self, path: str, txn_id: str) -> bool:
        """Whether `path` lies inside the staging directory of transaction `txn_id` (after `..` and `//`
        are resolved, so a spelling cannot climb out of it)."""
        relative = self.relative(path)
        if "://" in relative or relative.startswith("/"):
            return False
        return posixpath.normpath(relative).startswith(self.staging_dir(txn_id) + "/")

    def discard_staged(self, txn_id: str, paths: Iterable[str] | None = None) -> list[str]:
        """Delete what transaction `txn_id` staged: its whole staging directory (`paths=None`), or those
        of `paths` that lie inside it. Returns what was deleted.

        This is the one place a transaction's files are deleted (abort, a lost commit, the clean-up
        after a commit), and it never looks outside the transaction's own staging directory: a path a
        record lists as added may be a file the table already had (re-added with a deletion vector, or
        a compaction output a rebase moved onto), and deleting it would delete committed data.
        """
        if paths is None:
            staging = self.staging_dir(txn_id)
            self._forget_footers(p for p in list(self._footers) if self.staged_by(p, txn_id))
            self.delete(staging)
            return [staging]
        doomed = [self.relative(p) for p in paths if self.staged_by(p, txn_id)]
        self._forget_footers(doomed)
        for path in doomed:
            self.delete(path)
        return doomed

    def _forget_footers(self, paths: Iterable[str]) -> None:
        """Drop the kept footers of staged files that will never be proven (their files are going)."""
        for path in paths:
            self._footers.pop(path, None)

    def commit_file(self, txn_id: str, attempt: int) -> str:
        return f"{METADATA_DIR}/commits/{txn_id}-{attempt}.json"

    def checkpoint_file(self, version: int, txn_id: str) -> str:
        return f"{METADATA_DIR}/checkpoints/{version:020d}-{txn_id}.json"

    def manifest_file(self, version: int, bucket: int, txn_id: str) -> str:
        """A new manifest for the checkpoint of `version` (later checkpoints may name it too): a name of its
        own every time, so a second try never meets the torn file of a first."""
        return f"{METADATA_DIR}/manifests/{version:020d}-{txn_id}-{bucket:05d}-{uuid.uuid4().hex[:12]}.parquet"

    def _local(self, relative: str) -> Path:
        assert self._root is not None  # callers check the branch; not an argument check
        return self._root / relative

    def _remote(self, relative: str) -> str:
        if not relative:
            return self._base
        return f"{self._base}/{relative}" if self._base else relative

    # --- operations ----------------------------------------------------------------------------------

    def make_root(self) -> None:
        if self._root is not None:
            self._root.mkdir(parents=True, exist_ok=True)
        else:
            self._fs.create_dir(self._base, recursive=True)

    def write_exclusive(self, relative: str, data: bytes) -> None:
        """Create a new file; FileExistsError if the name was ever used (local locations)."""
        if self._root is not None:
            target = self._local(relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            return
        with self._fs.open_output_stream(self._remote(relative)) as out:
            out.write(data)

    def publish(self, relative: str, data: bytes) -> None:
        """Create a new file that readers see whole or not at all (metadata read while it is written:
        archive segments). Locally: written under a temporary name, then hard-linked to its name, which
        fails if the name exists (FileExistsError), so it is exclusive too. On an object store a PUT is
        already atomic."""
        if self._root is None:
            self.write_exclusive(relative, data)
            return
        target = self._local(relative)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        self.write_exclusive(str(temporary.relative_to(self._root)), data)
        try:
            os.link(temporary, target)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the name is unique (a random part), rename
            if target.exists():
                raise FileExistsError(str(target)) from None
            os.rename(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    def set_modified(self, relative: str, seconds: float) -> bool:
        """Give a file the modification time `seconds` (since the epoch), for formats whose readers take
        a file's time as the time of what it records (Delta's commit files); False on an object store,
        whose objects keep the time they were written."""
        if self._root is None:
            return False
        os.utime(self._local(relative), (seconds, seconds))
        return True

    def replace(self, relative: str, data: bytes) -> None:
        """Write a file whose name is reused, whole or not at all: only for hints other formats define as
        overwritten (Delta's `_delta_log/_last_checkpoint`), never for the table's own files. Locally a
        temporary file renamed over it; on an object store a PUT, which replaces atomically."""
        if self._root is None:
            with self._fs.open_output_stream(self._remote(relative)) as out:
                out.write(data)
            return
        target = self._local(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(temporary, "xb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)

    def read(self, relative: str) -> bytes:
        if self._root is not None:
            return self._local(relative).read_bytes()
        with self._fs.open_input_stream(self._remote(relative)) as stream:
            return bytes(stream.read())

    def open_input(self, relative: str) -> Any:
        """A readable binary file (pyarrow reads Parquet footers from it without fetching the data)."""
        if self._root is not None:
            return open(self._local(relative), "rb")
        return self._fs.open_input_file(self._remote(relative))

    def arrow_file(self, relative: str) -> tuple[Any, str]:
        """pyarrow's file system and the path in it of a file (relative to the location, or an absolute
        path or URI), for readers that hand files to `pyarrow.dataset`."""
        from pyarrow import fs as pafs

        if relative.startswith("/") or relative.startswith("file://"):
            return pafs.LocalFileSystem(), relative.removeprefix("file://")
        if "://" in relative:
            return _object_store(relative.replace("s3a://", "s3://", 1))
        if self._root is not None:
            return pafs.LocalFileSystem(), str(self._local(relative))
        return self._fs, self._remote(relative)

    def file_size(self, relative: str) -> int | None:
        """The size of the regular file at `relative`, or None when there is none (missing, a directory)."""
        if self._root is not None:
            try:  # one stat, not is_file() and then stat(): the commit proves every file it adds this way
                found = os.stat(self._local(relative))
            except (FileNotFoundError, NotADirectoryError):
                return None
            return found.st_size if stat.S_ISREG(found.st_mode) else None
        from pyarrow import fs as pafs

        info = self._fs.get_file_info(self._remote(relative))
        return int(info.size) if info.type == pafs.FileType.File else None

    def parquet_footer(self, relative: str, *, keep: bool = False) -> Any:
        """The Parquet footer (pyarrow FileMetaData) of a file. Raises OSError or pyarrow's ArrowInvalid
        when the file is missing or not Parquet.

        Files are never overwritten, so the writer describing a staged file (`keep=True`) and the commit
        proving it (`keep=False`, the footer's last use) share one read: a kept footer is handed out once
        more and then dropped. Nothing else is kept: a parsed footer costs about 10 KiB of native memory
        (outside tracemalloc), and a cache of every footer read kept the newest 4,096 of them in a stream's
        driver, committed or not (issue 42). Only footers described and not yet proven stay, those of a
        transaction that never reaches its proof until its staged files are discarded (or, past
        `_FOOTERS_KEPT` of them, the oldest first)."""
        footer = self._footers.pop(relative, None)
        if footer is None:
            import pyarrow.parquet as pq

            with self.open_input(relative) as handle:
                footer = pq.ParquetFile(handle).metadata
        if keep:
            if len(self._footers) >= _FOOTERS_KEPT:
                self._footers.pop(next(iter(self._footers)))
            self._footers[relative] = footer
        return footer

    @property
    def kept_footers(self) -> int:
        """Footers read for a proof still to come (what `parquet_footer(keep=True)` kept)."""
        return len(self._footers)

    def missing(self, paths: Collection[str], *, under: str) -> list[str]:
        """Those of `paths` (relative to the location) that are not regular files now, in their order.

        Missing must mean missing: a file counts as missing only when the location answered that it is
        not there; when it cannot answer (an object store that does not respond, a permission refused)
        this raises OSError, never a shorter list. Locally each path costs one `stat` (about a
        microsecond). On an object store a few paths are asked one request each; more than
        `STAT_LIMIT` are answered by one recursive listing of `under` (1,000 keys a request), which
        is how a read of many files or a commit of thousands stays a handful of round trips
        (bench/README.md has the figures)."""
        if self._root is not None:
            root = str(self._root)  # plain strings: a pathlib join costs more than the stat itself
            return [p for p in paths if _stat_missing(os.path.join(root, p))]
        from pyarrow import fs as pafs

        prefix = posixpath.normpath(under) + "/"
        clean = {p: posixpath.normpath(p) for p in paths}
        listed: set[str] | None = None
        if len(clean) > STAT_LIMIT and any(c.startswith(prefix) for c in clean.values()):
            listed = {f.path for f in self.walk(prefix.rstrip("/"))}
        out = []
        for path, normal in clean.items():
            if listed is not None and normal.startswith(prefix):
                gone = normal not in listed
            else:
                gone = self._fs.get_file_info(self._remote(normal)).type != pafs.FileType.File
            if gone:
                out.append(path)
        return out

    def exists(self, relative: str) -> bool:
        if self._root is not None:
            return self._local(relative).exists()
        from pyarrow import fs as pafs

        return bool(self._fs.get_file_info(self._remote(relative)).type != pafs.FileType.NotFound)

    def root_state(self) -> str:
        """What the location itself is now: "missing", "file" or "directory" (an object-store prefix with
        objects under it, or none, is a directory)."""
        if self._root is not None:
            if not os.path.lexists(self._root):
                return "missing"
            return "directory" if self._root.is_dir() else "file"
        from pyarrow import fs as pafs

        kind = self._fs.get_file_info(self._base).type
        if kind == pafs.FileType.File:
            return "file"
        return "directory" if kind == pafs.FileType.Directory else "missing"

    def top_entries(self) -> list[str]:
        """The names directly under the location (empty when it is missing or empty)."""
        return sorted(entry.path.rsplit("/", 1)[-1] for entry in self.list_dir(""))

    def read_json(self, relative: str) -> dict[str, Any] | None:
        """A small JSON object at `relative`, or None when there is no such file or it is not one."""
        try:
            data = json.loads(self.read(relative))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _inside(self, relative: str) -> bool:
        """Whether deleting `relative` stays strictly inside the location: not the location itself (it is
        never removed recursively), no `..` out of it and, locally, no symlinked directory on the way
        that leads elsewhere (the last component may be a link: deleting it removes the link, not its
        target)."""
        clean = posixpath.normpath(relative) if relative else "."
        if clean in (".", "..") or clean.startswith("../") or clean.startswith("/"):
            return False
        if self._root is None:
            return True
        root = os.path.realpath(self._root)
        parent = os.path.realpath(os.path.dirname(os.path.join(self._root, clean)))
        return parent == root or parent.startswith(root + os.sep)

    def delete(self, relative: str) -> None:
        """Delete a file or a directory tree; a missing one is not an error (cleanup is idempotent).

        Never outside the location: a path that climbs out, or that passes through a symlinked
        directory pointing elsewhere, raises OSError; a symlink itself is unlinked, never followed."""
        if not self._inside(relative):
            raise OSError(f"refusing to delete {relative!r}: it is not inside {self.location}")
        if self._root is not None:
            target = self._local(relative)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)  # never follows symlinks inside the tree
            else:
                target.unlink(missing_ok=True)
            return
        from pyarrow import fs as pafs

        info = self._fs.get_file_info(self._remote(relative))
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir(self._remote(relative))
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._remote(relative))

    def list_dir(self, relative: str) -> list[FileInfo]:
        """Entries directly under a directory (files and directories), newest change time included."""
        if self._root is not None:
            base = self._local(relative)
            if not base.is_dir():
                return []
            out = []
            try:
                entries = list(os.scandir(base))
            except FileNotFoundError:
                return []  # removed since is_dir(): a transaction that ended meanwhile
            for entry in entries:
                try:
                    found = entry.stat()
                except FileNotFoundError:
                    continue  # deleted between the listing and its stat (cleanup or an abort beside us)
                out.append(FileInfo(f"{relative}/{entry.name}", found.st_size, found.st_mtime))
            return out
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self._remote(relative), allow_not_found=True)
        return [
            FileInfo(f"{relative}/{i.base_name}", i.size or 0, i.mtime.timestamp() if i.mtime else 0.0)
            for i in self._fs.get_file_info(selector)
        ]

    def remove_empty_dirs(self, relative: str) -> None:
        """Remove the directories under `relative` (and it) that hold no file, deepest first."""
        if self._root is None:
            return  # object stores have no directories of their own
        base = self._local(relative)
        if not base.is_dir() or base.is_symlink():
            return
        for dirpath, _, _ in sorted(os.walk(base), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                continue  # not empty: something this table did not write stays, and so does its directory

    def walk(self, relative: str) -> Iterator[FileInfo]:
        """Every file under a directory, recursively."""
        if self._root is not None:
            base = self._local(relative)
            for dirpath, _, names in os.walk(base):
                for name in names:
                    full = Path(dirpath) / name
                    found = full.stat()
                    yield FileInfo(str(full.relative_to(self._root)), found.st_size, found.st_mtime)
            return
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self._remote(relative), recursive=True, allow_not_found=True)
        for info in self._fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                rel = info.path[len(self._base) + 1 :] if self._base else info.path
                yield FileInfo(rel, info.size or 0, info.mtime.timestamp() if info.mtime else 0.0)
