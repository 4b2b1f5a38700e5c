"""Credentials never leak: a workload against the S3 test server with distinctive credentials, then a
grep of everything it produced for them.

Produced = every log record at DEBUG (lv_core, botocore, boto3, urllib3, ...), every event of every
transaction (repr and to_dict), the transaction widget (HTML and text) and the static renderer, the
lakehouse inspector, every error message and traceback (including failed connections and a missing
bucket), reprs of the lakehouse, store, results and DAGs, the recovery report, the `lv` command's
output, the magics' output (text and rich display), and every object written to the bucket.

The secret access key and the session token must appear nowhere (botocore logs the token header at
DEBUG: S3Store installs a redacting log filter, checked by test_session_token_not_in_debug_logs). The
access key id is not a secret
(it is part of every signed request), but LakeVilla's own output must not show it either.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.engine import arrow_ops as ops
from lv_core.errors import LvError, TransactionAborted
from tests.conftest import S3_REGION, moto_only
from tests.helpers import oracle as O

pytestmark = pytest.mark.s3

SECRET = "lvSecretKey" + uuid.uuid4().hex
TOKEN = "lvSessionToken" + uuid.uuid4().hex
ACCESS = "AKIALV" + uuid.uuid4().hex[:14].upper()
LIBRARY_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")


class Sink:
    """Collects everything the workload produces, labelled by where it came from."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, where: str, value: Any) -> None:
        self.items.append((where, value if isinstance(value, str) else repr(value)))

    def error(self, where: str, e: BaseException) -> None:
        self.add(where, f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)))

    def find(self, needle: str, *, skip_library_logs: bool = False) -> list[str]:
        return [f"{where}: ...{text[max(0, text.find(needle) - 80):text.find(needle) + 40]!r}..."
                for where, text in self.items
                if needle in text and not (skip_library_logs and where.startswith("log:") and
                                           where.split(":")[1].split(".")[0] in LIBRARY_LOGGERS)]


class Capture(logging.Handler):
    def __init__(self, sink: Sink) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception as e:
            text = f"(unformattable: {e})"
        self.sink.add(f"log:{record.name}", text)


@pytest.fixture
def sink():
    s = Sink()
    handler = Capture(s)
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield s
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _options(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "region": S3_REGION, "aws_access_key_id": ACCESS,
            "aws_secret_access_key": SECRET, "aws_session_token": TOKEN}


def _txn_outputs(sink: Sink, txn: Any) -> None:
    from widgets import TransactionWidget, fold, render_html, render_text

    for e in txn.events.history:
        sink.add(f"event:{e.kind}", repr(e))
        sink.add(f"event:{e.kind}:dict", json.dumps(e.to_dict(), default=str))
    sink.add("txn repr", repr(txn))
    sink.add("txn dag", json.dumps(txn.dag().to_json(), default=str))
    sink.add("txn requests", repr(txn.requests()))
    sink.add("txn validation", json.dumps(txn.validation, default=str))
    view = fold(txn.events.history, txn=txn.id)
    sink.add("render_html", render_html(view))
    sink.add("render_text", render_text(view))
    w = TransactionWidget(txn, tick_s=0)
    w.flush()
    sink.add("widget html", w.to_html())
    sink.add("widget text", w.to_text())
    sink.add("widget bundle", json.dumps(w._repr_mimebundle_(), default=str))
    w.close()


