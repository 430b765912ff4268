"""The commands of the README's "Running on Apache Kafka and Flink" section
are accepted by the command line as written (nothing is run)."""

import os
import re
import shlex

from pipelines.cli.main import build_parser

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def section_commands() -> list[list[str]]:
    text = open(README, encoding="utf-8").read()
    section = text.split("## Running on Apache Kafka and Flink", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = block.replace("\\\n", " ").splitlines()
    commands = [shlex.split(line.split("#", 1)[0].replace("HOST:PORT", "localhost:8081"))[1:] for line in lines
                if line.startswith("scinol ")]
    first_run = next(c for c in commands if c[0] == "run")
    # "scinol run ... --from-savepoint PATH" means the run above with one more option
    return [first_run + c[2:] if c[:2] == ["run", "..."] else c for c in commands]


def test_every_command_of_the_section_parses():
    commands = section_commands()
    assert [c[0] for c in commands] == ["provision", "broker", "flink", "run", "flink", "flink", "run", "flink"]
    for argv in commands:
        args = build_parser().parse_args(argv)  # a UsageError names any option it does not accept
        assert callable(args.func)
    run = build_parser().parse_args(commands[3])
    assert (run.runner, run.flink_master, run.parallelism) == ("flink", "localhost:8081", 2)
    resume = build_parser().parse_args(commands[6])
    assert (resume.runner, resume.from_savepoint) == ("flink", "PATH")
