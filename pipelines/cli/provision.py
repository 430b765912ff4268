"""``scinol provision``: fetch what Apache Kafka, Flink, Prism and the schema
registry need into the cache (``$SCINOL_CACHE``, default ``~/.cache/scinol``).

Each part is fetched once; a second call finds it complete and starts no
registry client. One line per part says where it went; the first part that
cannot be provisioned (no Java or Maven, a registry that cannot be reached)
ends the command with one line naming it, exit status 2.
"""

from __future__ import annotations

import sys
import time

from .errors import UsageError

PARTS = ("kafka", "flink", "prism", "registry", "prometheus")
DEFAULT_PARTS = ("kafka", "flink", "prism")
"""What ``scinol provision`` without names fetches: what the Kafka and Flink
tests and runs need (the registry has its own command, ``scinol registry``)."""


def add_parser(sub) -> None:
    p = sub.add_parser("provision", help="fetch Apache Kafka, Flink, Prism (and the schema registry, Prometheus) into the cache",
                       description="Fetches each named part once into ~/.cache/scinol (or $SCINOL_CACHE): kafka "
                                   "(Apache Kafka 4.x jars, Maven), flink (Flink 1.19 from the apache-flink "
                                   "wheels, PyPI, and Beam's Flink job server, Maven), prism (Beam's Prism "
                                   "runner, built with go install), registry (Apicurio Registry, Maven), "
                                   "prometheus (Debian's Prometheus server, for the metrics tests). "
                                   "Without names: kafka flink prism. Idempotent.")
    p.add_argument("parts", nargs="*", metavar="PART",
                   help=f"any of {', '.join(PARTS)} (default: {' '.join(DEFAULT_PARTS)})")
    p.set_defaults(func=run)


def _kafka() -> list[tuple[str, object]]:
    from pipelines.provision.kafka import DEFAULT_KAFKA_VERSION, provision_kafka

    return [(f"Apache Kafka {DEFAULT_KAFKA_VERSION}", provision_kafka())]


def _flink() -> list[tuple[str, object]]:
    from pipelines.provision.flink import DEFAULT_FLINK_VERSION, provision_flink, provision_flink_job_server

    return [(f"Flink {DEFAULT_FLINK_VERSION} (FLINK_HOME)", provision_flink()),
            ("Beam's Flink job server", provision_flink_job_server())]


def _prism() -> list[tuple[str, object]]:
    from pipelines.provision.prism import provision_prism

    return [("Prism", provision_prism())]


def _registry() -> list[tuple[str, object]]:
    from pipelines.provision.registry import APICURIO_VERSION, install

    return [(f"Apicurio Registry {APICURIO_VERSION}", install())]


def _prometheus() -> list[tuple[str, object]]:
    from pipelines.provision.prometheus import PROMETHEUS_VERSION, provision_prometheus

    return [(f"Prometheus {PROMETHEUS_VERSION}", provision_prometheus())]


PROVISIONERS = {"kafka": _kafka, "flink": _flink, "prism": _prism, "registry": _registry,
                "prometheus": _prometheus}


def run(args) -> int:
    from pipelines.provision import registry
    from pipelines.provision.cache import ProvisionError

    unknown = [part for part in args.parts if part not in PARTS]
    if unknown:
        raise UsageError(f"provision: unknown part {unknown[0]!r} (choose from {', '.join(PARTS)})")
    parts = list(dict.fromkeys(args.parts or DEFAULT_PARTS))  # in the order given, each once
    for part in parts:
        began = time.monotonic()
        try:
            provided = PROVISIONERS[part]()
        except (ProvisionError, registry.ProvisionError) as exc:
            raise UsageError(f"provision {part}: {exc}") from None
        seconds = time.monotonic() - began
        for what, where in provided:
            print(f"{part}: {what}: {where}", flush=True)
        print(f"scinol provision: {part} ready in {seconds:.1f} s", file=sys.stderr)
    return 0
