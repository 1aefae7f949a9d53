"""The configuration checked against its schema (workflow/schemas/config.schema.yaml) and the
registry, with errors that name the field first: `statistics.threshold: -1, must be > 0`, an
unknown or misspelled key with the nearest known one, a kernel the registry does not hold with
the names it does. jsonschema finds the schema's errors (it is what Snakemake's own `validate`
uses, which then fills the schema's defaults); this module only words them. And what the kernel
lists mean: `kernels: all` is the registry's list, an absent `timing.candidates` the configured
kernels (resolve_kernel_lists), so the kernel list is written once, in runtime.kernels."""
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
    if kind in ("anyOf", "oneOf") and "description" in err.schema:
        return [f"{field}: {instance!r}, must be {err.schema['description']}"]
    if kind == "enum":
        return [f"{field}: {instance!r}, must be one of {', '.join(map(str, value))}"]
    if kind == "type":
        return [f"{field}: {instance!r} ({type(instance).__name__}), must be of type {value}"]
    if kind in ("minItems", "maxItems", "uniqueItems", "minLength", "pattern", "minProperties"):
        return [f"{field}: {instance!r} fails {kind} {value!r}"]
    return [f"{field or 'config'}: {err.message}"]


ALL_KERNELS = "all"  # `kernels: all`: every kernel of the registry, in its order


def registry_errors(config: dict) -> list[str]:
    """Each kernel or baseline the configuration lists that the registry (runtime.kernels) does
    not hold, with the names it does."""
    from ..runtime.kernels import BASELINES, KERNELS

    lines = []
    for key, known in (("kernels", KERNELS), ("kernels_left_out", KERNELS),
                       ("baselines", BASELINES)):
        names = config.get(key)
        if not isinstance(names, list):  # absent, `all`, or a value the schema refuses
            continue
        lines += [f"{key}.{i}: {name!r}, not in the registry; its {key}: {', '.join(known)}"
                  for i, name in enumerate(names) if name not in known]
    return lines


def config_errors(config: dict, schema_path: str | Path = SCHEMA) -> list[str]:
    """Every schema violation of `config` as one line naming its field, unknown keys first (a
    misspelled key also shows as a missing one: the unknown key is the cause), then every name
    the registry does not hold."""
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(Draft202012Validator(schema).iter_errors(config),
                    key=lambda e: (e.validator != "additionalProperties",
                                   e.validator == "required", list(map(str, e.absolute_path))))
    return [line for err in errors for line in _describe(err)] + registry_errors(config)


def resolve_kernel_lists(config: dict) -> dict:
    """`config` (checked) with its kernel lists spelled out, in place: `kernels: all` as the
    registry's kernels in its order (less `kernels_left_out`), an absent `timing.candidates` as
    the configured kernels.
    Every stage reads these lists, as older configurations (and records' replays) write them."""
    from ..runtime.kernels import KERNELS

    if config.get("kernels") == ALL_KERNELS:
        left_out = config.get("kernels_left_out") or []  # names checked by registry_errors
        config["kernels"] = [k for k in KERNELS if k not in left_out]
    timing = config.get("timing")
    if isinstance(timing, dict) and "candidates" not in timing:
        timing["candidates"] = list(config["kernels"])
    return config
