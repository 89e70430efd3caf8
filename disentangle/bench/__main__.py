"""``python -m disentangle.bench ...``: see :mod:`disentangle.bench`."""
from .command import main

if __name__ == "__main__":
    main()
