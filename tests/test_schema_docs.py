"""Every field of the spec language's JSON Schema (`modelgen schema`) has a description, so editors show help."""
from __future__ import annotations

from modelgen.codegen.schema import Spec


def _undocumented(schema: dict) -> list[str]:
    """Dotted paths of properties with no description (on the property itself, or on the model it refers to)."""
    defs = schema.get("$defs", {})
    missing: list[str] = []

    def has_doc(prop: dict) -> bool:
        if prop.get("description"):
            return True
        ref = prop.get("$ref") or next((p.get("$ref") for p in prop.get("allOf", []) if "$ref" in p), None)
        return bool(ref and defs[ref.split("/")[-1]].get("description"))

    def walk(node: dict, where: str) -> None:
        for name, prop in node.get("properties", {}).items():
            if not has_doc(prop):
                missing.append(f"{where}.{name}")

    walk(schema, "Spec")
    for name, model in defs.items():
        walk(model, name)
    return missing


def test_every_schema_property_has_a_description():
    missing = _undocumented(Spec.model_json_schema())
    assert not missing, f"{len(missing)} undocumented field(s): {', '.join(missing)}"
