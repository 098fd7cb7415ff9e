"""``python -m zstores``: the ``zstores`` command (see ``zstores.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
