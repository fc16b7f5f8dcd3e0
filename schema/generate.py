"""Write the JSON Schemas of the contract models under schema/jsonschema/.

Run ``make schema`` (``python -m schema.generate``) after changing a model; a test fails while
the checked-in files drift from the models.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schema.models import ArchiveLine, GreenSummary, WindowReport

OUT_DIR = Path(__file__).with_name("jsonschema")


def schema_models() -> dict[str, type[BaseModel]]:
    """Models with a published JSON Schema, by file stem."""
    models: dict[str, type[BaseModel]] = {
        "archive-line": ArchiveLine,
        "window-report": WindowReport,
        "green-summary": GreenSummary,
    }
    try:  # the disclosure report model is added by the aggregator
        from schema.report import DisclosureReport

        models["disclosure-report"] = DisclosureReport
    except ImportError:
        pass
    return models


def render(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    OUT_DIR.mkdir(exist_ok=True)
    for stem, model in schema_models().items():
        path = OUT_DIR / f"{stem}.schema.json"
        path.write_text(render(model))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
