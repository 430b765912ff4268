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
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic", required=True, help=topic_help)
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for every client, e.g. security.protocol=SSL (repeatable)")
    p.add_argument("--kafka-config-file", metavar="FILE", help="librdkafka settings, one KEY=VALUE per line")
    p.add_argument("--schema-registry", metavar="URL", help="resolve and register Avro schema ids here")


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
    settings: dict[str, str] = {}
    lines = []
    if path:
        try:
            with open(path) as f:
                lines = [(f"{path}:{n}", line.strip()) for n, line in enumerate(f, 1)]
        except OSError as exc:
            raise UsageError(f"{path}: cannot read Kafka config ({exc.strerror})") from None
    lines += [("--kafka-config", p) for p in pairs]
    for where, line in lines:
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{where}: expected KEY=VALUE, got a line without '='")
        settings[key.strip()] = value.strip()
    return settings
