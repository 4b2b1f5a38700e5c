"""S3 (and S3-compatible stores: MinIO, moto) as an object store, through boto3.

Put modes map to S3 conditional writes:

- ``create`` -> ``PutObject`` with ``If-None-Match: *``; 412 ``PreconditionFailed`` or 409
  ``ConditionalRequestConflict`` -> :class:`AlreadyExists`.
- :class:`IfMatch` -> ``PutObject`` with ``If-Match: <etag>``; 412, 409 or 404 -> :class:`PreconditionFailed`.

A 409 means a concurrent write to the key was in flight; S3 asks clients to retry, so a few
retries with backoff come first (the in-flight write may fail and leave the key free).

botocore retries transient failures (connection resets, 5xx, throttling). A retried conditional
put can fail its condition *because its own first attempt landed* (the response was lost), so a
412/409 after a retry is checked: if the object now holds exactly our bytes, the put succeeded.

``copy`` is a server-side ``CopyObject`` (the bytes never pass through this client); a source
over 5 GiB, which CopyObject refuses, is copied as a multipart upload of ``UploadPartCopy`` parts.

Etags are the strings S3 returns (with their quotes); they change whenever the content changes,
but writing identical bytes again yields the same etag (S3 etags are content hashes).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlparse

import boto3
import botocore.exceptions
from botocore.config import Config

from lv_core.concurrency import Backoff
from lv_core.errors import AlreadyExists, ConfigError, NotFound, PreconditionFailed, StorageError
from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode
from lv_core.storage.guard import WriteGuard
from lv_core.storage.readback import etag_if_holds

#: Options accepted in ``storage_options`` (anything else is a :class:`ConfigError`).
KNOWN_OPTIONS = frozenset(
    {
        "endpoint_url",
        "region",
        "region_name",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "profile",
        "connect_timeout",
        "read_timeout",
        "max_attempts",
        "trust_conditional_writes",
    }
)
_SECRET_OPTIONS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_DEFAULT_REGION = "us-east-1"
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: A 409 ConditionalRequestConflict means another write to the key was in flight: retry a few times.
_CONFLICT_RETRIES = 3


def _conflict_backoff() -> Backoff:
    """0.05 s doubling per retry, each delay drawn from 0.5x to 1.5x of it (so pollers spread out)."""
    return Backoff(first=0.075, cap=0.6, factor=2.0, jitter=1 / 3)


#: The largest source CopyObject accepts; larger ones are copied in parts.
MAX_COPY_OBJECT_SIZE = 5 * 1024**3
#: Part size of a multipart copy (grown when 10,000 parts would not cover the object).
COPY_PART_SIZE = 512 * 1024**2
_MAX_PARTS = 10_000


#: Libraries whose DEBUG logs show request headers (botocore logs each canonical request and the
#: prepared request, ``x-amz-security-token`` included).
_LIBRARY_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")
#: A session-token header value in a log line, whatever token it is (e.g. one the AWS chain refreshed).
_TOKEN_HEADER = re.compile(r"(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^\s'\"\\,}&]+", re.IGNORECASE)
_REDACTED = "***"
#: Shorter "secrets" are not replaced (it would garble unrelated log text).
_MIN_SECRET_LEN = 4


class _RedactCredentials(logging.Filter):
    """Blanks out credentials in log records of the AWS libraries (it redacts, never drops a record).

    Redacts the registered secret keys and session tokens wherever they appear, and any
    ``x-amz-security-token`` header value. Installed on every library logger by :func:`_install_redaction`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()

    def add(self, secrets: Iterable[str | None]) -> None:
        """Also redact ``secrets`` (empty and very short values are ignored)."""
        new = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET_LEN}
        with self._lock:
            self._secrets = self._secrets | new

    def redact(self, text: str) -> str:
        """``text`` with the known secrets and session-token header values replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, _REDACTED)
        if "security-token" in text.lower():
            text = _TOKEN_HEADER.sub(lambda m: m.group(1) + _REDACTED, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave the record to the handler
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


_REDACTION = _RedactCredentials()
_REDACTION_LOCK = threading.Lock()


def _install_redaction(secrets: Iterable[str | None] = ()) -> None:
    """Register ``secrets`` and add the redacting filter to every existing AWS-library logger.

    A logger's filters only see records logged to that very logger (not to its children), so the
    filter goes on each one; called after creating a client, when botocore has created its loggers.
    """
    _REDACTION.add(secrets)
    with _REDACTION_LOCK:
        names = [n for n, lg in list(logging.Logger.manager.loggerDict.items())
                 if isinstance(lg, logging.Logger) and n.split(".")[0] in _LIBRARY_LOGGERS]
        for name in {*names, *_LIBRARY_LOGGERS}:
            logger = logging.getLogger(name)
            if _REDACTION not in logger.filters:
                logger.addFilter(_REDACTION)


def _quoted(etag: str) -> str:
    """An ETag as GET, HEAD and PUT report it (quoted): SeaweedFS 4.48 answers CopyObject unquoted."""
    return etag if etag.startswith(('"', 'W/"')) else f'"{etag}"'


def _flag(value: Any) -> bool:
    """A boolean storage option (true/false, 1/0, yes/no, as text or not)."""
    if isinstance(value, str):
        if value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if value.strip().lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"expected true or false, not {value!r}")
    return bool(value)


def _check_key(key: str) -> None:
    """Reject keys that are not plain relative ``/``-separated paths (same rule as LocalStore)."""
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
        raise StorageError(f"invalid object key {key!r}")


class S3Store(ObjectStore):
    """Object store over ``s3://bucket/prefix`` using boto3 with path-style addressing.

    Args:
        bucket: the bucket name.
        prefix: key prefix inside the bucket (no leading/trailing ``/`` needed); may be empty.
        options: ``endpoint_url``, ``region`` (or ``region_name``), ``aws_access_key_id``,
            ``aws_secret_access_key``, ``aws_session_token``, ``profile``, and the tuning knobs
            ``connect_timeout``/``read_timeout`` (seconds) and ``max_attempts`` (total tries of a
            request, first one included; botocore "standard" retries, default 5).
            ``trust_conditional_writes`` (default false) skips the conditional-write check before the
            first write (:mod:`lv_core.storage.guard`): only for a store ``lv doctor`` passed.
            Without keys or a profile the standard boto3 credential chain applies.

    Raises:
        ConfigError: an unknown option, a bad value, or an unknown profile.
    """

    scheme = "s3"

    def __init__(self, bucket: str, prefix: str = "", options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        unknown = sorted(set(opts) - KNOWN_OPTIONS)
        if unknown:
            raise ConfigError(
                f"unknown S3 storage option(s) {', '.join(map(repr, unknown))}; "
                f"accepted: {', '.join(sorted(KNOWN_OPTIONS))}"
            )
        if not bucket:
            raise ConfigError("an S3 store needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url: str | None = opts.get("endpoint_url") or None
        if self.endpoint_url is not None:
            parsed = urlparse(str(self.endpoint_url))
            if parsed.username or parsed.password:
                raise ConfigError("endpoint_url must not contain credentials; "
                                  "use aws_access_key_id/aws_secret_access_key")
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ConfigError(f"endpoint_url must be an http(s) URL, got {self.endpoint_url!r}")
        region, region_name = opts.get("region"), opts.get("region_name")
        if region and region_name and region != region_name:
            raise ConfigError("give either 'region' or 'region_name', not two different values")
        keys = {k: opts[k] for k in _SECRET_OPTIONS if opts.get(k)}
        if bool(keys.get("aws_access_key_id")) != bool(keys.get("aws_secret_access_key")):
            raise ConfigError("aws_access_key_id and aws_secret_access_key must be given together")
        profile = opts.get("profile")
        if profile and keys:
            raise ConfigError("give either 'profile' or explicit AWS keys, not both")
        try:
            session = boto3.session.Session(profile_name=profile, **keys) if profile else boto3.session.Session(**keys)
        except botocore.exceptions.ProfileNotFound as e:
            raise ConfigError(f"AWS profile {profile!r} not found") from e
        self.region: str = region or region_name or session.region_name or _DEFAULT_REGION
        try:
            config = Config(
                s3={"addressing_style": "path"},
                retries={"total_max_attempts": int(opts.get("max_attempts", 5)), "mode": "standard"},
                connect_timeout=float(opts.get("connect_timeout", 5)),
                read_timeout=float(opts.get("read_timeout", 30)),
                max_pool_connections=32,
                tcp_keepalive=True,
            )
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad S3 tuning option: {e}") from e
        self._session = session
        self._client = session.client("s3", region_name=self.region, endpoint_url=self.endpoint_url, config=config)
        _install_redaction(self._secrets())
        where = self.endpoint_url or f"aws:{self.region}"
        #: checks once that this store honours conditional writes before the first write (never credentials)
        self.guard = WriteGuard(_Unguarded(self), f"{where}|{self.bucket}|{self.prefix}",
                                trusted=_flag(opts.get("trust_conditional_writes", False)))

    def __repr__(self) -> str:
        endpoint = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3Store(bucket={self.bucket!r}, prefix={self.prefix!r}, region={self.region!r}{endpoint})"

    # -- helpers -------------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    def _frozen_credentials(self) -> Any:
        """The session's current credentials (None when there are none or they cannot be resolved)."""
        try:
            creds = self._session.get_credentials()
            return creds.get_frozen_credentials() if creds is not None else None
        except botocore.exceptions.BotoCoreError:
            return None

    def _secrets(self) -> tuple[str | None, ...]:
        """The secret key and session token in use (what the log filter redacts)."""
        frozen = self._frozen_credentials()
        return (frozen.secret_key, frozen.token) if frozen is not None else ()

    def _scrub(self, text: str) -> str:
        """Blank out the credentials in use, should a server or library echo them."""
        frozen = self._frozen_credentials()
        if frozen is not None:
            for secret in (frozen.access_key, frozen.secret_key, frozen.token):
                if secret:
                    text = text.replace(secret, "***")
        return text

    def _error(self, op: str, key: str, e: Exception) -> StorageError | ConfigError:
        """Translate a botocore exception into our hierarchy (message without secrets)."""
        if isinstance(e, botocore.exceptions.NoCredentialsError):
            return ConfigError(
                f"S3 {op} s3://{self.bucket}: no AWS credentials (pass aws_access_key_id/"
                "aws_secret_access_key or a profile in storage_options, or configure the AWS chain)"
            )
        if isinstance(e, botocore.exceptions.ClientError):
            err = e.response.get("Error", {})
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            detail = f"{err.get('Code', '?')} (HTTP {status}): {err.get('Message', '')}".rstrip(": ")
        else:
            detail = f"{type(e).__name__}: {e}"
        return StorageError(self._scrub(f"S3 {op} {self.url(key) if key else self.url()} failed: {detail}"))

    @staticmethod
    def _code(e: botocore.exceptions.ClientError) -> str:
        return str(e.response.get("Error", {}).get("Code", ""))

    @staticmethod
    def _status(e: botocore.exceptions.ClientError) -> int:
        return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)

    @staticmethod
    def _retried(e: botocore.exceptions.ClientError) -> bool:
        return int(e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0

    # -- ObjectStore ---------------------------------------------------------------------------

    def url(self, key: str = "") -> str:
        base = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"{base}/{key}" if key else base

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        full = self._full(key)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if byte_range is not None:
            start, end = byte_range
            if start < 0 or end < 0:
                raise ValueError(f"byte_range must be non-negative, got {byte_range!r}")
            if end <= start:  # an empty range: S3 cannot express it, but existence and etag still matter
                meta = self.head(key)
                return GetResult(b"", meta.etag)
            kwargs["Range"] = f"bytes={start}-{end - 1}"
        try:
            resp = self._client.get_object(**kwargs)
            with resp["Body"] as body:
                data = body.read()
        except botocore.exceptions.ClientError as e:
            code = self._code(e)
            if code in _NOT_FOUND_CODES:
                raise NotFound(key) from e
            if code == "InvalidRange" or self._status(e) == 416:  # start beyond the end
                return GetResult(b"", self.head(key).etag)
            raise self._error("GET", key, e) from e
        except (botocore.exceptions.BotoCoreError, OSError) as e:
            raise self._error("GET", key, e) from e
        return GetResult(data, resp["ETag"])

    def head(self, key: str) -> ObjectMeta:
        full = self._full(key)
        try:
            resp = self._client.head_object(Bucket=self.bucket, Key=full)
        except botocore.exceptions.ClientError as e:
            if self._code(e) in _NOT_FOUND_CODES or self._status(e) == 404:
                raise NotFound(key) from e
            raise self._error("HEAD", key, e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("HEAD", key, e) from e
        return ObjectMeta(key, int(resp["ContentLength"]), resp["ETag"], resp["LastModified"].timestamp())

    # -- writes: refused on a store that fails the conditional-write check (lv_core/storage/guard.py) --

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        self.guard.ensure()
        return self._put(key, data, mode=mode)

    def delete(self, key: str) -> None:
        self.guard.ensure()
        self._delete(key)

    def _put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        full = self._full(key)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": bytes(data)}
        if mode == CREATE:
            kwargs["IfNoneMatch"] = "*"
        elif isinstance(mode, IfMatch):
            kwargs["IfMatch"] = mode.etag
        elif mode != OVERWRITE:
            raise ValueError(f"unknown put mode {mode!r}")
        backoff = _conflict_backoff()
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                return str(self._client.put_object(**kwargs)["ETag"])
            except botocore.exceptions.ClientError as e:
                code, status = self._code(e), self._status(e)
                if mode == OVERWRITE:
                    raise self._error("PUT", key, e) from e
                conflict = code == "ConditionalRequestConflict" or status == 409
                if conflict and attempt < _CONFLICT_RETRIES:
                    # S3: a concurrent write to the key was in flight; its outcome decides ours.
                    backoff.sleep()
                    continue
                failed_condition = conflict or code == "PreconditionFailed" or status == 412
                gone = isinstance(mode, IfMatch) and (code in _NOT_FOUND_CODES or status == 404)
                if not (failed_condition or gone):
                    raise self._error("PUT", key, e) from e
                if self._retried(e):  # our own first attempt may have landed (its response lost)
                    landed = etag_if_holds(self, key, data)
                    if landed is not None:
                        return landed
                if mode == CREATE:
                    raise AlreadyExists(key) from e
                raise PreconditionFailed(f"{key}: {'object is gone' if gone else 'etag changed'}") from e
            except botocore.exceptions.BotoCoreError as e:
                raise self._error("PUT", key, e) from e
        raise AssertionError("unreachable")

    def copy(self, src: str, dst: str) -> str:
        self.guard.ensure()
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        dst_full = self._full(dst)
        try:
            resp = self._client.copy_object(Bucket=self.bucket, Key=dst_full, CopySource=source)
            return _quoted(str(resp["CopyObjectResult"]["ETag"]))
        except botocore.exceptions.ClientError as e:
            if self._code(e) in _NOT_FOUND_CODES or self._status(e) == 404:
                raise NotFound(src) from e
            if self._code(e) != "InvalidRequest":
                raise self._error("COPY", dst, e) from e
            meta = self.head(src)  # CopyObject refuses sources over 5 GiB with InvalidRequest
            if meta.size <= MAX_COPY_OBJECT_SIZE:
                raise self._error("COPY", dst, e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("COPY", dst, e) from e
        return self._copy_in_parts(source, dst, meta)

    def _copy_in_parts(self, source: dict[str, str], dst: str, meta: ObjectMeta) -> str:
        """Multipart upload of ``UploadPartCopy`` ranges of the source version ``meta`` describes."""
        part = max(COPY_PART_SIZE, -(-meta.size // _MAX_PARTS))
        dst_full = self._full(dst)
        upload_id: str | None = None
        try:
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=dst_full)["UploadId"]
            parts = []
            for number, start in enumerate(range(0, meta.size, part), start=1):
                resp = self._client.upload_part_copy(
                    Bucket=self.bucket, Key=dst_full, UploadId=upload_id, PartNumber=number, CopySource=source,
                    CopySourceRange=f"bytes={start}-{min(start + part, meta.size) - 1}",
                    CopySourceIfMatch=meta.etag,  # every part from the same version of the source
                )
                parts.append({"PartNumber": number, "ETag": resp["CopyPartResult"]["ETag"]})
            resp = self._client.complete_multipart_upload(
                Bucket=self.bucket, Key=dst_full, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
            upload_id = None
            return _quoted(str(resp["ETag"]))
        except botocore.exceptions.ClientError as e:
            if self._code(e) == "PreconditionFailed" or self._status(e) == 412:
                raise StorageError(f"S3 COPY {self.url(dst)}: the source {meta.key!r} changed during the copy") from e
            if self._code(e) in _NOT_FOUND_CODES:
                raise NotFound(meta.key) from e
            raise self._error("COPY", dst, e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("COPY", dst, e) from e
        finally:
            if upload_id is not None:  # do not leave the parts behind (they are billed)
                try:
                    self._client.abort_multipart_upload(Bucket=self.bucket, Key=dst_full, UploadId=upload_id)
                except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
                    pass

    def _delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=full)
        except botocore.exceptions.ClientError as e:
            if self._code(e) in _NOT_FOUND_CODES:
                return
            raise self._error("DELETE", key, e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("DELETE", key, e) from e

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        base = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base + prefix}
        if start_after is not None:
            kwargs["StartAfter"] = base + start_after
        return self._list(prefix, kwargs)

    def _list(self, prefix: str, kwargs: dict[str, Any]) -> Iterator[ObjectMeta]:
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(**kwargs):
                for obj in page.get("Contents", ()):
                    yield ObjectMeta(
                        self._rel(obj["Key"]), int(obj["Size"]), obj["ETag"], obj["LastModified"].timestamp()
                    )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error("LIST", prefix, e) from e

    def close(self) -> None:
        self._client.close()

    # -- for other readers ---------------------------------------------------------------------

    def storage_options_for_deltalake(self) -> dict[str, str]:
        """The ``storage_options`` delta-rs (``deltalake``) needs to reach the same bucket.

        Credentials are resolved now (explicit keys, profile or the AWS chain) and returned as
        static keys; temporary credentials therefore expire with their session.
        ``aws_conditional_put=etag`` makes delta-rs commit with ``If-None-Match`` (no DynamoDB
        lock, no unsafe rename); path-style requests match the boto3 client.
        """
        opts: dict[str, str] = {
            "AWS_REGION": self.region,
            "AWS_CONDITIONAL_PUT": "etag",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }
        if self.endpoint_url:
            opts["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                opts["AWS_ALLOW_HTTP"] = "true"
        creds = self._session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            opts["AWS_ACCESS_KEY_ID"] = frozen.access_key
            opts["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
            if frozen.token:
                opts["AWS_SESSION_TOKEN"] = frozen.token
        return opts


class _Unguarded(ObjectStore):
    """An S3 store's requests without the write guard (the guard's own checks use it)."""

    scheme = "s3"

    def __init__(self, store: S3Store) -> None:
        self.store = store

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        return self.store.get(key, byte_range=byte_range)

    def put(self, key: str, data: bytes, *, mode: PutMode = OVERWRITE) -> str:
        return self.store._put(key, data, mode=mode)

    def head(self, key: str) -> ObjectMeta:
        return self.store.head(key)

    def delete(self, key: str) -> None:
        self.store._delete(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        return self.store.list(prefix, start_after=start_after)

    def url(self, key: str = "") -> str:
        return self.store.url(key)
