"""S3Store specifics: options, secrets hygiene, prefixes, lost responses, and delta-rs options.

The storage contract itself runs on S3 in tests/unit/test_storage_contract.py. Tests here that
need the moto server are marked ``s3``; the option checks need no server.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, Callable

import botocore.exceptions
import pytest

from lv_core.errors import AlreadyExists, ConfigError, NotFound, PreconditionFailed, StorageError
from lv_core.storage import open_store
from lv_core.storage.base import CREATE, IfMatch
from lv_core.storage.s3 import S3Store

SECRET_ID = "AKIALVTESTSECRETID01"
SECRET_KEY = "lv/Secret+Key/that-must-never-leak"
SECRET_TOKEN = "lv-session-token-never-leak"


# -- options (no server) ---------------------------------------------------------------------------


def test_unknown_option_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="'endpoint'"):
        S3Store("b", "", {"endpoint": "http://127.0.0.1:9"})


@pytest.mark.parametrize(
    "options",
    [
        {"endpoint_url": "ftp://127.0.0.1:9"},
        {"region": "eu-west-1", "region_name": "us-east-1"},
        {"aws_access_key_id": "x"},
        {"max_attempts": "many"},
        {"profile": "p", "aws_access_key_id": "x", "aws_secret_access_key": "y"},
    ],
)
def test_bad_options_are_config_errors(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        S3Store("b", "", options)


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'no-such-profile'"):
        S3Store("b", "", {"profile": "no-such-profile"})


def test_profile_credentials_reach_deltalake_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "aws-config"
    config.write_text(
        "[profile lvtest]\naws_access_key_id = AKIAPROFILE\naws_secret_access_key = profile-secret\n"
        "region = eu-central-1\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    store = S3Store("b", "p", {"profile": "lvtest"})
    opts = store.storage_options_for_deltalake()
    assert (opts["AWS_ACCESS_KEY_ID"], opts["AWS_SECRET_ACCESS_KEY"]) == ("AKIAPROFILE", "profile-secret")
    assert opts["AWS_REGION"] == store.region == "eu-central-1"
    assert "AWS_ENDPOINT_URL" not in opts and "AWS_ALLOW_HTTP" not in opts


def test_deltalake_options_for_an_http_endpoint() -> None:
    store = S3Store(
        "b",
        "",
        {
            "endpoint_url": "http://127.0.0.1:9000",
            "region_name": "eu-west-3",
            "aws_access_key_id": "id",
            "aws_secret_access_key": "secret",
            "aws_session_token": "tok",
        },
    )
    assert store.storage_options_for_deltalake() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-3",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "tok",
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    https = S3Store("b", "", {"endpoint_url": "https://minio.example:9000", "region": "x"})
    assert "AWS_ALLOW_HTTP" not in https.storage_options_for_deltalake()


def test_default_region_and_urls() -> None:
    assert S3Store("b", "", {}).region == "us-east-1"  # the fixture cleared AWS_* from the environment
    assert S3Store("b", "", {}).url() == "s3://b"
    assert S3Store("b", "", {}).url("t/_delta_log/0.json") == "s3://b/t/_delta_log/0.json"
    assert S3Store("b", "/wh/x/", {}).url("k") == "s3://b/wh/x/k"


def test_open_store_makes_an_s3_store() -> None:
    store = open_store("s3://bkt/some/prefix", {"region": "eu-west-1"})
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.scheme) == ("bkt", "some/prefix", "s3")
    with pytest.raises(ConfigError, match="'bogus'"):
        open_store("s3://bkt", {"bogus": 1})


def test_repr_has_no_secrets() -> None:
    store = S3Store(
        "b",
        "p",
        {"aws_access_key_id": SECRET_ID, "aws_secret_access_key": SECRET_KEY, "aws_session_token": SECRET_TOKEN},
    )
    text = repr(store) + str({k: v for k, v in vars(store).items() if not k.startswith("_")})
    assert "S3Store(bucket='b'" in text
    for secret in (SECRET_ID, SECRET_KEY, SECRET_TOKEN):
        assert secret not in text


# -- against the S3 servers (moto, SeaweedFS) -----------------------------------------------------------------------


@pytest.mark.s3
def test_errors_name_operation_and_key_without_secrets(s3_options: dict[str, str]) -> None:
    opts = {**s3_options, "aws_access_key_id": SECRET_ID, "aws_secret_access_key": SECRET_KEY}
    store = S3Store("lv-no-such-bucket", "wh", opts)
    errors = []
    for call in (lambda: store.put("t/k.json", b"x"), lambda: store.get("t/k.json"), lambda: list(store.list("t/"))):
        with pytest.raises(StorageError) as info:
            call()
        assert not isinstance(info.value, NotFound)
        errors.append(str(info.value))
    # moto (no identities) answers NoSuchBucket; SeaweedFS (4.48, with the test identity) refuses the unknown
    # key first: InvalidAccessKeyId (403); either way the operation, the key and no secret are named
    assert "PUT" in errors[0] and "s3://lv-no-such-bucket/wh/t/k.json" in errors[0]
    assert any(code in errors[0] for code in ("NoSuchBucket", "InvalidAccessKeyId"))
    assert "GET" in errors[1] and "LIST" in errors[2]
    for message in errors:
        assert SECRET_ID not in message and SECRET_KEY not in message


def test_unreachable_endpoint_is_a_storage_error() -> None:
    store = S3Store(
        "b",
        "",
        {
            "endpoint_url": "http://127.0.0.1:9",  # discard port: connection refused
            "aws_access_key_id": SECRET_ID,
            "aws_secret_access_key": SECRET_KEY,
            "max_attempts": 1,
            "connect_timeout": 1,
        },
    )
    with pytest.raises(StorageError, match="HEAD") as info:
        store.head("k")
    assert SECRET_KEY not in str(info.value) and SECRET_ID not in str(info.value)


@pytest.mark.s3
def test_prefixes_isolate_stores_in_one_bucket(s3_bucket: str, s3_options: dict[str, str], s3_admin: Any) -> None:
    one, two = S3Store(s3_bucket, "one", s3_options), S3Store(s3_bucket, "two/deeper", s3_options)
    one.put("t/k", b"1")
    two.put("t/k", b"2")
    assert [m.key for m in one.list("")] == ["t/k"] == [m.key for m in two.list("t/")]
    assert (one.get("t/k").data, two.get("t/k").data) == (b"1", b"2")
    raw = [o["Key"] for o in s3_admin.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert raw == ["one/t/k", "two/deeper/t/k"]
    assert [m.key for m in one.list("", start_after="t/a")] == ["t/k"]
    assert [m.key for m in one.list("", start_after="t/k")] == []


@pytest.mark.s3
def test_conditional_puts_send_the_headers(s3_store: S3Store, s3_requests: deque[Any]) -> None:
    etag = s3_store.put("h", b"1", mode=CREATE)
    s3_store.put("h", b"2", mode=IfMatch(etag))
    s3_store.put("h", b"3")
    puts = [(r.if_none_match, r.if_match) for r in s3_requests if r.method == "PUT" and r.path.endswith("/wh/h")]
    assert puts == [("*", None), (None, etag), (None, None)]


def _refuse_copy_object(store: S3Store, monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """Make CopyObject answer as S3 does for a source over 5 GiB (moto copies any size)."""

    def copy_object(**kwargs: Any) -> Any:
        calls.append(kwargs["Key"])
        raise botocore.exceptions.ClientError(
            {"Error": {"Code": "InvalidRequest", "Message": "The specified copy source is larger than the "
                       "maximum allowable size for a copy source: 5368709120"},
             "ResponseMetadata": {"HTTPStatusCode": 400}}, "CopyObject")

    monkeypatch.setattr(store._client, "copy_object", copy_object)


@pytest.mark.s3
def test_copy_is_server_side(s3_store: S3Store, s3_requests: deque[Any]) -> None:
    s3_store.put("stage/f", b"data")
    s3_requests.clear()
    etag = s3_store.copy("stage/f", "t/f")
    assert [(r.method, r.path) for r in s3_requests] == [("PUT", f"/{s3_store.bucket}/wh/t/f")]
    assert s3_store.get("t/f").etag == etag


@pytest.mark.s3
def test_copy_over_5_gib_goes_in_parts(s3_store: S3Store, s3_requests: deque[Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import lv_core.storage.s3 as s3_module

    mib = 1024 * 1024
    data = bytes(range(256)) * (11 * mib // 256) + b"tail"
    s3_store.put("big", data)
    monkeypatch.setattr(s3_module, "MAX_COPY_OBJECT_SIZE", mib)
    monkeypatch.setattr(s3_module, "COPY_PART_SIZE", 5 * mib)
    calls: list[str] = []
    _refuse_copy_object(s3_store, monkeypatch, calls)
    s3_requests.clear()
    etag = s3_store.copy("big", "copy/big")
    assert calls == ["wh/copy/big"]
    got = s3_store.get("copy/big")
    assert got.data == data and got.etag == etag
    part_copies = [r for r in s3_requests if r.method == "PUT" and r.path.endswith("/wh/copy/big")]
    assert len(part_copies) == 3  # 5 + 5 + 1 MiB


@pytest.mark.s3
def test_copy_refused_for_another_reason_is_a_storage_error(s3_store: S3Store, s3_requests: deque[Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    s3_store.put("small", b"x")
    _refuse_copy_object(s3_store, monkeypatch, [])
    s3_requests.clear()
    with pytest.raises(StorageError, match="COPY .*InvalidRequest"):
        s3_store.copy("small", "dst")
    assert [r.method for r in s3_requests] == ["HEAD"]  # the source is small: no multipart copy
    assert not s3_store.exists("dst")


def _lose_first_response(store: S3Store, before: Callable[[], None] | None = None) -> list[str]:
    """Make the next PutObject's first attempt land (or run ``before`` instead) and lose its answer."""
    client = store._client
    attempts: list[str] = []

    def handler(request: Any, **_: Any) -> None:
        attempts.append(request.url)
        if len(attempts) == 1:
            if before is None:
                client._endpoint.http_session.send(request)  # the write reaches the server...
            else:
                before()
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)  # ...the answer does not
        return None

    client.meta.events.register("before-send.s3.PutObject", handler)
    return attempts


