"""TPC-H / TPC-DS data for the workload benchmarks (``tpcds.py``, ``cab.py``): generated at run time by
the generator packages of the ``bench`` extra (``pip install -e .[bench]``), loaded as Delta tables
through LakeVilla (one ``delta`` transaction per table, Spark reading the generated Parquet and the
product writing it). Nothing generated is kept in the repository: the data goes to a scratch folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

#: The generator executables, in the order they are tried, per benchmark (TPC-H: tpchgen-cli, else
#: the combined tpcgen-cli; TPC-DS: tpcgen-cli).
GENERATORS = {"tpch": (("tpchgen-cli",), ("tpcgen-cli", "tpch")), "tpcds": (("tpcgen-cli", "tpcds"),)}


def generator(kind: str) -> list[str] | None:
    """The command line prefix that generates ``kind`` ("tpch" or "tpcds") data, or None when no
    generator package is installed (the ``bench`` extra)."""
    bindir = Path(sys.executable).parent
    for exe, *sub in GENERATORS[kind]:
        path = shutil.which(exe) or (str(bindir / exe) if (bindir / exe).exists() else None)
        if path:
            return [path, *sub]
    return None


def generate(kind: str, scale: float, dest: Path, *, parts: int = 1) -> tuple[Path, float]:
    """Generate ``kind`` data at ``scale`` as Parquet under ``dest`` (reused when a previous run with the
    same parameters completed); returns the folder and the seconds generation took (0 when reused).

    Raises:
        RuntimeError: no generator is installed, or it failed.
    """
    cmd = generator(kind)
    if cmd is None:
        raise RuntimeError(f"no {kind} generator: pip install -e '.[bench]' (tpcgen-cli / tpchgen-cli)")
    out = dest / f"{kind}-sf{scale:g}-p{parts}"
    done = out / "_GENERATED"
    if done.exists():
        return out, 0.0
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    args = [*cmd, "parquet", "-s", f"{scale:g}", "--output-dir", str(out)]
    if parts > 1:
        args += ["--parts", str(parts)]
    t0 = time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"{' '.join(args)} failed: {res.stderr[-2000:]}")
    done.write_text(" ".join(args))
    return out, time.perf_counter() - t0


def table_files(folder: Path) -> dict[str, list[Path]]:
    """Table name -> its Parquet files in a generated folder (``t.parquet`` or ``t/t.<part>.parquet``)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(folder.iterdir()):
        if p.is_dir():
            files = sorted(p.glob("*.parquet"))
            if files:
                out[p.name] = files
        elif p.suffix == ".parquet":
            out[p.stem] = [p]
    out.pop("dbgen_version", None)  # the generator's own bookkeeping, not a benchmark table
    return out


def delta_schema(files: list[Path]) -> pa.Schema:
    """The table's schema for ``create_table``: the generated columns, all nullable, view types as
    plain ones (what Spark reads the Parquet as)."""
    fields = []
    for f in pq.read_schema(files[0]):
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.schema(fields)


def load(lh: Any, folder: Path, tables: list[str] | None = None) -> dict[str, Any]:
    """Create every generated table in ``lh`` and fill it through the product: a ``delta`` transaction
    per table inserts the Spark DataFrame of the generated files. Returns per table rows, data files
    and seconds."""
    spark = lh.spark
    got: dict[str, Any] = {}
    for name, files in table_files(folder).items():
        if tables is not None and name not in tables:
            continue
        t0 = time.perf_counter()
        schema = delta_schema(files)
        lh.create_table(name, schema)
        frame = spark.read.parquet(*["file:" + os.fspath(f) for f in files]).select(*schema.names)
        txn = lh.begin("delta", timeout_s=3600)
        rows = txn.insert(name, frame)
        txn.commit()
        snap = lh.snapshot(name)
        got[name] = {"rows": rows, "files": snap.num_files, "bytes": snap.size_bytes,
                     "seconds": round(time.perf_counter() - t0, 2)}
    return got


def plain_views(lh: Any, tables: list[str]) -> dict[str, int]:
    """Plain Spark over the same data: a temporary view per table reading, as Parquet, exactly the
    data files of the table's latest snapshot (no Delta log, no LakeVilla). Returns the version read."""
    from lv_core.engine import api
    from lv_core.engine.spark_schema import spark_schema

    eng = api.engine(lh)
    spark = lh.spark
    versions = {}
    for name in tables:
        snap = lh.snapshot(name)
        urls = [eng.url(f"{name}/{p}") for p in snap.files]
        # the schema given, as LakeVilla's own scan does: no footer inference per query
        spark.read.schema(spark_schema(snap.schema)).parquet(*urls).createOrReplaceTempView(name)
        versions[name] = snap.version
    return versions


@dataclass
class Loaded:
    """Generated data loaded as Delta tables in a scratch warehouse, with Lakehouses open on it."""

    folder: Path  #: the generated Parquet
    warehouse: Path
    lakehouses: list[Any]  #: the first one loaded the tables
    timings: dict[str, float] = field(default_factory=dict)  #: generate_s, spark_start_s, load_s
    tables: dict[str, Any] = field(default_factory=dict)  #: per table, what :func:`load` returns


@contextmanager
def loaded(kind: str, scale: float, workdir: Path, *, parts: int, spark_conf: dict[str, str],
           tables: list[str] | None = None, connections: int = 1, keep: bool = False) -> Iterator[Loaded]:
    """The set-up the workload benchmarks share (``tpcds.py``, ``cab.py``): generate ``kind`` data (reused
    when already generated), open ``connections`` Lakehouses on a fresh warehouse under ``workdir`` (one
    Spark server, started and timed here so the first measurement does not pay it), load the tables
    through the first; on exit close them and remove the warehouse (unless ``keep``)."""
    import lv_core
    from benchmarks.common import log

    folder, gen_s = generate(kind, scale, workdir, parts=parts)
    wh = workdir / f"wh-{os.getpid()}"
    shutil.rmtree(wh, ignore_errors=True)
    lhs = [lv_core.connect(str(wh), spark_conf=spark_conf) for _ in range(connections)]
    try:
        got = Loaded(folder, wh, lhs, {"generate_s": round(gen_s, 2)})
        t0 = time.perf_counter()
        lhs[0].spark.sql("SELECT 1").collect()
        got.timings["spark_start_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        got.tables = load(lhs[0], folder, tables)
        got.timings["load_s"] = round(time.perf_counter() - t0, 2)
        log(f"{kind}: loaded {len(got.tables)} tables in {got.timings['load_s']} s "
            f"({sum(t['rows'] for t in got.tables.values()):,} rows)")
        yield got
    finally:
        for lh in lhs:
            lh.close()
        if not keep:
            shutil.rmtree(wh, ignore_errors=True)
