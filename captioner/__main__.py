"""`python -m captioner` runs the `captioner` command line."""

import sys

from captioner.cli import main

if __name__ == "__main__":
    sys.exit(main())
