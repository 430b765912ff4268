"""The command line's one error type; imports nothing of the project, so
every command module can raise it without importing the CLI back."""

EXIT_USAGE = 2
"""Exit status of every error the user can cause."""
EXIT_DEAD_LETTERS = 3
"""Exit status of a run stopped by ``--max-dead-letter-ratio``."""
EXIT_ORDER = 4
"""Exit status of a run that could not apply a partition in offset order: more
waiting than ``--max-waiting``, offsets deleted before they were read, or
messages still waiting for offsets that never came when a bounded run ended."""
EXIT_ENDED_ELSEWHERE = 5
"""Exit status of a run whose Flink job was cancelled on the cluster, not by the run."""


class UsageError(Exception):
    """An error to report in one line, ``scinol: error: ...``, exit status 2."""
