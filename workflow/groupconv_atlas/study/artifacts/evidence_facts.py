"""The record's facts that current-evidence.md states (study/artifacts/evidence renders them): which
implementations it built, verified and timed, in which layout (the registry's `layout_of`, never
a guessed one), what it did not measure, and notes listed once each. Read from atlas.json alone;
a long list is summarised with "and N more"."""
from __future__ import annotations

import re

from groupconv.kernels import BASELINES, DISPATCHERS, KERNELS, base_implementation, layout_of

# How many names a summarised list shows before "and N more".
FIRST = 5
LAYOUT_TITLES = {"nchw": "contiguous NCHW", "nhwc": "channels_last (NHWC)"}
LAYOUT_SHORT = {"nchw": "NCHW", "nhwc": "channels_last"}
NOT_MEASURED = "not measured in this record"


def natural_key(name: str) -> list:
    """k2 before k10; names without a number in plain order."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def natural(names) -> list[str]:
    return sorted(names, key=natural_key)


def first_few(items: list[str], n: int = FIRST) -> str:
    """'a, b, c and 4 more': a long list summarised; a short one whole."""
    if len(items) <= n + 1:
        return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1] \
            if items else "none"
    return f"{', '.join(items[:n])} and {len(items) - n} more"


def role(impl: str) -> str:
    base = base_implementation(impl)
    if base in KERNELS:
        return "kernel"
    if base in DISPATCHERS:
        return "dispatcher"
    if base in BASELINES:
        return "reference"
    return "other"


def registry_layout(impl: str) -> str | None:
    """The registry's layout, or None for a name the registry does not hold (a derived
    reference such as torch_best, or an implementation since removed): never a guessed one."""
    return layout_of(impl) if role(impl) != "other" else None


def timed_by_boundary(atlas: dict) -> dict[str, dict[str, set[str]]]:
    """Per boundary, the candidates and references the comparisons paired. The A/A twin (a
    second handle to its candidate) and the derived references (chosen among timed ones) are
    left out: neither was timed as an implementation of its own."""
    out: dict[str, dict[str, set[str]]] = {}
    for c in atlas.get("comparisons") or []:
        part = out.setdefault(c["boundary"], {"candidates": set(), "references": set()})
        part["candidates"].add(c["candidate"])
        if c.get("job") != "aa" and role(c["baseline"]) != "other":
            part["references"].add(c["baseline"])
    return out


def named_implementations(atlas: dict) -> set[str]:
    """What the record built, verified or timed as a candidate (a reference only derived from
    others, such as torch_best, is neither)."""
    candidates = {c["candidate"] for c in atlas.get("comparisons") or [] if c.get("job") != "aa"}
    return set(atlas.get("builds") or {}) | set(atlas.get("verification") or {}) | candidates


def record_layouts(atlas: dict) -> dict[str, dict[str, dict[str, list[str]]]]:
    """layout -> role -> implementation -> what the record did with it (built, verified, timed
    at which boundaries), from builds, verification and comparisons."""
    built = set(atlas.get("builds") or {})
    verified = set(atlas.get("verification") or {})
    timed: dict[str, list[str]] = {}
    for boundary, part in sorted(timed_by_boundary(atlas).items()):
        for impl in part["candidates"] | part["references"]:
            timed.setdefault(impl, []).append(boundary)
    layouts: dict[str, dict[str, dict[str, list[str]]]] = {}
    for impl in built | verified | set(timed):
        layout = registry_layout(impl)
        if layout is None:
            continue
        steps = [s for s, held in (("built", impl in built), ("verified", impl in verified))
                 if held] + [f"timed:{b}" for b in timed.get(impl, [])]
        layouts.setdefault(layout, {}).setdefault(role(impl), {})[impl] = steps
    order = [*LAYOUT_TITLES, *sorted(set(layouts) - set(LAYOUT_TITLES))]
    return {layout: layouts[layout] for layout in order if layout in layouts}


def steps_words(steps: list[str], boundaries: list[str]) -> str:
    """'built, verified and timed', 'verified, not timed', 'timed at sync_api only'."""
    done = [s for s in steps if not s.startswith("timed:")]
    timed = [s.split(":", 1)[1] for s in steps if s.startswith("timed:")]
    if not timed:
        return " and ".join(done) + ", not timed" if done else "not timed"
    done.append("timed" if timed == boundaries else f"timed at {' and '.join(timed)} only")
    return ", ".join(done[:-1]) + " and " + done[-1] if len(done) > 1 else done[0]


def layout_items(atlas: dict) -> list[str]:
    """Per layout the custom kernels, dispatchers and PyTorch references the record ran in it
    and what it did with each; the NCHW-only statement only where that is all it ran."""
    layouts = record_layouts(atlas)
    boundaries = sorted(timed_by_boundary(atlas))
    names = {"kernel": ("custom kernel", "custom kernels"), "dispatcher": ("dispatcher",
             "dispatchers"), "reference": ("PyTorch reference", "PyTorch references")}
    items = []
    for layout, roles in layouts.items():
        parts = []
        for kind in ("kernel", "dispatcher", "reference"):
            members = roles.get(kind, {})
            by_steps: dict[str, list[str]] = {}
            for impl in natural(members):
                by_steps.setdefault(steps_words(members[impl], boundaries), []).append(impl)
            for words, impls in by_steps.items():
                parts.append(f"{names[kind][len(impls) > 1]} {', '.join(impls)} ({words})")
        items.append(f"- **{LAYOUT_TITLES.get(layout, layout)}**: " + "; ".join(parts) + ".")
    if not layouts:
        return ["- This record names no implementation the registry knows."]
    if list(layouts) == ["nchw"]:
        items.append("- Every implementation this record built, verified or timed computes in "
                     "contiguous NCHW: no channels_last implementation ran.")
    unknown = [impl for impl in natural(named_implementations(atlas))
               if registry_layout(impl) is None]
    if unknown:
        items.append(f"- Not in the registry, so no layout is stated: {first_few(unknown)}.")
    head = atlas.get("headline") or {}
    for statement in (head.get("reference_statement"),
                      (head.get("nchw_only") or {}).get("reference_statement")):
        if statement:
            items.append(f"- Derived, not timed: {statement}.")
    return items


def layout_words(atlas: dict) -> str:
    measured = [LAYOUT_TITLES.get(lay, lay) for lay in record_layouts(atlas)]
    return f"layouts other than {' and '.join(measured)}" if measured else "layouts"


def once_each(notes) -> list[tuple[str, int]]:
    """Each note once, in first-seen order, with how many times the record carries it (notes
    that differ only in spacing or a trailing full stop are the same note)."""
    seen: dict[str, list] = {}
    for note in notes or []:
        text = " ".join(str(note).split()).rstrip(".")
        if text:
            seen.setdefault(text.casefold(), [text, 0])[1] += 1
    return [(text, count) for text, count in seen.values()]


def beyond_items(atlas: dict) -> list[str]:
    """Each stage beyond the forward atlas: measured (where it is shown), or not measured in
    this record, from atlas.json's own sections."""
    record = (atlas.get("evidence") or {}).get("record")
    items = []
    passes = atlas.get("passes")
    if passes:
        source = passes.get("record") or {}
        name = source.get("name") if isinstance(source, dict) else source
        items.append(f"- Backward passes: {', '.join(passes.get('by_pass') or {}) or 'none'}"
                     + (f", from record {name}" if name and name != record else "")
                     + " (atlas.json's passes; the report's passes page).")
    else:
        items.append(f"- Backward passes: {NOT_MEASURED}.")
    mobilenet = atlas.get("mobilenet")
    if mobilenet:
        layouts = mobilenet.get("layouts") or {}
        done = [v.get("title", k) for k, v in layouts.items() if v.get("measured")]
        missing = [v.get("title", k) for k, v in layouts.items() if not v.get("measured")]
        items.append("- MobileNetV2 probe: " + (f"measured in {' and '.join(done)}" if done
                                                else "measured")
                     + (f"; {' and '.join(missing)} {NOT_MEASURED}" if missing else "")
                     + " (the report's mobilenet page).")
    else:
        items.append(f"- MobileNetV2 probe: {NOT_MEASURED}.")
    probes = atlas.get("probes") or {}
    measured = [name for name, probe in probes.items() if probe.get("measured")]
    missing = [f"{name} (`snakemake {probe.get('snakemake_target', name)}`)"
               for name, probe in probes.items() if not probe.get("measured")]
    if measured:
        items.append(f"- Probes {', '.join(measured)}: measured (the report's probes page).")
    if missing:
        items.append(f"- Probes {', '.join(missing)}: {NOT_MEASURED}.")
    items.append("- Nsight Compute captures: " + nsight_words(atlas.get("nsight")))
    items.append("- Independent timer cross-check: " + (
        f"measured ({atlas['crosscheck'].get('timer')}; above)." if atlas.get("crosscheck")
        else f"{NOT_MEASURED}."))
    if not atlas.get("roofline"):
        items.append(f"- Roofline ceilings: {NOT_MEASURED}.")
    if not atlas.get("floor"):  # where measured, the headline states it
        items.append("- Measured floor (a same-bytes copy and an empty launch beside the "
                     f"kernels): {NOT_MEASURED}.")
    if not atlas.get("reference_algorithms"):
        items.append("- The GPU kernels each PyTorch reference ran: not named in this record.")
    return items


