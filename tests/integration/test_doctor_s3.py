"""``lv doctor`` and the write guard against real S3 servers (moto and SeaweedFS, ``s3_backend``), and
against a store that ignores conditional writes: an HTTP proxy in front of the same server that drops
``If-None-Match`` / ``If-Match`` (tests/helpers/s3proxy.py; the requests reach the real server)."""

from __future__ import annotations

import pytest

import lv_core
from lv_core.cli import main as lv
from lv_core.errors import UnsafeStore
from lv_core.storage.guard import WriteGuard, forget_verdicts, verdict_key
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.s3 import S3Store
from tests.conftest import S3_REGION, S3_TEST_CREDENTIALS, moto_only
from tests.helpers.s3proxy import ConditionalDroppingProxy

pytestmark = pytest.mark.s3
#: why the header-dropping proxy runs in front of moto only
PROXY = ("the proxy removes signed headers, which SeaweedFS (it checks signatures against the test identity) "
         "refuses as tampered requests; moto does not check signatures, so the requests reach it without them")


@pytest.fixture
def aws_env(monkeypatch):
    """The test credentials in the environment (the ``lv`` command takes them from the boto3 chain)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_TEST_CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_TEST_CREDENTIALS["aws_secret_access_key"])


def _doctor(url: str, endpoint: str) -> int:
    return lv(["doctor", url, "--endpoint", endpoint, "--region", S3_REGION])


def _keys(endpoint: str, bucket: str, prefix: str) -> list[str]:
    store = S3Store(bucket, prefix, {"endpoint_url": endpoint, "region": S3_REGION, **S3_TEST_CREDENTIALS})
    return [m.key for m in store.list("")]


def test_lv_doctor_passes_on_the_server(s3_server, s3_bucket, aws_env, capsys):
    assert _doctor(f"s3://{s3_bucket}/wh", s3_server) == 0
    out = capsys.readouterr().out
    assert "PASS  put-if-absent-concurrent" in out and "every check passed" in out
    # the scratch prefix is gone; the verdict the write guard reads stays
    assert _keys(s3_server, s3_bucket, "wh") == [verdict_key(f"{s3_server}|{s3_bucket}|wh")]


@pytest.mark.parametrize(("drop", "failed"), [
    (("if-none-match", "if-match"), {"put-if-absent", "put-if-absent-concurrent", "if-match-stale"}),
    (("if-match",), {"if-match-stale"}),
], ids=["ignores-both", "ignores-if-match"])
def test_doctor_fails_and_writes_are_refused_on_a_store_that_ignores_conditions(s3_backend, s3_server, s3_bucket,
                                                                               aws_env, capsys, drop, failed):
    moto_only(s3_backend, PROXY)
    # a table written through the real endpoint, to show that reads through the broken one still work
    good = lv_core.connect(f"s3://{s3_bucket}/wh", storage_options={"endpoint_url": s3_server, "region": S3_REGION,
                                                                     **S3_TEST_CREDENTIALS})
    good.create_table("t", "id BIGINT")
    before = _keys(s3_server, s3_bucket, "wh")
    with ConditionalDroppingProxy(s3_server, drop) as proxy:
        assert _doctor(f"s3://{s3_bucket}/wh", proxy) == 1
        captured = capsys.readouterr()
        assert {c for c in failed if f"FAIL  {c} " in captured.out} == failed
        for ok in ("if-match-current", "read-after-write", "list-after-write", "delete", "clock"):
            assert f"PASS  {ok} " in captured.out  # the proxy loses only the two headers
        assert "failed:" in captured.err and all(c in captured.err for c in failed)
        forget_verdicts()  # a new process: it finds the verdict lv doctor left on the store
        bad = lv_core.connect(f"s3://{s3_bucket}/wh", storage_options={"endpoint_url": proxy, "region": S3_REGION,
                                                                        **S3_TEST_CREDENTIALS})
        assert bad.version("t") == 0 and bad.list_tables() == ["t"]  # reads stay allowed
        with pytest.raises(UnsafeStore, match="lv doctor"):
            bad.create_table("u", "id BIGINT")
        with pytest.raises(UnsafeStore):  # the case: CREATE TABLE of an existing name overwrote version 0
            bad.create_table("t", "id BIGINT")
    after = _keys(s3_server, s3_bucket, "wh")
    assert [k for k in after if not k.startswith("_lakevilla/doctor/")] == \
        [k for k in before if not k.startswith("_lakevilla/doctor/")]  # nothing of the refused writes landed


def test_without_lv_doctor_the_first_write_checks_and_refuses(s3_backend, s3_server, s3_bucket):
    """Nobody ran lv doctor: the first write through the broken endpoint runs the check itself."""
    moto_only(s3_backend, PROXY)
    with ConditionalDroppingProxy(s3_server) as proxy:
        forget_verdicts()
        bad = lv_core.connect(f"s3://{s3_bucket}/wh", storage_options={"endpoint_url": proxy, "region": S3_REGION,
                                                                        **S3_TEST_CREDENTIALS})
        with pytest.raises(UnsafeStore, match="If-None-Match"):
            bad.create_table("t", "id BIGINT")
    assert not [k for k in _keys(s3_server, s3_bucket, "wh") if not k.startswith("_lakevilla/doctor/")]


def test_a_checked_store_costs_one_get_per_process(s3_server, s3_bucket):
    opts = {"endpoint_url": s3_server, "region": S3_REGION, **S3_TEST_CREDENTIALS}
    forget_verdicts()
    first = S3Store(s3_bucket, "wh", opts)
    first.put("a", b"x")  # checks, records the verdict on the store
    forget_verdicts()  # another process
    store = S3Store(s3_bucket, "wh", opts)
    counted = InstrumentedStore(store.guard.raw)
    store.guard = WriteGuard(counted, store.guard.identity)
    store.put("b", b"y")
    assert counted.counts()["GET"] == 1 and counted.total() == 1  # the verdict, nothing else
