"""Deployment: the whole `scinol run` pipeline through Beam's PortableRunner
and a separate Python local job service (nothing in it depends on the local
runner), the local deployment script for real, and the Flink and Dataflow
material checked as far as it can be without Kubernetes or Google Cloud:
manifests parse, every command line they hold is accepted by `scinol run`'s
parser and Beam's options, and images, ports and paths agree."""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import apache_beam
import numpy as np
import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from tests.support.faultkit import REPO
from learners import make_learner
from learners.datasets import toy_examples
from pipelines.kafka.broker import free_port
from pipelines.state.checkpoints import CheckpointStore
from pipelines.cli.main import build_parser
from pipelines.records.events import dense_events
from pipelines.records.topics import produce_events
from pipelines.provision.flink import DEFAULT_FLINK_VERSION
from pipelines.runners.options import RESTART_ATTEMPTS, RESTART_DELAY_MS, RunnerOptions, flink_args
from tests.support.trialkit import read_topic

DEPLOY = os.path.join(REPO, "deploy")


# --------------------------------------------------------------------------- portable runner

@pytest.fixture(scope="module")
def job_service():
    """Beam's Python local job service, in its own process, as a Flink job server would be."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "the job service did not start"
            time.sleep(0.1)
        yield f"localhost:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("mode", ["bounded", "unbounded"])
def test_scinol_run_through_the_portable_runner(kafka_bootstrap, topic_name, tmp_path, job_service, mode):
    X, y = toy_examples(3000, 4)
    y[::7] = np.nan
    events = list(dense_events(X, y, "p-", start_ms=1_700_000_000_000))
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    ckpt = tmp_path / "ckpt"
    how = ["--bounded"] if mode == "bounded" else ["--stop-after", "3000"]
    r = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
         "--predictions-topic", topic_name + ".pred", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000",
         *how, "--", "--runner=PortableRunner", f"--job_endpoint={job_service}", "--environment_type=LOOPBACK"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    predictions = [rec for _, _, rec in read_topic(kafka_bootstrap, topic_name + ".pred")]
    assert [p["event_id"] for p in predictions] == [e["id"] for e in events]
    reference = make_learner("scinol2", "logistic")
    want = reference.learn(X, y)
    np.testing.assert_allclose([p["score"] for p in predictions], want, rtol=1e-12, atol=1e-300)
    final = CheckpointStore(str(ckpt)).latest("default")
    assert final.event_count == 3000
    for name, arr in reference.state.arrays.items():
        np.testing.assert_array_equal(final.learner.state.arrays[name], arr)


@pytest.mark.kafka
# --------------------------------------------------------------------------- local

def test_local_deployment_script_runs(tmp_path):
    r = subprocess.run(["bash", os.path.join(DEPLOY, "local", "run-local.sh"), str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "SCINOL_EVENTS": "600"})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 3 and lines[0]["event_id"] == "toy-0-0"
    assert CheckpointStore(str(tmp_path / "checkpoints")).latest("default").event_count == 600


# --------------------------------------------------------------------------- Flink

def load_yaml(*parts):
    with open(os.path.join(DEPLOY, *parts)) as f:
        return list(yaml.safe_load_all(f))


def split_scinol_command(args):
    """A `scinol run ... -- BEAM_ARGS` argument list: the parsed scinol
    options and the Beam arguments, both checked."""
    ns = build_parser().parse_args(args)  # raises on anything `scinol run` does not accept
    assert ns.command == "run"
    beam = list(ns.beam_args)
    known = PipelineOptions(beam).get_all_options(drop_default=True)
    with_unknown = PipelineOptions(beam).get_all_options(drop_default=True, retain_unknown_options=True)
    return ns, known, set(with_unknown) - set(known)


def containers(pod_spec):
    return {c["name"]: c for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", [])}


def mounts(container):
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def test_flink_manifests():
    (flink,) = load_yaml("flink", "flink-session.yaml")
    (job,) = load_yaml("flink", "scinol-run-job.yaml")
    storage = {d["metadata"]["name"]: d for d in load_yaml("flink", "storage.yaml")}
    assert flink["apiVersion"] == "flink.apache.org/v1beta1" and flink["kind"] == "FlinkDeployment"
    conf = flink["spec"]["flinkConfiguration"]
    assert conf["execution.checkpointing.interval"] and conf["execution.checkpointing.mode"] == "EXACTLY_ONCE"
    assert conf["state.checkpoints.dir"].startswith("file:///flink-data/")
    # Flink restores a failed task from its checkpoint, as run here (README, "Recovery")
    assert conf["restart-strategy.type"] == "fixed-delay"
    assert int(conf["restart-strategy.fixed-delay.attempts"]) == RESTART_ATTEMPTS
    assert conf["restart-strategy.fixed-delay.delay"] == f"{RESTART_DELAY_MS // 1000}s"
    assert conf["state.backend.type"] == "hashmap"  # what FlinkSessionCluster runs
    tm = containers(flink["spec"]["taskManager"]["podTemplate"]["spec"])
    pool = tm["beam-worker-pool"]
    assert pool["args"] == ["--worker_pool"] and pool["ports"][0]["containerPort"] == 50000

    pod = job["spec"]["template"]["spec"]
    cs = containers(pod)
    launcher, server = cs["launcher"], cs["beam-job-server"]
    assert launcher["command"] == ["scinol"]
    ns, beam, unknown = split_scinol_command(launcher["args"])
    assert beam["runner"] == "PortableRunner" and beam["environment_type"] == "EXTERNAL"
    assert beam["environment_config"] == "localhost:50000"  # the worker pool sidecar
    # Flink job server options, added at submission
    assert unknown <= {"checkpointing_interval", "finish_bundle_before_checkpointing", "number_of_execution_retries",
                       "execution_retry_delay"}
    # the Beam flags `scinol run --runner flink` passes here, but for where the job server and workers are
    here = flink_args(RunnerOptions("flink", flink_master="scinol-flink-rest:8081", parallelism=2,
                                    checkpointing_interval=60000), job_server_jar="x.jar")
    where = ("--runner", "--flink_master", "--flink_version", "--flink_job_server_jar", "--job_server_java_launcher",
             "--environment_type")
    assert {a for a in here if a.split("=")[0] not in where} <= set(ns.beam_args)
    job_port = int(beam["job_endpoint"].rsplit(":", 1)[1])
    assert f"--job-port={job_port}" in server["args"] and "--flink-master=scinol-flink-rest:8081" in server["args"]
    assert "--flink-master=" + flink["metadata"]["name"] + "-rest:8081" in server["args"]
    # the checkpoint directory and the Kafka settings are where the launcher and the workers look
    for container in (launcher, pool):
        assert mounts(container)[ns.checkpoint_dir] == "scinol-checkpoints"
        assert mounts(container)[os.path.dirname(ns.kafka_config_file)] == "kafka-client"
    assert storage["scinol-checkpoints"]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "kafka.properties" in storage["scinol-kafka-client"]["stringData"]
    # versions agree: Flink of the job server = the cluster's; Beam everywhere = the installed one
    flink_version = flink["spec"]["flinkVersion"].replace("v", "").replace("_", ".")
    assert server["image"] == f"apache/beam_flink{flink_version}_job_server:{apache_beam.__version__}"
    assert flink["spec"]["image"] == f"flink:{flink_version}"
    assert flink_version in apache_beam.options.pipeline_options.FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS
    assert flink_version == DEFAULT_FLINK_VERSION  # the Flink that runs here (tests/runners)


# --------------------------------------------------------------------------- images

def dockerfile(*parts):
    with open(os.path.join(REPO, *parts)) as f:
        text = re.sub(r"\\\n", " ", f.read())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_pipeline_image():
    lines = dockerfile("deploy", "Dockerfile")
    assert f"ARG BEAM_VERSION={apache_beam.__version__}" in lines
    stages = [line.split()[-1] for line in lines if line.startswith("FROM")]
    assert stages == ["worker", "launcher"]
    assert lines[0].startswith("ARG") and "apache/beam_python3.11_sdk:${BEAM_VERSION}" in lines[1]
    for line in lines:
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert os.path.exists(os.path.join(REPO, source)), source
    entry = json.loads(next(line for line in lines if line.startswith("ENTRYPOINT"))[len("ENTRYPOINT"):])
    cmd = json.loads(next(line for line in lines if line.startswith("CMD"))[len("CMD"):])
    assert entry == ["scinol"]
    with pytest.raises(SystemExit) as stop:  # `scinol run --help`: accepted, prints help, exits 0
        build_parser().parse_args(cmd)
    assert stop.value.code == 0
    # the worker stage keeps Beam's boot entrypoint (Flink worker pool, Dataflow SDK container)
    worker = lines[: next(i for i, line in enumerate(lines) if line.startswith("FROM worker"))]
    assert not any(line.startswith(("ENTRYPOINT", "CMD")) for line in worker)


# --------------------------------------------------------------------------- Dataflow

@pytest.fixture(scope="module")
def dataflow_main():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dataflow_main", os.path.join(DEPLOY, "dataflow", "main.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module


def sample_value(param):
    for regex, value in ((r"^\^\(true\|false\)\$$", "true"), (r"\[0-9", "7"), (r"https", "http://registry:8081")):
        if any(re.search(regex, r) for r in param.get("regexes", [])):
            return value
    return {"params": "eps=0.5;", "kafka_config": "client.id=x;acks=all", "bootstrap": "kafka:9092",
            "learner": "scinol2", "loss": "logistic"}.get(param["name"], f"{param['name']}-value")


def test_dataflow_flex_template(dataflow_main, tmp_path):
    with open(os.path.join(DEPLOY, "dataflow", "metadata.json")) as f:
        meta = json.load(f)
    params = meta["parameters"]
    assert {p["name"] for p in params if not p["isOptional"]} == {"bootstrap", "topic", "predictions_topic"}
    for p in params:
        for regex in p.get("regexes", []):
            assert re.fullmatch(regex, sample_value(p)), (p["name"], regex)
    conf = tmp_path / "kafka.properties"
    conf.write_text("sasl.password=x\n")
    argv = [f"--{p['name']}={conf if p['name'] == 'kafka_config_file' else sample_value(p)}" for p in params]
    argv += ["--runner=DataflowRunner", "--project=p", "--region=europe-west1", "--temp_location=gs://b/tmp",
             "--sdk_container_image=europe-west1-docker.pkg.dev/p/scinol/scinol-stream-dataflow:0.1.0"]
    args = dataflow_main.to_scinol_args(argv, fetch=lambda url: pytest.fail("no gs:// here"))
    ns, beam, unknown = split_scinol_command(args)
    assert not unknown and beam["runner"] == "DataflowRunner" and beam["sdk_container_image"].endswith(":0.1.0")
    assert ns.bounded and ns.param == ["eps=0.5"] and ns.kafka_config == ["client.id=x", "acks=all"]
    assert ns.max_index == 7 and ns.n_classes == 7 and ns.kafka_config_file == str(conf)
    # every template parameter became a `scinol run` option (none leaked to Beam)
    assert not [a for a in args[args.index("--"):] if a.split("=")[0][2:] in {p["name"] for p in params}]
    assert dataflow_main.to_scinol_args(["--kafka_config_file=gs://b/k.properties"], fetch=lambda url: "/tmp/k") \
        == ["run", "--kafka-config-file", "/tmp/k", "--"]

    lines = dockerfile("deploy", "dataflow", "Dockerfile")
    env = dict(line.split(None, 1)[1].split("=", 1) for line in lines if line.startswith("ENV"))
    copies = {line.split()[-1]: line.split()[-2] for line in lines if line.startswith("COPY")}
    assert copies[env["FLEX_TEMPLATE_PYTHON_PY_FILE"]] == "deploy/dataflow/main.py"

    launch = os.path.join(DEPLOY, "dataflow", "launch.sh")
    assert subprocess.run(["bash", "-n", launch]).returncode == 0
    text = open(launch).read()
    used = set(re.findall(r'(?:params[+]?="|,)([a-z_]+)=\$', text))
    assert used and used <= {p["name"] for p in params} | {"sdk_container_image"}
    assert {"bootstrap", "topic", "predictions_topic", "sdk_container_image"} <= used
    assert "--metadata-file deploy/dataflow/metadata.json" in text
    assert shlex.split("--enable-streaming-engine")[0] in text


def test_a_checkpoint_url_without_a_filesystem_is_refused_in_one_line(capsys):
    """URLs go through Beam's FileSystems; a scheme none serves is one line, and never a local folder."""
    from pipelines.cli.main import main

    assert main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                 "--checkpoint-dir", "nosuch://bucket/ckpt"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ("run: --checkpoint-dir nosuch://bucket/ckpt: cannot keep checkpoints at nosuch://: "
            "no Beam filesystem for that scheme is installed") in err
    assert not os.path.exists("nosuch:")


def test_the_readme_names_what_was_not_run_and_the_flink_options_that_were():
    with open(os.path.join(DEPLOY, "README.md")) as f:
        readme = f.read()
    assert "Kubernetes, Docker and Dataflow cannot run on\nthis machine" in readme
    assert "were not\ntested" in readme
    for flag in flink_args(RunnerOptions("flink"), job_server_jar="x.jar"):
        assert flag.split("=")[0] in readme, flag  # every Beam flag `--runner flink` passes is documented
    assert f"--flink_version={DEFAULT_FLINK_VERSION}" in readme
    assert f"--number_of_execution_retries={RESTART_ATTEMPTS} --execution_retry_delay={RESTART_DELAY_MS}" in readme
