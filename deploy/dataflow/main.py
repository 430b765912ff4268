"""Dataflow Flex Template entry point: template parameters -> ``scinol run``.

Dataflow starts this file with the template's parameters and its own
pipeline options, all as ``--name=value``. The template parameters
(metadata.json) become ``scinol run`` options; everything else (runner,
project, region, temp_location, sdk_container_image, ...) is passed to Beam
after ``--``. A ``kafka_config_file`` on Cloud Storage is copied to a local
file first (``scinol run`` reads a local file; its settings then travel with
the pipeline to the workers).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

METADATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metadata.json")
FLAGS = ("bounded",)  # parameters that are switches: "true" turns them on


def template_parameters() -> list[str]:
    """Names of the template's own parameters (from metadata.json when
    present next to this file, else the built-in list)."""
    if os.path.exists(METADATA):
        with open(METADATA) as f:
            return [p["name"] for p in json.load(f)["parameters"]]
    return ["bootstrap", "topic", "predictions_topic", "learner", "loss", "params", "n_classes", "hash_bits",
            "checkpoint_dir", "checkpoint_every", "checkpoint_seconds", "checkpoint_topic", "dead_letter_topic",
            "group_id", "max_index", "max_message_bytes", "max_batch", "kafka_config", "kafka_config_file",
            "schema_registry", "bounded"]


def to_scinol_args(argv: list[str], fetch=None) -> list[str]:
    """``--name=value`` arguments -> the argument list of ``scinol run``."""
    names = set(template_parameters())
    run, beam = ["run"], []
    for arg in argv:
        name, sep, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name not in names or not sep:
            beam.append(arg)
            continue
        option = "--" + name.replace("_", "-")
        if name in FLAGS:
            if value.lower() == "true":
                run.append(option)
        elif name in ("params", "kafka_config"):  # several NAME=VALUE pairs, separated by ';'
            for pair in filter(None, (p.strip() for p in value.split(";"))):
                run += ["--param" if name == "params" else "--kafka-config", pair]
        elif name == "kafka_config_file" and value.startswith("gs://"):
            run += [option, (fetch or _fetch)(value)]
        else:
            run += [option, value]
    return run + ["--", *beam]


def _fetch(url: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    fd, path = tempfile.mkstemp(prefix="kafka-", suffix=".properties")
    with os.fdopen(fd, "wb") as out, FileSystems.open(url) as src:
        out.write(src.read())
    return path


def main(argv: list[str] | None = None) -> int:
    from pipelines.cli.main import main as scinol

    return scinol(to_scinol_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
