"""Security: model and checkpoint files never execute anything on load and
are validated; Kafka TLS/SASL settings reach every client; secrets never
appear in logs or error messages."""

import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from tests.support.faultkit import REPO
from learners import OnlineLearner, make_learner
from learners.state import StateFileError


# --------------------------------------------------------------------------- model files

@pytest.fixture
def good_model(tmp_path):
    model = make_learner("scinol2")
    model.learn(np.eye(3), [1, -1, 1])
    path = tmp_path / "good.scinol"
    model.save(str(path))
    return path


def members_of(path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def write_zip(path, members: dict, compression=zipfile.ZIP_STORED) -> str:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return str(path)


def npy(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


class _OpensAFile:
    """Unpickling this calls open(path, "w"): the proof that something executed."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def edit_header(members, **arrays_or_fields):
    header = json.loads(members["header.json"])
    for key, value in arrays_or_fields.items():
        if key in header["arrays"]:
            header["arrays"][key].update(value)
        else:
            header[key] = value
    members["header.json"] = json.dumps(header).encode()
    return members


def test_a_pickle_payload_in_a_model_file_is_never_executed(good_model, tmp_path):
    proof = tmp_path / "executed"
    payload = npy(np.array([_OpensAFile(str(proof))], dtype=object), allow_pickle=True)
    members = members_of(good_model)
    as_declared = write_zip(tmp_path / "a.scinol", {**members, "P.npy": payload})
    members_o = edit_header(dict(members), P={"dtype": "|O", "shape": [1]})
    as_object = write_zip(tmp_path / "b.scinol", {**members_o, "P.npy": payload})
    raw_pickle = tmp_path / "c.scinol"
    raw_pickle.write_bytes(payload[payload.index(b"\x80"):])  # a bare pickle stream, not a zip
    for path, message in ((as_declared, "unreadable"), (as_object, "only plain numeric dtypes"),
                          (str(raw_pickle), "not a readable scinol model file")):
        with pytest.raises(StateFileError, match=message):
            OnlineLearner.load(path)
    assert not proof.exists()


@pytest.mark.parametrize("case", ["npy-shape", "header-shape", "learner-shape", "coords-disagree", "dtype",
                                  "scalar-type", "nested-json", "fortran"])
def test_shapes_and_types_are_validated(good_model, tmp_path, case):
    m = members_of(good_model)
    P = np.lib.format.read_array(io.BytesIO(m["P.npy"]))
    messages = {
        "npy-shape": ("P.npy", npy(np.zeros((P.shape[0] + 1,) + P.shape[1:])), "header.json says"),
        "header-shape": ("header.json", None, "header.json says"),
        "learner-shape": ("P.npy", None, "scinol2 needs"),
        "coords-disagree": ("P.npy", None, "disagree on the number of coordinates"),
        "dtype": ("P.npy", npy(P.astype(np.float32)), "header.json says"),
        "scalar-type": ("header.json", None, "not names of numbers"),
        "nested-json": ("header.json", b"[" * 100_000, "invalid header.json"),
        "fortran": ("P.npy", npy(np.asfortranarray(P.reshape(P.shape[0], 3))), "Fortran order"),
    }
    member, data, message = messages[case]
    if case == "header-shape":
        edit_header(m, P={"shape": [P.shape[0] + 1, 1, 3]})
    elif case == "learner-shape":  # consistent file, but not a scinol2 state with one output
        wrong = np.zeros((P.shape[0], 2, 3))
        m["P.npy"] = npy(wrong)
        edit_header(m, P={"shape": list(wrong.shape), "sha256": _sha(wrong)})
    elif case == "coords-disagree":
        wrong = np.zeros((P.shape[0] + 1,) + P.shape[1:])
        m["P.npy"] = npy(wrong)
        edit_header(m, P={"shape": list(wrong.shape), "sha256": _sha(wrong)})
    elif case == "scalar-type":
        edit_header(m, scalars={"t": {"__class__": "os.system"}})
    elif case == "fortran":
        f = np.asfortranarray(P.reshape(P.shape[0], 3))
        m["P.npy"] = data
        edit_header(m, P={"shape": list(f.shape)})
    else:
        m[member] = data
    with pytest.raises(StateFileError, match=message):
        OnlineLearner.load(write_zip(tmp_path / "bad.scinol", m))


def _sha(arr):
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def test_path_traversal_names_are_never_used_as_paths(good_model, tmp_path):
    m = members_of(good_model)
    outside = tmp_path / "evil.npy"
    # a member named to climb out: ignored (members are read by name, never extracted)
    extra = write_zip(tmp_path / "extra.scinol", {**m, "../evil.npy": m["P.npy"], "/tmp/evil.npy": b"x"})
    assert OnlineLearner.load(extra).n_examples == 3
    # the header naming such an array: refused
    header = json.loads(m["header.json"])
    header["arrays"]["../evil"] = header["arrays"].pop("P")
    named = write_zip(tmp_path / "named.scinol", {**m, "header.json": json.dumps(header).encode(),
                                                  "../evil.npy": m["P.npy"]})
    with pytest.raises(StateFileError, match="not a plain identifier"):
        OnlineLearner.load(named)
    assert not outside.exists() and not os.path.exists("/tmp/evil.npy")


def test_zip_bombs_and_huge_declared_sizes_are_refused_before_allocating(good_model, tmp_path):
    m = members_of(good_model)
    bomb = write_zip(tmp_path / "bomb.scinol", {**m, "P.npy": b"\x00" * (200 << 20)}, zipfile.ZIP_DEFLATED)
    assert os.path.getsize(bomb) < 1 << 20  # 200 MiB of zeros deflate to a few hundred KiB
    huge = dict(m)
    edit_header(huge, P={"shape": [1 << 40, 1, 3]})
    huge_header = npy(np.zeros((1, 1, 3))).replace(b"(1, 1, 3)", b"(%d, 1, 3)" % (1 << 40))
    npy_says_huge = write_zip(tmp_path / "npyhuge.scinol", {**m, "P.npy": huge_header})
    tracemalloc.start()
    try:
        for path, message in ((bomb, "compressed"), (write_zip(tmp_path / "huge.scinol", huge), "more than"),
                              (npy_says_huge, "header.json says")):
            with pytest.raises(StateFileError, match=message):
                OnlineLearner.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20, f"{peak} bytes allocated to refuse them"


def test_model_command_reports_a_malicious_file_in_one_line(good_model, tmp_path):
    m = members_of(good_model)
    bad = write_zip(tmp_path / "bad.scinol", {**m, "P.npy": npy(np.array([1], dtype=object), allow_pickle=True)})
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "model", "inspect", bad], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(r"^scinol: error: .*unreadable", r.stderr, re.M), r.stderr


RESTRICTED_UNPICKLER = "pipelines/steps/kept.py"
"""The one module that may import pickle: sharded mode's state in Beam state
is read back there by an Unpickler that loads only the classes it is given
(tests/pipelines/test_sharded_model.py shows a crafted pickle refused)."""


def test_no_code_path_can_unpickle():
    """Static guard: nothing in the package loads pickles or NumPy files with
    pickle allowed, except through the one restricted Unpickler."""
    offenders = []
    for folder in ("learners", "pipelines", "schemas"):
        for path in pathlib.Path(REPO, folder).rglob("*.py"):
            text, name = path.read_text(), path.relative_to(REPO).as_posix()
            for pattern in (r"^\s*import pickle", r"^\s*from pickle", r"allow_pickle\s*=\s*True", r"np\.load\(",
                            r"\bmarshal\.loads", r"\bdill\b", r"cloudpickle"):
                if re.search(pattern, text, re.M) and not (name == RESTRICTED_UNPICKLER and "pickle" in pattern):
                    offenders.append(f"{name}: {pattern}")
    assert not offenders


def test_the_one_unpickler_overrides_find_class_and_nothing_else_loads():
    text = pathlib.Path(REPO, RESTRICTED_UNPICKLER).read_text()
    assert "def find_class(self, module: str, name: str):" in text and "raise pickle.UnpicklingError" in text
    assert not re.search(r"pickle\.loads?\(|pickle\.Unpickler\(io", text)  # only the subclass reads


# --------------------------------------------------------------------------- Kafka settings

SECRET = "s3cret-Pa55-9d1f"  # a bogus password: must reach librdkafka, never the logs


@pytest.fixture
def spy_clients(monkeypatch):
    """Record the config every confluent-kafka client is created with (the
    clients are the real ones: the spies only note the config on the way)."""
    import confluent_kafka
    import confluent_kafka.admin

    import pipelines.beam_io.partition_fn
    import pipelines.kafka.consumer
    import pipelines.kafka.producer

    seen = []

    def spy(real):
        def create(conf, *args, **kwargs):
            seen.append((real.__name__, dict(conf)))
            return real(conf, *args, **kwargs)
        return create

    for module, name in ((confluent_kafka, "Producer"), (confluent_kafka, "Consumer"),
                         (pipelines.kafka.producer, "Producer"), (pipelines.kafka.consumer, "Consumer"),
                         (pipelines.beam_io.partition_fn, "Consumer")):
        monkeypatch.setattr(module, name, spy(getattr(module, name)))
    admin_init = confluent_kafka.admin.AdminClient.__init__  # a Python class that names itself in super()

    def init(self, conf, **kwargs):
        seen.append(("AdminClient", dict(conf)))
        admin_init(self, conf, **kwargs)
    monkeypatch.setattr(confluent_kafka.admin.AdminClient, "__init__", init)
    return seen


def test_kafka_settings_reach_every_client(kafka_bootstrap, topic_name, tmp_path, spy_clients, capsys):
    from pipelines.cli.main import main

    conf_file = tmp_path / "kafka.properties"
    conf_file.write_text(f"# TLS and SASL would go here\nsasl.password = {SECRET}\nssl.key.password={SECRET}\n")
    settings = ["--kafka-config", "client.id=scinol-spy", "--kafka-config-file", str(conf_file)]
    base = ["--bootstrap", kafka_bootstrap, "--topic", topic_name]
    assert main(["produce", "--generate", "toy", "--n", "300", "--quiet", *base, *settings]) == 0
    from confluent_kafka.cimpl import Producer  # the test's own client, not spied on

    own = Producer({"bootstrap.servers": kafka_bootstrap})
    own.produce(topic_name, b"not avro")  # one dead letter
    assert own.flush(10) == 0
    assert main(["run", *base, "--predictions-topic", topic_name + ".pred", "--bounded", "--checkpoint-dir",
                 str(tmp_path / "ckpt"), "--checkpoint-every", "100", *settings]) == 0
    assert main(["tail", topic_name + ".pred", "--bootstrap", kafka_bootstrap, "--max", "1", *settings]) == 0
    assert main(["run", *base, "--predictions-topic", topic_name + ".sharded", "--bounded", "--shards", "2",
                 "--checkpoint-dir", str(tmp_path / "sharded"), *settings]) == 0
    clients = [(kind, conf) for kind, conf in spy_clients if conf.get("bootstrap.servers") == kafka_bootstrap]
    reporters = sorted(getattr(conf.get("error_cb"), "client", "") for _, conf in clients)
    kinds = sorted(kind for kind, _ in clients)
    assert kinds.count("AdminClient") >= 3 and kinds.count("Consumer") >= 4 and kinds.count("Producer") >= 6
    # the pipelines' producers: predictions, dead letters, checkpoint headers; sharded: feedback
    for want in (".pred'", ".dlq'", ".pred.checkpoints'", ".sharded'", ".sharded.feedback'"):
        assert any(r.endswith(want) for r in reporters), reporters
    wrong = [(kind, sorted(conf)) for kind, conf in clients
             if conf.get("client.id") != "scinol-spy" or conf.get("sasl.password") != SECRET
             or conf.get("ssl.key.password") != SECRET]
    assert not wrong, wrong
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_secrets_never_reach_logs_or_errors(kafka_bootstrap, topic_name, tmp_path):
    from pipelines.records.events import generated_events
    from pipelines.records.topics import produce_events
    from pipelines.config import RunConfig

    produce_events(kafka_bootstrap, topic_name, generated_events("toy", 200, 0), progress=False)
    secrets = ["--kafka-config", f"sasl.password={SECRET}", "--kafka-config", f"ssl.key.password={SECRET}",
               "--kafka-config", f"ssl.keystore.password={SECRET}"]
    run_args = ["run", "--bootstrap", kafka_bootstrap, "--topic", topic_name, "--predictions-topic",
                topic_name + ".pred", "--bounded"]
    ok = run_cli(*run_args, *secrets)
    assert ok.returncode == 0, ok.stderr[-2000:]
    # SASL against a broker that refuses it: the run fails, and says so, without the password
    failed = run_cli(*run_args, *secrets, "--kafka-config", "security.protocol=SASL_PLAINTEXT",
                     "--kafka-config", "sasl.mechanism=SCRAM-SHA-256", "--kafka-config", "sasl.username=scinol")
    assert failed.returncode != 0 and ("SASL" in failed.stderr or "transport" in failed.stderr)
    # a malformed line of the settings file: reported by line number, not content
    conf_file = tmp_path / "kafka.properties"
    conf_file.write_text(f"sasl.password {SECRET}\n")
    bad_line = run_cli(*run_args, "--kafka-config-file", str(conf_file))
    assert bad_line.returncode == 2 and f"{conf_file}:1" in bad_line.stderr
    for r in (ok, failed, bad_line):
        assert SECRET not in r.stdout + r.stderr
    cfg = RunConfig(bootstrap="b", topic="t", predictions_topic="p", kafka_config={"sasl.password": SECRET})
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)


# --------------------------------------------------------------------------- the pipeline on SASL/SCRAM over TLS

def _properties(path: pathlib.Path, settings: dict) -> str:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return str(path)


@pytest.mark.slow
def test_scinol_run_on_sasl_scram_over_tls_and_its_two_refusals(secure_broker, topic_name, tmp_path):
    """The right credentials: the run learns and predicts every event. A
    wrong password (to ``scinol run`` or ``scinol produce``), or a CA that
    did not sign the broker's certificate: one line naming the broker and
    the cause, at once (no 30 s of retries), no traceback, no password."""
    from pipelines.records.events import generated_events
    from pipelines.records.topics import produce_events
    from pipelines.kafka.tls import make_ca

    bootstrap, right = secure_broker.bootstrap, secure_broker.client_config()
    produce_events(bootstrap, topic_name, generated_events("toy", 200, 0), kafka_config=right, progress=False)
    run_args = ["run", "--bootstrap", bootstrap, "--topic", topic_name, "--predictions-topic", topic_name + ".pred",
                "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt")]
    ok = run_cli(*run_args, "--kafka-config-file", _properties(tmp_path / "right.properties", right))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "200 messages read, 200 predictions written, 0 dead letters" in ok.stderr

    wrong_password = "not-the-password-" + SECRET
    wrong = run_cli(*run_args, "--kafka-config-file",
                    _properties(tmp_path / "wrong.properties", {**right, "sasl.password": wrong_password}))
    (tmp_path / "rows.csv").write_text("y,a\n1,2\n0,3\n")
    wrong_produce = run_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic_name, "--kafka-config-file",
                            str(tmp_path / "wrong.properties"), str(tmp_path / "rows.csv"))
    other_ca = make_ca(tmp_path / "other-ca", "some other CA")
    untrusted = run_cli(*run_args, "--kafka-config-file",
                        _properties(tmp_path / "ca.properties", {**right, "ssl.ca.location": other_ca}))
    assert wrong.stderr.splitlines()[-1] == (f"scinol: error: Kafka broker {bootstrap} rejected the SASL login of "
                                             f"user 'scinol' (SCRAM-SHA-512): wrong user name or password")
    assert wrong_produce.stderr == wrong.stderr.splitlines()[-1] + "\n"
    assert untrusted.stderr.splitlines()[-1] == (f"scinol: error: Kafka broker {bootstrap} presented a TLS certificate "
                                                 f"signed by no CA in ssl.ca.location ({other_ca}): untrusted "
                                                 f"certificate")
    for refused in (wrong, wrong_produce, untrusted):
        assert refused.returncode == 2 and "Traceback" not in refused.stderr and "retrying" not in refused.stderr
    for r in (ok, wrong, wrong_produce, untrusted):
        assert right["sasl.password"] not in r.stdout + r.stderr and wrong_password not in r.stdout + r.stderr
