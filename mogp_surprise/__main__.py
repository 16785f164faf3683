"""``python -m mogp_surprise ...`` (e.g. ``torchrun --nproc_per_node 2 -m mogp_surprise fit ...``) runs the CLI."""
import sys

from .cli import main

sys.exit(main())
