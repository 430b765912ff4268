import os
import sys

# Tests import the slow reference implementations as plain modules.
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """A real Kafka-protocol broker (tansu, memory storage) for the session."""
    from pipelines.kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test (the session's broker is shared)."""
    import re
    import uuid

    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80] + "-" + uuid.uuid4().hex[:8]