@pytest.mark.s3
def test_retried_create_whose_first_attempt_landed_succeeds(s3_store: S3Store) -> None:
    attempts = _lose_first_response(s3_store)
    etag = s3_store.put("log/0001.json", b"my commit", mode=CREATE)
    assert len(attempts) == 2  # botocore retried, and the retry met 412
    got = s3_store.get("log/0001.json")
    assert (got.data, got.etag) == (b"my commit", etag)


@pytest.mark.s3
def test_retried_create_that_lost_to_another_writer_fails(s3_store: S3Store, s3_admin: Any) -> None:
    def other_writer() -> None:
        s3_admin.put_object(Bucket=s3_store.bucket, Key="wh/log/0001.json", Body=b"their commit")

    attempts = _lose_first_response(s3_store, before=other_writer)
    with pytest.raises(AlreadyExists):
        s3_store.put("log/0001.json", b"my commit", mode=CREATE)
    assert len(attempts) == 2
    assert s3_store.get("log/0001.json").data == b"their commit"


@pytest.mark.s3
def test_retried_if_match_whose_first_attempt_landed_succeeds(s3_store: S3Store) -> None:
    e1 = s3_store.put("ptr", b"v1")
    attempts = _lose_first_response(s3_store)
    e2 = s3_store.put("ptr", b"v2", mode=IfMatch(e1))
    assert len(attempts) == 2
    assert s3_store.get("ptr").etag == e2 != e1
    with pytest.raises(PreconditionFailed):
        s3_store.put("ptr", b"v3", mode=IfMatch(e1))


