"""Clear errors for bad input on the Lakehouse metadata API, malformed foreign markers and leases, and
credentials redacted from the AWS libraries' DEBUG logs (no Spark, no S3 server)."""

from __future__ import annotations

import json
import logging

import pytest

import lv_core
from lv_core.delta import commit
from lv_core.delta.actions import CommitInfo, Protocol
from lv_core.delta.errors import VersionNotFound
from lv_core.errors import ConfigError, DeltaLogError, InvalidTableName, UnsupportedFeature
from lv_core.protocol.layout import lease_key
from lv_core.protocol.lease import lease_expired, read_lease
from lv_core.protocol.markers import classify
from lv_core.storage import s3 as s3mod


@pytest.fixture
def lh(tmp_path):
    return lv_core.connect(str(tmp_path / "wh"))


@pytest.mark.parametrize("name", ["../x", "x" * 300, "a\x00b", ""])
def test_version_validates_the_table_name(lh, name):
    with pytest.raises(InvalidTableName, match="invalid table name"):
        lh.version(name)


def test_snapshot_versions_are_named(lh):
    lh.create_table("t", "id BIGINT")  # the snapshot cache is warm from here on
    with pytest.raises(VersionNotFound, match="has no version -1"):
        lh.snapshot("t", version=-1)
    with pytest.raises(VersionNotFound, match="has no version 999: the latest version is 0"):
        lh.snapshot("t", version=999)
    with pytest.raises(ConfigError, match="version must be an integer"):
        lh.snapshot("t", version="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="as_of .* must be an integer"):
        lh.global_state("x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="as_of"):
        lh.snapshot("t", as_of=True)  # type: ignore[arg-type]
    assert lh.snapshot("t", version=0).version == 0


def test_snapshot_refuses_unreadable_protocol_from_a_warm_cache(lh):
    lh.create_table("dv", "id BIGINT")
    commit(lh.store, "dv", 1, [CommitInfo({"operation": "UPGRADE PROTOCOL"}),
                               Protocol(3, 7, ("someFutureReaderFeature",), ("someFutureReaderFeature",))])
    with pytest.raises(UnsupportedFeature, match="someFutureReaderFeature"):
        lh.snapshot("dv")
    with pytest.raises(UnsupportedFeature, match="someFutureReaderFeature"):
        lh.snapshot("dv", version=1)
    assert lh.snapshot("dv", version=0).version == 0  # before the upgrade it is readable


def _marker(**lv):
    return json.dumps({"commitInfo": {"operation": "LAKEVILLA MARKER",
                                      "lakevilla": {"kind": "marker", "txn": "t1", **lv}}}).encode()


@pytest.mark.parametrize("field,value", [("leaseExpires", "soon"), ("leaseExpires", [1]),
                                         ("created", "yesterday"), ("leaseExpires", float("nan"))])
def test_marker_with_a_malformed_time_is_a_delta_log_error(field, value):
    with pytest.raises(DeltaLogError, match=field):
        classify(3, _marker(**{field: value}), "e", filled=False)


def test_marker_times_missing_or_numbers():
    assert classify(3, _marker(), "e", filled=False).marker.lease_expires == 0.0
    assert classify(3, _marker(leaseExpires=None, created=5), "e", filled=False).marker.created == 5.0
    assert classify(3, _marker(leaseExpires=12.5), "e", filled=False).marker.lease_expires == 12.5
    with pytest.raises(DeltaLogError, match="predecessors"):
        classify(3, _marker(predecessors=7), "e", filled=False)


@pytest.mark.parametrize("expires,expired", [("soon", True), (None, True), ("NaN", True), (True, True),
                                             (4e10, False), ("4e10", False)])
def test_lease_expiry_is_a_number(local_store, expires, expired):
    local_store.put(lease_key("t1"), json.dumps({"expires": expires}).encode())
    lease = read_lease(local_store, "t1")
    assert isinstance(lease["expires"], float)
    assert lease_expired(local_store, "t1", None) is expired


def test_redaction_filter_redacts_and_keeps_records():
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    s3mod._install_redaction(["mySecretValue123", "myTokenValue456", None, ""])
    log = logging.getLogger("botocore.auth")
    handler, old = Keep(logging.DEBUG), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        log.debug("CanonicalRequest:\n%s", "x-amz-security-token:myTokenValue456\nsecret=mySecretValue123")
        log.debug("headers={'X-Amz-Security-Token': b'otherRefreshedToken', 'Host': 'h'}")
        log.debug("nothing to hide here")
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    assert len(records) == 3
    text = "\n".join(records)
    assert "myTokenValue456" not in text and "mySecretValue123" not in text
    assert "otherRefreshedToken" not in text and "'Host': 'h'" in text
    # (other tests may have registered short secrets such as "secret" in the process-wide filter)
    assert records[0].startswith("CanonicalRequest:\nx-amz-security-token:***\n") and records[0].endswith("=***")
    assert records[2] == "nothing to hide here"
