"""Errors that mean "the input was wrong", as opposed to a bug in this package.

The command-line tools print a `UserError` as one line on stderr and exit with status 2;
anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input from the user (a path, an option, a file's contents), told in one line."""


class DataError(UserError):
    """A dataset, image or text file that cannot be read as what it claims to be."""
