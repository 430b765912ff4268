"""The Beam flags and readings the Flink tests share."""

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
