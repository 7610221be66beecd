"""The results file as a JSON Schema document (draft 2020-12), generated from the records and shipped as
src/gapbench/results.schema.json:

    python -m gapbench.results.schema > src/gapbench/results.schema.json
"""

from __future__ import annotations

from gapbench.results.records import ResultSet


def json_schema() -> dict:
    """The results file's JSON Schema (draft 2020-12), as shipped in results.schema.json."""
    doc = ResultSet.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:gapbench:results:1",
            "title": "gapbench results file, schema version 1",
            "description": "Generated from gapbench.results.records; docs/schema.md explains every field. Numbers are "
                           "finite; a value is above 0 where given and an ok measurement has one; a stats interval "
                           "has low <= high and min <= max (checks JSON Schema cannot state are made by gapbench as "
                           "well).",
            **{k: v for k, v in doc.items() if k != "title"}}



if __name__ == "__main__":  # python -m gapbench.results.schema > src/gapbench/results.schema.json
    import json

    print(json.dumps(json_schema(), indent=1, sort_keys=True))
