"""current-evidence.md: the prose lives in workflow/templates/current-evidence.md (string.Template
blocks); this module fills it from atlas.json alone and builds the tables, with the record's
facts from study/artifacts/evidence_facts (layouts, what ran, what was not measured). Long lists are
summarised and long headline sentences cut after whole parts, the report's pages and atlas.json
holding every row; the text is wrapped so that no line passes LINE_LIMIT."""
from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path
from string import Template

from .evidence_facts import (LAYOUT_SHORT, beyond_items, first_few, layout_items, natural,
                             natural_key, not_claimed, once_each, registry_layout, role,
                             timed_by_boundary)

TEMPLATE = Path(__file__).resolve().parents[3] / "templates" / "current-evidence.md"
BLOCK = re.compile(r"^<!-- block: ([a-z_]+) -->\n", re.MULTILINE)
METHOD_WORDS = {
    "t": "Student t interval of the mean paired log ratio over batches",
    "BCa": "paired BCa bootstrap over batches",
    "percentile": "paired percentile bootstrap over batches",
    "basic": "paired basic bootstrap over batches",
}
# Prose and bullets are wrapped at WIDTH (a bullet's or paragraph's later lines indented by two
# spaces, which Markdown and the report's renderer read as the same item); table rows are built
# short enough to stay under LINE_LIMIT on their own.
WIDTH = 196
LINE_LIMIT = 200
# A headline sentence longer than this (a list over regions or over sessions' cells) is cut to
# its first parts; the landing page holds it whole.
LONG_LINE = 460


def template_blocks(path: Path = TEMPLATE) -> dict[str, Template]:
    """The named blocks of the template file; the text before the first block is a comment."""
    parts = BLOCK.split(path.read_text())
    return {name: Template(body) for name, body in zip(parts[1::2], parts[2::2])}


def fill(block: Template, **values) -> str:
    try:
        return block.substitute(**values)
    except KeyError as err:  # a template edit that names a value nobody provides
        raise KeyError(f"{TEMPLATE.name}: no value for ${err.args[0]}") from None


def x(value) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def interval(low, high) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def share(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def wrap(text: str, width: int = WIDTH) -> str:
    """Every prose line or bullet longer than `width` broken at spaces (never inside a name),
    later lines indented by two spaces; headings and table rows as they are; runs of blank lines
    (left by absent sections) made one."""
    out: list[str] = []
    for line in text.split("\n"):
        if not line.strip():
            if out and out[-1] != "":
                out.append("")
            continue
        if len(line) <= width or line.startswith(("|", "#")):
            out.append(line)
            continue
        out.extend(textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=False,
                                 break_on_hyphens=False))
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


# --- the answer first ----------------------------------------------------------------------------

def cut_line(line: str, limit: int = LONG_LINE) -> str:
    """A summary line over `limit` characters cut after its last top-level '; ' part that fits
    (never inside brackets, so what stays is whole parts of the sentence, each as true as in the
    whole), saying how many parts follow and where the whole line is."""
    if len(line) <= limit:
        return line
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(line):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and line.startswith("; ", i):
            parts.append(line[start:i])
            start = i + 2
    parts.append(line[start:])
    kept = [parts[0]]
    for part in parts[1:]:
        if len("; ".join([*kept, part])) > limit:
            break
        kept.append(part)
    rest = len(parts) - len(kept)
    if not rest:
        return line
    return (f"{'; '.join(kept)}; and {rest} more part{'s' if rest > 1 else ''} (whole: the "
            "report's landing page).")


def _headline(atlas: dict, blocks: dict[str, Template]) -> tuple[str, str]:
    head = atlas.get("headline") or {}
    lines = "\n".join(f"- {cut_line(line)}" for line in head.get("summary_lines", [])) or \
        "- No headline: this atlas has no strict-FP32 PyTorch reference."
    if not (head.get("boundaries") or {}).get("graph_device"):
        return lines, ""
    old = head.get("nchw_only")
    l2 = head.get("l2_bytes")
    items = fill(blocks["headline_items"], candidate=head["candidate"],
                 reference=head["reference"], l2_mb="n/a" if not l2 else f"{l2 / 1e6:.1f}",
                 beside_words=f" (against {old['reference']}: headline.nchw_only)" if old else "")
    return lines, items


# --- caveats and amendments ----------------------------------------------------------------------

