"""The Beam flags and readings the Flink tests share."""

from pipelines.runners.options import job_server_args
from tests.support.trialkit import read_topic


def flink_args(jar, master: str, *more: str) -> list[str]:
    """Beam's FlinkRunner on ``master`` ([local] or a session cluster) with the job server ``jar``, LOOPBACK."""
    return ["--runner=FlinkRunner", f"--flink_master={master}", *job_server_args(jar), "--environment_type=LOOPBACK",
            *more]


def predictions_of(bootstrap, topic):
    return [record for _, _, record in read_topic(bootstrap, topic)]
