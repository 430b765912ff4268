"""``scinol flink up|down|status``: a Flink session cluster on loopback for
local work (JobManager + N TaskManagers from the provisioned Flink 1.19),
left running in the background between commands.

``up`` starts a detached keeper process (``scinol flink serve``, not for
direct use) that runs a :class:`FlinkSessionCluster` and holds it: the JVMs
get SIGTERM when their keeper dies (Linux ``PR_SET_PDEATHSIG``), so no
process outlives it. The keeper records its pid, the REST address and the
JVMs' pids in ``state.json`` in the state folder (default
``<cache>/flink-session``), which is how ``down`` and ``status`` find the
cluster; ``down`` sends the keeper SIGTERM and waits until every recorded
pid is gone. The cluster comes with a Beam SDK worker pool (``--worker-pool``
for ``scinol run``): each TaskManager then runs the job's Python in its own
process, on its own core, where LOOPBACK would run all of it in the
submitting process under one GIL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .errors import UsageError

STATE = "state.json"
CHECKPOINTS = "checkpoints"
HA = "ha"
"""ZooKeeper's data and Flink's high-availability files, beside the state file (with --high-availability)."""
LOG = "keeper.log"


def add_parser(sub) -> None:
    p = sub.add_parser("flink", help="start, stop or show a local Flink session cluster (up / down / status); "
                                     "stop a job with a savepoint (stop)",
                       description="A Flink 1.19 session cluster on loopback, in the background: `up` starts a "
                                   "JobManager and N TaskManagers and prints the master address to give "
                                   "`scinol run --runner flink --flink-master`; `down` stops it. `stop` stops a "
                                   "job on any Flink cluster with a savepoint, for `scinol run --from-savepoint`.")
    actions = p.add_subparsers(dest="action", required=True, parser_class=type(p))
    up = actions.add_parser("up", help="start the cluster (says so if it is already up)")
    up.add_argument("--taskmanagers", type=int, default=2, metavar="N", help="TaskManagers to start (default 2)")
    up.add_argument("--slots", type=int, default=1, metavar="S", help="task slots per TaskManager (default 1)")
    up.add_argument("--port", type=int, default=None, help="REST port, the master address (default: a free one)")
    up.add_argument("--timeout", type=float, default=180.0, metavar="S",
                    help="seconds to wait for every TaskManager to register (default 180)")
    up.add_argument("--metrics-ports", type=_ports, default=None, metavar="FIRST-LAST",
                    help="serve Prometheus metrics on this port range: Flink's (its reporter, from the JobManager "
                         "and each TaskManager) and scinol's (from each Python worker), one endpoint each")
    up.add_argument("--high-availability", action="store_true",
                    help="also run ZooKeeper (Flink's own) with Flink's ZooKeeper high availability, and start a "
                         "JobManager that dies again: it takes the running jobs over from their last checkpoint")
    down = actions.add_parser("down", help="stop the cluster started by `scinol flink up`")
    status = actions.add_parser("status", help="say whether the cluster is up, where, and with how many TaskManagers "
                                          "(exit status 1 when it is down)")
    stop = actions.add_parser("stop", help="stop a running job with a savepoint (Flink's stop-with-savepoint) and "
                                           "print where it went; resume with `scinol run ... --from-savepoint`")
    stop.add_argument("job", nargs="?", default=None, metavar="JOB",
                      help="the Flink job id or the job's name (Beam's --job_name); default: the only running job")
    stop.add_argument("--savepoint", required=True, metavar="DIR",
                      help="folder (or scheme:// URL the cluster can write) the savepoint goes in")
    stop.add_argument("--flink-master", default=None, metavar="HOST:PORT",
                      help="the cluster's REST address (default: the cluster `scinol flink up` started)")
    stop.add_argument("--drain", action="store_true",
                      help="end event time first (timers fire, windows close): for a job that will not resume")
    stop.add_argument("--timeout", type=float, default=300.0, metavar="S",
                      help="seconds to wait for the savepoint (default 300)")
    serve = actions.add_parser("serve", help=argparse.SUPPRESS)  # the keeper `up` starts
    serve.add_argument("--taskmanagers", type=int, required=True)
    serve.add_argument("--slots", type=int, required=True)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--timeout", type=float, required=True)
    serve.add_argument("--metrics-ports", type=_ports, default=None)
    serve.add_argument("--high-availability", action="store_true")
    for q in (up, down, status, serve, stop):
        q.add_argument("--state-dir", default=None, metavar="DIR",
                       help="where the cluster's pids and ports are recorded (default: <cache>/flink-session)")
    for q in (up, down, status, serve, stop):
        q.set_defaults(func=run)


def _ports(text: str) -> range:
    from pipelines.telemetry import port_range

    try:
        return port_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args) -> int:
    folder = Path(args.state_dir) if args.state_dir else _default_state_dir()
    return {"up": up, "down": down, "status": status, "serve": serve, "stop": stop}[args.action](args, folder)


def _default_state_dir() -> Path:
    from pipelines.provision.cache import cache_root

    return cache_root() / "flink-session"


# ------------------------------------------------------------------ the recorded state

def read_state(folder: Path) -> dict | None:
    """The recorded cluster if its keeper is still alive; a stale record
    (keeper gone, e.g. after a reboot) is removed."""
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError):
        return None
    if not _is_keeper(state.get("keeper", -1)):
        (folder / STATE).unlink(missing_ok=True)
        return None
    return state


def _is_keeper(pid: int) -> bool:
    """Whether ``pid`` is alive and is a ``flink serve`` keeper (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"flink" in cmdline and b"serve" in cmdline


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}").exists() and "zombie" not in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("State:")).lower()
    except (OSError, StopIteration):
        return ""