def _caveats(atlas: dict, blocks) -> str:
    ev, sess = atlas["evidence"], atlas["session"]
    notes = list(ev.get("caveats") or [])
    if not sess.get("timing_measured_alone", True):
        notes.append("Timing jobs shared the GPU machine with other jobs (`measure_alone: "
                     "false`, the smoke config's setting): these latencies check that the "
                     "pipeline runs; they are not claims about the kernels.")
    out = ""
    if notes:
        out += fill(blocks["caveats"], caveat_items="\n".join(
            f"- {text}." + (f" (stated {n} times)" if n > 1 else "")
            for text, n in once_each(notes)))
    if ev.get("amendments"):
        out += "\n" + fill(blocks["amendments"], amendment_items="\n".join(
            f"- {text}." + (f" ({n} amendments with this note)" if n > 1 else "")
            for text, n in once_each(ev["amendments"])))
    return out


# --- what was verified and measured --------------------------------------------------------------

def _verification_rows(atlas: dict) -> list[str]:
    groups: dict[tuple, list[str]] = {}
    for impl, c in atlas["verification"].items():
        groups.setdefault((c["correct"], c["incorrect"], c["unsupported"]), []).append(impl)
    rows = []
    for (correct, incorrect, unsupported), impls in sorted(
            groups.items(), key=lambda kv: (-kv[0][1], -kv[0][0], kv[0][2])):
        rows.append(f"| {correct} | {incorrect} | {unsupported} | "
                    f"{first_few(natural(impls), 12)} |")
    return rows


def _timed_items(atlas: dict, reference: str | None, others: int) -> list[str]:
    """Which jobs ran and what the table below shows (which implementation was timed at which
    boundary is said per layout, above)."""
    timed = timed_by_boundary(atlas)
    items = []
    jobs = natural((atlas.get("session") or {}).get("timing_wall_s") or {})
    if jobs:
        items.append(f"- Timing jobs: {', '.join(jobs)}.")
    if not timed:
        items.append("- No comparison was timed in this record.")
    elif reference:
        items.append(f"- Below, each candidate against {reference}: the geometric mean over the "
                     "shapes compared, its interval over shapes (shapes resampled, then batches "
                     "within each: what claims rest on), wins / ties / losses / inconclusive."
                     + (f" The other {others} comparisons: summary.parquet and the report's "
                        "comparisons-summary page." if others else ""))
    return items


def _comparison_table(atlas: dict, reference: str) -> tuple[str, int]:
    """One row per candidate against `reference`, a column group per boundary; and how many
    comparisons the table leaves to the summary."""
    rows = [c for c in atlas.get("comparisons") or [] if c.get("job") != "aa"]
    picked = [c for c in rows if c["baseline"] == reference]
    if not picked:
        return "", len(rows)
    boundaries = sorted({c["boundary"] for c in picked})
    cells = {(c["candidate"], c["boundary"]): c for c in picked}
    candidates = sorted({c["candidate"] for c in picked},
                        key=lambda n: (role(n) != "dispatcher", natural_key(n)))
    head = "| candidate | layout | " + " | ".join(
        f"{b}: mean | {b}: over shapes | {b}: W/T/L/I" for b in boundaries) + " |"
    rule = "|---|---|" + "---|---|---|" * len(boundaries)
    body = []
    for cand in candidates:
        cols = []
        for b in boundaries:
            c = cells.get((cand, b))
            cols.append("n/a | n/a | n/a" if c is None else
                        f"{x(c['geomean_ratio'])} | "
                        f"{interval(c.get('shape_ci_low'), c.get('shape_ci_high'))} | "
                        f"{c['n_win']}/{c['n_tie']}/{c['n_loss']}/{c['n_inconclusive']}")
        layout = registry_layout(cand)
        body.append(f"| {cand} | {LAYOUT_SHORT.get(layout, layout or 'n/a')} | "
                    + " | ".join(cols) + " |")
    return "\n".join([head, rule, *body]), len(rows) - len(picked)


def _table_reference(atlas: dict) -> str | None:
    """The headline's reference where the comparisons hold it, else the reference most
    candidates were compared with."""
    rows = [c for c in atlas.get("comparisons") or [] if c.get("job") != "aa"]
    wanted = (atlas.get("headline") or {}).get("reference")
    if wanted and any(c["baseline"] == wanted for c in rows):
        return wanted
    counts = Counter(c["baseline"] for c in rows)
    return counts.most_common(1)[0][0] if counts else None


