"""Data file paths: partition folder names, and the path strings of ``add``/``remove`` in the log.

Two encodings are involved, and both must match what Delta on Spark writes:

1. **Folder names** (``escape_partition_name``): Hive/Spark ``ExternalCatalogUtils.escapePathName``.
   Only control characters 0x01-0x1F and 0x7F and ``" # % ' * / : = ? \\ { [ ] ^`` become ``%XX``
   (uppercase hex); everything else, including ``+``, space, ``!``, ``(``, ``)``, ``@``, ``,``, ``}``
   and non-ASCII letters such as ``ü``, is kept. A null or empty value is the folder
   ``__HIVE_DEFAULT_PARTITION__``. (delta-rs 1.6 escapes more: it percent-encodes every character
   outside ``[A-Za-z0-9._-]``, e.g. ``a+b`` -> ``a%2Bb``. Both agree on the characters Spark escapes,
   on the ``%XX`` form and on the null folder; where they differ we follow Spark, the reference
   implementation, so folders look the same whichever of the two engines wrote a table. Readers never
   parse folder names: they take partition values from ``partitionValues`` and locate files through
   the log path, so either layout is read correctly by both.)

2. **Log paths** (``encode_path``): the ``path`` of an ``add`` is a URI (RFC 2396) reference. Delta on
   Spark writes ``new Path(partitionDir, fileName).toUri.toString``, i.e. java.net.URI quoting: ``%``
   is always quoted (``%`` -> ``%25``, so a folder ``p=50%25`` is logged as ``p=50%2525``), and so is
   every character not allowed in a URI path (space, ``" # < > ? [ \\ ] ^ ` { | }``, control
   characters, non-ASCII space/control characters) as the ``%XX`` of its UTF-8 bytes. Kept as they are:
   letters, digits, ``- _ . ! ~ * ' ( )``, ``, ; : $ & + =``, ``/``, ``@`` and other non-ASCII characters.
   delta-rs applies the same rule to its (fully escaped) folder names, so for a delta-rs layout our
   encoding gives exactly the string delta-rs logged (e.g. folder ``p=a%2Bb`` -> ``p=a%252Bb``).
   One addition of ours: a ``:`` in the first segment of a relative path is quoted (``%3A``) so that
   no reader mistakes the segment for a URI scheme.

Decoding (``decode_path``) is ``%XX`` -> byte (UTF-8); ``+`` is not a space in a path. Decoding is
many-to-one (``a+b`` and ``a%2Bb`` name the same file), so a path read from the log is never
re-encoded: the actions keep the exact log string (``AddFile.raw_path``) and a ``remove`` repeats it
byte for byte, because other readers (delta-rs) match a ``remove`` to its ``add`` by that string.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Mapping, Optional, Sequence
from urllib.parse import unquote

__all__ = ["HIVE_NULL", "decode_path", "encode_path", "escape_partition_name", "partition_folder"]

#: The folder name of a null (or empty) partition value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

_SCHEME = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*://|file:)")

# Hive/Spark escapePathName: these characters (and nothing else) become %XX.
_HIVE_ESCAPE = frozenset([chr(c) for c in range(0x01, 0x20)] + ['"', "#", "%", "'", "*", "/", ":", "=", "?",
                                                                  "\\", "\x7f", "{", "[", "]", "^"])
# java.net.URI, path component: unreserved (alphanum, mark), punct, "/" and "@" are legal as they are.
_URI_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                       "-_.!~*'()" ",;:$&+=" "/@")
_ALL_URI_LEGAL = re.compile("[" + re.escape("".join(sorted(_URI_LEGAL))) + "]*")


def escape_partition_name(text: str) -> str:
    """A partition column name or value escaped for a folder name, as Hive/Spark ``escapePathName``."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPE else c for c in text)


def partition_folder(partition_columns: Sequence[str], values: Mapping[str, Optional[str]]) -> str:
    """``col=value/...`` for a partition (``__HIVE_DEFAULT_PARTITION__`` for a null or empty value)."""
    segs = []
    for col in partition_columns:
        v = values.get(col)
        segs.append(f"{escape_partition_name(col)}={HIVE_NULL if v is None or v == '' else escape_partition_name(v)}")
    return "/".join(segs)


def _uri_char(c: str) -> str:
    if c in _URI_LEGAL:
        return c
    o = ord(c)
    # java.net.URI "other": non-ASCII characters that are neither ISO control nor space characters
    if o > 0x7F and not (o <= 0x9F or unicodedata.category(c) in ("Zs", "Zl", "Zp")):
        return c
    return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def _uri_path(text: str) -> str:
    if _ALL_URI_LEGAL.fullmatch(text):  # the common case: nothing to escape
        return text
    return "".join(_uri_char(c) for c in text)


def encode_path(path: str) -> str:
    """A data file path (decoded, relative to the table, or an absolute URI) as a log ``path`` string.

    Only for paths LakeVilla creates: a path read from the log is written back with its own string.
    """
    m = _SCHEME.match(path)  # absolute URIs (shallow clones): keep "scheme://" as it is
    if m:
        return m.group(0) + _uri_path(path[m.end():])
    out = _uri_path(path)
    head, sep, rest = out.partition("/")
    return head.replace(":", "%3A") + sep + rest


def decode_path(path: str) -> str:
    """Decode a log ``path`` string (``%XX`` as UTF-8; ``+`` stays ``+``)."""
    return unquote(path)
