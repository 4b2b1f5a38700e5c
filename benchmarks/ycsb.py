"""YCSB-LH style workloads (paper sections 6.2-6.3) on one Delta table, client processes in parallel.

A table of ``records`` rows of about 1 KB (``id`` plus ten 100-character fields, as YCSB's
``usertable``), stored ``per_file`` rows per Parquet file. Workloads (YCSB core workloads):

- A: 50% read / 50% update, zipfian      - B: 95% read / 5% update, zipfian
- C: 100% read, zipfian                   - D: 95% read / 5% insert, latest
- F: 50% read / 50% read-modify-write, zipfian

Each client process draws its operations from a seeded generator (seed, workload, client index), so
runs are reproducible in what they do. ``mode`` "single": every YCSB operation is one transaction
(a read-modify-write is one transaction of a read and an update); "bundled": a client's operations
form transactions of ``bundle`` operations (0: all of them in one, as the paper's "single Txn").
An aborted transaction is retried (the whole bundle) up to ``max_retries`` times; aborts are
counted by rule. Systems: the LakeVilla presets and LV[R] alone, the ``delta`` baseline (same code,
LakeVilla off: every operation commits alone), and delta-rs (``deltalake``: its own snapshot
refresh, file skipping, conflict checker and commit retries) as the plain open-table-format peer.

Point operations find the file(s) holding a key through the ``id`` min/max statistics of each data
file (data skipping, as delta-rs and Spark do), and declare exactly that predicate to LakeVilla's
conflict detection (``may_match``, as a :class:`~lv_core.engine.skipping.FileFilter` of ``id = key``: data a
group-commit holder can judge for the owner, docs/PROTOCOL.md), so two updates of different keys in
different files never conflict. Reads are not "exposed" (the YCSB client consumes values only after commit).
"""

from __future__ import annotations

import json
import random
import string
import time
from collections import Counter
from typing import Any, Callable

from benchmarks.common import (
    ClientPool,
    StoreSpec,
    add_counts,
    clone_warehouse,
    delta_rs_uri,
    mean,
    ms,
    open_lakehouse,
    percentile,
    raw_store,
    remove_warehouse,
)

TABLE = "usertable"
FIELDS = [f"f{i}" for i in range(10)]
FIELD_LEN = 100
DDL = "id BIGINT, " + ", ".join(f"{f} STRING" for f in FIELDS)

WORKLOADS: dict[str, dict[str, Any]] = {
    "A": {"mix": {"read": 0.5, "update": 0.5}, "dist": "zipfian"},
    "B": {"mix": {"read": 0.95, "update": 0.05}, "dist": "zipfian"},
    "C": {"mix": {"read": 1.0}, "dist": "zipfian"},
    "D": {"mix": {"read": 0.95, "insert": 0.05}, "dist": "latest"},
    "F": {"mix": {"read": 0.5, "rmw": 0.5}, "dist": "zipfian"},
}

#: system name -> how it begins transactions (None: delta-rs)
SYSTEMS: dict[str, dict[str, Any] | None] = {
    "delta-rs": None,
    "delta": {"preset": "delta"},
    "LV[R]": {"preset": "repeatable_read", "features": ["R"]},
    "repeatable_read": {"preset": "repeatable_read"},
    "serializable": {"preset": "serializable"},
    "snapshot": {"preset": "snapshot"},
    "write_serializable": {"preset": "write_serializable"},
}
FEATURES = {"delta-rs": "-", "delta": "none", "LV[R]": "R", "repeatable_read": "R+CT", "serializable": "R+CT+I",
            "snapshot": "R+CT+I (R2,R3)", "write_serializable": "R+CT+I (RO skip R1)"}
#: systems without multi-statement transactions: "bundled" would be the same as "single"
SINGLE_ONLY = {"delta-rs", "delta"}


# ------------------------------------------------------------------------------------ generators
class Zipfian:
    """YCSB's ZipfianGenerator (Gray et al.), items 0..n-1 with constant ``theta``; ``grow`` extends n."""

    def __init__(self, n: int, rng: random.Random, theta: float = 0.99) -> None:
        self.rng, self.theta = rng, theta
        self.n = 0
        self.zetan = 0.0
        self.zeta2 = 1.0 + 0.5 ** theta
        self.alpha = 1.0 / (1.0 - theta)
        self.grow(n)

    def grow(self, n: int) -> None:
        for i in range(self.n + 1, n + 1):
            self.zetan += 1.0 / (i ** self.theta)
        self.n = n
        self.eta = (1 - (2.0 / n) ** (1 - self.theta)) / (1 - self.zeta2 / self.zetan)

    def next(self) -> int:
        u = self.rng.random()
        uz = u * self.zetan
        if uz < 1.0:
            return 0
        if uz < self.zeta2:
            return 1
        return min(self.n - 1, int(self.n * (self.eta * u - self.eta + 1) ** self.alpha))


