"""The ``scinol`` command line.

Every failure the user can cause (bad options, unreadable or malformed
files, bad labels, bad model files) ends with one line on stderr,
``scinol: error: ...``, and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """An error to report in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage dump
        command = self.prog.split()[1:]
        raise UsageError(" ".join(command + [message]) if not command else f"{command[0]}: {message}")


def _learn_parser(sub) -> None:
    p = sub.add_parser("learn", help="learn online from a CSV or libsvm file, VW style",
                       description="One online pass (or --passes N) over DATA; prints the progressive "
                                   "average loss at every power of two examples.")
    p.add_argument("data", metavar="DATA", help="CSV or libsvm/svmlight file (.gz is fine)")
    p.add_argument("--format", choices=["csv", "libsvm"], help="file format (default: from the extension)")
    p.add_argument("--label", default=None, help="CSV label column: header name or 0-based index (default: first column)")
    p.add_argument("--header", choices=["auto", "yes", "no"], default="auto", help="CSV header line (default: auto)")
    p.add_argument("--delimiter", default=None, help="CSV delimiter (default: sniffed from , ; tab)")
    _add_learner_options(p)
    p.add_argument("--n-classes", type=int, default=None, help="number of classes for softmax (default: largest label + 1)")
    p.add_argument("--passes", type=int, default=1, help="passes over the data (default 1)")
    p.add_argument("-p", "--predictions", metavar="FILE", help="write ŷ_t (made before learning from example t), one line per example")
    p.add_argument("--save", metavar="FILE", help="save the final model")
    p.add_argument("--load", metavar="FILE", help="start from a saved model (its learner, loss and bias are used)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per compiled-kernel call (no effect on results)")
    p.add_argument("--quiet", action="store_true", help="no progress table")


def _generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="write a generated data set to a file",
                       description="Data sets from the seed papers, written as CSV (label column 'y') or libsvm.")
    p.add_argument("name", choices=["toy"], help="toy: the illustrative data of seed 000 §4.1 (21 features, scales 2^-10..2^10)")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--n", type=int, default=5000, help="number of examples (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--format", choices=["csv", "libsvm"], default="csv")


def _broker_parser(sub) -> None:
    p = sub.add_parser("broker", help="run the embedded Kafka-protocol broker (tansu) until Ctrl-C",
                       description="Starts tansu (memory storage) on loopback and prints its bootstrap address.")
    p.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")


def _add_learner_options(p) -> None:
    p.add_argument("--learner", default=None, help="learning algorithm, see `scinol learners` (default: scinol2)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a learner parameter, e.g. --param lr=0.1 (repeatable; see `scinol learners`)")
    p.add_argument("--loss", default=None, help="logistic (labels ±1 or 0/1), hinge, absolute, squared, "
                                                "epsilon_insensitive, softmax (labels 0..K-1); default: logistic")
    p.add_argument("--loss-param", type=float, default=None, help="the ε of epsilon_insensitive (default 0.1)")
    p.add_argument("--no-bias", action="store_true", help="do not add the constant bias feature")


def _add_kafka_options(p, topic_help: str) -> None:
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic", required=True, help=topic_help)
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for every client, e.g. security.protocol=SSL (repeatable)")
    p.add_argument("--kafka-config-file", metavar="FILE", help="librdkafka settings, one KEY=VALUE per line")
    p.add_argument("--schema-registry", metavar="URL", help="resolve and register Avro schema ids here")


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="run the streaming pipeline: events topic in, predictions and checkpoints out",
                       description="Exact mode (default): one stateful learner per model name; sharded mode "
                                   "with --shards K. Beam flags go after `--`, "
                                   "e.g. `-- --runner=PortableRunner --job_endpoint=localhost:8099`.")
    _add_kafka_options(p, "the events topic (Avro Event records)")
    p.add_argument("--predictions-topic", required=True, help="where Prediction records go")
    _add_learner_options(p)
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


