"""A Flink session cluster on loopback: one JobManager and N TaskManagers,
started from the provisioned Flink distribution (:mod:`pipelines.provision.flink`).

    with FlinkSessionCluster(taskmanagers=2) as cluster:
        run the pipeline with --runner=FlinkRunner --flink_master=cluster.master
        cluster.kill_taskmanager(cluster.taskmanager_pids()[0])   # failover
        cluster.add_taskmanager()

Each process is ``bin/jobmanager.sh start-foreground`` or
``bin/taskmanager.sh start-foreground`` (the scripts ``exec`` into the JVM,
so the child's pid is the JVM's), with its own configuration folder
(``FLINK_CONF_DIR``) in a temporary folder that also holds the logs, pid
files and checkpoints. The JVMs get SIGTERM when the process that started
them dies (Linux ``PR_SET_PDEATHSIG``), so an interrupted test leaves none
behind; :meth:`FlinkSessionCluster.stop` ends them in order.

With ``high_availability`` the cluster also runs a ZooKeeper server (the
one Flink's distribution ships, ``FlinkZooKeeperQuorumPeer``, so nothing
more is downloaded) and Flink's ZooKeeper high availability: the
JobManager keeps its jobs and their checkpoints in ZooKeeper and
``high-availability.storageDir``, and a JobManager started again after a
crash (:meth:`FlinkSessionCluster.restart_jobmanager`, what a supervisor
does) takes the running jobs over from their last checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
from pathlib import Path

import yaml

from pipelines.provision.processes import dying_with_parent
from pipelines.runners import flink_rest
from pipelines.telemetry import port_range_text

HOST = "localhost"
TASK_OFF_HEAP = "512m"
"""Direct memory a TaskManager's tasks may use beyond Flink's own: Beam's
gRPC channels to the Python worker receive each state write and data
message into direct buffers, and with Flink's default (none; about 240 MB
of direct memory in all) a wide model's state writes (tens of MB each)
exhausted it: "Cannot reserve 2097152 bytes of direct buffer memory", the
worker's channels closed and the job restarted again and again."""
ZOOKEEPER_SESSION_MS = 15_000
"""The JobManagers' ZooKeeper session timeout under high availability (see ``_ha_conf``)."""


class FlinkClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message ends with its logs' tail."""


