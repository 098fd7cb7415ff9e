"""``python -m zfuse``: the ``zfuse`` command."""

from .cli import main

raise SystemExit(main())
