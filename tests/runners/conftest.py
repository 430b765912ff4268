"""Fixtures for the runner tests: the provisioned Flink distribution, Beam's
Flink job server and Prism (through the project's own provisioning code,
cached between runs), and a Flink session cluster.

A part that cannot be provisioned (no registry reachable) skips the test
on a developer's machine and fails it under ``CI=true``: a skipped
integration test must not pass as green in CI.
"""

from __future__ import annotations

import warnings

import pytest

from tests.support.provisioned import provisioned as _provisioned


@pytest.fixture(scope="session")
def flink_home():
    from pipelines.provision.flink import provision_flink

    return _provisioned(provision_flink)


@pytest.fixture(scope="session")
def flink_job_server_jar():
    from pipelines.provision.flink import provision_flink_job_server

    return _provisioned(provision_flink_job_server)


@pytest.fixture(scope="session")
def prism_binary():
    from pipelines.provision.prism import provision_prism

    return _provisioned(provision_prism)


@pytest.fixture(scope="session")
def flink_cluster(flink_home):
    """A session cluster with 2 TaskManagers (1 slot each), shared by the
    test modules that submit to one (about 20 s to start on 2 cores); the
    fixture below hands it to each test clean and whole."""
    from pipelines.runners.flink_cluster import FlinkSessionCluster

    with FlinkSessionCluster(taskmanagers=2, flink_home=flink_home) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _session_cluster_left_clean(request):
    """After a test on the module's session cluster: no job of it left
    running (holding slots the next test needs), and the cluster at its
    size again, whatever the test did or where it failed."""
    cluster = request.getfixturevalue("flink_cluster") if "flink_cluster" in request.fixturenames else None
    yield
    if cluster is None:
        return
    leftover = cluster.cancel_live_jobs()
    if leftover:
        warnings.warn(f"cancelled Flink jobs the test left running: {leftover}")
    for _ in range(cluster.taskmanagers_wanted - len(cluster.taskmanager_pids())):
        cluster.add_taskmanager()


@pytest.fixture(scope="module")
def apache_kafka():
    """An Apache Kafka broker of the module's own (the Flink tests kill and
    restart parts around it)."""
    from pipelines.kafka.apache_broker import ApacheKafkaBroker
    from tests.support.brokers import started

    broker = started(ApacheKafkaBroker())
    yield broker
    broker.stop()
