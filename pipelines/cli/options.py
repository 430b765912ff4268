"""Options shared by several sub-commands, and turning them into settings."""

from __future__ import annotations

from .errors import UsageError


def add_learner_options(p) -> None:
    p.add_argument("--learner", default=None, help="learning algorithm, see `scinol learners` (default: scinol2)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a learner parameter, e.g. --param lr=0.1 (repeatable; see `scinol learners`)")
    p.add_argument("--loss", default=None, help="logistic (labels ±1 or 0/1), hinge, absolute, squared, "
                                                "epsilon_insensitive, softmax (labels 0..K-1); default: logistic")
    p.add_argument("--loss-param", type=float, default=None, help="the ε of epsilon_insensitive (default 0.1)")
    p.add_argument("--no-bias", action="store_true", help="do not add the constant bias feature")


def add_bootstrap_option(p) -> None:
    p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", required=True, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (--bootstrap is the old spelling)")


def add_interaction_options(p) -> None:
    p.add_argument("-q", "--quadratic", action="append", default=[], metavar="AB",
                   help="cross the features of namespaces A and B (first letters, as VW's -q; repeatable)")
    p.add_argument("--cubic", action="append", default=[], metavar="ABC",
                   help="cross the features of three namespaces (as VW's --cubic; repeatable)")


def interactions_of(args) -> tuple[str, ...]:
    """-q/--cubic as checked interactions (learners.interactions)."""
    from learners.interactions import normalize_interactions

    for option, specs, size in (("-q", args.quadratic, 2), ("--cubic", args.cubic, 3)):
        for spec in specs:
            if len(spec) != size:
                raise UsageError(f"{option} {spec!r}: expected {size} namespace letters")
    try:
        return normalize_interactions(list(args.quadratic) + list(args.cubic))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_kafka_options(p, topic_help: str) -> None:
    add_bootstrap_option(p)
    p.add_argument("--topic", required=True, help=topic_help)
    add_client_options(p)


def add_client_options(p) -> None:
    """librdkafka settings and the schema registry: every command that talks to Kafka."""
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for every client, e.g. security.protocol=SSL (repeatable)")
    p.add_argument("--kafka-config-file", metavar="FILE", help="librdkafka settings, one KEY=VALUE per line")
    g = p.add_argument_group("schema registry (Confluent's REST API)")
    g.add_argument("--schema-registry", metavar="URL",
                   help="resolve and register Avro schema ids here (credentials in the URL are never shown)")
    g.add_argument("--schema-registry-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of Confluent's SchemaRegistryClient, e.g. basic.auth.user.info=USER:PASSWORD, "
                        "ssl.ca.location=FILE (repeatable; values never shown)")
    g.add_argument("--schema-registry-config-file", metavar="FILE",
                   help="SchemaRegistryClient settings, one KEY=VALUE per line")
    g.add_argument("--subject-name-strategy", default="TopicNameStrategy",
                   choices=["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"],
                   help="subjects the schemas are registered under, as Confluent's serializers name them "
                        "(default TopicNameStrategy: TOPIC-value)")
    g.add_argument("--no-auto-register", dest="auto_register", action="store_false",
                   help="never register a schema: use the one registered under the subject (this version's, else "
                        "the latest), fail if there is none (a registry the run may only read)")


def add_topic_options(p, partitions_help: str) -> None:
    """How the topics a command creates are made."""
    p.add_argument("--partitions", type=int, default=None, metavar="N", help=partitions_help)
    p.add_argument("--replication-factor", type=int, default=None, metavar="N",
                   help="replication factor of topics created (default: the broker's default.replication.factor)")
    p.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of every topic created, e.g. retention.ms=604800000 (repeatable)")


def registry_settings(args):
    """The :class:`schemas.registry.Registry` the options describe (None
    without --schema-registry); bad settings are a UsageError."""
    config = settings(args.schema_registry_config, args.schema_registry_config_file, "--schema-registry-config",
                      "schema registry config")
    if args.schema_registry is None:
        if config or not args.auto_register:
            raise UsageError("--schema-registry-config and --no-auto-register need --schema-registry URL")
        return None
    from schemas.registry import Registry

    try:
        return Registry(args.schema_registry, config, subject_strategy=args.subject_name_strategy,
                        auto_register=args.auto_register)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def topic_settings(args) -> dict:
    """``--replication-factor`` and ``--topic-config`` as TopicSpec fields."""
    if args.replication_factor is not None and args.replication_factor < 1:
        raise UsageError(f"--replication-factor must be at least 1, not {args.replication_factor}")
    return {"replication": args.replication_factor,
            "config": settings(args.topic_config, None, "--topic-config", "topic config")}


def parse_params(items: list[str]) -> dict[str, float]:
    """``["lr=0.1", "beta1=0.9"]`` → ``{"lr": 0.1, "beta1": 0.9}``."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--param {item!r}: {value!r} is not a number") from None
    return params


def kafka_settings(pairs: list[str], path: str | None) -> dict[str, str]:
    """librdkafka settings from a KEY=VALUE file (# comments) and flags; the
    flags win. Values are never printed: they may be secrets."""
    return settings(pairs, path, "--kafka-config", "Kafka config")


def settings(pairs: list[str], path: str | None, flag: str, what: str) -> dict[str, str]:
    """KEY=VALUE settings from a file (# comments) and ``flag``s; the flags
    win. Values are never printed: they may be secrets."""
    out: dict[str, str] = {}
    lines = []
    if path:
        try:
            with open(path) as f:
                lines = [(f"{path}:{n}", line.strip()) for n, line in enumerate(f, 1)]
        except OSError as exc:
            raise UsageError(f"{path}: cannot read {what} ({exc.strerror})") from None
    lines += [(flag, p) for p in pairs]
    for where, line in lines:
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{where}: expected KEY=VALUE, got a line without '='")
        out[key.strip()] = value.strip()
    return out
