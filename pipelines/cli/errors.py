"""The command line's one error type; imports nothing of the project, so
every command module can raise it without importing the CLI back."""

EXIT_USAGE = 2
"""Exit status of every error the user can cause."""
EXIT_DEAD_LETTERS = 3
"""Exit status of a run stopped by ``--max-dead-letter-ratio``."""


class UsageError(Exception):
    """An error to report in one line, ``scinol: error: ...``, exit status 2."""
