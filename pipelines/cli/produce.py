"""``scinol produce``: stream a data file or generated data into a topic as Avro events."""

from __future__ import annotations

import sys

from .errors import UsageError
from .options import add_kafka_options, add_topic_options, kafka_settings, registry_settings, topic_settings


def run(args) -> int:
    from pipelines.files.datafiles import open_reader
    from pipelines.records.event_values import file_values
    from pipelines.records.events import generated_events
    from pipelines.records.topics import produce_values

    if (args.data is None) == (args.generate is None):
        raise UsageError("give a DATA file or --generate, not both or neither")
    if args.generate:
        events, total = generated_events(args.generate, args.n, args.seed, args.model), args.n

        def encoded(codec):
            return (codec.encode("scinol.Event", e, args.topic) for e in events)
    else:
        reader = open_reader(args.data, args.format, label=args.label, weight=args.weight_column)
        total = None

        def encoded(codec):  # a batch of rows per compiled call
            return file_values(reader, args.model, codec, args.topic)
    # A file is read and encoded in a thread while this one produces. Each
    # time the reader comes back from parsing (no GIL) it waits for this
    # thread to hand over the GIL: up to the switch interval, 5 ms by default,
    # many times a batch. At 0.5 ms a 1,000,000-row CSV is produced 11-22 %
    # faster; this process does nothing else.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0005))
    try:
        count, rate = produce_values(args.bootstrap, args.topic, encoded, partitions=args.partitions, rate=args.rate,
                                     total=total, kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file),
                                     progress=not args.quiet, registry=registry_settings(args),
                                     topic_spec=topic_settings(args))
    finally:
        sys.setswitchinterval(interval)
    print(f"produced {count:,} events to {args.topic} ({rate:,.0f} events/s)", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("produce", help="stream a data file or generated data into a topic as Avro events",
                       description="CSV rows become dense Events, libsvm rows sparse ones, Vowpal Wabbit "
                                   "text named ones (ns^name); ids are FILE:LINE (or the VW tag).")
    p.add_argument("data", nargs="?", metavar="DATA", help="CSV, libsvm or VW text file (or use --generate)")
    add_kafka_options(p, "the topic to write (created when missing)")
    p.add_argument("--format", choices=["csv", "libsvm", "vw"], help="file format (default: from the extension)")
    p.add_argument("--label", default=None, help="CSV label column: header name or 0-based index")
    p.add_argument("--weight-column", metavar="NAME", default=None,
                   help="CSV column of importance weights >= 0 (the events' weight; libsvm: label:weight)")
    p.add_argument("--generate", choices=["toy"], help="generated data instead of a file (Kempka et al. 2019 §4.1)")
    p.add_argument("--n", type=int, default=5000, help="--generate: number of events")
    p.add_argument("--seed", type=int, default=0, help="--generate: random seed")
    add_topic_options(p, "partitions when creating the topic (default 1)")
    p.add_argument("--model", default="default", help="the model name the events carry")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
