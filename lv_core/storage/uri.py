"""Warehouse URIs -> object stores: plain path, ``file:///abs/path``, ``s3://bucket/prefix``."""

from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

from lv_core.errors import ConfigError
from lv_core.storage.base import ObjectStore
from lv_core.storage.local import LocalStore


def open_store(warehouse: str | os.PathLike[str] | None,
               storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
    """Open the object store a warehouse URI names (``None`` -> ``$LV_WAREHOUSE`` or ``./lakehouse``)."""
    if warehouse is None:
        warehouse = os.environ.get("LV_WAREHOUSE") or "lakehouse"
    uri = os.fspath(warehouse)
    if not uri:
        raise ConfigError("empty warehouse location")
    if "\x00" in uri or any(ord(c) < 32 for c in uri):
        raise ConfigError(f"warehouse {uri!r}: control characters are not allowed in a location")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("s3", "s3a"):
        from lv_core.storage.s3 import S3Store

        if not parsed.netloc:
            raise ConfigError(f"warehouse {uri!r}: an S3 URI needs a bucket (s3://bucket/prefix)")
        return S3Store(parsed.netloc, parsed.path.strip("/"), dict(storage_options or {}))
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"warehouse {uri!r}: file URIs must be local (file:///abs/path)")
        return LocalStore(unquote(parsed.path))
    if scheme and len(scheme) > 1:  # one letter would be a Windows drive
        raise ConfigError(f"warehouse {uri!r}: unsupported scheme {scheme!r} (use a path, file:// or s3://)")
    if storage_options:
        raise ConfigError("storage_options apply to s3:// warehouses only")
    return LocalStore(uri)
