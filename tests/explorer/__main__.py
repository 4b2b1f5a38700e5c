"""``python -m tests.explorer SCENARIO PREEMPTIONS [MAX_SCHEDULES]``: search until the first violation."""

from __future__ import annotations

import sys

from tests.explorer import scenarios
from tests.explorer.explore import explore


def main(argv: list[str]) -> int:
    import lv_core

    print(f"lv_core from {lv_core.__file__}")
    scenario = getattr(scenarios, argv[0])
    ex = explore(scenario, preemptions=int(argv[1]), max_schedules=int(argv[2]) if len(argv) > 2 else 500,
                 stop_at_first=True)
    print(ex.summary())
    if ex.violations:
        print(ex.violations[0].describe())
    return 1 if ex.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
