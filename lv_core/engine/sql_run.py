"""SQL statements as re-executable transaction operations, computed by Spark: SELECT, INSERT and
copy-on-write UPDATE/DELETE (MERGE: :mod:`lv_core.engine.sql_merge`).

Every run of an operation (first execution, or a redo on a newer state) binds each table reference
to the transaction's current view of that table (``ctx.files``: its snapshot plus its own writes)
through a :class:`RunScope`, which records the files read per table (``reads``) and the tables
scanned (``scans``): the conflict checks and R1 see exactly what the statement used.

- SELECT is *exposed* (its result reaches the caller). Its value is a :class:`SqlRead`: the lazy
  DataFrame plus the exact data files it reads per table; two values are equal when they read the
  same files. Same files means the same rows, so a redo that reads other files counts as a change
  and aborts with ``exposed_read`` (conservative, like :class:`~lv_core.engine.spark_ops.TableRead`,
  and cheap: nothing is collected to compare). The DataFrame stays valid after later statements
  and after the commit (see :mod:`lv_core.engine.sql_bind`), as long as its files exist.
- INSERT/UPDATE/DELETE/MERGE are not exposed: their inputs stay inside Spark, so when a
  predecessor changes a table they read (also through a subquery) they are redone at commit. Their
  value is the row counts of the execution; the one-row DataFrame ``sql()`` returned shows the first
  execution's counts (a redo may change them).
- UPDATE/DELETE: candidate files by data skipping on the WHERE clause; one Spark query finds the
  files that really hold matching rows; only those are rewritten (remove + add). Subqueries in SET
  and WHERE may read any table (the target too: then every target file counts as read).
- Types (INSERT values, SET expressions, MERGE values) follow Spark's ANSI store assignment: lossless
  types pass, numbers narrow with a range check, atomic values become strings, dates and timestamps
  convert; anything else is a :class:`~lv_core.errors.SchemaError` naming the column.
- A statement that fails writes nothing (files staged by the failed run are deleted by
  ``Transaction.execute``) and leaves the transaction usable.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional

import pyarrow as pa

from lv_core.delta.colmap import column_mapping
from lv_core.delta.dv import live_records
from lv_core.delta.features import check_identity_update, check_writable
from lv_core.engine import cdf
from lv_core.engine.skipping import file_filter
from lv_core.engine.spark_io import FILE_COL, SparkEngine
from lv_core.engine.spark_schema import NOT_NULL_TAG, col, fits, nullable_type, spark_errors, spark_schema
from lv_core.engine.spark_views import pinned_view, views_for
from lv_core.engine.sql_ast import SqlError, Statement, UpdateSpec
from lv_core.engine.sql_bind import Renderer, has_subquery, q, skip_text
from lv_core.engine.sql_cols import referenced
from lv_core.errors import ConfigError, EngineError, LvError, SchemaError
from lv_core.txn.context import OpContext
from lv_core.txn.ops import Operation, OpResult

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["RunScope", "SqlRead", "assign", "dml_op", "insert_op", "select_op", "sql_errors"]


# ---------------------------------------------------------------------------------------- errors

_SCHEMA_KEYS = ("UNRESOLVED_COLUMN", "DATATYPE_MISMATCH", "FIELD_NOT_FOUND", "INVALID_EXTRACT", "AMBIGUOUS_REFERENCE",
                "INCOMPATIBLE_DATA", "CAST_INVALID_INPUT", "CANNOT_PARSE")
_USER_ERRORS = ("AnalysisException", "ParseException", "ArithmeticException", "NumberFormatException",
                "DateTimeException", "IllegalArgumentException")


def _clean(msg: str) -> str:
    """One readable line: no SQLSTATE, no position inside the generated query, no bound names."""
    msg = msg.split("\n\nJVM stacktrace:")[0].strip().splitlines()[0] if msg.strip() else msg
    msg = re.sub(r"_pyspark_connect_temp_view_[0-9a-f]+", "<table>", msg)
    msg = re.sub(r"lvref[0-9a-f]+x\d+y|lv_pinned_[0-9a-f]+", "<table>", msg)
    msg = re.sub(r"\s*SQLSTATE: \w+", "", msg)
    msg = re.sub(r";?\s*line \d+,? pos(?:ition)? \d+;?", "", msg)
    return msg.strip().rstrip(";").strip()


@contextlib.contextmanager
def sql_errors(what: str) -> Iterator[None]:
    """Spark errors of a SQL statement as LvErrors with one clean line: unknown columns and type
    errors -> SchemaError; other analysis, parse and data errors (division by zero, overflow) ->
    SqlError; our run-time data checks -> SchemaError; anything else as :func:`spark_errors` does."""
    try:  # pyspark's own record of the error (with the JVM stack trace) goes to the client log (session.py)
        yield
    except EngineError as e:  # a Spark failure inside the engine: the user's data or SQL may be the cause
        if e.__cause__ is not None and _user_error(e.__cause__):
            raise _translate(e.__cause__, what) from None
        raise
    except LvError:
        raise
    except Exception as e:  # translated below
        if _user_error(e):
            raise _translate(e, what) from None
        try:
            with spark_errors(what):
                raise
        except LvError as le:
            raise type(le)(_clean(str(le))) from None


def _user_error(e: BaseException) -> bool:
    name = type(e).__name__
    analysis = name in ("AnalysisException", "ParseException")  # their plan text may quote our checks
    return ((type(e).__module__ or "").startswith("pyspark") and name in _USER_ERRORS
            and (analysis or NOT_NULL_TAG not in str(e)))


def _translate(e: BaseException, what: str) -> LvError:
    full = str(e)
    cls = SchemaError if any(k in full for k in _SCHEMA_KEYS) else SqlError
    return cls(f"{what}: {_clean(full)}")


# ---------------------------------------------------------------------------------------- binding


@dataclass(frozen=True)
class Pinned:
    """A table bound through the session's view of its committed version (see
    :mod:`lv_core.engine.spark_views`)."""

    name: str


@dataclass(eq=False)
class SqlRead:
    """What a SELECT returned: the DataFrame and the exact files it reads per table (the part a
    redo compares)."""

    files: Mapping[str, frozenset[tuple[str, int]]]  #: table -> (path, size) of every data file read
    df: "DataFrame" = field(repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SqlRead) and dict(self.files) == dict(other.files)

    __hash__ = None  # type: ignore[assignment]


class RunScope:
    """One run of a statement: binds table references to the transaction's current view and
    records what was read.

    Args:
        engine: the data engine.
        ctx: the operation context of this run.
        names: table name as written in the statement -> the table's real name.
        what: the statement, for error messages (e.g. ``"UPDATE bank_x"``).
        exact: bind tables with their exact schema (user-facing results) instead of plain scans.
    """

    def __init__(self, engine: SparkEngine, ctx: OpContext, names: Mapping[str, str], what: str, *,
                 exact: bool = False, columns: Optional[frozenset[str]] = None) -> None:
        self.engine, self.ctx, self.names, self.what, self.exact = engine, ctx, names, what, exact
        self.columns = columns  # the only columns the statement can name (None: any), see sql_cols
        self.reads: dict[str, set[str]] = {}
        self.scans: set[str] = set()
        self.files: dict[str, frozenset[tuple[str, int]]] = {}
        self.cache: dict[str, pa.Table] = {}  # arrow path: file contents already fetched
        self._frames: dict[str, Any] = {}

    @property
    def spark(self) -> Any:
        return self.engine.spark

    def real(self, written: str) -> str:
        """The real name of a table as written in the statement (resolved before the run)."""
        if written in self.names:
            return self.names[written]
        for k, v in self.names.items():
            if k.lower() == written.lower():
                return v
        raise SqlError(f"{self.what}: table {written!r} was not resolved; this is a bug in the SQL layer")

    def table(self, written: str) -> Any:
        """The whole table as this transaction sees it now (recorded as read): a DataFrame, or for an
        exact scope over a committed version the :class:`Pinned` view holding it."""
        t = self.real(written)
        df = self._frames.get(t)
        if df is None:
            snap = self.ctx.snapshot(t)
            view = self.ctx.files(t)
            files = sorted(view.values(), key=lambda f: f.path)
            with sql_errors(self.what):
                if self.exact and (name := pinned_view(self.engine, snap, view, self)) is not None:
                    df = Pinned(name)
                elif self.exact:
                    df = self.engine.read(t, snap, files, columns=self.columns)
                else:
                    df = self.engine.scan(t, snap, files, cache=self.cache, columns=self.columns)
            self._frames[t] = df
            self.reads.setdefault(t, set()).update(f.path for f in files)
            self.scans.add(t)
            self.files[t] = frozenset((f.path, f.size) for f in files)
        return df

    def sql(self, text: str, renderer: Renderer, frames: Optional[Mapping[str, Any]] = None) -> "DataFrame":
        """Run ``text`` (rendered by ``renderer``) with its placeholders bound; analysed eagerly. Tables
        held by views are named in the text; if the session lost one of them (dropped behind our back)
        it is made again and the statement analysed once more."""
        for again in (False, True):
            kwargs = renderer.bind(self.table, dict(frames or {}))
            views = {k: v.name for k, v in kwargs.items() if isinstance(v, Pinned)}
            run = renderer.with_views(text, views) if views else text
            kwargs = {k: v for k, v in kwargs.items() if k not in views}
            if not kwargs:
                run = run.replace("{{", "{").replace("}}", "}")
            with sql_errors(self.what):
                df = self._analysed(run, kwargs, () if again else views.values())
            if df is not None:
                if views:  # the views outlive every DataFrame built on this one (they hold its plan)
                    views_for(self.spark).hold(getattr(df, "_plan", df), views.values())
                return df
            views_for(self.spark).forget(views.values())
            self._frames = {t: f for t, f in self._frames.items() if not isinstance(f, Pinned)}
        raise AssertionError("unreachable")  # pragma: no cover

    def query(self, text: str, renderer: Renderer, frames: Optional[Mapping[str, Any]] = None) -> "DataFrame":
        """:meth:`sql` without analysing now, for a query the caller runs at once inside :func:`sql_errors`
        (Spark reports its errors at that first action): one Spark Connect round trip fewer, about 50 ms on
        a local server. Never for a DataFrame handed to the user (SELECT), whose errors belong to the
        statement; a query over :class:`Pinned` views is analysed now, which re-makes a lost view."""
        kwargs = renderer.bind(self.table, dict(frames or {}))
        if any(isinstance(v, Pinned) for v in kwargs.values()):
            return self.sql(text, renderer, frames)
        return _unanalysed(self.spark, text, kwargs)

    def _analysed(self, text: str, kwargs: Mapping[str, Any], views: Iterable[str]) -> Optional["DataFrame"]:
        """``spark.sql``; None when it failed because one of ``views`` does not exist in the session."""
        try:
            return self.spark.sql(text, **kwargs)
        except Exception as e:  # noqa: BLE001 - anything else is re-raised as is
            msg = str(e)
            if "TABLE_OR_VIEW_NOT_FOUND" in msg and any(v in msg for v in views):
                return None
            raise

    def result(self, value: Any, **kw: Any) -> OpResult:
        reads = {t: set(v) for t, v in self.reads.items()}
        for t, v in kw.pop("reads", {}).items():
            reads.setdefault(t, set()).update(v)
        return OpResult(value=value, reads=reads, scans=set(self.scans) | set(kw.pop("scans", ())), **kw)


def _unanalysed(spark: Any, text: str, kwargs: Mapping[str, Any]) -> "DataFrame":
    """``spark.sql(text, **kwargs)`` as a plan, without the round trip in which Spark Connect's
    ``sql()`` analyses it (the same ``SQL`` relation, with each bound DataFrame as a query-scoped alias,
    is what that call returns for a query). A classic session analyses locally: plain ``sql()``."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.sql_formatter import SQLStringFormatter

    if not isinstance(spark, ConnectSession):
        return spark.sql(text, **kwargs)
    if not kwargs:
        return ConnectFrame(SQL(text.replace("{{", "{").replace("}}", "}")), spark)
    formatter = SQLStringFormatter(spark)
    text = formatter.format(text, **kwargs)
    return ConnectFrame(SQL(text, views=[SubqueryAlias(df._plan, name) for df, name in formatter._temp_views]),
                        spark)


