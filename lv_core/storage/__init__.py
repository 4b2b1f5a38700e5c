"""Object stores: the interface, a local folder, S3 (boto3), and instrumentation."""

from lv_core.storage.base import CREATE, OVERWRITE, GetResult, IfMatch, ObjectMeta, ObjectStore, PutMode
from lv_core.storage.local import LocalStore
from lv_core.storage.uri import open_store

__all__ = [
    "CREATE",
    "OVERWRITE",
    "GetResult",
    "IfMatch",
    "LocalStore",
    "ObjectMeta",
    "ObjectStore",
    "PutMode",
    "open_store",
]