def nsight_words(nsight: dict | None) -> str:
    """From atlas.json's nsight section (study/plans/nsight_plan.NsightPlan.atlas_section)."""
    if not nsight:
        return "not stated in this atlas.json."
    if nsight.get("mode") == "live":
        return ("made by their own target (`snakemake nsight`), not by the atlas's jobs; the "
                "report's nsight page shows them where that target ran.")
    own = nsight.get("captures") or 0
    if own:
        return f"{own} in this record (the report's nsight page)."
    borrowed = nsight.get("borrowed_from")
    return NOT_MEASURED + (f"; the report's nsight page shows the "
                           f"{nsight.get('borrowed_captures', 0)} of record {borrowed}."
                           if borrowed else ".")


def not_claimed(atlas: dict) -> dict:
    implementations = set(atlas.get("verification") or {})
    tf32 = [i for i in natural(implementations) if BASELINES.get(i, {}).get("tf32")]
    tf32_words = (f" {', '.join(tf32)} (PyTorch as shipped, TF32 allowed in cuDNN convolutions)"
                  " shows what a default PyTorch user gets: verified at a TF32 tolerance, never "
                  "a dispatch target." if tf32 else "")
    mobilenet = atlas.get("mobilenet")
    networks = (atlas.get("probes") or {}).get("networks") or {}
    shown = [w for w, held in (("the MobileNetV2 probe's", mobilenet),
                               ("the network probe's", networks.get("measured"))) if held]
    network_words = (f"Nothing about end-to-end network speed beyond {' and '.join(shown)} "
                     "own readings." if shown else
                     "Nothing about end-to-end network speed: this record measured no network.")
    return {"layout_words": layout_words(atlas), "tf32_words": tf32_words,
            "network_words": network_words}
