"""``python -m mogp_surprise.cli``."""
import sys

from . import main

sys.exit(main())
