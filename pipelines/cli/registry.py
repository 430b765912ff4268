"""``scinol registry``: run a local schema registry (Confluent's REST API) until Ctrl-C."""

from __future__ import annotations

import sys

from .errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("registry", help="run a local schema registry (Apicurio Registry, Confluent's REST API) "
                                        "until Ctrl-C",
                       description="Fetches Apicurio Registry once with Maven (into ~/.cache/scinol, or "
                                   "$SCINOL_CACHE), starts it in memory on loopback (Java 21 or newer) and prints "
                                   "the URL to give --schema-registry.")
    p.add_argument("--user", default=None, help="require HTTP basic authentication as this user")
    p.add_argument("--password-file", default=None, metavar="FILE",
                   help="with --user: the password, first line of FILE (never on the command line)")
    p.set_defaults(func=run)


def run(args) -> int:
    import signal
    import threading

    from pipelines.provision.registry import LocalRegistry, ProvisionError

    users = None
    if (args.user is None) != (args.password_file is None):
        raise UsageError("registry: --user and --password-file go together")
    if args.user is not None:
        try:
            with open(args.password_file) as f:
                users = {args.user: f.readline().strip()}
        except OSError as exc:
            raise UsageError(f"{args.password_file}: cannot read the password ({exc.strerror})") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        registry = LocalRegistry(users).start()
    except ProvisionError as exc:
        raise UsageError(f"registry: {exc}") from None
    try:
        print(registry.url, flush=True)
        print(f"schema registry (Apicurio Registry, in memory) at {registry.url}; Ctrl-C to stop", file=sys.stderr)
        while not stop.wait(0.5):
            if registry.process.poll() is not None:
                raise UsageError(f"registry exited with status {registry.process.returncode}; log: {registry.log_path}")
    except KeyboardInterrupt:
        pass
    finally:
        registry.stop()
        print("registry stopped", file=sys.stderr)
    return 0
