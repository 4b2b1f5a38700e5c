"""``connect(spark_conf=...)`` and ``%lv connect --conf``: checked before anything starts; set on a
running session all or nothing (no Spark here: a fake session stands in for Spark's runtime config)."""

from __future__ import annotations

from typing import Any

import pytest

import lv_core
from lv_core.engine.spark_conf import apply_runtime, normalize, parse_pairs
from lv_core.errors import ConfigError


def test_normalize_accepts_spark_settings_as_strings() -> None:
    assert normalize({"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": 8,
                      "spark.sql.adaptive.enabled": False, "spark.hadoop.fs.s3a.path.style.access": True}) == {
        "spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "false", "spark.hadoop.fs.s3a.path.style.access": "true"}
    assert normalize(None) == {}


@pytest.mark.parametrize("conf, names", [
    ({"driver.memory": "4g"}, "driver.memory"),
    ({"spark.": "x"}, "spark."),
    ({"spark.a b": "x"}, "spark.a b"),
    ({3: "x"}, "3"),
    ({"spark.driver.memory": None}, "spark.driver.memory"),
    ({"spark.driver.memory": ["4g"]}, "spark.driver.memory"),
    ({"spark.driver.memory": "4g\n--conf x"}, "spark.driver.memory"),
    ({"spark.driver.memory": " "}, "spark.driver.memory"),
    ("spark.driver.memory=4g", "mapping"),
])
def test_bad_settings_are_config_errors_naming_the_key(conf: Any, names: str) -> None:
    with pytest.raises(ConfigError, match="spark_conf") as e:
        normalize(conf)
    assert names in str(e.value)


def test_parse_pairs() -> None:
    assert parse_pairs(["spark.driver.memory=4g", "spark.a=x=y", "spark.driver.memory=6g"]) == {
        "spark.driver.memory": "6g", "spark.a": "x=y"}
    assert parse_pairs(None) == {}
    for bad in ["spark.driver.memory", "=4g", "memory=4g"]:
        with pytest.raises(ConfigError):
            parse_pairs([bad])


class FakeConf:
    """Spark's runtime config: static keys refuse changes, a typed key refuses bad values."""

    STATIC = {"spark.driver.memory", "spark.sql.warehouse.dir"}

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self.calls: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.calls.append(f"set {key}={value}")
        if key in self.STATIC:
            raise RuntimeError(f'[CANNOT_MODIFY_CONFIG] Cannot modify the value of the Spark config: "{key}".')
        if key == "spark.sql.shuffle.partitions" and not value.isdigit():
            raise RuntimeError(f"[INVALID_CONF_VALUE.TYPE_MISMATCH] The value '{value}' in the config "
                               f"\"{key}\" is invalid. It should be an integer.")
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.calls.append(f"unset {key}")
        self.values.pop(key, None)


class FakeSession:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = FakeConf(values)


BASE = {"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "4"}


def test_runtime_settings_are_set_and_equal_ones_skipped() -> None:
    s = FakeSession(BASE)
    apply_runtime(s, {"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "9", "spark.x.y": "z"},
                  where="the Spark session sc://h:1")
    assert s.conf.values == {**BASE, "spark.sql.shuffle.partitions": "9", "spark.x.y": "z"}
    assert s.conf.calls == ["set spark.sql.shuffle.partitions=9", "set spark.x.y=z"]  # 1g already in effect


def test_a_static_setting_is_refused_by_name_and_nothing_changes() -> None:
    s = FakeSession(BASE)
    with pytest.raises(ConfigError) as e:
        apply_runtime(s, {"spark.x.y": "z", "spark.sql.shuffle.partitions": "9", "spark.driver.memory": "4g"},
                      where="the Spark session sc://h:1")
    msg = str(e.value)
    assert "spark.driver.memory is a static Spark setting" in msg and "runs with 1g" in msg
    assert "sc://h:1" in msg and "No setting was changed" in msg and "start-connect-server" in msg
    assert s.conf.values == BASE


def test_embedded_static_refusal_says_how_to_restart() -> None:
    s = FakeSession(BASE)
    with pytest.raises(ConfigError, match="stop_spark"):
        apply_runtime(s, {"spark.driver.memory": "4g"}, where="the embedded Spark server of this process")


def test_a_bad_value_is_refused_and_earlier_settings_are_put_back() -> None:
    s = FakeSession({**BASE, "spark.a.b": "old"})
    with pytest.raises(ConfigError, match=r"Spark refused spark.sql.shuffle.partitions=many .*integer"):
        apply_runtime(s, {"spark.a.b": "new", "spark.c.d": "x", "spark.sql.shuffle.partitions": "many"},
                      where="the Spark session sc://h:1")
    assert s.conf.values == {**BASE, "spark.a.b": "old"}


def test_connect_checks_spark_conf_before_anything(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="not a Spark setting name"):
        lv_core.connect(str(tmp_path / "wh"), spark_conf={"driver.memory": "4g"})
    assert not (tmp_path / "wh").exists()
    lh = lv_core.connect(str(tmp_path / "wh"), spark_conf={"spark.driver.memory": "2g"})
    assert lh.data_plane.spark_conf == {"spark.driver.memory": "2g"}  # type: ignore[attr-defined]
    assert lv_core.connect(str(tmp_path / "wh")).data_plane.spark_conf == {}  # type: ignore[attr-defined]
