"""The PostgreSQL reference the anomaly matrix compares aborts with, measured on a real server.

Starts a throw-away PostgreSQL 15 cluster (tests/helpers/postgres.py), runs every Hermitage schedule of
tests/reliability/anomalies.py in both forms at SERIALIZABLE, and checks that the outcomes equal the
recording (tests/reliability/postgres_outcomes.json) the matrix uses, and that every history PostgreSQL
produced is serializable by the same oracle. Skipped, with the reason, when the server or psycopg is
missing. Re-record with ``python -m tests.reliability.anomalies record-postgres``.
"""

from __future__ import annotations

import pytest

from tests.helpers import postgres
from tests.reliability.anomalies import ANOMALIES, load_postgres, measure_postgres

pytestmark = pytest.mark.skipif(postgres.unavailable() is not None, reason=str(postgres.unavailable()))


def test_postgresql_outcomes_match_the_recording():
    with postgres.cluster() as dsn:
        measured = measure_postgres(dsn)
    recorded = load_postgres()
    assert set(measured) == {a.name for a in ANOMALIES} == set(recorded)
    diff = {(a, f): (measured[a][f]["outcomes"], recorded[a][f]["outcomes"])
            for a in measured for f in measured[a] if measured[a][f]["outcomes"] != recorded[a][f]["outcomes"]}
    assert not diff, f"PostgreSQL's outcomes changed (measured, recorded): {diff}"
    assert all(c["serializable"] for cases in measured.values() for c in cases.values())


def test_the_sql_translation():
    from tests.helpers import oracle as O

    assert postgres.to_sql(O.read("t", 1)) == ("SELECT id, val FROM t WHERE id = %s", (1,))
    assert postgres.to_sql(O.scan("a", O.mod(3, 0))) == ("SELECT id, val FROM a WHERE CAST(val AS INTEGER) %% %s = %s",
                                                       (3, 0))
    assert postgres.to_sql(O.copy("a", 1, "c", 101)) == ("INSERT INTO c SELECT %s, val FROM a WHERE id = %s", (101, 1))
