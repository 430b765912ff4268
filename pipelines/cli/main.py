"""The ``scinol`` command line: one argparse sub-parser per command, each
defined with its command in its own module (``add_parser`` sets
``func``), dispatched here.

Every failure the user can cause (bad options, unreadable or malformed
files, bad labels, bad model files) ends with one line on stderr,
``scinol: error: ...``, and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from pipelines.runners.startup import skip_numba_probes

from . import bench, broker, compile, demo, flink, generate, learn, learners, model, produce, provision, registry, run, tail
from .errors import EXIT_USAGE, UsageError

COMMANDS = (learn, compile, generate, learners, broker, registry, provision, flink, run, produce, tail, demo, model, bench)


class _OptionalDependencyNotice(logging.Filter):
    """Drops Beam's import-time notice that Google Cloud's client libraries
    are not installed: nothing here uses them, and it reads like an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


logging.getLogger().addFilter(_OptionalDependencyNotice())


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage dump
        command = self.prog.split()[1:]
        raise UsageError(" ".join(command + [message]) if not command else f"{command[0]}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scinol", description="Parameter-free, scale-invariant online learning of linear models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _user_errors() -> tuple:
    """Errors the user causes, reported in one line (exit 2)."""
    from learners.losses import LabelError
    from learners.state import StateFileError
    from pipelines.files.datafiles import DataError
    from pipelines.kafka.admin import BrokerUnavailable, TopicSetupError
    from pipelines.kafka.broker import BrokerError
    from pipelines.kafka.consumer import TopicMissing
    from pipelines.kafka.errors import KafkaConnectionError
    from pipelines.kafka.transactions import TransactionsUnsupported
    from pipelines.state.resume import ResumeRefused
    from schemas.registry import SchemaRegistryError

    return (UsageError, DataError, StateFileError, LabelError, BrokerError, BrokerUnavailable, TopicMissing,
            ResumeRefused, SchemaRegistryError, TopicSetupError, TransactionsUnsupported, KafkaConnectionError)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    skip_numba_probes()
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        return args.func(args)
    except SystemExit:  # --help: before the clause below, which imports the learners and Kafka to name its errors
        raise
    except KeyboardInterrupt:
        print("scinol: interrupted", file=sys.stderr)
        return 130
    except _user_errors() as exc:
        print(f"scinol: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `scinol learners | head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    except OSError as exc:
        print(f"scinol: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
