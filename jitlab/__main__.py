"""``python -m jitlab`` is the ``jitlab`` command."""

import sys

from .cli import main

sys.exit(main())
