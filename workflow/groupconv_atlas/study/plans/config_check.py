"""The configuration checked against its schema (workflow/schemas/config.schema.yaml) and the
registry, with errors that name the field first: `statistics.threshold: -1, must be > 0`, an
unknown or misspelled key with the nearest known one, a kernel the registry does not hold with
the names it does. jsonschema finds the schema's errors (it is what Snakemake's own `validate`
uses, which then fills the schema's defaults); this module only words them. And what the kernel
lists mean: `kernels: all` is the registry's list, an absent `timing.candidates` the configured
kernels (resolve_kernel_lists), so the kernel list is written once, in groupconv.kernels."""
from __future__ import annotations

import difflib
from pathlib import Path

import yaml

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "config.schema.yaml"
_BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _field(path) -> str:
    return ".".join(str(p) for p in path)


def _joined(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _brief(value, limit: int = 120) -> str:
    """A value as the message shows it: a long one (a list of 80 shapes) cut to one short line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _shapes_file_as_config(config: dict) -> list[str]:
    """A shapes file given as a configuration file (--configfile config/shapes.yaml) puts its
    list of shapes where the path to it belongs: said in one line, not as that list."""
    shapes = config.get("shapes")
    if isinstance(shapes, list) and shapes and all(isinstance(s, dict) and "id" in s
                                                   for s in shapes):
        return [f"shapes: a list of {len(shapes)} shapes (first: {shapes[0]['id']!r}), where "
                "the path to a shapes file belongs: was a shapes file given as --configfile? "
                "Name it with `--config shapes=<file>` (or `shapes: <file>` in a config file)"]
    return []


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
        return [f"{field}: {_brief(instance)}, must be {_BOUNDS[kind]} {value}"]
    if kind in ("anyOf", "oneOf") and "description" in err.schema:
        return [f"{field}: {_brief(instance)}, must be {err.schema['description']}"]
    if kind == "contains" and isinstance(value, dict) and "const" in value:
        return [f"{field}: {_brief(instance)}, must list {value['const']!r}"]
    if kind == "enum":
        return [f"{field}: {_brief(instance)}, must be one of {', '.join(map(str, value))}"]
    if kind == "type":
        return [f"{field}: {_brief(instance)} ({type(instance).__name__}), must be of type "
                f"{value}"]
    if kind in ("minItems", "maxItems", "uniqueItems", "minLength", "pattern", "minProperties"):
        return [f"{field}: {_brief(instance)} fails {kind} {value!r}"]
    message = err.message if len(err.message) <= 200 else f"{err.message[:200]}..."
    return [f"{field or 'config'}: {message}"]


ALL_KERNELS = "all"  # `kernels: all`: every kernel of the registry, in its order


def registry_errors(config: dict) -> list[str]:
    """Each kernel or baseline the configuration lists that the registry (groupconv.kernels) does
    not hold, with the names it does."""
    from groupconv.kernels import BASELINES, KERNELS

    lines = []
    for key, known in (("kernels", KERNELS), ("kernels_left_out", KERNELS),
                       ("baselines", BASELINES)):
        names = config.get(key)
        if not isinstance(names, list):  # absent, `all`, or a value the schema refuses
            continue
        lines += [f"{key}.{i}: {name!r}, not in the registry; its {key}: {', '.join(known)}"
                  # A name that is no string is the schema's to report.
              for i, name in enumerate(names) if isinstance(name, str) and name not in known]
    for key in ("gate_kernel", "bench_kernel"):
        name = config.get(key)
        if isinstance(name, str) and name not in KERNELS:
            lines.append(f"{key}: {name!r}, not in the registry; its kernels: "
                         f"{', '.join(KERNELS)}")
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
    shapes_file = _shapes_file_as_config(config)
    # With a shapes file in place of the path, the schema's own line on `shapes` says less.
    errors = [e for e in errors if not (shapes_file and list(e.absolute_path)[:1] == ["shapes"])]
    return (shapes_file + [line for err in errors for line in _describe(err)]
            + registry_errors(config) + compile_pair_errors(config))


def compile_pair_errors(config: dict) -> list[str]:
    """Each (model, N) pair the network probe's `compile` lists (inference, and the training
    reading's) that the probe does not run: a model it does not build, an N it does not take."""
    networks = config.get("networks")
    if not isinstance(networks, dict):
        return []
    training = networks.get("training") if isinstance(networks.get("training"), dict) else {}
    lines = []
    for field, pairs, ns in (("networks.compile", networks.get("compile"), networks.get("ns")),
                             ("networks.training.compile", training.get("compile"),
                              training.get("ns"))):
        models = networks.get("models") or []
        for i, pair in enumerate(pairs if isinstance(pairs, list) else []):
            if not (isinstance(pair, list) and len(pair) == 2):
                continue  # the schema's to report
            model, n = pair
            if model not in models:
                lines.append(f"{field}.{i}: {model!r}, not among networks.models: "
                             f"{', '.join(map(str, models))}")
            elif n not in (ns or []):
                lines.append(f"{field}.{i}: N = {n!r} for {model}, not among the N it runs: "
                             f"{ns}")
    return lines


def shape_id_lists(config: dict) -> list[tuple[str, list]]:
    """Every list of shape ids the configuration holds, with its field: each section's
    `shapes` (crosscheck, overhead, nsight, ...) and the shapes of `nsight.pairs`."""
    lists = [(f"{name}.shapes", section["shapes"]) for name, section in config.items()
             if isinstance(section, dict) and isinstance(section.get("shapes"), list)]
    pairs = (config.get("nsight") or {}).get("pairs") or []
    lists += [(f"nsight.pairs.{i}", [pair[0]]) for i, pair in enumerate(pairs)
              if isinstance(pair, list) and pair]
    return lists


def shape_id_errors(config: dict, shape_ids) -> list[str]:
    """Each shape id a list of the configuration names that the shape set does not hold, with
    its field and the nearest id there is: checked before any job runs, so no id is dropped
    silently and no job fails on one later."""
    known = sorted(shape_ids)
    lines = []
    for field, ids in shape_id_lists(config):
        for i, shape in enumerate(ids):
            if shape in shape_ids:
                continue
            near = difflib.get_close_matches(str(shape), known, n=1, cutoff=0.6)
            where = field if field.startswith("nsight.pairs") else f"{field}.{i}"
            lines.append(f"{where}: {shape!r}, not a shape of the shape set"
                         + (f"; did you mean {near[0]!r}?" if near else ""))
    return lines


def resolve_kernel_lists(config: dict) -> dict:
    """`config` (checked) with its kernel lists spelled out, in place: `kernels: all` as the
    registry's kernels in its order (less `kernels_left_out`), an absent `timing.candidates` as
    the configured kernels.
    Every stage reads these lists, as older configurations (and records' replays) write them."""
    from groupconv.kernels import KERNELS

    if config.get("kernels") == ALL_KERNELS:
        left_out = config.get("kernels_left_out") or []  # names checked by registry_errors
        config["kernels"] = [k for k in KERNELS if k not in left_out]
    timing = config.get("timing")
    if isinstance(timing, dict) and "candidates" not in timing:
        timing["candidates"] = list(config["kernels"])
    return config
