"""Errors a user can cause. The CLI turns each into one line on stderr and exit code 2."""


class GapbenchError(Exception):
    """Bad input: an unknown name, a missing or malformed file, an impossible request."""


class ResultFileError(GapbenchError):
    """A results file that cannot be read or does not match the schema; names the file and the field."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = path, field, problem
        super().__init__(f"{path}: {field}: {problem}" if field else f"{path}: {problem}")
