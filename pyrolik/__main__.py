"""``python -m pyrolik``: the command line (also what ``torchrun -m pyrolik`` runs)."""

import sys

from pyrolik.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
