"""``python -m disentangle.claims ...``: see :mod:`disentangle.claims.command`."""
import sys

from .command import main

if __name__ == "__main__":
    sys.exit(main())
