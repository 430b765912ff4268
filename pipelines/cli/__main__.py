"""``python -m pipelines.cli``: the same as the ``scinol`` command."""

import sys

from pipelines.cli.main import main

sys.exit(main())
