"""``scinol broker``: run a Kafka broker in the foreground until Ctrl-C."""

from __future__ import annotations

import sys

from .errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("broker", help="run the embedded Kafka-protocol broker (tansu) until Ctrl-C",
                       description="Starts tansu (memory storage) on loopback and prints its bootstrap address.")
    p.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")
    p.set_defaults(func=run)


def run(args) -> int:
    import signal
    import threading

    from pipelines.kafka.broker import EmbeddedBroker

    broker = EmbeddedBroker(port=args.port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    broker.start()
    try:
        print(broker.bootstrap, flush=True)
        print(f"embedded broker (tansu, memory storage) at {broker.bootstrap}; Ctrl-C to stop", file=sys.stderr)
        while not stop.wait(0.5):
            if broker.process.poll() is not None:
                raise UsageError(f"broker exited with status {broker.process.returncode}")
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
        print("broker stopped", file=sys.stderr)
    return 0