class FlinkSessionCluster:
    """A JobManager and ``taskmanagers`` TaskManagers on loopback.

    Args:
      taskmanagers: how many TaskManagers to start.
      slots: task slots per TaskManager.
      flink_home: a Flink distribution; default: provisioned (``flink_version``).
      checkpoint_dir: where Flink writes checkpoints; default: inside the cluster's folder.
      taskmanager_memory / jobmanager_memory: JVM process sizes. A
        TaskManager's holds :data:`TASK_OFF_HEAP` of direct memory for
        Beam's gRPC channels to the Python worker and a heap for the keyed
        state (on the heap: a 2^20-coordinate sharded model peaked at about
        700 MB used; at 1.5 GB in all, about 530 MB of task heap, the
        TaskManager ran out of heap).
      restart_attempts / restart_delay: the fixed-delay restart strategy: a job
        whose TaskManager died restarts from its last checkpoint. Each attempt
        fails at once while the job lacks slots, so attempts x delay must
        cover starting a replacement TaskManager (10-30 s on a busy 2-core
        machine); 5 attempts 2 s apart were seen to give up.
      conf: further Flink settings (flat keys), applied last.
      keep_dir: leave the folder (logs, checkpoints) after :meth:`stop`.
      worker_pool: also start a Beam SDK worker pool (:attr:`worker_pool`,
        for ``--environment_type=EXTERNAL``): each TaskManager then gets its
        own Python worker process, so the job's Python runs on more than
        one core; LOOPBACK runs all of it in the submitting process.
      high_availability: run ZooKeeper and Flink's ZooKeeper high
        availability, its files under ``ha_dir`` (default: inside the
        cluster's folder), so a restarted JobManager recovers the jobs.
      metrics_ports: a port range for Prometheus: the JobManager and each
        TaskManager serve Flink's metrics (Flink's Prometheus reporter) and
        each of the worker pool's Python workers serves scinol's
        (:mod:`pipelines.telemetry`), each on the first port of the range
        still free when it starts. None: no metrics endpoint.
    """

    def __init__(self, taskmanagers: int = 2, slots: int = 1, *, flink_home: str | Path | None = None,
                 flink_version: str | None = None, checkpoint_dir: str | Path | None = None,
                 taskmanager_memory: str = "3072m", jobmanager_memory: str = "1024m", restart_attempts: int = 10,
                 restart_delay: str = "5 s", conf: dict | None = None, startup_timeout: float = 180.0,
                 keep_dir: bool = False, worker_pool: bool = False, metrics_ports: range | None = None,
                 high_availability: bool = False, ha_dir: str | Path | None = None):
        if taskmanagers < 1 or slots < 1:
            raise ValueError(f"a cluster needs at least 1 TaskManager with 1 slot, got {taskmanagers} x {slots}")
        self.taskmanagers_wanted, self.slots = taskmanagers, slots
        self.flink_home = Path(flink_home) if flink_home else None
        self.flink_version = flink_version
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.taskmanager_memory, self.jobmanager_memory = taskmanager_memory, jobmanager_memory
        self.restart_attempts, self.restart_delay = restart_attempts, restart_delay
        self.extra_conf = dict(conf or {})
        self.startup_timeout = startup_timeout
        self.keep_dir = keep_dir
        self.dir: Path | None = None
        self.rest_port: int | None = None
        self.jobmanager: subprocess.Popen | None = None
        self.taskmanagers: dict[str, subprocess.Popen] = {}  # resource id -> process
        self._next_tm = 0
        self.started_in: float | None = None  # seconds from start() to all TaskManagers registered
        self.with_worker_pool = worker_pool
        self.metrics_ports = metrics_ports
        self.pool: subprocess.Popen | None = None
        self.pool_port: int | None = None
        self.high_availability = high_availability
        self.ha_dir = Path(ha_dir) if ha_dir else None
        self.zookeeper: subprocess.Popen | None = None
        self.zookeeper_port: int | None = None
        self.jobmanager_starts = 0

    # ------------------------------------------------------------------ addresses

    @property
    def master(self) -> str:
        """``host:port`` of the REST endpoint: Beam's ``--flink_master``."""
        return f"{HOST}:{self.rest_port}"

    @property
    def rest_url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    @property
    def worker_pool(self) -> str | None:
        """``host:port`` of the SDK worker pool (Beam's ``--environment_config``), if started."""
        return f"{HOST}:{self.pool_port}" if self.pool is not None else None

    # ------------------------------------------------------------------ start / stop

    def start(self) -> "FlinkSessionCluster":
        began = time.monotonic()
        if self.flink_home is None:
            from pipelines.provision.flink import DEFAULT_FLINK_VERSION, provision_flink

            self.flink_home = provision_flink(self.flink_version or DEFAULT_FLINK_VERSION)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                self._start_once()
                break
            except FlinkClusterError as exc:
                self.stop()
                # A free port is found by binding and letting go; another
                # process may take it before the JVM binds it. Choose again.
                chosen = "rest.port" not in self.extra_conf
                if attempt == BIND_ATTEMPTS or not chosen or "java.net.BindException" not in str(exc):
                    raise
            except BaseException:
                self.stop()
                raise
        self.started_in = time.monotonic() - began
        return self

    def _start_once(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="scinol-flink-"))
        self._next_tm = 0
        self._write_conf()
        if self.high_availability:
            self._start_zookeeper()
        self.jobmanager = self._spawn("jobmanager", ["jobmanager.sh", "start-foreground"])
        self.jobmanager_starts = 1
        ids = [self._start_taskmanager() for _ in range(self.taskmanagers_wanted)]
        if self.with_worker_pool:
            self._start_worker_pool()
        self._wait_registered(ids, self.startup_timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """TaskManagers first, then the JobManager: SIGTERM, then SIGKILL after ``timeout``."""
        procs = list(self.taskmanagers.values()) + [p for p in (self.jobmanager, self.pool) if p is not None]
        _terminate(procs, timeout)
        _terminate([self.zookeeper] if self.zookeeper is not None else [], timeout)  # last: the others use it
        self.taskmanagers, self.jobmanager, self.pool, self.zookeeper = {}, None, None, None
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "FlinkSessionCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ JobManager

    def restart_jobmanager(self, timeout: float = 120.0) -> int:
        """Start the JobManager again after it died (a supervisor's job);
        with high availability it takes the running jobs over from ZooKeeper.
        Returns its pid once its REST endpoint answers."""
        if self.jobmanager is not None and self.jobmanager.poll() is None:
            raise FlinkClusterError(f"the JobManager (pid {self.jobmanager.pid}) is still running")
        self.jobmanager_starts += 1
        name = f"jobmanager-{self.jobmanager_starts}"
        self.jobmanager = self._spawn(name, ["jobmanager.sh", "start-foreground"])
        self._wait_answering(self.jobmanager, name, lambda: self.rest("/overview", timeout=5.0, attempts=1),
                             f"at {self.rest_url}", timeout)
        return self.jobmanager.pid

    def _wait_answering(self, proc: subprocess.Popen, name: str, probe, where: str, timeout: float) -> None:
        """Until ``probe()`` stops raising (OSError, ValueError); FlinkClusterError
        with the log's tail if ``proc`` exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise FlinkClusterError(f"{name} exited with status {proc.returncode} while starting"
                                        f"{self._log_tail(name)}")
            try:
                probe()
                return
            except (urllib.error.URLError, OSError, ValueError):
                if time.monotonic() > deadline:
                    raise FlinkClusterError(f"{name} did not answer {where} within {timeout:.0f} s"
                                            f"{self._log_tail(name)}") from None
            time.sleep(0.25)

    def _start_zookeeper(self, timeout: float = 60.0) -> None:
        """The distribution's ZooKeeper server (what ``bin/zookeeper.sh``
        starts, one peer), answering on :attr:`zookeeper_port` before this returns."""
        data = self._ha_root() / "zookeeper"
        data.mkdir(parents=True, exist_ok=True)
        (self.dir / "conf" / "zoo.cfg").write_text(
            f"tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={data}\nclientPort={self.zookeeper_port}\n"
            f"clientPortAddress={HOST}\nserver.1={HOST}:{_free_port()}:{_free_port()}\n")
        # bin/zookeeper.sh runs the JVM as a grandchild (it does not exec), which
        # stopping the script would leave behind: start what it starts directly.
        self.zookeeper = self._spawn("zookeeper", ["flink-console.sh", "zookeeper", "--zkConfigFile",
                                                   str(self.dir / "conf" / "zoo.cfg"), "--peerId", "1"],
                                     {"JVM_ARGS": "-Xms128m -Xmx256m -Dzookeeper.jmx.log4j.disable=true"})
        self._wait_answering(self.zookeeper, "zookeeper",
                             lambda: socket.create_connection((HOST, self.zookeeper_port), timeout=1.0).close(),
                             f"on {HOST}:{self.zookeeper_port}", timeout)

    def _ha_root(self) -> Path:
        return self.ha_dir or self.dir / "ha"

    def _ha_conf(self) -> dict:
        """Flink's ZooKeeper high availability, under a cluster id of its own."""
        if not self.high_availability:
            return {}
        self.zookeeper_port = self.zookeeper_port or _free_port()
        root = self._ha_root().resolve()
        return {"high-availability.type": "zookeeper",
                "high-availability.zookeeper.quorum": f"{HOST}:{self.zookeeper_port}",
                "high-availability.storageDir": (root / "storage").as_uri(),
                "high-availability.cluster-id": "/scinol-" + hashlib.sha1(str(root).encode()).hexdigest()[:12],
                # A new JobManager leads once the killed one's ZooKeeper session expires: Flink asks for 60 s
                # (ZooKeeper grants 40 at most with tickTime 2000); 15 s still outlasts a long GC pause.
                "high-availability.zookeeper.client.session-timeout": str(ZOOKEEPER_SESSION_MS)}

    # ------------------------------------------------------------------ TaskManagers

    def taskmanager_pids(self) -> list[int]:
        """Pids of the TaskManager JVMs that are alive."""
        return [p.pid for p in self.taskmanagers.values() if p.poll() is None]

    def kill_taskmanager(self, pid: int, graceful: bool = False) -> None:
        """kill -9 one TaskManager (a crash, for failover tests); with
        ``graceful``, SIGTERM: it leaves the cluster in good order."""
        for resource_id, proc in list(self.taskmanagers.items()):
            if proc.pid == pid:
                proc.terminate() if graceful else proc.kill()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                del self.taskmanagers[resource_id]
                return
        raise ValueError(f"pid {pid} is not a TaskManager of this cluster (they are {self.taskmanager_pids()})")

    def job_taskmanagers(self, job_id: str) -> list[int]:
        """Pids of the TaskManagers running tasks of job ``job_id`` now."""
        ids = set()
        for vertex in self.rest(f"/jobs/{job_id}")["vertices"]:
            found = self.rest(f"/jobs/{job_id}/vertices/{vertex['id']}/taskmanagers")["taskmanagers"]
            ids.update(tm.get("taskmanager-id", "") for tm in found)
        return [proc.pid for rid, proc in self.taskmanagers.items() if rid in ids and proc.poll() is None]

    def completed_checkpoints(self, job_id: str) -> int:
        return int(self.rest(f"/jobs/{job_id}/checkpoints")["counts"]["completed"])

    def add_taskmanager(self, timeout: float = 60.0) -> int:
        """Start one more TaskManager; returns its pid once the JobManager has registered it and its slots."""
        resource_id = self._start_taskmanager()
        self._wait_registered([resource_id], timeout)
        return self.taskmanagers[resource_id].pid

    def registered_taskmanagers(self, attempts: int = 3) -> list[dict]:
        """The JobManager's view (``GET /taskmanagers``): id, slots, ..."""
        return self.rest("/taskmanagers", attempts=attempts)["taskmanagers"]

    def rest(self, path: str, timeout: float = 15.0, attempts: int = 3):
        return flink_rest.rest(self.master, path, timeout=timeout, attempts=attempts)

    def cancel_job(self, job_id: str, timeout: float = 60.0) -> None:
        """Cancel job ``job_id`` and wait until it has ended (:func:`flink_rest.cancel_job`)."""
        flink_rest.cancel_job(self.master, job_id, timeout)

    def jobs(self) -> list[dict]:
        """``GET /jobs/overview``: each job's id, name, state, start/end time."""
        return flink_rest.jobs(self.master)

    def cancel_live_jobs(self, timeout: float = 60.0) -> list[str]:
        """Cancel every job that has not ended and wait for each to end; their ids."""
        return flink_rest.cancel_live_jobs(self.master, timeout=timeout)

    def _start_taskmanager(self) -> str:
        resource_id = f"scinol-tm-{self._next_tm}"
        self._next_tm += 1
        self.taskmanagers[resource_id] = self._spawn(
            resource_id, ["taskmanager.sh", "start-foreground", "-D", f"taskmanager.resource-id={resource_id}"])
        return resource_id

    def _wait_registered(self, resource_ids: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        missing = set(resource_ids)
        while True:
            for name, proc in [("jobmanager", self.jobmanager), *((r, self.taskmanagers[r]) for r in resource_ids)]:
                if proc.poll() is not None:
                    raise FlinkClusterError(f"Flink {name} exited with status {proc.returncode} while starting"
                                            f"{self._log_tail(name)}")
            try:
                # Registered with all its slots (a TaskManager reports them after registering).
                missing = set(resource_ids) - {tm["id"] for tm in self.registered_taskmanagers(attempts=1)
                                               if tm.get("slotsNumber", 0) >= self.slots}
            except (urllib.error.URLError, OSError, ValueError):
                pass  # REST endpoint not up yet
            if not missing:
                return
            if time.monotonic() > deadline:
                name = sorted(missing)[0]
                raise FlinkClusterError(f"Flink TaskManagers {sorted(missing)} did not register with the "
                                        f"JobManager at {self.rest_url} within {timeout:.0f} s"
                                        f"{self._log_tail(name)}{self._log_tail('jobmanager')}")
            time.sleep(0.25)

    # ------------------------------------------------------------------ processes and configuration

    def _start_worker_pool(self) -> None:
        """Beam's worker pool (:mod:`pipelines.runners.worker_pool`: one pool
        for every TaskManager, whose workers share ids): it starts one SDK
        harness process per StartWorker call (one per TaskManager per job), the
        ``sdk-harness`` script in the cluster's folder, which runs
        :mod:`pipelines.runners.harness` with this interpreter and the
        project on PYTHONPATH (an installed package needs no path)."""
        import sys

        self.pool_port = _free_port()
        root = str(Path(__file__).resolve().parents[2])
        env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        harness = self.dir / "sdk-harness"
        metrics = f" --metrics-ports={port_range_text(self.metrics_ports)}" if self.metrics_ports else ""
        harness.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pipelines.runners.harness "$@"{metrics}\n')
        harness.chmod(0o755)
        self.pool = self._spawn("worker-pool", [sys.executable, "-m", "pipelines.runners.worker_pool",
                                                f"--service_port={self.pool_port}",
                                                f"--container_executable={harness}"], env, flink_bin=False)

    def _spawn(self, name: str, argv: list[str], env: dict | None = None, flink_bin: bool = True) -> subprocess.Popen:
        env = {**os.environ, "FLINK_CONF_DIR": str(self.dir / "conf"), "FLINK_LOG_DIR": str(self.dir / "log"),
               "FLINK_PID_DIR": str(self.dir / "pid"), "FLINK_IDENT_STRING": name, **(env or {})}
        program = str(self.flink_home / "bin" / argv[0]) if flink_bin else argv[0]
        log = open(self.dir / "log" / f"{name}.out", "ab")
        try:
            return subprocess.Popen(dying_with_parent([program, *argv[1:]]), env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()

    def _write_conf(self) -> None:
        for sub in ("conf", "log", "pid", "tmp"):
            (self.dir / sub).mkdir()
        checkpoints = self.checkpoint_dir or self.dir / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        home_conf = self.flink_home / "conf"
        defaults = {}
        for name in ("config.yaml", "flink-conf.yaml"):  # Flink >= 1.19 / older
            if (home_conf / name).is_file():
                defaults = _flatten(yaml.safe_load((home_conf / name).read_text()) or {})
                break
        self.rest_port = int(self.extra_conf.get("rest.port") or _free_port())  # a port asked for in conf
        conf = {
            **defaults,  # keeps env.java.opts.all: the --add-opens Java 17 needs
            "jobmanager.rpc.address": HOST, "jobmanager.bind-host": HOST, "jobmanager.rpc.port": _free_port(),
            "jobmanager.memory.process.size": self.jobmanager_memory,
            "taskmanager.host": HOST, "taskmanager.bind-host": HOST,
            "taskmanager.numberOfTaskSlots": self.slots,
            "taskmanager.memory.process.size": self.taskmanager_memory,
            # Beam's operators keep their state on the heap (hashmap backend);
            # managed memory only serves batch sorting: keep it small.
            "taskmanager.memory.managed.size": "128m",
            "taskmanager.memory.task.off-heap.size": TASK_OFF_HEAP,
            "rest.address": HOST, "rest.bind-address": HOST, "rest.port": self.rest_port,
            # Working folders (the TaskManagers' blob caches: ~160 MB of job jar
            # per job) inside this cluster's folder, which stop() removes. By
            # default they are /tmp/tm_<resource id>, kept across clusters,
            # and a TaskManager starting on gigabytes of old jars took ~30 s
            # per blob cache to come up.
            "process.working-dir": str(self.dir / "work"),
            # and their scratch files too (each JVM unpacks a 22 MB RPC jar
            # there, left behind when the JVM is killed)
            "io.tmp.dirs": str(self.dir / "tmp"),
            "state.backend.type": "hashmap",
            "state.checkpoints.dir": checkpoints.resolve().as_uri(),
            "state.savepoints.dir": (self.dir / "savepoints").resolve().as_uri(),
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": self.restart_attempts,
            "restart-strategy.fixed-delay.delay": self.restart_delay,
            # A TaskManager killed with -9 is noticed in seconds, not Flink's
            # default 50: its heartbeat RPCs fail at once (refused), and after
            # heartbeat.rpc-failure-threshold (2) of them it is let go. The
            # timeout only covers a live but silent process: 20 s, so a JVM
            # starved of CPU on a busy 2-core machine is not taken for dead.
            "heartbeat.interval": 2000, "heartbeat.timeout": 20000,
            **self._reporter_conf(),
            **self._ha_conf(),
            **self.extra_conf,
        }
        (self.dir / "conf" / "config.yaml").write_text(yaml.safe_dump(conf, default_flow_style=False))
        for name in ("log4j-console.properties", "logback-console.xml"):
            if (home_conf / name).is_file():
                shutil.copy(home_conf / name, self.dir / "conf" / name)

    def _reporter_conf(self) -> dict:
        """Flink's Prometheus reporter (its plugin ships in the distribution's ``plugins/``) on the range."""
        if not self.metrics_ports:
            return {}
        return {"metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
                "metrics.reporter.prom.port": port_range_text(self.metrics_ports)}

    def _log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = (self.dir / "log" / f"{name}.out").read_text(errors="replace").splitlines()
        except (OSError, TypeError):
            return ""
        return f"\n--- last lines of {name}'s log ---\n" + "\n".join(text[-lines:])


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _terminate(procs: list, timeout: float) -> None:
    """SIGTERM each process, then SIGKILL those still alive after ``timeout`` seconds in all."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


BIND_ATTEMPTS = 3
"""Starts tried when a port chosen for the cluster was taken before the JVM bound it."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


