"""Isolation presets -> LakeVilla features (ARCHITECTURE.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from lv_core.errors import ConfigError

ALL_FEATURES = frozenset({"R", "CT", "I"})


@dataclass(frozen=True)
class Preset:
    name: str
    features: frozenset[str]
    slack: int = 0
    check_r1: bool = True  # R1 applies to transactions that read
    r1_read_only: bool = True  # R1 applies to read-only transactions too
    r1_files: bool = False  # R1 fires only for newer commits that changed what was read (files, predicates)
    snapshot_read_only: bool = False  # a read-only transaction that read one global version skips R1
    doc: str = ""


PRESETS: dict[str, Preset] = {
    "serializable": Preset("serializable", ALL_FEATURES, r1_files=True, snapshot_read_only=True,
                           doc="serializable, lakehouse-wide"),
    "snapshot": Preset("snapshot", ALL_FEATURES, check_r1=False, doc="snapshot isolation (R2+R3 only)"),
    "write_serializable": Preset("write_serializable", ALL_FEATURES, r1_read_only=False, r1_files=True,
                                 doc="read-only transactions pass validation without R1"),
    "repeatable_read": Preset("repeatable_read", frozenset({"R", "CT"}), doc="repeatable reads across tables"),
    "delta": Preset("delta", frozenset(), doc="raw Delta Lake: every statement commits on its own (the baseline)"),
}


class Isolation(NamedTuple):
    """A preset resolved with its overrides: what a transaction runs under. A caller that resolved
    it once (a ``%%lvtxn`` cell, before anything runs) hands it to ``Lakehouse.begin`` as it is."""

    preset: Preset
    features: frozenset[str]
    slack: int


def resolve(preset: str | None, features: str | Iterable[object] | None = None,
            slack: int | None = None) -> Isolation:
    """Validate a preset name and optional overrides; return (preset, features, slack).

    Raises:
        ConfigError: an unknown preset or feature, or a negative slack.
    """
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    name = (preset or "serializable").strip().lower()
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    p = PRESETS[name]
    feats = p.features
    if features is not None:
        if isinstance(features, str):
            items = [f.strip() for f in features.replace("+", ",").split(",") if f.strip()]
        else:
            try:
                items = [str(f).strip() for f in features]
            except TypeError:
                raise ConfigError(f"features must be a set like {{'R','CT','I'}}, not {features!r}") from None
        bad = sorted({i.upper() for i in items} - ALL_FEATURES)
        if bad:
            raise ConfigError(f"unknown feature(s) {', '.join(bad)}; LakeVilla features are R, CT and I")
        feats = frozenset(i.upper() for i in items)
        if "CT" in feats:
            feats = feats | {"R"}  # CT builds on markers (module #1)
    s = p.slack if slack is None else slack
    if not isinstance(s, int) or isinstance(s, bool) or s < 0:
        raise ConfigError(f"slack must be a non-negative integer, not {slack!r}")
    return Isolation(p, feats, s)