@pytest.mark.s3
def test_deltalake_reads_and_writes_with_the_derived_options(s3_store: S3Store, s3_requests: deque[Any]) -> None:
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    opts = s3_store.storage_options_for_deltalake()
    table = pa.table({"id": [1, 2, 3], "balance": [10.0, 20.0, 30.0]})
    deltalake.write_deltalake(s3_store.url("bank"), table, storage_options=opts)
    deltalake.write_deltalake(s3_store.url("bank"), table, mode="append", storage_options=opts)
    dt = deltalake.DeltaTable(s3_store.url("bank"), storage_options=opts)
    assert dt.version() == 1
    assert dt.to_pyarrow_table().num_rows == 6
    logs = [m.key for m in s3_store.list("bank/_delta_log/")]
    assert logs == ["bank/_delta_log/00000000000000000000.json", "bank/_delta_log/00000000000000000001.json"]
    commits = [r for r in s3_requests if r.method == "PUT" and "/_delta_log/" in r.path]
    assert [r.if_none_match for r in commits] == ["*", "*"]  # delta-rs commits with put-if-absent


# -- 409 ConditionalRequestConflict (moto never sends it: stubbed client, no server) ---------------


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Any:
    from botocore.stub import Stubber

    import lv_core.storage.s3 as s3_module
    from lv_core.concurrency import Backoff

    monkeypatch.setattr(s3_module, "_conflict_backoff", lambda: Backoff(first=1e-6, cap=1e-6))
    store = S3Store("b", "wh", {"region": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "y",
                                "trust_conditional_writes": True})
    with Stubber(store._client) as stubber:
        yield store, stubber
        stubber.assert_no_pending_responses()


def test_conflict_409_is_retried_then_succeeds(stubbed: Any) -> None:
    store, stubber = stubbed
    params = {"Bucket": "b", "Key": "wh/log/1.json", "Body": b"c", "IfNoneMatch": "*"}
    stubber.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409, expected_params=params)
    stubber.add_response("put_object", {"ETag": '"e1"'}, expected_params=params)
    assert store.put("log/1.json", b"c", mode=CREATE) == '"e1"'


@pytest.mark.parametrize("mode, error", [(CREATE, AlreadyExists), (IfMatch('"e0"'), PreconditionFailed)])
def test_conflict_409_that_persists_is_a_lost_race(stubbed: Any, mode: Any, error: type[Exception]) -> None:
    store, stubber = stubbed
    for _ in range(4):
        stubber.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409)
    with pytest.raises(error):
        store.put("log/1.json", b"c", mode=mode)


def test_endpoint_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(ConfigError) as info:
        S3Store("b", "", {"endpoint_url": "http://user:pw-never-leak@127.0.0.1:9000"})
    assert "pw-never-leak" not in str(info.value)
