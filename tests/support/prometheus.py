"""Reading ``scinol run --metrics-port``: the endpoint of this process
scraped directly, and a real Prometheus server (Debian's, provisioned)
that scrapes one target, with its HTTP query API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pipelines import telemetry
from pipelines.kafka.broker import free_port
from tests.support.waiting import wait_for


def scrape() -> dict:
    """{(metric sample name, frozenset of labels): value} from the endpoint."""
    host, port = telemetry.address()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port`` each) every second; a context manager."""

    def __init__(self, binary: Path, targets: list[str], folder: Path, config: Path | None = None,
                 rules: Path | None = None):
        """``config``: a configuration file of one's own instead (``targets`` unused); ``rules``: a rule file."""
        self.binary, self.targets, self.folder, self.config = binary, list(targets), folder, config
        self.rules = rules
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "PrometheusServer":
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.config or self.folder / "prometheus.yml"
        if self.config is None:
            rules = f"rule_files: [{json.dumps(str(self.rules))}]\n" if self.rules else ""
            config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n" + rules +
                              "scrape_configs:\n  - job_name: scinol\n"
                              f"    static_configs:\n      - targets: {json.dumps(self.targets)}\n")
        self.log = open(self.folder / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [str(self.binary), f"--config.file={config}", f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"Prometheus did not start; see {self.folder / 'prometheus.log'}")
            time.sleep(0.2)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, promql: str) -> list[dict]:
        """The instant vector ``promql`` evaluates to: [{"metric": labels, "value": [t, "v"]}]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def api(self, path: str) -> dict:
        """The ``data`` of ``/api/v1/<path>``."""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]

    def scalar(self, promql: str) -> float | None:
        """The value of a one-element ``promql``; None while it has none."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        self.log.close()


def dashboard_queries_answer(prometheus: PrometheusServer) -> None:
    """Every query of the Grafana dashboard in deploy/ is valid PromQL over
    the run's metrics, and all but the dead-letter panel (none in the runs
    tested) show data."""
    dashboard = json.loads((Path(__file__).parents[2] / "deploy" / "monitoring" / "grafana-dashboard.json")
                           .read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    no_data = ["sum by (reason) (rate(scinol_dead_letters_total[5m]))"]
    empty = lambda: [q for q in queries if not prometheus.query(q)]  # noqa: E731
    wait_for(lambda: empty() == no_data, 30, "every panel but the dead letters' to show data (a rate needs two "
                                             "scrapes)", lambda: f"without data: {empty()}")
