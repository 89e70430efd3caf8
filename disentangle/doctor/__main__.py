"""``python -m disentangle.doctor ...``: see :mod:`disentangle.doctor`."""
import sys

from .command import main

if __name__ == "__main__":
    sys.exit(main())