# ---------------------------------------------------------------------------------------- types

_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")
_STRINGS = ("StringType", "CharType", "VarcharType")
_TIMES = ("DateType", "TimestampType", "TimestampNTZType")
_COMPLEX = ("StructType", "ArrayType", "MapType", "BinaryType")


def assign(c: "Column", src: Any, target: Any, what: str) -> "Column":
    """``c`` (of Spark type ``src``) stored into column ``target`` (a StructField), by Spark's ANSI
    store assignment. Raises SchemaError (naming the column) when the type cannot be stored."""
    from pyspark.sql import functions as F

    dst = nullable_type(target.dataType)
    s, d = type(src).__name__, type(dst).__name__
    if fits(src, dst):
        return c if nullable_type(src) == dst else c.cast(dst)
    if (s in _NUMERIC and d in _NUMERIC) or (s in _STRINGS and d in _TIMES):
        t = c.try_cast(dst)
        msg = f"{NOT_NULL_TAG} {what}: a value does not fit column {target.name!r} ({dst.simpleString()})"
        return F.when(c.isNotNull() & t.isNull(), F.raise_error(F.lit(msg))).otherwise(t)
    if (d in _STRINGS and s not in _COMPLEX) or (s in _TIMES and d in _TIMES):
        return c.cast(dst)
    raise SchemaError(f"{what}: column {target.name!r} is {dst.simpleString()}; the value is {src.simpleString()}, "
                      "which cannot be stored in it. Help: CAST the value, or fix the column order.")


