"""The configuration checked against its schema (workflow/schemas/config.schema.yaml), with
errors that name the field first: `statistics.threshold: -1, must be > 0`, and an unknown or
misspelled key with the nearest known one. jsonschema finds the errors (it is what Snakemake's
own `validate` uses, which then fills the schema's defaults); this module only words them."""
from __future__ import annotations

import difflib
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
_BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _field(path) -> str:
    return ".".join(str(p) for p in path)


def _joined(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _describe(err) -> list[str]:
    field = _field(err.absolute_path)
    kind, value, instance = err.validator, err.validator_value, err.instance
    if kind == "additionalProperties" and isinstance(instance, dict):
        known = sorted(err.schema.get("properties", {}))
        lines = []
        for key in sorted(set(instance) - set(known)):
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            lines.append(f"{_joined(field, key)}: unknown key; "
                         + (f"did you mean {_joined(field, near[0])}?" if near
                            else f"known keys here: {', '.join(known)}"))
        return lines
    if kind == "required" and isinstance(instance, dict):
        return [f"{_joined(field, key)}: missing (required)" for key in value
                if key not in instance]
    if kind in _BOUNDS:
        return [f"{field}: {instance!r}, must be {_BOUNDS[kind]} {value}"]
    if kind == "enum":
        return [f"{field}: {instance!r}, must be one of {', '.join(map(str, value))}"]
    if kind == "type":
        return [f"{field}: {instance!r} ({type(instance).__name__}), must be of type {value}"]
    if kind in ("minItems", "maxItems", "uniqueItems", "minLength", "pattern", "minProperties"):
        return [f"{field}: {instance!r} fails {kind} {value!r}"]
    return [f"{field or 'config'}: {err.message}"]


def with_registry(schema: dict) -> dict:
    """The schema with the names the registry knows (runtime.kernels) as the enums of
    `kernels` and `baselines`: the kernel list is written once, in the registry."""
    from ..runtime.kernels import BASELINES, KERNELS

    props = schema.get("properties", {})
    for key, names in (("kernels", KERNELS), ("baselines", BASELINES)):
        if key in props:
            props[key]["items"] = {**props[key].get("items", {}), "enum": list(names)}
    return schema


def config_errors(config: dict, schema_path: str | Path = SCHEMA) -> list[str]:
    """Every schema violation of `config` as one line naming its field; unknown keys first (a
    misspelled key also shows as a missing one: the unknown key is the cause)."""
    from jsonschema import Draft202012Validator

    schema = with_registry(yaml.safe_load(Path(schema_path).read_text()))
    errors = sorted(Draft202012Validator(schema).iter_errors(config),
                    key=lambda e: (e.validator != "additionalProperties",
                                   e.validator == "required", list(map(str, e.absolute_path))))
    return [line for err in errors for line in _describe(err)]
