"""`python -m simulmt.cli …`, as the `simulmt` script (`serve --workers` starts its children so)."""

import sys

from simulmt.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
