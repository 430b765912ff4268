"""The download cache: where provisioned parts live, a lock per part, and a
completion marker.

A part is a folder under the cache root. It counts as provisioned only once
its marker file exists, and the marker is written last: a part whose
download was interrupted has no marker, is deleted and fetched again on the
next call. A second call on a provisioned part starts no process and makes
no network request.

Every failure is a :class:`ProvisionError` whose message is one line naming
the registry and the command that failed, ready for ``scinol: error: ...``.
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
MARKER = ".complete"


class ProvisionError(RuntimeError):
    """A part could not be provisioned; the message is one line."""


def cache_root() -> Path:
    """``$SCINOL_CACHE``, default ``~/.cache/scinol``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "scinol").expanduser()


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """An exclusive lock across processes: two test sessions provisioning the
    same part wait for each other instead of writing the same files."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_complete(part: Path) -> bool:
    return (part / MARKER).is_file()


def provision_part(part: Path, build: Callable[[Path], dict | None]) -> Path:
    """The folder ``part``, filled by ``build(part)`` unless already complete.

    ``build`` may return facts worth keeping (versions, sizes); they are
    stored in the marker as JSON (see :func:`part_facts`).
    """
    if is_complete(part):
        return part
    with locked(part.parent / f"{part.name}.lock"):
        if is_complete(part):  # another process finished it while we waited
            return part
        shutil.rmtree(part, ignore_errors=True)  # left by an interrupted attempt
        part.mkdir(parents=True)
        started = time.monotonic()
        try:
            facts = build(part) or {}
        except BaseException:
            shutil.rmtree(part, ignore_errors=True)
            raise
        facts = {"seconds": round(time.monotonic() - started, 1), **facts}
        (part / MARKER).write_text(json.dumps(facts, indent=1) + "\n")
    return part


def part_facts(part: Path) -> dict:
    """What ``build`` recorded for a complete part."""
    return json.loads((part / MARKER).read_text())


def require_tool(cmd: list[str], purpose: str) -> str:
    """The output of a version command such as ``java -version``, or a
    one-line error saying which tool is missing and what needs it."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except FileNotFoundError:
        raise ProvisionError(f"{purpose} needs {cmd[0]!r}, which is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"{purpose}: {' '.join(cmd)} did not answer within 60 s") from None
    if proc.returncode != 0:
        raise ProvisionError(f"{purpose}: {' '.join(cmd)} failed: {first_line(proc.stdout + proc.stderr)}")
    return proc.stdout + proc.stderr


# Words in a client's output meaning the registry was not reached at all
# (as opposed to reached, and answering that it has no such thing).
_UNREACHABLE = re.compile(
    r"(connection refused|connect timed out|read timed out|network is unreachable|no route to host|"
    r"name or service not known|temporary failure in name resolution|unknownhostexception|"
    r"connection reset|remote host terminated the handshake|transfer failed|no such host|i/o timeout|"
    r"cannot connect to proxy|timed out)", re.IGNORECASE)


def run_client(cmd: list[str], *, registry: str, command: str, cwd: Path | None = None,
               env: dict | None = None, timeout: float = 1800) -> str:
    """Run a registry client (``mvn``, ``pip``, ...); its combined output.

    ``command`` is the short name of what was run (``mvn dependency:copy``)
    for the error line, which says whether ``registry`` was unreachable or
    answered with an error, in the client's own words.
    """
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ProvisionError(f"{command} failed: {cmd[0]!r} is not installed (or not on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"{command} failed: {registry} did not answer within {timeout:.0f} s") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        causes = _UNREACHABLE.findall(output)
        if causes:  # the last one is the innermost ("transfer failed: ... connection refused")
            raise ProvisionError(f"cannot reach {registry} ({causes[-1].lower()}); "
                                 f"{command} failed: {first_line(output)}")
        raise ProvisionError(f"{command} failed, {registry} answered: {first_line(output)}")
    return output


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(output: str, limit: int = 300) -> str:
    """A client's most telling error line, cut to ``limit`` characters."""
    lines = [_ANSI.sub("", ln).strip() for ln in output.splitlines()]
    marked = [re.sub(r"^\[?ERROR\]?:?\s*", "", ln) for ln in lines if ln.startswith(("[ERROR]", "ERROR", "error:"))]
    line = next((ln for ln in marked + lines if ln), "(no output)").replace(" -> [Help 1]", "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
