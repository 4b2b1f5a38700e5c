"""SQL on the lakehouse: ``txn.sql(statement)`` inside a transaction and ``lh.sql(statement)`` in
autocommit, parsed with sqlglot (Spark dialect) and computed by Spark.

``statement`` may be a script of several statements separated by ``;`` (``;`` inside quotes and
comments does not split). Every statement is parsed before any runs, so a syntax error runs
nothing; then they run in order and the result of the last one is returned:

==========================  =========================================================================
SELECT ...                  a Spark DataFrame (lazy; valid after later statements and the commit)
INSERT INTO ...             one row: ``num_affected_rows``, ``num_inserted_rows``
UPDATE ... / DELETE ...     one row: ``num_affected_rows``
MERGE INTO ...              one row: ``num_affected_rows``, ``num_updated_rows``, ``num_deleted_rows``,
                            ``num_inserted_rows`` (as Delta Lake on Spark returns them)
SHOW TABLES [LIKE 'p*']     ``tableName`` rows
DESCRIBE [TABLE] t          ``col_name``, ``data_type``, ``comment`` rows (+ partition information)
CREATE TABLE ...            None
OPTIMIZE t                  one row: ``numFilesRemoved``, ``numFilesAdded`` (compaction, a
                            ``dataChange: false`` commit; see :mod:`lv_core.engine.sql_maint`)
VACUUM t [RETAIN n HOURS]   one ``path`` row per deleted data file (``DRY RUN``: would delete);
  [DRY RUN]                 not transactional, like CREATE TABLE
BEGIN / COMMIT / ROLLBACK   ``lh.sql`` only: a transaction over the statements between them (also
BEGIN ATOMIC ... END        across calls); see :mod:`lv_core.engine.sql_txn`. None
==========================  =========================================================================

Inside a transaction, SELECT/INSERT/UPDATE/DELETE/MERGE are operations of the transaction
(:mod:`lv_core.engine.sql_run`, :mod:`lv_core.engine.sql_merge`): each table reference is bound to
the transaction's snapshot of that table plus its own writes, recorded for conflict checks and R1,
redone at commit when a predecessor invalidates it; a SELECT shown to the caller that a predecessor
invalidates aborts the commit with rule ``exposed_read``. CREATE TABLE, SHOW TABLES and DESCRIBE
are not transactional: CREATE TABLE takes effect at once (a rollback does not drop the table) and
SHOW/DESCRIBE read the latest committed state.

Errors (all :class:`~lv_core.errors.LvError`): syntax errors with line/column and the offending
text (:class:`~lv_core.engine.sql_ast.SqlError`); unsupported statements listing what is supported
(:class:`~lv_core.engine.sql_ast.UnsupportedStatement`); unknown tables listing the tables that
exist (:class:`~lv_core.errors.TableNotFound`); unknown columns and type mismatches
(:class:`~lv_core.errors.SchemaError`, naming the column). **A failed statement writes nothing and
the transaction remains usable**: the statements before it stay in the transaction, the failed one
left no trace (its staged files are deleted); the caller may go on, commit, or roll back (``%%lvtxn``
rolls the cell's transaction back). In autocommit (``lh.sql``) each statement is its own transaction
under the lakehouse's default preset ``serializable``: a failed statement is rolled back, the ones
before it stay committed, the ones after it do not run; a statement whose commit aborts (R1-R3,
conflict) is re-run in a new transaction up to ``retries`` times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from lv_core.engine import progress
from lv_core.engine.spark_io import SparkEngine
from lv_core.engine.spark_schema import spark_schema
from lv_core.engine.sql_ast import SUPPORTED, BoundStatement, SqlError, Statement, UnsupportedStatement
from lv_core.engine.sql_bind import Renderer
from lv_core.engine.sql_maint import optimize_op, vacuum_sql
from lv_core.engine.sql_merge import merge_op
from lv_core.engine.sql_parse import parse_script, show_matches
from lv_core.engine.sql_run import dml_op, insert_op, select_op, sql_errors
from lv_core.engine.sql_txn import TxnControl, check_blocks
from lv_core.errors import TableNotFound, TransactionAborted
from lv_core.txn.ports import LakehousePort, TransactionPort

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["SUPPORTED", "SqlError", "SqlSession", "UnsupportedStatement", "autocommit_sql", "resolve_tables",
           "run_bound", "txn_sql"]

#: Gives the engine (starting Spark on first use: DDL never needs it).
EngineFn = Callable[[], SparkEngine]

_NO_TXN = ("create", "show", "describe", "vacuum")


def txn_sql(lh: LakehousePort, engine: EngineFn, txn: TransactionPort, statement: str) -> Optional["DataFrame"]:
    """``Transaction.sql``: run the statement(s) inside ``txn``; returns the last one's result."""
    txn.ensure_active()
    statements = parse_script(statement)
    for st in statements:
        if st.kind == "txn":
            raise UnsupportedStatement(f"line {st.line}: {st.text.split()[0].upper()} inside a transaction: this "
                                       "statement already runs in one; end it with %%lvtxn or txn.commit()/"
                                       "txn.rollback()", line=st.line, text=st.text)
    result = None
    for number, st in enumerate(statements, 1):
        result = _run(lh, engine, txn, st, number)
    return result


