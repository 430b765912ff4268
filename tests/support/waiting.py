"""Waiting in a test for something another process does."""

from __future__ import annotations

import time


def wait_for(condition, timeout: float, what: str, story=lambda: "") -> None:
    """Until ``condition()``; AssertionError naming ``what`` (and ``story()``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; {story()}")
        time.sleep(0.5)