def _produce_parser(sub) -> None:
    p = sub.add_parser("produce", help="stream a data file or generated data into a topic as Avro events",
                       description="CSV rows become dense Events, libsvm rows sparse ones; ids are FILE:LINE.")
    p.add_argument("data", nargs="?", metavar="DATA", help="CSV or libsvm file (or use --generate)")
    _add_kafka_options(p, "the topic to write (created when missing)")
    p.add_argument("--format", choices=["csv", "libsvm"], help="file format (default: from the extension)")
    p.add_argument("--label", default=None, help="CSV label column: header name or 0-based index")
    p.add_argument("--generate", choices=["toy"], help="generated data instead of a file (seed 000 §4.1)")
    p.add_argument("--n", type=int, default=5000, help="--generate: number of events")
    p.add_argument("--seed", type=int, default=0, help="--generate: random seed")
    p.add_argument("--partitions", type=int, default=None, help="partitions when creating the topic (default 1)")
    p.add_argument("--model", default="default", help="the model name the events carry")
    p.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _tail_parser(sub) -> None:
    p = sub.add_parser("tail", help="decode and print the records of a topic",
                       description="Prints every record from the start of each partition. A Prediction's raw "
                                   "score ŷ is the field `score`.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="stop after S seconds without a record")
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--kafka-config-file", metavar="FILE")
    p.add_argument("--schema-registry", metavar="URL")


def _demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="the main job: embedded broker, a real data stream, the pipeline, "
                                    "predictions, a checkpoint and a learning curve",
                       description="Streams scikit-learn's breast cancer data (raw, unnormalised) through the "
                                   "pipeline on an embedded broker.")
    p.add_argument("--out", default="scinol-demo", help="directory for checkpoints and the plot")
    p.add_argument("--passes", type=int, default=20, help="shuffled passes over the 569 rows (default 20)")
    p.add_argument("--keep-broker", action="store_true", help="keep the broker up afterwards, until Ctrl-C")


def _model_parser(sub) -> None:
    p = sub.add_parser("model", help="inspect or export a saved model or checkpoint")
    msub = p.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    i = msub.add_parser("inspect", help="print the header and the largest weights")
    i.add_argument("path", metavar="PATH")
    i.add_argument("--top", type=int, default=10, help="how many weights (default 10)")
    e = msub.add_parser("export", help="write the weights as JSON, CSV or Parquet")
    e.add_argument("path", metavar="PATH")
    e.add_argument("--format", choices=["json", "csv", "parquet"], default="json")
    e.add_argument("-o", "--output", default=None, help="output file (default: PATH.weights.FORMAT)")


def _learners_parser(sub) -> None:
    sub.add_parser("learners", help="list the learners, their parameters and properties",
                   description="Every learner usable with --learner / make_learner(name).")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scinol", description="Parameter-free, scale-invariant online learning of linear models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _learn_parser(sub)
    _generate_parser(sub)
    _learners_parser(sub)
    _broker_parser(sub)
    _run_parser(sub)
    _produce_parser(sub)
    _tail_parser(sub)
    _demo_parser(sub)
    _model_parser(sub)
    from pipelines.cli.bench import add_bench_parser

    add_bench_parser(sub)
    return parser


def run_broker(args) -> int:
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


def main(argv=None) -> int:
    from learners.losses import LabelError
    from learners.state import StateFileError

    from pipelines.kafka.broker import BrokerError
    from pipelines.records.datafiles import DataError

    try:
        args = build_parser().parse_args(argv)
        if args.command == "learn":
            from pipelines.cli.learn import run_learn

            return run_learn(args)
        if args.command == "generate":
            from pipelines.cli.learn import run_generate

            return run_generate(args)
        if args.command == "run":
            from pipelines.cli.run import run_run

            return run_run(args)
        if args.command in ("produce", "tail"):
            from pipelines.cli import run as run_command

            return run_command.run_produce(args) if args.command == "produce" else run_command.run_tail(args)
        if args.command == "model":
            from pipelines.cli import model as model_command

            if args.model_command == "inspect":
                model_command.inspect(args.path, args.top)
            else:
                print(f"wrote {model_command.export(args.path, args.format, args.output)}", file=sys.stderr)
            return 0
        if args.command == "demo":
            from pipelines.cli.demo import run_demo

            return run_demo(args.out, args.passes, args.keep_broker)
        if args.command == "broker":
            return run_broker(args)
        if args.command == "bench":
            from pipelines.cli.bench import run_bench

            return run_bench(args, sys.argv[1:] if argv is None else list(argv))
        if args.command == "learners":
            from pipelines.cli.learn import run_learners

            return run_learners(args)
    except (UsageError, DataError, StateFileError, LabelError, BrokerError) as exc:
        print(f"scinol: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"scinol: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("scinol: interrupted", file=sys.stderr)
        return 130
    return 0

