"""The folder a direct-path write leaves its files in: what is in it, their Delta facts, clean-up.

Spark writes each operation's output into a fresh folder inside the table folder (see
:mod:`lv_core.engine.spark_io`). :func:`staged_files` lists its Parquet files, :func:`footer_facts`
gives each file's partition values, size and stats from the footers and folder names (no Spark job),
:func:`drop_folder` and :func:`drop_debris` remove a failed write or what a good one leaves besides data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

from lv_core import concurrency
from lv_core.delta.schema import DeltaSchema
from lv_core.engine.footer_stats import FOLDER_TYPES, folder_values, footer_stats, read_footer
from lv_core.errors import LvError
from lv_core.storage.base import ObjectStore

__all__ = ["STAGING", "Fact", "drop_debris", "drop_folder", "footer_facts", "local_root", "staged_files"]

#: Folder inside a table where change data files are written before they get their names.
STAGING = "_lv_staging"
#: Parquet footers read at once (each a few KiB) when a write's facts come from its files.
FOOTER_READS = 16
#: (file relative to the write's folder, partition values, size, stats JSON)
Fact = tuple[str, dict[str, Optional[str]], int, str]


def local_root(store: ObjectStore) -> Path:
    """The folder of a ``file`` store."""
    return Path(unquote(urlparse(store.url()).path))


def staged_files(store: ObjectStore, stage_key: str) -> list[tuple[str, int]]:
    """Parquet files Spark left in the folder ``stage_key`` (relative to it) and their sizes."""
    if store.scheme == "file":
        root = local_root(store) / stage_key
        out = []
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                if n.endswith(".parquet") and not n.startswith((".", "_")):
                    full = os.path.join(dirpath, n)
                    out.append((os.path.relpath(full, root).replace(os.sep, "/"), os.path.getsize(full)))
        return sorted(out)
    return sorted((m.key[len(stage_key) + 1:], m.size) for m in store.list(stage_key + "/")
                  if m.key.endswith(".parquet") and not m.key.rsplit("/", 1)[-1].startswith((".", "_")))


def footer_facts(store: ObjectStore, stage_key: str, staged: Sequence[tuple[str, int]], schema: DeltaSchema,
                 parts: Sequence[str]) -> Optional[list[Fact]]:
    """The facts of each staged file holding rows, from the Parquet footers (a few KiB per file, read in
    parallel) and the folder names; None when those cannot give them exactly (see
    :mod:`lv_core.engine.footer_stats`: the caller then computes them with Spark)."""
    if any(schema.field(p).type not in FOLDER_TYPES for p in parts):
        return None
    local = local_root(store) if store.scheme == "file" else None

    def one(item: tuple[str, int]) -> Optional[tuple[Fact, int]]:
        rel, size = item
        values = folder_values(rel, parts)
        if values is None:
            return None
        key = f"{stage_key}/{rel}"
        md = pq.read_metadata(str(local / key)) if local is not None else read_footer(store, key, size)
        stats = footer_stats(md, schema, parts)
        return None if stats is None else ((rel, values, size, stats), md.num_rows)

    got = concurrency.gather(concurrency.Pool.REQUESTS, one, staged, limit=FOOTER_READS)
    if any(g is None for g in got):
        return None
    return [fact for fact, rows in (g for g in got if g) if rows]


def drop_folder(store: ObjectStore, stage_key: str) -> None:
    """Delete a write's folder and everything in it (a failed write, or the staging of moved files)."""
    if store.scheme == "file":
        root = local_root(store)
        shutil.rmtree(root / stage_key, ignore_errors=True)
        if f"/{STAGING}/" in stage_key:
            with contextlib.suppress(OSError):
                (root / stage_key).parent.rmdir()  # _lv_staging, when no other operation is writing
        return
    with contextlib.suppress(LvError):
        for m in list(store.list(stage_key + "/")):
            store.delete(m.key)


def drop_debris(store: ObjectStore, stage_key: str, keep: set[str], staged: Sequence[tuple[str, int]]) -> None:
    """Delete what a write left in its folder besides the data files ``keep`` (relative to it): files
    without rows (``staged`` lists the Parquet files) and, in a local folder, the checksum files of
    Spark's local file system; the whole folder if nothing is kept."""
    if not keep:
        drop_folder(store, stage_key)
    elif store.scheme == "file":
        root = local_root(store) / stage_key
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                full = os.path.join(dirpath, n)
                if os.path.relpath(full, root).replace(os.sep, "/") not in keep:
                    with contextlib.suppress(OSError):
                        os.unlink(full)
    else:
        for rel, _size in staged:
            if rel not in keep:
                with contextlib.suppress(LvError):
                    store.delete(f"{stage_key}/{rel}")
