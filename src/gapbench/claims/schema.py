"""The JSON output of `gapbench claims --format json` as a JSON Schema (draft 2020-12), generated from the records
and shipped as src/gapbench/claims/claims.schema.json:

    python -m gapbench.claims.schema > src/gapbench/claims/claims.schema.json
"""

from __future__ import annotations

from gapbench.claims.records import ClaimReport


def json_schema() -> dict:
    doc = ClaimReport.model_json_schema(mode="serialization")
    doc.setdefault("properties", {})["verdict_line"] = {"type": "string",
                                                        "description": "the first line of every format"}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:gapbench:claims:1",
            "title": "gapbench claims report",
            "description": "Generated from gapbench.claims.records; docs/claims.md explains every verdict.",
            **{k: v for k, v in doc.items() if k != "title"}}


if __name__ == "__main__":  # python -m gapbench.claims.schema > src/gapbench/claims/claims.schema.json
    import json

    print(json.dumps(json_schema(), indent=1, sort_keys=True))
