"""``scinol run``: the streaming pipeline from the command line."""

from __future__ import annotations

import sys

from pipelines.cli.main import UsageError
from pipelines.cli.learn import parse_params


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


def run_produce(args) -> int:
    from pipelines.records.datafiles import open_reader
    from pipelines.produce import file_events, generated_events, produce_events

    if (args.data is None) == (args.generate is None):
        raise UsageError("give a DATA file or --generate, not both or neither")
    if args.generate:
        events, total = generated_events(args.generate, args.n, args.seed, args.model), args.n
    else:
        reader = open_reader(args.data, args.format, label=args.label)
        events, total = file_events(reader, args.model), None
    count, rate = produce_events(args.bootstrap, args.topic, events, partitions=args.partitions, rate=args.rate,
                                 total=total, kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file),
                                 progress=not args.quiet, registry_url=args.schema_registry)
    print(f"produced {count:,} events to {args.topic} ({rate:,.0f} events/s)", file=sys.stderr)
    return 0


def run_tail(args) -> int:
    from pipelines.tail import tail

    try:
        tail(args.bootstrap, args.topic, fmt=args.format, max_records=args.max, timeout=args.timeout,
             kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file), registry_url=args.schema_registry)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return 0


def input_limits(args) -> dict:
    """--max-index / --max-message-bytes as RunConfig fields (absent: its defaults);
    also refuses a checkpoint directory the checkpoint store cannot use."""
    if args.checkpoint_dir and "://" in args.checkpoint_dir:
        # The store writes with os/open: "gs://b/x" would silently become a local directory "gs:".
        raise UsageError(f"run: --checkpoint-dir must be a local or mounted directory, not a URL "
                         f"({args.checkpoint_dir.split('://')[0]}://...)")
    limits = {}
    for option, name in (("--max-index", "max_index"), ("--max-message-bytes", "max_message_bytes")):
        value = getattr(args, name, None)
        if value is not None:
            if value < 1:
                raise UsageError(f"run: {option} must be at least 1, got {value}")
            limits[name] = value
    return limits


def run_run(args) -> int:
    from pipelines.exact.pipeline import RunConfig, run
    from pipelines.exact.transforms import LearnerConfig

    learner = LearnerConfig(args.learner or "scinol2", args.loss or "logistic", parse_params(args.param),
                            args.n_classes, not args.no_bias, args.hash_bits, args.loss_param)
    try:
        learner.make()  # fail fast, with a one-line error, on a bad learner/loss/parameter
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    cfg = RunConfig(
        bootstrap=args.bootstrap, topic=args.topic, predictions_topic=args.predictions_topic, learner=learner,
        bounded=args.bounded, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds, checkpoint_topic=args.checkpoint_topic,
        dead_letter_topic=args.dead_letter_topic, group_id=args.group_id,
        kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file), registry_url=args.schema_registry,
        max_batch=args.max_batch, stop_after=args.stop_after, beam_args=list(args.beam_args),
        shards=args.shards, max_staleness=args.max_staleness, feedback_topic=args.feedback_topic,
        feedback_timeout=args.feedback_timeout,
        **input_limits(args))
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import check_shardable

        try:
            check_shardable(cfg)
        except ValueError as exc:
            raise UsageError(f"run: {exc}") from None
    mode = f"{cfg.shards} shards, max staleness {cfg.max_staleness}" if cfg.shards else "exact"
    print(f"scinol run: {cfg.topic} -> {cfg.predictions_topic} ({learner.learner}, {learner.loss}, {mode}, "
          f"{'bounded' if cfg.bounded else 'unbounded'}) on {cfg.bootstrap}", file=sys.stderr)
    run(cfg)
    return 0
