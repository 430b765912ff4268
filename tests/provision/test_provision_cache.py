"""The provisioning cache: one build per part even with two processes at
once, a marker only after success, and one-line errors from registry clients."""

import json
import subprocess
import sys

import pytest

from pipelines.provision.cache import (MARKER, ProvisionError, cache_root, part_facts, provision_part,
                                       require_tool, run_client)

BUILD_IN_A_CHILD = """
import sys, time
from pathlib import Path
from pipelines.provision.cache import provision_part

def build(folder):
    with open(sys.argv[2], "a") as log:
        log.write("built\\n")
    time.sleep(1.0)  # long enough for the other process to arrive meanwhile
    (folder / "payload").write_text("ok")
    return {"by": sys.argv[3]}

print(provision_part(Path(sys.argv[1]), build))
"""


def test_two_processes_at_once_build_a_part_once(tmp_path):
    part, log = tmp_path / "parts" / "thing-1.0", tmp_path / "builds.log"
    children = [subprocess.Popen([sys.executable, "-c", BUILD_IN_A_CHILD, str(part), str(log), name],
                                 stdout=subprocess.PIPE, text=True) for name in ("a", "b")]
    outputs = [child.communicate(timeout=60)[0].strip() for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert outputs == [str(part), str(part)]
    assert log.read_text() == "built\n"
    assert (part / "payload").read_text() == "ok"
    assert part_facts(part)["by"] in ("a", "b")


def test_a_failed_build_leaves_nothing_and_the_next_call_builds_again(tmp_path):
    part = tmp_path / "thing"

    def broken(folder):
        (folder / "half").write_text("partial download")
        raise ProvisionError("registry went away")

    with pytest.raises(ProvisionError, match="registry went away"):
        provision_part(part, broken)
    assert not part.exists()

    calls = []
    provision_part(part, lambda folder: calls.append(folder) or {"n": 1})
    provision_part(part, lambda folder: calls.append(folder) or {"n": 2})
    assert calls == [part]
    assert json.loads((part / MARKER).read_text())["n"] == 1


def test_an_interrupted_part_without_marker_is_rebuilt(tmp_path):
    part = tmp_path / "thing"
    part.mkdir()
    (part / "stale").write_text("left by a killed download")
    provision_part(part, lambda folder: None)
    assert not (part / "stale").exists() and (part / MARKER).is_file()


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("SCINOL_CACHE")
    assert cache_root().parts[-2:] == (".cache", "scinol")


def test_a_client_error_is_one_line_naming_registry_and_command():
    script = "import sys; print('[INFO] working'); print('[ERROR] Could not find artifact a:b:jar:9'); sys.exit(1)"
    with pytest.raises(ProvisionError) as err:
        run_client([sys.executable, "-c", script], registry="Maven Central", command="mvn dependency:copy")
    assert str(err.value) == "mvn dependency:copy failed, Maven Central answered: Could not find artifact a:b:jar:9"


def test_an_unreachable_registry_is_named_as_such():
    script = ("import sys; print('[ERROR] Could not transfer artifact x from/to central: "
              "transfer failed for https://repo/x.pom: Connect to repo:443 failed: Connection refused'); sys.exit(1)")
    with pytest.raises(ProvisionError) as err:
        run_client([sys.executable, "-c", script], registry="Maven Central", command="mvn dependency:copy")
    assert str(err.value).startswith("cannot reach Maven Central (connection refused); mvn dependency:copy failed: "
                                     "Could not transfer artifact x")


def test_a_missing_tool_is_one_line():
    with pytest.raises(ProvisionError) as err:
        require_tool(["no-such-tool-scinol", "-v"], "fetching Java parts from Maven")
    assert str(err.value) == ("fetching Java parts from Maven needs 'no-such-tool-scinol', "
                              "which is not installed (or not on PATH)")
