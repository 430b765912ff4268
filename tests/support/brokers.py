"""Starting a broker of the test's own (beside the session's, conftest.py)."""

import os

import pytest

from pipelines.kafka.apache_broker import ApacheKafkaBroker
from pipelines.provision.cache import ProvisionError


def started(broker: ApacheKafkaBroker) -> ApacheKafkaBroker:
    """``broker`` started; when Apache Kafka cannot be provisioned, the test is
    skipped on a developer's machine and fails under CI=true."""
    try:
        broker.start()
    except ProvisionError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Apache Kafka could not be provisioned: {exc}")
        pytest.skip(f"Apache Kafka could not be provisioned: {exc}")
    return broker