def _aa_words(aa: dict) -> dict:
    rate = "n/a" if aa["rate"] is None else f"{aa['rate']:.1%}"
    per = aa.get("by_boundary", {})
    exclude = "; ".join(
        f"{b} {r['exclude_one']} of {r['exclude_one_pairs']} ({share(r['exclude_one_rate'])}"
        + (f", ratios within {r['exclude_one_largest_deviation']:.2%} of 1"
           if r.get("exclude_one_largest_deviation") is not None else "") + ")"
        for b, r in per.items() if "exclude_one" in r) or "n/a"
    return {"aa_implementation": aa["implementation"], "aa_decided": aa["win_or_loss"],
            "aa_pairs": aa["pairs"], "aa_rate": rate, "aa_limit": f"{aa['limit']:.0%}",
            "aa_verdict": "passed" if aa["passed"] else "FAILED: do not trust the verdicts",
            "aa_nominal": f"{1 - aa.get('confidence_level', 0.95):.0%}",
            "aa_exclude_one": exclude,
            "aa_exclude_limit": f"{aa.get('exclude_one_limit', 0):.0%}",
            "aa_exclude_verdict": "passed" if aa.get("exclude_one_passed") else
            "NOT met: either the per-shape intervals are too narrow or the second handle differs "
            "from the first by a real amount smaller than the threshold"}


# --- the optional sections -----------------------------------------------------------------------

def _roofline(atlas: dict, blocks) -> str:
    roof = atlas.get("roofline")
    if not roof or not roof.get("by_implementation"):
        return ""
    ceil = roof["ceilings"]
    boundary = "graph_device"
    ranked = sorted(((r[boundary]["geomean_fraction_of_roofline"], impl)
                     for impl, r in roof["by_implementation"].items()
                     if boundary in r and r[boundary].get("geomean_fraction_of_roofline")
                     is not None), reverse=True)
    words = ("highest first, " + first_few([f"{impl} {frac:.1%}" for frac, impl in ranked])
             if ranked else "n/a")
    return fill(blocks["roofline"], dram_tbs=f"{ceil['dram_bandwidth_bytes_per_s'] / 1e12:.2f}",
                fma_tflops=f"{ceil['fma_flops_per_s'] / 1e12:.1f}", boundary=boundary,
                roofline_words=words)


def _spread(atlas: dict, blocks) -> str:
    spread = [r for r in atlas.get("cross_job_spread") or [] if r["boundary"] == "graph_device"]
    if not spread:
        return ""
    threshold = f"{atlas['config']['statistics']['threshold']:.0%}"
    over = sorted((r for r in spread if r["shapes_over_threshold"]),
                  key=lambda r: (-r["shapes_over_threshold"], r["implementation"]))
    named = [f"{r['implementation']} on {r['shapes_over_threshold']} of {r['shapes']} "
             f"(up to {r['max_spread']:.2f}x, on {r['worst'][0]['shape_id']})" if r["worst"] else
             f"{r['implementation']} on {r['shapes_over_threshold']} of {r['shapes']}"
             for r in over]
    words = (f"Of {len(spread)} implementations timed in two or more jobs, shapes whose job "
             f"medians differ by more than {threshold}: {first_few(named, 3)}" if named else
             f"Of {len(spread)} implementations timed in two or more jobs, none has a shape "
             f"whose job medians differ by more than {threshold}") + \
        " (each one's worst shapes: atlas.json's cross_job_spread)."
    return fill(blocks["spread"], spread_words=words)


def _algorithms(atlas: dict, blocks) -> str:
    """The cells whose reference ran more than one algorithm, counted per reference with the
    first few shapes; nothing for a record that does not name the kernels. The kernels' names
    (long cuDNN signatures) stay in atlas.json."""
    algorithms = atlas.get("reference_algorithms")
    if not algorithms:
        return ""
    changed = algorithms["changed"]
    if not changed:
        words = "In every process each reference ran the same kernels on each shape."
    else:
        per_ref = Counter(c["reference"] for c in changed)
        shapes = list(dict.fromkeys(c["shape_id"] for c in changed))
        words = (f"On {len(changed)} (shape, reference) cells a reference ran more than one "
                 "algorithm (" + ", ".join(f"{ref} on {n}" for ref, n in
                                           sorted(per_ref.items(), key=lambda kv: -kv[1]))
                 + f"; shapes {first_few(shapes, 3)}): a verdict against it depends on which "
                 "process paired it, so torch_best reads it on the batches of its fastest "
                 "algorithm's processes; comparisons against the reference itself stay as "
                 "measured. Each cell's kernels, processes and medians: atlas.json's "
                 "reference_algorithms; the one torch_best read: comparisons.parquet's "
                 "reference_algorithm.")
    return fill(blocks["algorithms"], named=algorithms["named"], changed_words=words)


