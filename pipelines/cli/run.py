"""``scinol run``: the streaming pipeline from the command line."""

from __future__ import annotations

import sys

from .errors import UsageError
from .options import (add_interaction_options, add_kafka_options, add_learner_options, interactions_of,
                      kafka_settings, parse_params)


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


def run(args) -> int:
    from pipelines.config import RunConfig
    from pipelines.launch import run as run_pipeline
    from pipelines.config import LearnerConfig

    learner = LearnerConfig(args.learner or "scinol2", args.loss or "logistic", parse_params(args.param),
                            args.n_classes, not args.no_bias, args.hash_bits, args.loss_param,
                            interactions_of(args))
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
    run_pipeline(cfg)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the streaming pipeline: events topic in, predictions and checkpoints out",
                       description="Exact mode (default): one stateful learner per model name; sharded mode "
                                   "with --shards K. Beam flags go after `--`, "
                                   "e.g. `-- --runner=PortableRunner --job_endpoint=localhost:8099`.")
    add_kafka_options(p, "the events topic (Avro Event records)")
    p.add_argument("--predictions-topic", required=True, help="where Prediction records go")
    add_learner_options(p)
    add_interaction_options(p)
    p.add_argument("--n-classes", type=int, default=None, help="number of classes (softmax)")
    p.add_argument("--hash-bits", type=int, default=18, help="hash space of named features (default 18)")
    p.add_argument("--bounded", action="store_true",
                   help="read up to the end offsets seen at start, write a final checkpoint, stop")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="write checkpoints here and resume from the newest")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N", help="checkpoint every N events")
    p.add_argument("--checkpoint-seconds", type=float, default=None, metavar="T", help="checkpoint every T seconds")
    p.add_argument("--checkpoint-topic", default=None, help="compacted topic for checkpoint headers "
                                                            "(default: PREDICTIONS_TOPIC.checkpoints)")
    p.add_argument("--dead-letter-topic", default=None, help="default: TOPIC.dlq")
    p.add_argument("--group-id", default=None, help="consumer group (offsets committed after each bundle)")
    p.add_argument("--stop-after", type=int, default=None, metavar="N",
                   help="unbounded: stop after the first N offsets of each partition")
    p.add_argument("--max-batch", type=int, default=2000, help="messages per batch from the source")
    p.add_argument("--max-index", type=int, default=None, metavar="N",
                   help="dead-letter events with a sparse index >= N or more than N dense values "
                        "(index_out_of_range; default 4194304): bounds a model's memory")
    p.add_argument("--max-message-bytes", type=int, default=None, metavar="N",
                   help="dead-letter messages over N bytes undecoded (oversized; default 16 MiB)")
    g = p.add_argument_group("sharded mode (features split over K stateful shards, g_t fed back through Kafka)")
    g.add_argument("--shards", type=int, default=None, metavar="K",
                   help="split each model's coordinates over K shards (default: exact mode, one learner per model)")
    g.add_argument("--max-staleness", type=int, default=0, metavar="S",
                   help="a shard predicts at most S events ahead of the feedback it has applied; 0 (default) "
                        "equals exact mode, larger S trades exactness for throughput")
    g.add_argument("--feedback-topic", default=None, help="default: PREDICTIONS_TOPIC.feedback (1 partition)")
    g.add_argument("--feedback-timeout", type=float, default=30.0, metavar="T",
                   help="give up (and report) feedback awaited longer than T seconds (default 30)")
    p.add_argument("beam_args", nargs="*", metavar="-- BEAM_ARGS", help="passed to Beam's PipelineOptions")
    p.set_defaults(func=run)