def _overview(master: str) -> dict | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{master}/overview", timeout=5) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ up / down / status

def up(args, folder: Path) -> int:
    if args.taskmanagers < 1 or args.slots < 1:
        raise UsageError(f"flink up: --taskmanagers and --slots must be at least 1, got {args.taskmanagers} and "
                         f"{args.slots}")
    state = read_state(folder)
    if state is None and args.port is not None and _port_taken(args.port):
        raise UsageError(f"flink up: --port {args.port}: something already listens there")
    if state is not None:
        print(state["master"], flush=True)
        print(f"scinol flink: already up at {state['master']} ({len(state['taskmanagers'])} TaskManagers, keeper "
              f"pid {state['keeper']}); `scinol flink down` stops it", file=sys.stderr)
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pipelines.cli", "flink", "serve", "--state-dir", str(folder),
           "--taskmanagers", str(args.taskmanagers), "--slots", str(args.slots), "--timeout", str(args.timeout)]
    if args.port is not None:
        cmd += ["--port", str(args.port)]
    if args.metrics_ports is not None:
        from pipelines.telemetry import port_range_text

        cmd += ["--metrics-ports", port_range_text(args.metrics_ports)]
    if args.high_availability:
        cmd.append("--high-availability")
    with open(folder / LOG, "w") as log:
        # Its own session: the terminal's Ctrl-C and the end of this command do not reach it.
        keeper = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    print(f"scinol flink: starting a JobManager and {args.taskmanagers} TaskManagers (keeper pid {keeper.pid}, "
          f"log {folder / LOG})", file=sys.stderr)
    while (state := read_state(folder)) is None:
        if keeper.poll() is not None:
            raise UsageError(f"flink up: the cluster did not start: {_last_error(folder / LOG)}")
        time.sleep(0.5)
    print(state["master"], flush=True)
    print(f"scinol flink: up at {state['master']} with {len(state['taskmanagers'])} TaskManagers "
          f"(started in {state['started_in']:.0f} s); `scinol flink down` stops it", file=sys.stderr)
    print(f"scinol flink: run on it with `scinol run --runner flink --flink-master {state['master']} "
          f"--worker-pool {state['worker_pool']} --parallelism {len(state['taskmanagers'])} ...`", file=sys.stderr)
    if state.get("zookeeper"):
        print(f"scinol flink: high availability: ZooKeeper at {state['zookeeper']}, jobs and checkpoints recorded "
              f"under {state['ha']}; a JobManager that dies is started again and takes its jobs over",
              file=sys.stderr)
    if state.get("metrics_ports"):
        print(f"scinol flink: Prometheus metrics at /metrics on ports {state['metrics_ports']} (Flink's from "
              f"the JobManager and TaskManagers, scinol's from each job's Python workers); answering now: "
              f"{_metrics_endpoints(state)}", file=sys.stderr)
    return 0