def fnv64(x: int) -> int:
    """FNV-1a over the 8 bytes of ``x`` (YCSB scrambles zipfian ranks with an FNV hash)."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        h ^= x & 0xFF
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        x >>= 8
    return h


def field_value(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=FIELD_LEN))


def generate_ops(workload: str, records: int, n_ops: int, client: int, n_clients: int,
                 seed: int) -> list[dict[str, Any]]:
    """The operations of one client: [{kind, key, field, value}], reproducible from the seed."""
    spec = WORKLOADS[workload]
    rng = random.Random(f"{seed}/{workload}/{client}")
    kinds = list(spec["mix"])
    weights = [spec["mix"][k] for k in kinds]
    zipf = Zipfian(records, rng)
    own_inserts: list[int] = []
    ops = []
    for _ in range(n_ops):
        kind = rng.choices(kinds, weights)[0]
        op: dict[str, Any] = {"kind": kind}
        if kind == "insert":
            key = records + client + n_clients * len(own_inserts)
            own_inserts.append(key)
            op["key"] = key
            op["values"] = [field_value(rng) for _ in FIELDS]
        else:
            if spec["dist"] == "latest":  # recent keys are hot: this client's inserts, then the newest loaded
                existing = list(range(records)) + own_inserts
                if zipf.n < len(existing):
                    zipf.grow(len(existing))
                key = existing[len(existing) - 1 - zipf.next()]
            else:
                key = fnv64(zipf.next()) % records
            op["key"] = key
            if kind in ("update", "rmw"):
                op["field"] = rng.choice(FIELDS)
                op["value"] = field_value(rng)
        ops.append(op)
    return ops


def records_table(records: int, seed: int, start: int = 0):
    import pyarrow as pa

    rng = random.Random(f"{seed}/load")
    cols: dict[str, Any] = {"id": pa.array(range(start, start + records), pa.int64())}
    for f in FIELDS:
        cols[f] = pa.array([field_value(rng) for _ in range(records)], pa.string())
    return pa.table(cols)


# ------------------------------------------------------------------------- LakeVilla operations
_RANGES: dict[str, tuple[int, int] | None] = {}


def _id_range(add: Any) -> tuple[int, int] | None:
    r = _RANGES.get(add.path, ())
    if r == ():
        r = None
        if add.stats:
            s = json.loads(add.stats)
            lo, hi = s.get("minValues", {}).get("id"), s.get("maxValues", {}).get("id")
            if lo is not None and hi is not None:
                r = (int(lo), int(hi))
        _RANGES[add.path] = r
    return r


def _may_hold(key: int) -> Callable[[Any], bool]:
    def match(add: Any) -> bool:
        r = _id_range(add)
        return r is None or r[0] <= key <= r[1]

    return match


def _predicate(ctx: Any, key: int) -> Any:
    """``id = key`` as the scan predicate LakeVilla's conflict detection gets (serializable: a FileFilter)."""
    from lv_core.delta.colmap import column_mapping
    from lv_core.engine.skipping import file_filter

    snap = ctx.snapshot(TABLE)
    return file_filter(f"id = {int(key)}", snap.schema, snap.partition_columns, column_mapping(snap).names)


def lv_read(key: int):
    """Point read with data skipping; a predicate read of ``id = key`` for conflict detection."""
    import pyarrow.compute as pc

    from lv_core.engine.arrow_io import read_data_files
    from lv_core.txn.ops import Operation, OpResult

    match = _may_hold(key)

    def run(ctx: Any) -> OpResult:
        snap = ctx.snapshot(TABLE)
        files = [f for f in ctx.files(TABLE).values() if match(f)]
        data = read_data_files(ctx.store, TABLE, files, snap.schema, snap.partition_columns)
        data = data.filter(pc.equal(data["id"], key))
        return OpResult(value=data.num_rows, reads={TABLE: {f.path for f in files}}, scans={TABLE},
                        may_match={TABLE: _predicate(ctx, key)})

    return Operation("read", (TABLE,), run, logical={"ycsb": "read", "key": key}, exposed=False)


