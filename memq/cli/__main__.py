"""``python -m memq.cli``: the ``memq`` command."""

import sys

from memq.cli import main

sys.exit(main())
