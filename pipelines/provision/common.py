"""What every provisioning step shares: the cache folder, one lock per
part, a completion marker, and running a registry client (pip, mvn, go)
so that a failure is one line naming the registry and the cause.

A part is a folder under the cache. It counts as provisioned only when its
marker file exists; the marker is written last, so a part whose download
was interrupted is deleted and fetched again on the next call. A second
call on a provisioned part touches neither the network nor a client.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

CACHE_ENV = "SCINOL_CACHE"
MARKER = ".provisioned"


class ProvisionError(RuntimeError):
    """A part could not be provisioned; the message is one line."""


def cache_root() -> Path:
    """Where downloads go: ``$SCINOL_CACHE``, default ``~/.cache/scinol``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "scinol").expanduser()


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock held across processes (two test sessions
    provisioning the same part wait for each other instead of both writing)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_provisioned(part: Path) -> bool:
    return (part / MARKER).is_file()


def provision_part(part: Path, build: Callable[[Path], dict]) -> Path:
    """``part`` (a folder), built by ``build(part)`` unless already complete.
    ``build`` returns facts worth keeping (versions, sources); they go into
    the marker as JSON."""
    if is_provisioned(part):
        return part
    with locked(part.parent / f"{part.name}.lock"):
        if is_provisioned(part):  # another process finished it while we waited
            return part
        if part.exists():  # left by an interrupted attempt
            shutil.rmtree(part)
        part.mkdir(parents=True)
        try:
            facts = build(part)
        except BaseException:
            shutil.rmtree(part, ignore_errors=True)
            raise
        (part / MARKER).write_text(json.dumps({"provisioned_at": time.time(), **(facts or {})}, indent=1))
    return part


def marker_facts(part: Path) -> dict:
    return json.loads((part / MARKER).read_text())


# Words in a client's output that mean the registry was not reached at all
# (as opposed to reached and answering "no such package").
_UNREACHABLE = re.compile(
    r"(connection refused|network is unreachable|no route to host|name or service not known|"
    r"temporary failure in name resolution|no such host|unknownhost\w*|i/o timeout|timed out|"
    r"cannot connect to proxy|connection reset)", re.IGNORECASE)


def run_client(cmd: list[str], *, registry: str, what: str, env: dict | None = None, cwd: Path | None = None,
               timeout: float = 1800) -> str:
    """Run a registry client; its combined output, or a one-line
    :class:`ProvisionError` saying whether ``registry`` was unreachable or
    answered with an error, and the client's own words for it."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ProvisionError(f"cannot fetch {what}: {cmd[0]!r} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"cannot fetch {what}: {registry} did not answer within {timeout:.0f} s") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise ProvisionError(describe_failure(output, registry, what))
    return output


def describe_failure(output: str, registry: str, what: str) -> str:
    line = _error_line(output)
    cause = _UNREACHABLE.search(output)
    if cause:
        return f"cannot reach {registry} to fetch {what} ({cause.group(1).lower()}): {line}"
    return f"{registry} could not provide {what}: {line}"


def _error_line(output: str, limit: int = 300) -> str:
    """The client's most telling error line, shortened to one line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    marked = [ln for ln in lines if ln.startswith(("ERROR", "[ERROR]", "go: ", "error:"))]
    line = (marked or lines or ["(no output)"])[0]
    line = re.sub(r"^\[?ERROR\]?:?\s*", "", line)
    line = line.replace(" -> [Help 1]", "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