def run_bound(lh: LakehousePort, engine: EngineFn, txn: Optional[TransactionPort], st: BoundStatement,
              number: int = 1) -> Optional["DataFrame"]:
    """Run one statement that was parsed and bound before anything ran (a notebook cell's), as
    ``txn.sql`` runs it, without parsing it or looking its tables up again. ``txn`` None: a
    statement that needs no transaction (CREATE TABLE, SHOW, DESCRIBE, VACUUM, a SELECT of no table)."""
    if txn is not None:
        txn.ensure_active()
    return _run(lh, engine, txn, st, number)


class SqlSession:
    """The explicit transaction of ``BEGIN ... COMMIT`` across ``lh.sql`` calls (one per lakehouse)."""

    def __init__(self) -> None:
        self.txn: Optional[TransactionPort] = None


def autocommit_sql(lh: LakehousePort, engine: EngineFn, statement: str, *,
                   retries: int = 3, session: Optional[SqlSession] = None) -> Optional["DataFrame"]:
    """``Lakehouse.sql``: each statement in its own transaction (preset ``serializable``), committed
    before the next runs; DDL, SHOW and DESCRIBE need none. Returns the last statement's result.

    ``BEGIN [ISOLATION LEVEL p]`` opens ``session``'s transaction: the statements after it run in
    it until ``COMMIT``/``ROLLBACK`` (also in later calls); a ``BEGIN ATOMIC ... END`` block is one
    transaction that a failing statement rolls back (see :mod:`lv_core.engine.sql_txn`)."""
    statements = parse_script(statement)
    check_blocks(statements)
    sess = session if session is not None else SqlSession()
    result = None
    for number, st in enumerate(statements, 1):
        if st.kind == "txn":
            _control(lh, sess, st)
            result = None
            continue
        if sess.txn is not None:
            try:
                result = _run(lh, engine, sess.txn, st, number)
            except BaseException:
                if _in_atomic(statements, number):
                    txn, sess.txn = sess.txn, None
                    txn.rollback()
                raise
            continue
        if st.kind in _NO_TXN or (st.kind == "select" and not st.sources):
            result = _run(lh, engine, None, st, number)
            continue
        for attempt in range(retries + 1):
            txn = lh.begin()
            try:
                result = _run(lh, engine, txn, st, number)
                txn.commit()
                break
            except TransactionAborted:
                txn.rollback()  # no-op when the commit already aborted it
                if attempt >= retries:
                    raise
            except BaseException:
                txn.rollback()
                raise
    return result


def _control(lh: LakehousePort, sess: SqlSession, st: Statement) -> None:
    c: TxnControl = st.spec
    if c.action == "begin":
        if sess.txn is not None:
            raise SqlError(f"line {st.line}: BEGIN while a transaction is open; COMMIT or ROLLBACK it first",
                           line=st.line)
        sess.txn = lh.begin(c.preset or "serializable")
        return
    if sess.txn is None:
        raise SqlError(f"line {st.line}: {c.action.upper()} without a transaction (no BEGIN before it)", line=st.line)
    txn, sess.txn = sess.txn, None
    if c.action == "commit":
        txn.commit()
    else:
        txn.rollback()


def _in_atomic(statements: list[Statement], number: int) -> bool:
    """Whether statement ``number`` (1-based) is inside a BEGIN ATOMIC block."""
    inside = False
    for st in statements[:number]:
        if st.kind == "txn":
            inside = st.spec.action == "begin" and st.spec.atomic
    return inside