def target_fields(schema: Any) -> dict[str, Any]:
    """Lower-case name -> StructField of a table's Spark schema (in table order)."""
    return {f.name.lower(): f for f in schema.fields}


def resolve_column(fields: Mapping[str, Any], name: str, table: str, what: str) -> Any:
    f = fields.get(name.lower())
    if f is None:
        raise SchemaError(f"{what}: table {table!r} has no column {name!r}; its columns are "
                          f"{', '.join(x.name for x in fields.values())}")
    return f


def _unique(names: Mapping[str, str], written: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names[w] for w in written))


# ---------------------------------------------------------------------------------------- SELECT


def select_op(engine: SparkEngine, st: Statement, names: Mapping[str, str]) -> Operation:
    """An exposed read: the query's DataFrame over the transaction's view of every table it names."""

    def run(ctx: OpContext) -> OpResult:
        scope = RunScope(engine, ctx, names, "SELECT", exact=True, columns=referenced(st.tree))
        r = Renderer()
        df = scope.sql(r.expr(st.tree), r)
        return scope.result(SqlRead(dict(scope.files), df))

    return Operation("select", _unique(names, st.sources), run, logical={"sql": st.text}, exposed=True,
                     reads_only=True)


# ---------------------------------------------------------------------------------------- INSERT