def lv_update(key: int, field: str, value: str):
    """Copy-on-write update of one field of one record (rewrites the file(s) holding it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lv_core.delta.writer import write_data_files
    from lv_core.engine.arrow_io import read_data_files
    from lv_core.txn.ops import Operation, OpResult

    match = _may_hold(key)

    def run(ctx: Any) -> OpResult:
        snap = ctx.snapshot(TABLE)
        res = OpResult(value=0, reads={TABLE: set()}, scans={TABLE}, adds={TABLE: []}, removes={TABLE: []},
                       may_match={TABLE: _predicate(ctx, key)})
        for f in [f for f in ctx.files(TABLE).values() if match(f)]:
            data = read_data_files(ctx.store, TABLE, [f], snap.schema, snap.partition_columns)
            res.reads[TABLE].add(f.path)
            mask = pc.equal(data["id"], key)
            n = pc.sum(mask).as_py() or 0
            if not n:
                continue
            i = data.schema.get_field_index(field)
            col = pc.if_else(mask, pa.scalar(value, pa.string()), data[field])
            out = data.set_column(i, field, col)
            res.adds[TABLE].extend(write_data_files(ctx.store, TABLE, snap, out,
                                                    new_path=lambda v: ctx.new_path(TABLE, v)))
            res.removes[TABLE].append(f.remove())
            res.value += n
        return res

    return Operation("update", (TABLE,), run,
                     logical={"sql": f"UPDATE {TABLE} SET {field} = '{value}' WHERE id = {key}"})


def lv_insert(key: int, values: list[str]):
    import pyarrow as pa

    from lv_core.engine import arrow_ops

    cols = {"id": pa.array([key], pa.int64())}
    for f, v in zip(FIELDS, values, strict=False):
        cols[f] = pa.array([v], pa.string())
    return arrow_ops.append(TABLE, pa.table(cols))


def lv_ops(op: dict[str, Any]) -> list[Any]:
    kind = op["kind"]
    if kind == "read":
        return [lv_read(op["key"])]
    if kind == "update":
        return [lv_update(op["key"], op["field"], op["value"])]
    if kind == "rmw":
        return [lv_read(op["key"]), lv_update(op["key"], op["field"], op["value"])]
    if kind == "insert":
        return [lv_insert(op["key"], op["values"])]
    raise ValueError(kind)


# ------------------------------------------------------------------------------- delta-rs peer
class DeltaRsClient:
    def __init__(self, uri: str, options: dict[str, str] | None) -> None:
        from deltalake import DeltaTable

        self.uri, self.options = uri, options
        self.dt = DeltaTable(uri, storage_options=options)

    def refresh(self) -> None:
        self.dt.update_incremental()

    def read(self, key: int) -> int:
        import pyarrow.dataset as ds

        self.refresh()
        return self.dt.to_pyarrow_dataset().to_table(filter=ds.field("id") == key).num_rows

    def update(self, key: int, field: str, value: str) -> None:
        self.refresh()
        self.dt.update(new_values={field: value}, predicate=f"id = {key}")

    def insert(self, key: int, values: list[str]) -> None:
        import pyarrow as pa
        from deltalake import write_deltalake

        cols = {"id": pa.array([key], pa.int64())}
        for f, v in zip(FIELDS, values, strict=False):
            cols[f] = pa.array([v], pa.string())
        self.refresh()
        write_deltalake(self.dt, pa.table(cols), mode="append")

    def run(self, op: dict[str, Any]) -> None:
        kind = op["kind"]
        if kind in ("read", "rmw"):
            self.read(op["key"])
        if kind in ("update", "rmw"):
            self.update(op["key"], op["field"], op["value"])
        if kind == "insert":
            self.insert(op["key"], op["values"])


# --------------------------------------------------------------------------------- one client
def client_run(args: dict[str, Any], ready: Callable[[], float]) -> dict[str, Any]:
    """One YCSB client process (called through ClientPool)."""
    from lv_core.errors import LvError, TransactionAborted

    spec = StoreSpec(**args["store"])
    system = args["system"]
    ops = generate_ops(args["workload"], args["records"], args["ops"], args["client"], args["clients"], args["seed"])
    lv = SYSTEMS[system]
    store = None
    if lv is None:
        uri, opts = delta_rs_uri(spec, args["location"], TABLE)
        drs = DeltaRsClient(uri, opts)
        drs.read(0)  # warm-up (outside the measurement): log loaded, query engine initialised
    else:
        lh, store = open_lakehouse(spec, args["location"], lease_s=args.get("lease_s", 30.0))
        # Warm-up, outside the measurement, under the preset measured: snapshot cache and code paths; under
        # LV[I] also the table's one-time enrollment in the global log (a key round the first time a table
        # is read there, ever), which is no part of a steady-state operation.
        warm = lh.begin(lv["preset"], features=lv.get("features"))
        warm.execute(lv_read(0))
        warm.commit()
        store.reset()
    _RANGES.clear()
    start = ready()
    time.sleep(max(0.0, start - time.time()))
    t_start = time.time()
    deadline = time.monotonic() + args["max_seconds"]
    bundle = args["bundle"] if args["mode"] == "bundled" else 1
    chunks = [ops[i:i + (bundle or len(ops))] for i in range(0, len(ops), bundle or max(1, len(ops)))]
    aborts: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    lat: dict[str, list[float]] = {}
    op_lat: list[float] = []
    txn_lat: list[float] = []
    commit_lat: list[float] = []
    done = failed = redos = waits = txns = 0
    truncated = False
    for chunk in chunks:
        if time.monotonic() > deadline:
            truncated = True
            break
        t0 = time.monotonic()
        ok = False
        for _attempt in range(args["max_retries"] + 1):
            chunk_lat: list[float] = []
            try:
                if lv is None:
                    for op in chunk:
                        t = time.monotonic()
                        drs.run(op)
                        chunk_lat.append(time.monotonic() - t)
                    tc = time.monotonic()
                else:
                    txn = lh.begin(lv["preset"], features=lv.get("features"), timeout_s=args["timeout_s"])
                    try:
                        for op in chunk:
                            t = time.monotonic()
                            for o in lv_ops(op):
                                txn.execute(o)
                            chunk_lat.append(time.monotonic() - t)
                        tc = time.monotonic()
                        res = txn.commit()
                    except BaseException:
                        if txn.state == "active":
                            try:
                                txn.rollback()
                            except LvError:
                                pass
                        raise
                    redos += res.redo_count
                    waits += res.waits
                ok = True
                break
            except TransactionAborted as e:
                aborts[e.rule] += 1
            except LvError as e:
                errors[type(e).__name__] += 1
            except Exception as e:  # delta-rs commit conflicts and others
                name = type(e).__name__
                if name == "CommitFailedError":
                    aborts["conflict"] += 1
                else:
                    errors[f"{name}: {str(e)[:120]}"] += 1
            if time.monotonic() > deadline:
                break
        t1 = time.monotonic()
        if ok:
            txns += 1
            done += len(chunk)
            txn_lat.append(t1 - t0)
            commit_lat.append(t1 - tc)
            op_lat.extend(chunk_lat)
            if bundle == 1:
                lat.setdefault(chunk[0]["kind"], []).append(t1 - t0)
        else:
            failed += len(chunk)
    t_end = time.time()
    counts = store.counts() if store is not None else {}
    if store is not None:
        lh.close()
    return {"client": args["client"], "done": done, "failed": failed, "txns": txns, "aborts": dict(aborts),
            "errors": dict(errors), "redos": redos, "waits": waits, "t_start": t_start, "t_end": t_end,
            "truncated": truncated, "lat": lat, "op_lat": op_lat, "txn_lat": txn_lat, "commit_lat": commit_lat,
            "requests": counts}


# --------------------------------------------------------------------------------- orchestration
def load_template(spec: StoreSpec, location: str, records: int, per_file: int, seed: int) -> None:
    """Create the table and load the records (one commit), without injected latency."""
    from lv_core import Lakehouse
    from lv_core.engine import arrow_ops

    lh = Lakehouse(raw_store(spec, location))
    lh.create_table(TABLE, DDL)
    txn = lh.begin("delta")
    txn.execute(arrow_ops.append(TABLE, records_table(records, seed), rows_per_file=per_file))
    txn.commit()
    lh.close()


def summarize(cfg: dict[str, Any], clients: list[dict[str, Any]],
              server_counts: dict[str, int] | None) -> dict[str, Any]:
    done = sum(c["done"] for c in clients)
    elapsed = max(c["t_end"] for c in clients) - min(c["t_start"] for c in clients)
    aborts: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for c in clients:
        aborts.update(c["aborts"])
        errors.update(c["errors"])
    txn_lat = [x for c in clients for x in c["txn_lat"]]
    op_lat = [x for c in clients for x in c["op_lat"]]
    commit_lat = [x for c in clients for x in c["commit_lat"]]
    per_kind: dict[str, list[float]] = {}
    for c in clients:
        for k, v in c["lat"].items():
            per_kind.setdefault(k, []).extend(v)
    requests: dict[str, int] = {}
    for c in clients:
        requests = add_counts(requests, c["requests"])
    out = {
        **cfg,
        "ops_done": done,
        "ops_failed": sum(c["failed"] for c in clients),
        "txns": sum(c["txns"] for c in clients),
        "elapsed_s": round(elapsed, 3),
        "throughput_ops_s": round(done / elapsed, 2) if elapsed > 0 else None,
        "aborts": sum(aborts.values()),
        "aborts_by_rule": dict(aborts),
        "errors": dict(errors),
        "redos": sum(c["redos"] for c in clients),
        "waits": sum(c["waits"] for c in clients),
        "truncated": any(c["truncated"] for c in clients),
        "txn_latency_ms": {"p50": ms(percentile(txn_lat, 50)), "p99": ms(percentile(txn_lat, 99)),
                           "mean": ms(mean(txn_lat))},
        "op_latency_ms": {"p50": ms(percentile(op_lat, 50)), "p99": ms(percentile(op_lat, 99))},
        "commit_latency_ms": {"p50": ms(percentile(commit_lat, 50)), "p99": ms(percentile(commit_lat, 99))},
        "latency_by_kind_ms": {k: {"p50": ms(percentile(v, 50)), "p99": ms(percentile(v, 99)), "n": len(v)}
                               for k, v in sorted(per_kind.items())},
    }
    if requests and done:
        out["client_requests"] = requests
        out["client_requests_per_op"] = round(sum(requests.values()) / done, 2)
    if server_counts is not None and done:
        out["server_requests"] = server_counts
        out["server_requests_per_op"] = round(sum(server_counts.values()) / done, 2)
    return out


class YcsbRunner:
    """Prepares one template table per (store, layout) and runs configurations on fresh copies."""

    def __init__(self, pool: ClientPool, spec: StoreSpec, workdir: str, params: dict[str, Any], s3: Any = None) -> None:
        self.pool, self.spec, self.workdir, self.params, self.s3 = pool, spec, workdir, params, s3
        self.templates: dict[int, str] = {}
        self.n = 0

    def _location(self, name: str) -> str:
        if self.spec.kind == "local":
            return f"{self.workdir}/{name}"
        return f"{self.workdir.strip('/').replace('/', '-')}/{name}"

    def template(self, per_file: int) -> str:
        if per_file not in self.templates:
            loc = self._location(f"template-{per_file}")
            load_template(self.spec, loc, self.params["records"], per_file, self.params["seed"])
            self.templates[per_file] = loc
        return self.templates[per_file]

    def run(self, *, system: str, workload: str, clients: int, mode: str, per_file: int) -> dict[str, Any]:
        p = self.params
        self.n += 1
        loc = self._location(f"run-{self.n:04d}")
        clone_warehouse(self.spec, self.template(per_file), loc)
        ops_per_client = max(1, p["ops"] // clients) if p.get("ops_split", True) else p["ops"]
        cfg = {"system": system, "features": FEATURES[system], "workload": workload, "clients": clients,
               "mode": mode, "bundle": p["bundle"] if mode == "bundled" else 1, "per_file": per_file,
               "records": p["records"], "ops_per_client": ops_per_client, "store": self.spec.name,
               "seed": p["seed"]}
        args = [{"store": self.spec.to_json(), "location": loc, "system": system, "workload": workload,
                 "records": p["records"], "ops": ops_per_client, "client": i, "clients": clients,
                 "seed": p["seed"], "mode": mode, "bundle": p["bundle"], "max_retries": p["max_retries"],
                 "timeout_s": p["timeout_s"], "max_seconds": p["max_seconds"]} for i in range(clients)]
        try:
            results = self.pool.run("benchmarks.ycsb:client_run", args,
                                    timeout_s=p["max_seconds"] + p["timeout_s"] + 120,
                                    on_ready=self.s3.reset if self.s3 is not None else None)
            server = self.s3.counts() if self.s3 is not None else None
            return summarize(cfg, results, server)
        except Exception as e:  # one broken configuration does not stop the benchmark
            return {**cfg, "error": f"{type(e).__name__}: {str(e)[-2000:]}"}
        finally:
            remove_warehouse(self.spec, loc)

    def close(self) -> None:
        for loc in self.templates.values():
            remove_warehouse(self.spec, loc)
