"""MERGE INTO as a re-executable transaction operation (copy-on-write, computed by Spark).

``MERGE INTO t [AS a] USING s|(query) AS b ON cond WHEN MATCHED [AND c] THEN UPDATE SET ...|SET * |
DELETE ... WHEN NOT MATCHED [AND c] THEN INSERT (cols) VALUES (...) | INSERT *``, with Delta Lake's
semantics: clauses are tried in order and the first whose condition holds applies; a target row
matched by more than one source row is an error when a clause would update or delete it; ``SET *``
and ``INSERT *`` take source columns by name.

How it runs (one run = first execution or redo):
1. candidate target files: data skipping on the ON conjuncts that only use target columns;
2. one aggregate query over ``target JOIN source`` gives, per candidate file, the rows updated and
   deleted (and detects ambiguous multiple matches); only files with such rows are rewritten;
3. the touched files are rewritten from ``target LEFT JOIN source`` (each target row once);
4. source rows matching no target row (``LEFT ANTI JOIN``) are inserted by the first applicable
   NOT MATCHED clause.
Reads: the candidate target files, and every file of the source tables (also those read by a
source subquery); so a predecessor that changes the source redoes the MERGE at commit.
"""

from __future__ import annotations

from typing import Any, Mapping

from lv_core.delta.colmap import column_mapping
from lv_core.delta.features import check_identity_update, check_writable, identity_columns, identity_refusal
from lv_core.engine import cdf
from lv_core.engine.skipping import file_filter
from lv_core.engine.spark_io import FILE_COL, SparkEngine
from lv_core.engine.spark_schema import col, nullable_type, spark_schema
from lv_core.engine.sql_ast import MergeClause, SqlError, Statement
from lv_core.engine.sql_bind import Renderer, q, target_conjuncts
from lv_core.engine.sql_run import RunScope, assign, resolve_column, sql_errors, target_fields
from lv_core.errors import ConfigError, SchemaError
from lv_core.txn.context import OpContext
from lv_core.txn.ops import Operation, OpResult

__all__ = ["merge_op"]


def _source_sql(spec: Any, r: Renderer) -> str:
    from sqlglot import expressions as exp

    if spec.source_query is not None:
        return r.expr(spec.source_query)
    return r.expr(exp.select("*").from_(exp.Table(this=exp.to_identifier(spec.source_table))))


