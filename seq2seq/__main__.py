"""`python -m seq2seq` runs the `seq2seq` command line."""

import sys

from seq2seq.cli import main

if __name__ == "__main__":
    sys.exit(main())