def insert_op(engine: SparkEngine, st: Statement, names: Mapping[str, str]) -> Operation:
    """INSERT INTO t [(cols)] VALUES ... | query: by position; a blind append unless it reads tables."""
    spec = st.spec
    target = names[spec.target]
    what = f"INSERT INTO {target}"
    tables = (target, *[t for t in _unique(names, st.sources) if t != target])

    def run(ctx: OpContext) -> OpResult:
        from pyspark.sql import functions as F

        scope = RunScope(engine, ctx, names, what, columns=referenced(spec.query) if spec.rows is None else None)
        snap = ctx.snapshot(target)
        check_writable(snap.protocol, snap.metadata, table=target)  # refuse before any Spark work
        fields = target_fields(spark_schema(snap.schema))
        cols = ([resolve_column(fields, c, target, what).name for c in spec.columns] if spec.columns is not None
                else [f.name for f in fields.values()])
        r = Renderer()
        if spec.rows is not None:
            width = len(spec.rows[0])
            if width != len(cols):
                raise SchemaError(f"{what}: {width} value(s) per row for {len(cols)} column(s) ({', '.join(cols)})")
            if any(has_subquery(e) for row in spec.rows for e in row):
                text = " UNION ALL ".join("SELECT " + ", ".join(f"{r.expr(e)} AS `c{i}`" for i, e in enumerate(row))
                                          for row in spec.rows)
            else:
                text = ("SELECT * FROM VALUES " + ", ".join("(" + ", ".join(r.expr(e) for e in row) + ")"
                                                           for row in spec.rows)
                        + f" AS __lv_values({', '.join(f'c{i}' for i in range(width))})")
        else:
            text = r.expr(spec.query)
        src = scope.query(text, r)
        with sql_errors(what):
            schema = src.schema
        if len(schema.fields) != len(cols):
            raise SchemaError(f"{what}: the query gives {len(schema.fields)} column(s) for {len(cols)} column(s) "
                              f"({', '.join(cols)})")
        src = src.toDF(*[f"__lv_c{i}" for i in range(len(cols))])
        given = {c: (f"__lv_c{i}", schema.fields[i].dataType) for i, c in enumerate(cols)}
        missing = [f.name for f in fields.values() if not f.nullable and f.name not in given]
        if missing:
            raise SchemaError(f"{what}: column(s) {', '.join(map(repr, missing))} are NOT NULL and get no value; "
                              "add them to the column list")
        out = []
        for f in fields.values():
            if f.name in given:
                name, dtype = given[f.name]
                out.append(assign(F.col(name), dtype, f, what).alias(f.name))
            else:
                out.append(F.lit(None).cast(nullable_type(f.dataType)).alias(f.name))
        with sql_errors(what):
            adds = engine.write(ctx, target, src.select(*out))
        changes: dict[str, Any] = {}
        if cdf.enabled(snap):
            with sql_errors(what):
                changes = {"cdc": {target: engine.write_inserted(ctx, target, adds)}, "cdc_implied": {target}}
        return scope.result(sum(a.num_records or 0 for a in adds), adds={target: adds}, **changes)

    return Operation("insert", tables, run, logical={"sql": st.text}, blind=not st.sources)