def _crosscheck(atlas: dict, blocks, first: int = 8) -> str:
    cross = atlas.get("crosscheck")
    if not cross:
        return ""
    rows = []
    for r in cross["rows"][:first]:
        harness, same = r.get("harness_graph_device_median_us"), r["relative_difference"]
        record, rec_diff = r["atlas_graph_device_median_us"], r.get(
            "record_relative_difference", r["relative_difference"] if harness is None else None)
        rows.append(
            f"| {r['shape_id']} | {'n/a' if harness is None else f'{harness:.2f}'} | "
            f"{r['triton_median_us']:.2f} | "
            f"{'n/a' if harness is None or same is None else f'{same:+.1%}'} | "
            f"{'n/a' if record is None else f'{record:.2f}'} | "
            f"{'n/a' if rec_diff is None else f'{rec_diff:+.1%}'} |")
    more = len(cross["rows"]) - first
    return fill(blocks["crosscheck"], implementation=cross["implementation"],
                timer=cross["timer"], crosscheck_rows="\n".join(rows),
                more_words=(f" (the first {first} of {len(cross['rows'])} shapes; every one: "
                            "atlas.json's crosscheck)") if more > 0 else "")


def _precision_words(precision) -> str:
    """The settings that make PyTorch strict FP32 (the 'api' entry names which switches were
    used, the others say it)."""
    if isinstance(precision, dict):
        return ", ".join(f"{k} {v}" for k, v in precision.items() if k != "api")
    return str(precision)


def _geometry_words(geometry: dict | None) -> str:
    if not geometry:
        return "geometry not stated in this atlas"
    kernel = geometry.get("kernel")
    return ", ".join(str(w) for w in (
        geometry.get("dtype"), f"{kernel}x{kernel}" if kernel else None,
        f"stride {geometry.get('stride')}", f"padding {geometry.get('padding')}",
        f"dilation {geometry.get('dilation')}", "bias" if geometry.get("bias") else "no bias",
        f"given as {geometry['layout']}" if geometry.get("layout") else None) if w)


def evidence_markdown(atlas: dict, template: Path = TEMPLATE) -> str:
    """Plain words: the answer, the layouts measured, what was verified, what was measured,
    under which boundaries, what the record did not measure, what is not claimed. Every figure
    comes from atlas.json."""
    blocks = template_blocks(template)
    ev, sess, cfg = atlas["evidence"], atlas["session"], atlas["config"]
    st = cfg["statistics"]
    headline, headline_items = _headline(atlas, blocks)
    reference = _table_reference(atlas)
    table, others = _comparison_table(atlas, reference) if reference else ("", 0)
    text = fill(
        blocks["document"], headline=headline, headline_items=headline_items,
        statement=ev["statement"], device=ev["device"], gpu_name=sess["gpu_name"],
        driver=sess["driver"], cuda_runtime=sess["cuda_runtime"], cudnn=sess["cudnn"],
        torch=sess["torch"], pycuda=sess["pycuda"],
        precision=_precision_words(sess["precision"]),
        shape_count=atlas["shape_set"]["count"], shape_sha256=atlas["shape_set"]["sha256"],
        geometry=_geometry_words(atlas["shape_set"].get("geometry")),
        caveats=_caveats(atlas, blocks), layout_items="\n".join(layout_items(atlas)),
        boundaries=" and ".join(sorted(timed_by_boundary(atlas))) or "no boundary",
        tolerance_factor=cfg["verification_tolerance_factor"],
        verification_rows="\n".join(_verification_rows(atlas)),
        batches=cfg["timing"]["batches"], samples_per_batch=cfg["timing"]["samples_per_batch"],
        l2_policy=cfg["timing"]["l2_policy"], confidence=int(st["confidence_level"] * 100),
        method_words=METHOD_WORDS.get(st["method"], st["method"])
        + (f", {st['resamples']} resamples" if st["method"] != "t" else "")
        + "; with batches from two or more processes, a t interval over per-process means",
        threshold=f"{st['threshold']:.0%}",
        timed_items="\n".join(_timed_items(atlas, reference, others)), comparison_table=table,
        **_aa_words(atlas["aa"]), clock_flagged=atlas["clock"]["batches_clock_flagged"],
        clock_total=atlas["clock"]["batches_total"], flag_rule=atlas["clock"]["flag_rule"],
        stability_items="\n".join(part.strip("\n") for part in (
            _roofline(atlas, blocks), _spread(atlas, blocks), _algorithms(atlas, blocks)) if part),
        crosscheck=_crosscheck(atlas, blocks),
        beyond_items="\n".join(beyond_items(atlas)), **not_claimed(atlas))
    return wrap(text)