def merge_op(engine: SparkEngine, st: Statement, names: Mapping[str, str]) -> Operation:
    spec = st.spec
    target = names[spec.target]
    what = f"MERGE INTO {target}"
    sources = tuple(dict.fromkeys(names[w] for w in st.sources))
    tables = (target, *[t for t in sources if t != target])
    skip = target_conjuncts(spec.on, spec.alias)
    matched = [(i + 1, c) for i, c in enumerate(c for c in spec.clauses if c.matched)]
    inserts = [(i + 1, c) for i, c in enumerate(c for c in spec.clauses if not c.matched)]

    def run(ctx: OpContext) -> OpResult:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        scope = RunScope(engine, ctx, names, what)
        snap = ctx.snapshot(target)
        check_writable(snap.protocol, snap.metadata, table=target)
        fields = target_fields(spark_schema(snap.schema))
        view = ctx.files(target)
        may_match = file_filter(skip, snap.schema, snap.partition_columns, column_mapping(snap).names)
        candidates = sorted((f for f in view.values() if may_match(f)), key=lambda f: f.path)
        r = Renderer()
        ta, sa = q(spec.alias), q(spec.source_alias)
        src = f"({_source_sql(spec, r)})"
        on = f"({r.expr(spec.on)})"
        tkey = r.frame("target")
        frames: dict[str, Any] = {"target": engine.scan(target, snap, candidates, file_col=True, cache=scope.cache)}
        with sql_errors(what):
            source_cols = {f.name.lower(): f.name
                           for f in scope.query(f"SELECT * FROM {src} AS {sa}", r, frames).schema.fields}

        def by_name(f: Any) -> str:
            name = source_cols.get(f.name.lower())
            if name is None:
                raise SchemaError(f"{what}: SET * / INSERT * needs a source column {f.name!r}; the source has "
                                  f"{', '.join(source_cols.values())}")
            return f"{sa}.{q(name)}"

        # per clause: [(target field, expression text)]
        plans: dict[int, list[tuple[Any, str]]] = {}
        for code, c in matched:
            if c.action == "update":
                items = ([(f, by_name(f)) for f in fields.values()] if c.sets is None
                         else [(resolve_column(fields, n, target, what), r.expr(e)) for n, e in c.sets])
                if len({f.name for f, _ in items}) != len(items):
                    raise ConfigError(f"{what}: a column is assigned twice in one WHEN MATCHED clause")
                check_identity_update(snap.metadata, [f.name for f, _ in items], target)
                plans[code] = items
        iplans: dict[int, list[tuple[Any, str]]] = {}
        for code, c in inserts:
            if c.values is None:
                iplans[code] = [(f, by_name(f)) for f in fields.values()]
            else:
                cols = c.columns if c.columns is not None else [f.name for f in fields.values()]
                if len(cols) != len(c.values):
                    raise SchemaError(f"{what}: INSERT gives {len(c.values)} value(s) for {len(cols)} column(s)")
                iplans[code] = [(resolve_column(fields, n, target, what), r.expr(e))
                                for n, e in zip(cols, c.values, strict=False)]
        # type-check every assigned expression once, before touching data
        identity = identity_columns(snap.metadata)
        if iplans and identity:  # before any Spark work (the rewrite of matched rows would be wasted)
            raise identity_refusal(target, identity[0], "insert")
        exprs = [e for items in (*plans.values(), *iplans.values()) for _, e in items]
        types: list[Any] = []
        if exprs:
            probe = scope.query(f"SELECT {', '.join(f'({e}) AS `__lv_p{i}`' for i, e in enumerate(exprs))} "
                                f"FROM (SELECT * FROM {tkey}) AS {ta} CROSS JOIN {src} AS {sa}", r, frames)
            with sql_errors(what):
                types = [x.dataType for x in probe.schema.fields]
        it = iter(types)
        typed = {code: [(f, e, next(it)) for f, e in items] for code, items in plans.items()}
        ityped = {code: [(f, e, next(it)) for f, e in items] for code, items in iplans.items()}
        for typed_items in (*typed.values(), *ityped.values()):
            for f, _, t in typed_items:
                assign(F.lit(None), t, f, what)  # raises SchemaError for a type that cannot be stored

        def assigned(plan: Mapping[int, list], action: str, prefix: str, unchanged: Any) -> list[Any]:
            """Every target column: the value the clause chosen by ``action`` assigns it (computed in
            column ``<prefix><code>_<j>``), else ``unchanged(field)``."""
            out = []
            for f in fields.values():
                c = unchanged(f)
                for code, items in plan.items():
                    for j, (g, _, t) in enumerate(items):
                        if g.name == f.name:
                            c = F.when(F.col(action) == code, assign(F.col(f"{prefix}{code}_{j}"), t, f, what)
                                       ).otherwise(c)
                out.append(c.alias(f.name))
            return out

        def case(clauses: list[tuple[int, MergeClause]]) -> str:
            whens = " ".join(f"WHEN ({r.expr(c.condition) if c.condition is not None else 'TRUE'}) THEN {code}"
                             for code, c in clauses)
            return f"(CASE {whens} ELSE 0 END)"

        updated = deleted = inserted = 0
        adds: list[Any] = []
        files: list[Any] = []
        cdc: list[Any] = []
        changes = cdf.enabled(snap)
        if matched and candidates:
            action = case(matched)
            upd = [code for code, c in matched if c.action == "update"] or [-1]
            dele = [code for code, c in matched if c.action == "delete"] or [-1]
            stats = scope.query(
                f"WITH m AS (SELECT {ta}.`{FILE_COL}` AS f, {ta}.`__lv_rid` AS rid, {action} AS a "
                f"FROM (SELECT *, monotonically_increasing_id() AS `__lv_rid` FROM {tkey}) AS {ta} "
                f"JOIN {src} AS {sa} ON {on}), "
                "r AS (SELECT f, rid, count(*) AS k, max(a) AS a FROM m GROUP BY f, rid) "
                "SELECT f, sum(CASE WHEN k > 1 AND a > 0 THEN 1 ELSE 0 END) AS bad, "
                f"sum(CASE WHEN a IN ({', '.join(map(str, upd))}) THEN 1 ELSE 0 END) AS nu, "
                f"sum(CASE WHEN a IN ({', '.join(map(str, dele))}) THEN 1 ELSE 0 END) AS nd FROM r GROUP BY f",
                r, frames)
            with sql_errors(what):
                rows = stats.collect()
            if any(row["bad"] for row in rows):
                raise SqlError(f"{what}: {sum(row['bad'] for row in rows)} target row(s) match more than one source "
                               "row, so which update or delete applies is ambiguous. Help: make the ON condition "
                               "match at most one source row per target row (e.g. aggregate the source first).")
            resolve = engine.file_of(target, candidates)
            touched = []
            for row in rows:
                if row["nu"] or row["nd"]:
                    path = resolve(row["f"])
                    if path is None:
                        raise SqlError(f"{what}: Spark reported rows from an unknown file {row['f']!r}")
                    touched.append(path)
                    updated += int(row["nu"])
                    deleted += int(row["nd"])
            files = [view[p] for p in sorted(touched)]
            with sql_errors(what):
                cdf.check_staged(engine, ctx, target, files, lambda staged: scope.query(
                    f"SELECT {ta}.* FROM {tkey} AS {ta} JOIN {src} AS {sa} ON {on} WHERE {action} > 0", r, frames)
                    .where(F.col(FILE_COL).isin(*[f.path for f in staged])), what)
            if files:
                skey = r.frame("rewrite")
                frames["rewrite"] = engine.scan(target, snap, files, cache=scope.cache)
                cols = [f"{ta}.*", f"CASE WHEN {sa}.`__lv_m` IS NULL THEN 0 ELSE {action} END AS `__lv_a`"]
                for code, items in plans.items():
                    cols += [f"CASE WHEN {sa}.`__lv_m` IS NOT NULL AND {action} = {code} THEN ({e}) END "
                             f"AS `__lv_u{code}_{j}`" for j, (_, e) in enumerate(items)]
                raw = scope.query(
                    f"SELECT {', '.join(cols)} FROM (SELECT *, monotonically_increasing_id() AS `__lv_rid` "
                    f"FROM {skey}) AS {ta} LEFT JOIN (SELECT *, true AS `__lv_m` FROM {src} AS `__lv_src`) AS {sa} "
                    f"ON {on}", r, frames)
                first = Window.partitionBy("__lv_rid").orderBy(F.col("__lv_a").desc())
                ranked = raw.withColumn("__lv_n", F.row_number().over(first)).where(F.col("__lv_n") == 1)
                raw = ranked.where(~F.col("__lv_a").isin(*dele))
                out = assigned(typed, "__lv_a", "__lv_u", lambda f: col(f.name))
                with sql_errors(what):
                    adds += engine.write(ctx, target, raw.select(*out), rewrite=True)
                    if changes:  # the same ranked rows: updated ones before/after, deleted ones
                        old = [col(f.name) for f in fields.values()]
                        upd_rows = ranked.where(F.col("__lv_a").isin(*upd))
                        changed = (cdf.tagged(upd_rows, old, "update_preimage")
                                   .unionByName(cdf.tagged(upd_rows, out, "update_postimage"))
                                   .unionByName(cdf.tagged(ranked.where(F.col("__lv_a").isin(*dele)), old, "delete")))
                        cdc += engine.write_changes(ctx, target, changed)
        if inserts:
            icase = case(inserts)
            cols = [f"{icase} AS `__lv_i`"]
            for code, items in iplans.items():
                cols += [f"CASE WHEN {icase} = {code} THEN ({e}) END AS `__lv_v{code}_{j}`"
                         for j, (_, e) in enumerate(items)]
            raw = scope.query(f"SELECT {', '.join(cols)} FROM {src} AS {sa} LEFT ANTI JOIN "
                              f"(SELECT * FROM {tkey}) AS {ta} ON {on}", r, frames)
            out = assigned(ityped, "__lv_i", "__lv_v", lambda f: F.lit(None).cast(nullable_type(f.dataType)))
            with sql_errors(what):
                new = engine.write(ctx, target, raw.where(F.col("__lv_i") > 0).select(*out))
            inserted = sum(a.num_records or 0 for a in new)
            adds += new
            if changes:
                with sql_errors(what):
                    cdc += engine.write_inserted(ctx, target, new)
        value = {"num_affected_rows": updated + deleted + inserted, "num_updated_rows": updated,
                 "num_deleted_rows": deleted, "num_inserted_rows": inserted}
        # a source that reads the target itself depends on all of it: then any new target file conflicts
        return scope.result(value, reads={target: {f.path for f in candidates}}, scans={target},
                            may_match={} if target in sources else {target: may_match}, adds={target: adds},
                            removes={target: [f.remove() for f in files]}, cdc={target: cdc} if cdc else {})

    return Operation("merge", tables, run, logical={"sql": st.text})
