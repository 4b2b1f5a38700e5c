"""Console command ``lv``: operations on a warehouse without a notebook.

    lv recover WAREHOUSE [--endpoint URL] [--region R] [--grace S] [--lease S]
    lv tables WAREHOUSE
    lv doctor WAREHOUSE [--isolation] [--json]   # will LakeVilla work on this store (and this warehouse)?
"""

from __future__ import annotations

import argparse
import sys

from lv_core.errors import LvError
from lv_core.protocol.gvl import GlobalLog, GlobalLogError, move_out


def _options(args: argparse.Namespace) -> dict | None:
    opts = {}
    if args.endpoint:
        opts["endpoint_url"] = args.endpoint
    if args.region:
        opts["region"] = args.region
    return opts or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lv", description="LakeVilla for Jupyter: warehouse operations")
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("recover", help="free expired markers, roll decided commits forward, clean leftovers")
    tab = sub.add_parser("tables", help="list the tables with their latest versions")
    doc = sub.add_parser("doctor", help="check that the store honours what LakeVilla relies on (exit 1 if not)")
    doc.add_argument("--isolation", action="store_true",
                     help="also run a short black-box isolation self-test with client processes under each preset")
    doc.add_argument("--json", action="store_true", help="print the report as JSON")
    doc.add_argument("--clients", type=int, default=3, help="client processes of the self-test")
    doc.add_argument("--txns", type=int, default=12, help="transactions per client and preset in the self-test")
    for p in (rec, tab, doc):
        p.add_argument("warehouse", help="path, file:///abs/path or s3://bucket/prefix")
        p.add_argument("--endpoint", help="S3 endpoint URL (MinIO, test server)")
        p.add_argument("--region", help="S3 region")
    rec.add_argument("--grace", type=float, default=None,
                     help="seconds after a lease expired before a dead transaction's sublog is cleaned")
    rec.add_argument("--lease", type=float, default=None,
                     help="the clients' lease period in seconds (default 30): a transaction that wrote no heartbeat "
                          "counts as alive until this long after it began")
    args = parser.parse_args(argv)
    if args.cmd == "doctor":
        return _doctor(args)
    from lv_core.wiring import connect

    try:
        lh = connect(args.warehouse, storage_options=_options(args))
        if args.cmd == "recover":
            if args.lease is not None:
                lh.lease_s = args.lease
            rep = lh.recover(lease_grace_s=args.grace)
            for table, v, txn in rep.freed:
                print(f"freed expired marker {table}@{v} of {txn}")
            for table, v, txn in rep.rolled_forward:
                print(f"rolled forward {table}@{v} of {txn} (its commit was decided)")
            for table, v, txn in rep.live_markers:
                print(f"left live marker {table}@{v} of {txn}")
            for txn in rep.cleaned_txns:
                print(f"cleaned leftovers of {txn}")
            print(rep.summary())
            blocked = _blocked(lh.global_log)
            if blocked:
                print(f"lv recover: {blocked}", file=sys.stderr)
                return 1
        else:
            for t in lh.list_tables():
                print(f"{t}\t{lh.version(t)}")
    except LvError as e:
        print(f"lv: {e}", file=sys.stderr)
        return 1
    return 0


def _blocked(glog: GlobalLog) -> str | None:
    """Why the global version log blocks every LV[I] transaction (an object at its head that another client
    put there: :meth:`GlobalLog.check_head`), or None. LakeVilla does not move it (see :func:`move_out`)."""
    try:
        glog.check_head()
    except GlobalLogError as e:
        help_ = "" if "Help:" in str(e) else f". Help: {move_out(getattr(e, 'key', 'it'))}"
        return f"the global version log is blocked: {e}{help_}"
    return None


def _doctor(args: argparse.Namespace) -> int:
    """``lv doctor``: every store check (and the isolation self-test); exit 1 naming what failed."""
    import json

    from lv_core.doctor import doctor
    from lv_core.storage.uri import open_store

    try:
        store = open_store(args.warehouse, _options(args))
        report = doctor(store)
        out: dict = {"store": report.to_json()}
        blocked = _blocked(GlobalLog(store))  # the warehouse itself: a made-up global version at its head
        out["global_log"] = {"ok": blocked is None, "detail": blocked or "its head is one LakeVilla can have written"}
        ok = report.ok and blocked is None
        if args.isolation:
            if not report.ok:
                print("lv doctor: the store checks failed; the isolation self-test needs a store that passes them",
                      file=sys.stderr)
            else:
                from lv_core.doctor.selftest import selftest

                st = selftest(args.warehouse, storage_options=_options(args), clients=args.clients, txns=args.txns)
                out["isolation"] = st.to_json()
                ok = ok and st.ok
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(report.to_text())
            if "isolation" in out:
                print(st.to_text())
            if blocked:
                print(f"lv doctor: {blocked}", file=sys.stderr)
        if not ok:
            broke = "isolation" in out and not out["isolation"]["ok"]
            names = ([c.name for c in report.failed] + (["isolation"] if broke else [])
                     + (["global-log"] if blocked else []))
            print(f"lv doctor: failed: {', '.join(names)}", file=sys.stderr)
        return 0 if ok else 1
    except LvError as e:
        print(f"lv: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
