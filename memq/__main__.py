"""``python -m memq``: the ``memq`` command."""

import sys

from memq.cli import main

sys.exit(main())
