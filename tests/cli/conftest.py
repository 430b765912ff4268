"""Fixtures of the command-line tests."""

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temporary directory as the current one, so file names in commands
    and in error messages are short and relative."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