def resolve_tables(lh: LakehousePort, written: tuple[str, ...]) -> dict[str, str]:
    """Table names as written -> real names (exact, else a unique case-insensitive match).

    Raises:
        TableNotFound: naming the tables that do exist.
    """
    out: dict[str, str] = {}
    listing: Optional[list[str]] = None
    for w in written:
        if lh.has_table(w):
            out[w] = w
            continue
        listing = lh.list_tables() if listing is None else listing
        same = [t for t in listing if t.lower() == w.lower()]
        if len(same) == 1:
            out[w] = same[0]
            continue
        have = f"the lakehouse has: {', '.join(listing)}" if listing else "the lakehouse has no tables yet"
        raise TableNotFound(f"table {w!r} does not exist; {have}. Help: CREATE TABLE {w} (...) first, or check "
                            "the name.")
    return out


def _names(lh: LakehousePort, st: Statement, written: tuple[str, ...]) -> dict[str, str]:
    """The lakehouse's names of the tables ``st`` writes as ``written``: bound already, or looked up now."""
    if isinstance(st, BoundStatement):
        return {w: st.names[w] for w in written}
    return resolve_tables(lh, written)


def _run(lh: LakehousePort, engine_fn: EngineFn, txn: Optional[TransactionPort], st: Statement,
         number: int = 1) -> Optional["DataFrame"]:
    if st.kind == "create":
        s = st.spec
        lh.create_table(s.name, s.ddl, s.partition_by or None, if_not_exists=s.if_not_exists, description=s.description,
                        properties=s.properties or None)
        return None
    if st.kind == "show":
        shown = [t for t in lh.list_tables() if show_matches(st.spec.pattern, t)]
        return engine_fn().spark.createDataFrame([(n,) for n in shown], "tableName string")
    if st.kind == "describe":
        return _describe(lh, engine_fn, _names(lh, st, (st.spec.name,))[st.spec.name])
    if st.kind == "vacuum":
        name = _names(lh, st, (st.spec.name,))[st.spec.name]
        return vacuum_sql(lh, engine_fn().spark, name, st.spec.retain_hours, st.spec.dry_run)
    if txn is not None:
        txn.ensure_active()
    engine = engine_fn()
    if txn is None:  # a SELECT that reads no table, in autocommit
        return _no_tables(engine, st)
    with progress.statement(engine.spark, txn, number):
        return _run_in(lh, engine, txn, st)


def _no_tables(engine: SparkEngine, st: Statement) -> "DataFrame":
    text = Renderer().expr(st.tree).replace("{{", "{").replace("}}", "}")
    with sql_errors("SELECT"):
        return engine.spark.sql(text)


def _run_in(lh: LakehousePort, engine: SparkEngine, txn: TransactionPort, st: Statement) -> Optional["DataFrame"]:
    if st.kind == "select" and not st.sources:
        return _no_tables(engine, st)
    names = _names(lh, st, st.tables)
    if st.kind == "select":
        return txn.execute(select_op(engine, st, names)).df
    if st.kind == "insert":
        n = int(txn.execute(insert_op(engine, st, names)))
        return _counts(engine.spark, {"num_affected_rows": n, "num_inserted_rows": n})
    if st.kind in ("update", "delete"):
        return _counts(engine.spark, {"num_affected_rows": int(txn.execute(dml_op(engine, st, names)))})
    if st.kind == "merge":
        return _counts(engine.spark, txn.execute(merge_op(engine, st, names)))
    if st.kind == "optimize":
        name = _names(lh, st, (st.spec.name,))[st.spec.name]
        removed, added = txn.execute(optimize_op(engine, name))
        return _counts(engine.spark, {"numFilesRemoved": removed, "numFilesAdded": added})
    raise UnsupportedStatement(f"{st.kind} is not supported; supported: {SUPPORTED}")  # pragma: no cover


def _counts(spark: Any, values: Mapping[str, int]) -> "DataFrame":
    schema = ", ".join(f"{k} bigint" for k in values)
    return spark.createDataFrame([tuple(int(v) for v in values.values())], schema)


def _describe(lh: LakehousePort, engine_fn: EngineFn, name: str) -> "DataFrame":
    snap = lh.snapshot(name)
    fields = {f.name: f for f in snap.schema}
    rows: list[tuple[str, str, Optional[str]]] = []
    types = {f.name: f.dataType.simpleString() for f in spark_schema(snap.schema).fields}
    for n, f in fields.items():
        comment = f.metadata.get("comment") if isinstance(f.metadata, Mapping) else None
        rows.append((n, types[n], None if comment is None else str(comment)))
    if snap.partition_columns:
        rows += [("# Partition Information", "", None), ("# col_name", "data_type", "comment")]
        rows += [(p, types.get(p, ""), None) for p in snap.partition_columns]
    return engine_fn().spark.createDataFrame(rows, "col_name string, data_type string, comment string")
