"""Test hooks that cost nothing unless enabled by environment variable.

``LV_TEST_PAUSE_AT=<point>[,<point>...]`` makes a client print ``LV-PAUSED <point>`` on stdout and block
when it reaches that protocol step, so a test can SIGKILL it exactly there (a real crash, from outside),
or let it go on by writing a line to its stdin. Points: marker-placed, data-staged, waiting,
decision-written, between-markers, committed, validation-key-held, plan-recorded, between-table-writes
(LV[I] plan), gvl-published, serving-round (a holder serving the queue chose a group, nothing recorded),
serving-plan-recorded (that group's plan recorded).
"""

from __future__ import annotations

import os
import sys


def armed(point: str) -> bool:
    """``LV_TEST_PAUSE_AT`` names ``point``. Only :func:`crashpoint` asks: a crash point observes, it never
    changes the route a commit takes (what a test kills is what runs without it)."""
    return point in os.environ.get("LV_TEST_PAUSE_AT", "").split(",")


def crashpoint(point: str) -> None:
    """Pause here (for an external SIGKILL, or a line on stdin to go on) when ``LV_TEST_PAUSE_AT`` names
    this point."""
    if not armed(point):
        return
    sys.stdout.write(f"LV-PAUSED {point}\n")
    sys.stdout.flush()
    sys.stdin.readline()  # the test kills us while we wait here
