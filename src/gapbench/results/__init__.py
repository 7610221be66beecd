"""The results file: its records (Measurement, ResultSet), reading it safely, writing it atomically, and
merging independent runs.

Everything a user feeds in is read through `read_bytes` (regular files only, a size cap) and `parse_json`
(strict JSON, a nesting cap), then validated by the records, so a bad file is one line naming the file and the
field. Every file gapbench writes goes through `write_text_atomic`, after `check_output` said, before any
work, that writing there destroys nothing. Bump SCHEMA_VERSION only with a reader for the old version.
"""

from __future__ import annotations

import os

from gapbench.errors import ResultFileError
from gapbench.record import MAX_NAME, MAX_REASON, SchemaError, json_safe
from gapbench.results.files import (
    MAX_FILE_BYTES,
    MAX_NESTING,
    check_output,
    is_results_file,
    json_text,
    parse_json,
    read_bytes,
    write_json_atomic,
    write_text_atomic,
)
from gapbench.results.merge import merge_runs
from gapbench.results.records import (
    SCHEMA_VERSION,
    STATUSES,
    Measurement,
    ResultSet,
    now_iso,
    variant_key,
)

__all__ = ["SCHEMA_VERSION", "STATUSES", "MAX_NAME", "MAX_REASON", "MAX_FILE_BYTES", "MAX_NESTING", "Measurement",
           "ResultSet", "load", "save", "read", "merge_runs", "check_output", "is_results_file", "json_text",
           "json_safe", "parse_json", "read_bytes", "write_json_atomic", "write_text_atomic", "now_iso",
           "variant_key", "SchemaError"]


def read(doc, path: str = "<data>") -> ResultSet:
    """A result set from a parsed results file, validated; ResultFileError names the file and the field."""
    try:
        rs = ResultSet.read(doc)
    except SchemaError as e:
        raise ResultFileError(path, e.field, e.problem) from None
    rs.path = path
    return rs


def load(path: str | os.PathLike) -> ResultSet:
    """Read and validate a results file; raise ResultFileError naming the file and field."""
    p = str(path)
    return read(parse_json(read_bytes(p), p), p)


def save(rs: ResultSet, path: str | os.PathLike) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then rename over the target."""
    write_json_atomic(path, rs.model_dump(mode="json"))