def run_workload(sink: Sink, endpoint: str, bucket: str, capsys: Any) -> lv_core.Lakehouse:
    lh = lv_core.connect(f"s3://{bucket}/wh", storage_options=_options(endpoint), lease_s=2.0)
    sink.add("lh repr", repr(lh))
    sink.add("lh url", lh.url)
    sink.add("store repr", repr(lh.store))
    sink.add("store str", str(lh.store))
    for t in ("acc", "acc2"):
        lh.create_table(t, "id BIGINT, val DOUBLE")
        txn = lh.begin("delta")
        for k in (1, 2):
            txn.execute(ops.append(t, pa.table({"id": pa.array([k], pa.int64()), "val": [100.0]})))
        txn.commit()
        _txn_outputs(sink, txn)
    txns = []
    for preset, features in [("serializable", None), ("snapshot", None), ("write_serializable", None),
                             ("repeatable_read", None), ("repeatable_read", {"R"})]:
        txn = lh.begin(preset, features=features, name=f"t-{preset}")
        O.run_op(txn, O.read("acc", 1))
        O.run_op(txn, O.add("acc", 1, -1))
        O.run_op(txn, O.add("acc2", 1, 1))
        res = txn.commit()
        sink.add("commit result", repr(res))
        txns.append(txn)
    # an abort (R1), a rollback, and user errors
    t1, t2 = lh.begin("serializable"), lh.begin("serializable")
    O.run_op(t1, O.read("acc", 2))
    O.run_op(t2, O.add("acc", 2, 5))
    t2.commit()
    O.run_op(t1, O.add("acc2", 2, 1))
    try:
        t1.commit()
    except TransactionAborted as e:
        sink.error("abort", e)
        sink.add("abort details", json.dumps(e.details, default=str))
    t3 = lh.begin("repeatable_read")
    O.run_op(t3, O.add("acc", 1, 1))
    t3.rollback()
    txns += [t1, t2, t3]
    for bad in (lambda: O.run_op(lh.begin("serializable"), O.read("nope", 1)),
                lambda: lh.create_table("../x", "id BIGINT"), lambda: lh.begin("serialisable"),
                lambda: lh.snapshot("acc", as_of=999)):
        try:
            bad()
        except LvError as e:
            sink.error("user error", e)
    for txn in txns:
        _txn_outputs(sink, txn)
    sink.add("global state", repr(lh.global_state()))
    sink.add("tables", repr(lh.list_tables()))
    sink.add("recover", lh.recover().summary())

    # failures that reach the network layer: a missing bucket and a dead endpoint
    for where, url, ep in [("missing bucket", f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/wh", endpoint),
                           ("dead endpoint", f"s3://{bucket}/wh", "http://127.0.0.1:9")]:
        try:
            other = lv_core.connect(url, storage_options={**_options(ep), "max_attempts": 1, "connect_timeout": 1})
            other.create_table("t", "id BIGINT")
        except Exception as e:  # every message is checked
            sink.error(where, e)

    # the inspector
    from widgets import inspect_lakehouse, scan_lakehouse
    from widgets.render_inspector import inspector_html, inspector_text

    scan = scan_lakehouse(lh)
    sink.add("scan", repr(scan))
    sink.add("inspector html", inspector_html(scan))
    sink.add("inspector text", inspector_text(scan))
    insp = inspect_lakehouse(lh)
    sink.add("inspector widget", insp.to_html())
    insp.close()
    out = capsys.readouterr()
    sink.add("stdout", out.out)
    sink.add("stderr", out.err)
    return lh


def _magics_and_cli(sink: Sink, ip: Any, endpoint: str, bucket: str, monkeypatch: Any, capsys: Any) -> None:
    from IPython.utils.capture import capture_output

    from lv_core.cli import main as lv_main
    from lv_magic.state import STATE

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    ip.run_line_magic("config", "LvMagics.widgets = True")
    try:
        with capture_output() as cap:
            ip.run_line_magic("lv", f"connect s3://{bucket}/wh --endpoint {endpoint} --region {S3_REGION} --lazy")
            ip.run_cell("from tests.helpers import oracle as O")
            ip.run_cell_magic("lvtxn", "serializable --python --name m1", "O.run_op(txn, O.add('acc', 1, 1))")
            for line in ("tables", "status", "markers", "log acc", "dag", "recover", "inspect", "help"):
                ip.run_line_magic("lv", line)
            for bad in ("log ../x", "commit nope", "begin"):
                try:
                    ip.run_line_magic("lv", bad)
                except Exception as e:
                    sink.error(f"magic {bad}", e)
            try:
                ip.run_cell_magic("lvtxn", "--python", "O.run_op(txn, O.read('nope', 1))")
            except Exception as e:
                sink.error("magic cell error", e)
        sink.add("magic stdout", cap.stdout)
        sink.add("magic stderr", cap.stderr)
        for o in cap.outputs:
            sink.add("magic display", json.dumps(o.data, default=str))
    finally:
        ip.run_line_magic("config", "LvMagics.widgets = False")
        STATE.shutdown()
        STATE.txns.clear()
        STATE.lh = None
    rc = lv_main(["recover", f"s3://{bucket}/wh", "--endpoint", endpoint, "--region", S3_REGION, "--grace", "0"])
    rc2 = lv_main(["tables", f"s3://{bucket}/wh", "--endpoint", endpoint, "--region", S3_REGION])
    out = capsys.readouterr()
    sink.add("lv cli", f"rc={rc},{rc2}\n{out.out}\n{out.err}")


def _bucket_objects(sink: Sink, s3_admin: Any, bucket: str) -> int:
    n = 0
    for page in s3_admin.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", ()):
            body = s3_admin.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            sink.add(f"object:{o['Key']}", body.decode("utf-8", "replace"))
            n += 1
    return n


def test_credentials_never_leak(sink, ipshell, s3_backend, s3_server, s3_bucket, s3_admin, monkeypatch, capsys):
    moto_only(s3_backend, "the grep needs keys and a session token made up for this run, which SeaweedFS (it "
                          "checks signatures against its configured identity, and has no STS) refuses")
    run_workload(sink, s3_server, s3_bucket, capsys)
    _magics_and_cli(sink, ipshell, s3_server, s3_bucket, monkeypatch, capsys)
    n_objects = _bucket_objects(sink, s3_admin, s3_bucket)
    kinds = {w.split(":")[0] for w, _ in sink.items}
    assert n_objects > 10 and {"log", "event", "widget html", "object", "magic display"} <= kinds, kinds
    assert any(w.startswith("log:botocore") for w, _ in sink.items), "DEBUG logging was not captured"
    assert any(w in ("dead endpoint", "missing bucket") for w, _ in sink.items)
    assert not sink.find(SECRET), "the secret key leaked:\n" + "\n".join(sink.find(SECRET)[:10])
    leaks = sink.find(TOKEN, skip_library_logs=True) + sink.find(ACCESS, skip_library_logs=True)
    assert not leaks, "LakeVilla output shows credentials:\n" + "\n".join(leaks[:10])
    with capsys.disabled():
        print(f"\nsecurity: {len(sink.items)} outputs, {n_objects} bucket objects checked; "
              f"botocore DEBUG logs show the session token {len(sink.find(TOKEN))} times, the access key id "
              f"{len(sink.find(ACCESS))} times")


def test_session_token_not_in_debug_logs(sink, s3_backend, s3_server, s3_bucket):
    moto_only(s3_backend, "SeaweedFS has no STS: a session token is refused before anything is logged")
    lh = lv_core.connect(f"s3://{s3_bucket}/wh", storage_options=_options(s3_server))
    lh.create_table("t", "id BIGINT")
    assert not sink.find(TOKEN), sink.find(TOKEN)[:3]
