"""``scinol broker``: run a Kafka broker in the foreground until Ctrl-C or SIGTERM.

``--kind tansu`` (the default) is the embedded Kafka-protocol broker, memory
storage, nothing to fetch. ``--kind kafka`` is Apache Kafka 4.x (one KRaft
node, broker and controller), from the jars ``scinol provision kafka`` put in
the cache (fetched on first use if not); its data lives in a temporary folder
deleted when it stops. ``--brokers 3`` makes it a cluster of three such nodes
(topics replicated 3 times, ``min.insync.replicas`` 2), as production runs.
"""

from __future__ import annotations

import sys

from .errors import UsageError

KINDS = {"tansu": "embedded broker (tansu, memory storage)",
         "kafka": "Apache Kafka {version} (KRaft, broker and controller, data in a temporary folder)"}


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="run a Kafka broker (embedded tansu, or Apache Kafka 4.x) until Ctrl-C",
                       description="Starts a broker on loopback, prints its bootstrap address on stdout once it "
                                   "accepts connections, and stops it on Ctrl-C or SIGTERM.")
    p.add_argument("--kind", choices=sorted(KINDS), default="tansu",
                   help="tansu (default: embedded, memory storage) or kafka (Apache Kafka 4.x, KRaft; "
                        "see `scinol provision kafka`)")
    p.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")
    p.add_argument("--brokers", type=int, default=1, metavar="N",
                   help="--kind kafka: a KRaft cluster of N nodes, each broker and controller (default 1); with 3 "
                        "or more, topics are replicated 3 times with min.insync.replicas 2 unless created otherwise")
    p.set_defaults(func=run)


def _make_broker(kind: str, port: int | None, brokers: int = 1):
    if brokers > 1:
        from pipelines.kafka.apache_cluster import ApacheKafkaCluster

        cluster = ApacheKafkaCluster(brokers)
        return cluster, f"Apache Kafka {cluster.version} cluster of {brokers} KRaft nodes (broker and controller each)"
    if kind == "kafka":
        from pipelines.kafka.apache_broker import ApacheKafkaBroker

        broker = ApacheKafkaBroker(port=port)
        return broker, KINDS[kind].format(version=broker.version)
    from pipelines.kafka.broker import EmbeddedBroker

    return EmbeddedBroker(port=port), KINDS[kind]


def run(args) -> int:
    import signal
    import threading

    from pipelines.provision.cache import ProvisionError

    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError(f"broker: --port must be between 1 and 65535, got {args.port}")
    if args.brokers < 1 or (args.brokers > 1 and args.kind != "kafka"):
        raise UsageError(f"broker: --brokers {args.brokers}: a cluster of 1 or more nodes, --kind kafka only")
    if args.brokers > 1 and args.port is not None:
        raise UsageError("broker: --port applies to a single broker (a cluster's nodes take free ports)")
    broker, what = _make_broker(args.kind, args.port, args.brokers)
    stop = threading.Event()
    # Ctrl-C and SIGTERM both stop it (a SIGTERM while starting stops it once up). SIGINT is handled
    # here, not left to Python's KeyboardInterrupt: a process started from a script's background job
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt at all.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker.start()
    except ProvisionError as exc:
        raise UsageError(f"broker: {exc}") from None
    try:
        print(broker.bootstrap, flush=True)
        print(f"{what} at {broker.bootstrap}; Ctrl-C to stop", file=sys.stderr)
        while not stop.wait(0.5):
            for node in getattr(broker, "nodes", [broker]):
                if node.process.poll() is not None:
                    tail = node.log_tail() if hasattr(node, "log_tail") else ""
                    raise UsageError(f"broker exited with status {node.process.returncode}"
                                     + (f": {tail}" if tail else ""))
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
        print("broker stopped", file=sys.stderr)
    return 0
