"""The Beam flags, runs and readings the Flink tests share."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from learners.jit import sources_digest
from pipelines.runners.options import job_server_args
from tests.support.trialkit import read_topic
from tests.support.waiting import wait_for


def flink_args(jar, master: str, *more: str) -> list[str]:
    """Beam's FlinkRunner on ``master`` ([local] or a session cluster) with the job server ``jar``, LOOPBACK."""
    return ["--runner=FlinkRunner", f"--flink_master={master}", *job_server_args(jar), "--environment_type=LOOPBACK",
            *more]


def predictions_of(bootstrap, topic):
    return [record for _, _, record in read_topic(bootstrap, topic)]


def new_running_job(cluster, before: set, timeout: float = 180.0) -> str:
    """The id of a job running on ``cluster`` that is not in ``before``."""
    found = []
    wait_for(lambda: found.extend(j["jid"] for j in cluster.jobs() if j["state"] == "RUNNING"
                                  and j["jid"] not in before) or found, timeout, "the job to start on the cluster")
    return found[0]


def exactly_once_run(bootstrap, topic, tmp_path, master, name, *extra, code=None) -> subprocess.Popen:
    """``scinol run --exactly-once`` on the session cluster at ``master`` as
    a process, its Beam job named ``name`` and its stderr in tmp_path/<name>.log;
    ``code``: a folder with another version of the project to run instead
    (with LOOPBACK its Python steps run in that process, so all of the job
    is that version)."""
    err = open(tmp_path / f"{name}.log", "w")
    env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
         "--predictions-topic", topic + ".pred", "--checkpoint-dir", str(tmp_path / "ckpt"), "--runner", "flink",
         "--flink-master", master, "--exactly-once", "--checkpointing-interval", "2000", *extra,
         "--", f"--job_name={name}"], stderr=err, stdin=subprocess.DEVNULL, cwd=code, env=env)


def released_code(commit: str, into) -> Path:
    """The project as it was at ``commit`` (from this clone's history), unpacked into ``into``."""
    repo = Path(__file__).resolve().parents[2]
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", commit], capture_output=True, timeout=120)
    assert archive.returncode == 0, (f"commit {commit} is not in the history of {repo} (a shallow clone?): "
                                     f"{archive.stderr.decode(errors='replace')[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=120)
    _reuse_compiled_kernels(repo, into)
    return into


def _reuse_compiled_kernels(repo: Path, into: Path) -> None:
    """Numba's cache of this clone's kernels, copied to the unpacked release
    for each folder whose Python files are byte for byte this clone's, and
    learners/ too (every kernel inlines from it); else it compiles them all
    again (about 2 minutes on 2 busy cores). Numba's index keeps a digest of
    the source, not its path or time, so identical files find it as it is."""
    def same_sources(folder: Path) -> bool:
        ours = {p.name: p.read_bytes() for p in (repo / folder).glob("*.py")}
        theirs = {p.name: p.read_bytes() for p in (into / folder).glob("*.py")}
        return ours == theirs

    if not same_sources(Path("learners")):
        return
    for cache in sorted({p.parent for p in repo.glob("**/__pycache__/*.nbi") if ".git" not in p.parts}):
        folder = cache.parent.relative_to(repo)
        if not same_sources(folder):
            continue
        (into / folder / "__pycache__").mkdir(exist_ok=True)
        for cached in cache.iterdir():
            if cached.suffix in (".nbi", ".nbc"):
                shutil.copy2(cached, into / folder / "__pycache__" / cached.name)
            elif cached.name.endswith(".sources.sha256"):  # learners.jit's stamp: it names the sources' paths
                module = cached.name.split(".")[0]
                if cached.read_text() == _cache_stamp(repo / folder, module):
                    (into / folder / "__pycache__" / cached.name).write_text(_cache_stamp(into / folder, module))


def _cache_stamp(folder: Path, module: str) -> str | None:
    """The stamp learners.jit keeps ``module``'s cache under (its
    ``_drop_stale_cache``; the same code in both trees, whose learners/ agree)."""
    names = sorted(n for n in os.listdir(folder)
                   if n in (f"{module}.py", "losses.py", "codes.py") or n.startswith("math_") and n.endswith(".py"))
    return sources_digest([os.path.join(folder, n) for n in names])


def produce_slowly(bootstrap, topic, events, partitions=4, chunk=40, pause=0.4) -> threading.Thread:
    """``events`` produced ``chunk`` at a time, ``pause`` seconds apart, in a
    thread (a multiple of the partitions: event i stays on partition i % partitions)."""
    from pipelines.records.topics import produce_events

    def produce():
        for start in range(0, len(events), chunk):
            produce_events(bootstrap, topic, events[start:start + chunk], partitions=partitions, progress=False)
            time.sleep(pause)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    return thread
