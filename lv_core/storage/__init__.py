"""Object stores: the interface, a local folder, S3 (boto3), and instrumentation."""

from typing import TYPE_CHECKING, Any

from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode
from lv_core.storage.instrumented import KINDS, InstrumentedStore
from lv_core.storage.local import LocalStore
from lv_core.storage.uri import open_store

if TYPE_CHECKING:
    from lv_core.storage.s3 import S3Store

__all__ = [
    "CREATE",
    "KINDS",
    "OVERWRITE",
    "GetResult",
    "IfMatch",
    "InstrumentedStore",
    "LocalStore",
    "ObjectMeta",
    "ObjectStore",
    "PutMode",
    "S3Store",
    "open_store",
]


def __getattr__(name: str) -> Any:
    """Import :class:`S3Store` (and boto3) only when it is asked for."""
    if name == "S3Store":
        from lv_core.storage.s3 import S3Store

        return S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
