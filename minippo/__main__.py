"""``python -m minippo`` is the ``minippo`` command."""
import sys

from minippo.cli import main

sys.exit(main())