# ---------------------------------------------------------------------------------------- UPDATE / DELETE


def dml_op(engine: SparkEngine, st: Statement, names: Mapping[str, str]) -> Operation:
    """Copy-on-write UPDATE/DELETE whose SET and WHERE may use (correlated) subqueries over any table."""
    spec = st.spec
    is_update = isinstance(spec, UpdateSpec)
    target = names[spec.target]
    what = f"{'UPDATE' if is_update else 'DELETE FROM'} {target}"
    sources = _unique(names, st.sources)
    tables = (target, *[t for t in sources if t != target])
    reads_whole_target = target in sources  # a subquery reads the target table itself
    skip = skip_text(spec.where, spec.alias, spec.target)

    def run(ctx: OpContext) -> OpResult:
        from pyspark.sql import functions as F

        scope = RunScope(engine, ctx, names, what)
        snap = ctx.snapshot(target)
        check_writable(snap.protocol, snap.metadata, table=target)
        fields = target_fields(spark_schema(snap.schema))
        sets: list[tuple[Any, Any]] = []
        if is_update:
            seen: set[str] = set()
            for name, e in spec.sets:
                f = resolve_column(fields, name, target, what)
                if f.name in seen:
                    raise ConfigError(f"{what}: column {f.name!r} is assigned twice")
                seen.add(f.name)
                sets.append((f, e))
            check_identity_update(snap.metadata, seen, target)
        view = ctx.files(target)
        may_match = file_filter(skip, snap.schema, snap.partition_columns, column_mapping(snap).names)
        candidates = sorted((f for f in view.values() if may_match(f)), key=lambda f: f.path)
        r = Renderer()
        alias = q(spec.alias)
        cond = f"({r.expr(spec.where)})" if spec.where is not None else "TRUE"
        exprs = [r.expr(e) for _, e in sets]
        tkey = r.frame("target")
        changes = cdf.enabled(snap)
        named = None if changes else referenced(spec.where, *[e for _, e in sets])  # CDF checks read every column
        single = len(candidates) == 1 and not changes  # data skipping left one file: no per-row file column
        frames = {"target": engine.scan(target, snap, candidates, file_col=not single, cache=scope.cache,
                                        columns=named)}
        types = []
        if is_update:  # type-check SET before touching data: a bad type fails the same way on any data
            probe = scope.query(f"SELECT {', '.join(f'({e}) AS `__lv_s{i}`' for i, e in enumerate(exprs))} "
                                f"FROM {tkey} AS {alias}", r, frames)
            with sql_errors(what):
                types = [x.dataType for x in probe.schema.fields]
            for (f, _), t in zip(sets, types, strict=False):
                assign(F.lit(None), t, f, what)  # raises SchemaError for an impossible type
        extra: dict[str, Any] = {"reads": {target: {f.path for f in candidates}}, "scans": {target},
                                 "adds": {target: []}, "removes": {target: []}}
        if not reads_whole_target:
            extra["may_match"] = {target: may_match}
        if not candidates:  # no row can match: what subqueries would read cannot change that
            return scope.result(0, **extra)
        if not is_update and spec.where is None and not changes and all(f.num_records is not None for f in candidates):
            extra["reads"] = {target: set()}  # DELETE of everything: metadata only, like Delta
            extra["removes"] = {target: [f.remove() for f in candidates]}
            return scope.result(sum(live_records(f) or 0 for f in candidates), **extra)
        touched: dict[str, int] = {}
        if single:
            hits = scope.query(f"SELECT count(*) AS n FROM {tkey} AS {alias} WHERE {cond}", r, frames)
            with sql_errors(what):
                n = int(hits.collect()[0]["n"])
            if n:
                touched[candidates[0].path] = n
        else:
            hits = scope.query(f"SELECT `{FILE_COL}` AS f, count(*) AS n FROM {tkey} AS {alias} WHERE {cond} "
                               f"GROUP BY `{FILE_COL}`", r, frames)
            with sql_errors(what):
                rows = hits.collect()
            resolve = engine.file_of(target, candidates)
            for row in rows:
                path = resolve(row["f"])
                if path is None:
                    raise SqlError(f"{what}: Spark reported rows from an unknown file {row['f']!r}")
                touched[path] = int(row["n"])
        if not touched:
            return scope.result(0, **extra)
        files = [view[p] for p in sorted(touched)]
        with sql_errors(what):
            cdf.check_staged(engine, ctx, target, files, lambda staged: scope.query(
                f"SELECT * FROM {tkey} AS {alias} WHERE coalesce({cond}, false)", r, frames)
                .where(F.col(FILE_COL).isin(*[f.path for f in staged])), what)
        skey = r.frame("rewrite")
        frames["rewrite"] = engine.scan(target, snap, files, cache=scope.cache)
        if is_update:
            sel = ", ".join([f"{alias}.*", f"{cond} AS `__lv_hit`",
                             *[f"CASE WHEN {cond} THEN ({e}) END AS `__lv_s{i}`" for i, e in enumerate(exprs)]])
            raw = scope.query(f"SELECT {sel} FROM {skey} AS {alias}", r, frames)
            assigned = {f.name: (i, t) for i, ((f, _), t) in enumerate(zip(sets, types, strict=False))}
            out_cols = []
            for f in fields.values():
                if f.name in assigned:
                    i, t = assigned[f.name]
                    new = assign(F.col(f"__lv_s{i}"), t, f, what)
                    out_cols.append(F.when(F.col("__lv_hit"), new).otherwise(col(f.name)).alias(f.name))
                else:
                    out_cols.append(col(f.name))
            out = raw.select(*out_cols)
            if changes:  # the matched rows of the same scan, before and after
                hit = raw.where(F.coalesce(F.col("__lv_hit"), F.lit(False)))
                old = [col(f.name) for f in fields.values()]
                changed = cdf.tagged(hit, old, "update_preimage").unionByName(
                    cdf.tagged(hit, out_cols, "update_postimage"))
        else:
            out = scope.query(f"SELECT {alias}.* FROM {skey} AS {alias} WHERE NOT coalesce({cond}, false)", r, frames)
            if changes:
                gone = scope.query(f"SELECT {alias}.* FROM {skey} AS {alias} WHERE coalesce({cond}, false)", r, frames)
                changed = cdf.tagged(gone, [col(f.name) for f in fields.values()], "delete")
        with sql_errors(what):
            adds = engine.write(ctx, target, out, rewrite=True, like=files)
            if changes:
                extra["cdc"] = {target: engine.write_changes(ctx, target, changed)}
        extra["adds"] = {target: adds}
        extra["removes"] = {target: [f.remove() for f in files]}
        return scope.result(sum(touched.values()), **extra)

    return Operation("update" if is_update else "delete", tables, run, logical={"sql": st.text})