def _port_taken(port: int, host: str = "localhost") -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("scinol: error:")]
    line = (errors or lines or ["(no output)"])[-1]
    return line.removeprefix("scinol: error: ")


def down(args, folder: Path, timeout: float = 60.0) -> int:
    state = read_state(folder)
    if state is None:
        print("scinol flink: no cluster is up", file=sys.stderr)
        return 0
    os.kill(state["keeper"], signal.SIGTERM)
    pids = [state["keeper"], state["jobmanager"], *state["taskmanagers"]]
    pids += [state["worker_pool_pid"]] if state.get("worker_pool_pid") else []
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # the keeper did not stop them in time: a last resort
        os.kill(pid, signal.SIGKILL)
    (folder / STATE).unlink(missing_ok=True)
    print(f"scinol flink: stopped the cluster at {state['master']}"
          + (f" (killed {len(left)} processes that did not stop within {timeout:.0f} s)" if left else ""),
          file=sys.stderr)
    return 0


def status(args, folder: Path) -> int:
    state = read_state(folder)
    if state is None:
        print("scinol flink: down", file=sys.stderr)
        return 1
    overview = _overview(state["master"]) or {}
    print(state["master"], flush=True)
    print(f"scinol flink: up at {state['master']}: {overview.get('taskmanagers', '?')} TaskManagers, "
          f"{overview.get('slots-available', '?')} of {overview.get('slots-total', '?')} slots free, "
          f"{overview.get('jobs-running', '?')} jobs running (Flink {overview.get('flink-version', '?')}); "
          f"SDK worker pool at {state.get('worker_pool')}; retained checkpoints in {state.get('checkpoints')}",
          file=sys.stderr)
    if state.get("zookeeper"):
        print(f"scinol flink: high availability: ZooKeeper at {state['zookeeper']}, jobs and checkpoints recorded "
              f"under {state['ha']}; a JobManager that dies is started again and takes its jobs over",
              file=sys.stderr)
    if state.get("metrics_ports"):
        print(f"scinol flink: Prometheus metrics on ports {state['metrics_ports']}, answering now: "
              f"{_metrics_endpoints(state)}", file=sys.stderr)
    return 0


def _metrics_endpoints(state: dict) -> str:
    """The ports of the range that serve now (the JobManager, each
    TaskManager, each running job's Python workers), as a list."""
    from pipelines.telemetry import port_range

    host = state["master"].rsplit(":", 1)[0]
    ports = [port for port in port_range(state["metrics_ports"]) if _port_taken(port, host)]
    return ", ".join(map(str, ports)) or "none"


def stop(args, folder: Path) -> int:
    """Stop a job with a savepoint; its location on stdout."""
    from pipelines.runners import flink_rest

    master = args.flink_master or (read_state(folder) or {}).get("master")
    if master is None:
        raise UsageError("flink stop: no --flink-master given and no cluster started by `scinol flink up`")
    target = _savepoint_target(args.savepoint)
    try:
        job = flink_rest.find_job(master, args.job)
        location = flink_rest.stop_with_savepoint(master, job["jid"], target, args.drain, args.timeout)
    except LookupError as exc:
        raise UsageError(f"flink stop: {exc}") from None
    except (flink_rest.SavepointError, TimeoutError) as exc:
        raise UsageError(f"flink stop: no savepoint taken, the job runs on: {exc}") from None
    except OSError as exc:
        raise UsageError(f"flink stop: the cluster at {master} did not answer ({exc})") from None
    print(location, flush=True)
    print(f"scinol flink: stopped job {job['jid']} ({job['name']}) with a savepoint at {location}; resume it with "
          f"`scinol run ... --from-savepoint {location}`", file=sys.stderr)
    return 0


