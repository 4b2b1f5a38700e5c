"""Console command ``lv``: operations on a warehouse without a notebook.

    lv recover WAREHOUSE [--endpoint URL] [--region R] [--grace S] [--lease S]
    lv tables WAREHOUSE
"""

from __future__ import annotations

import argparse
import sys

from lv_core.errors import LvError


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
    for p in (rec, tab):
        p.add_argument("warehouse", help="path, file:///abs/path or s3://bucket/prefix")
        p.add_argument("--endpoint", help="S3 endpoint URL (MinIO, test server)")
        p.add_argument("--region", help="S3 region")
    rec.add_argument("--grace", type=float, default=None,
                     help="seconds after a lease expired before a dead transaction's sublog is cleaned")
    rec.add_argument("--lease", type=float, default=None,
                     help="the clients' lease period in seconds (default 30): a transaction that wrote no heartbeat "
                          "counts as alive until this long after it began")
    args = parser.parse_args(argv)
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
        else:
            for t in lh.list_tables():
                print(f"{t}\t{lh.version(t)}")
    except LvError as e:
        print(f"lv: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
