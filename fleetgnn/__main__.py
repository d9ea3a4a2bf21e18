"""``python -m fleetgnn`` (and ``torchrun -m fleetgnn train ...``) runs the command line."""

import sys

from fleetgnn.cli.main import main

sys.exit(main())
