"""The local schema registry the tests start (Apicurio Registry): stopped,
it leaves no process and no log behind; its starter killed, it goes too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pipelines.provision.registry import LocalRegistry, ProvisionError
from tests.support.processes import alive, gone_within

pytestmark = pytest.mark.registry


def test_a_stopped_registry_leaves_no_process_and_no_log():
    try:
        registry = LocalRegistry().start()
    except ProvisionError as exc:
        pytest.skip(f"no schema registry: {exc}")
    pid, log = registry.process.pid, registry.log_path
    assert alive(pid) and os.path.exists(log)
    registry.stop()
    assert not alive(pid) and not os.path.exists(log)


STARTER = """
from pipelines.provision.registry import LocalRegistry
import time
registry = LocalRegistry().start()
print(registry.process.pid, registry.log_path, flush=True)
time.sleep(600)
"""


def test_a_registry_ends_with_the_process_that_started_it_even_when_that_is_killed():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    try:
        started = starter.stdout.readline()
        assert started, "the registry did not start"
        pid, log = started.split()
        assert alive(int(pid))
    finally:
        starter.send_signal(signal.SIGKILL)  # no cleanup runs in the starter
        starter.wait()
    assert gone_within(int(pid), 30), "the registry outlived the process that started it"
    os.unlink(log)  # its starter was killed before it could remove it