def _savepoint_target(given: str) -> str:
    """A local folder as an absolute ``file://`` URI (made here, so an
    unwritable one is refused before Flink is asked); a URL as given."""
    if "://" in given:
        return given
    path = Path(given).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"flink stop: --savepoint {given}: cannot make the folder ({exc.strerror})") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"flink stop: --savepoint {given}: the folder is not writable")
    return path.as_uri()


# ------------------------------------------------------------------ the keeper

def _write_state(folder: Path, state: dict) -> None:
    (folder / f"{STATE}.new").write_text(json.dumps(state, indent=1) + "\n")
    os.replace(folder / f"{STATE}.new", folder / STATE)  # read_state never sees half a file


def _restart_jobmanager(cluster, folder: Path, state: dict) -> None:
    """What a supervisor does under high availability: start the dead
    JobManager again; it takes its jobs over from ZooKeeper."""
    print(f"the JobManager exited with status {cluster.jobmanager.returncode}; starting it again", flush=True)
    state["jobmanager"] = cluster.restart_jobmanager()
    _write_state(folder, state)
    print(f"JobManager up again (pid {state['jobmanager']})", flush=True)


def serve(args, folder: Path) -> int:
    """Start the cluster, record it, hold it until SIGTERM, stop it."""
    import threading

    from pipelines.provision.cache import ProvisionError
    from pipelines.runners.flink_cluster import FlinkClusterError, FlinkSessionCluster
    from pipelines.telemetry import port_range_text

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    conf = {"rest.port": args.port} if args.port else {}
    # beside the state file, not in the cluster's folder: a cluster up again after a loss finds them
    cluster = FlinkSessionCluster(taskmanagers=args.taskmanagers, slots=args.slots, conf=conf,
                                  startup_timeout=args.timeout, worker_pool=True, metrics_ports=args.metrics_ports,
                                  checkpoint_dir=folder / CHECKPOINTS, high_availability=args.high_availability,
                                  ha_dir=folder / HA)
    try:
        cluster.start()
    except (ProvisionError, FlinkClusterError) as exc:
        print(exc, flush=True)  # the whole message, with the JVMs' log tails, stays in the keeper's log
        raise UsageError(str(exc).splitlines()[0]) from None
    try:
        state = {"keeper": os.getpid(), "master": cluster.master, "jobmanager": cluster.jobmanager.pid,
                 "taskmanagers": cluster.taskmanager_pids(), "dir": str(cluster.dir),
                 "started_in": cluster.started_in, "worker_pool": cluster.worker_pool,
                 "worker_pool_pid": cluster.pool.pid,
                 "metrics_ports": port_range_text(args.metrics_ports) if args.metrics_ports else None,
                 "checkpoints": str((folder / CHECKPOINTS).resolve()),
                 "zookeeper": f"localhost:{cluster.zookeeper_port}" if args.high_availability else None,
                 "ha": str((folder / HA).resolve()) if args.high_availability else None}
        _write_state(folder, state)
        print(f"up at {cluster.master}: {state}", flush=True)
        while not stop.wait(1.0):
            if cluster.jobmanager.poll() is not None:
                if not args.high_availability:
                    raise UsageError(f"the JobManager exited with status {cluster.jobmanager.returncode}")
                _restart_jobmanager(cluster, folder, state)
    finally:
        cluster.stop()
        (folder / STATE).unlink(missing_ok=True)
        print("stopped", flush=True)
    return 0
