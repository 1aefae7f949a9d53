"""current-evidence.md: the prose lives in workflow/templates/current-evidence.md (string.Template
blocks); this module fills it from atlas.json alone and builds the tables."""
from __future__ import annotations

import re
from pathlib import Path
from string import Template

TEMPLATE = Path(__file__).resolve().parents[2] / "templates" / "current-evidence.md"
BLOCK = re.compile(r"^<!-- block: ([a-z_]+) -->\n", re.MULTILINE)
METHOD_WORDS = {
    "t": "Student t interval of the mean paired log ratio over batches",
    "BCa": "paired BCa bootstrap over batches",
    "percentile": "paired percentile bootstrap over batches",
    "basic": "paired basic bootstrap over batches",
}


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


def _comparison_rows(atlas: dict) -> list[str]:
    rows = []
    for c in atlas["comparisons"]:
        if c["job"] == "aa":
            continue
        rows.append(
            f"| {c['candidate']} | {c['baseline']} | {c['boundary']} | {x(c['geomean_ratio'])} | "
            f"{interval(c.get('shape_ci_low'), c.get('shape_ci_high'))} | "
            f"{interval(c.get('noise_ci_low', c['ci_low']), c.get('noise_ci_high', c['ci_high']))}"
            f" | {c['n_win']} | {c['n_tie']} | {c['n_loss']} | {c['n_inconclusive']} | "
            f"{c['n_unsupported']} | {c['n_incorrect']} |")
    return rows


def _headline(atlas: dict, blocks: dict[str, Template]) -> tuple[str, str]:
    head = atlas.get("headline") or {}
    lines = "\n".join(f"- {line}" for line in head.get("summary_lines", [])) or \
        "- No headline: this atlas has no strict-FP32 PyTorch reference."
    graph = (head.get("boundaries") or {}).get("graph_device")
    if not graph:
        return lines, ""
    group_rows = _group_rows(graph, head["candidate"])
    nchw_only = ""
    if head.get("nchw_only"):
        old = head["nchw_only"]
        nchw_only = fill(blocks["nchw_only"], candidate=head["candidate"],
                         reference=old["reference"], statement=old["reference_statement"],
                         group_rows="\n".join(_group_rows(old["boundaries"]["graph_device"],
                                                          head["candidate"])))
    fastest_rows = []
    for boundary, part in head["boundaries"].items():
        custom = sum(f["fastest_is_custom"] for f in part["fastest_per_shape"])
        total = len(part["fastest_per_shape"])
        by = ", ".join(f"{k} {v}" for k, v in part["fastest_counts"].items())
        fastest_rows.append(f"| {boundary} | {custom} | {total - custom} | {by} |")
    l2 = head.get("l2_bytes")
    tables = fill(blocks["headline_tables"], candidate=head["candidate"],
                  reference=head["reference"], l2_mb="n/a" if not l2 else f"{l2 / 1e6:.1f}",
                  group_rows="\n".join(group_rows), fastest_rows="\n".join(fastest_rows),
                  nchw_only_rows=nchw_only)
    return lines, tables


def _group_rows(graph: dict, candidate: str) -> list[str]:
    """The headline's rows by region: every candidate overall (the dispatcher among them), then
    the headline candidate by kind, channels per group and footprint."""
    rows = [f"| overall: {e['candidate']} | {e['shapes_compared']} | {x(e['geomean_ratio'])} | "
            f"{interval(e['shape_ci_low'], e['shape_ci_high'])} | {e['n_win']} | {e['n_loss']} | "
            f"{e['n_tie']} | {e['n_inconclusive']} |"
            for e in graph.get("overall", []) if e["candidate"] == "dispatch"]
    for title, entries in (("kind", graph["by_kind"]),
                           ("channels per group", graph["by_channels_per_group"]),
                           ("footprint", graph["by_footprint"])):
        for e in entries:
            rows.append(
                f"| {title}: {e['group']} | {e['shapes']} | {x(e['geomean_ratio'])} | "
                f"{interval(e['shape_ci_low'], e['shape_ci_high'])} | {e['n_win']} | "
                f"{e['n_loss']} | {e['n_tie']} | {e['n_inconclusive']} |")
    return rows


def _nhwc_timed(atlas: dict) -> bool:
    return bool((atlas.get("headline") or {}).get("nchw_only"))


def _torch_best_words(atlas: dict) -> str:
    if not _nhwc_timed(atlas):
        return "per shape and boundary the faster of torch_default and torch_tuned"
    return ("per shape and boundary the fastest strict-FP32 PyTorch reference in either layout "
            "(torch_default, torch_tuned, and the same on channels_last input and weight: "
            "torch_default_nhwc, torch_tuned_nhwc; their layout conversion happens once when "
            "they are bound, outside every timed region); `torch_best_nchw` is the same among "
            "the NCHW two, the reading before channels_last was measured")


def _layout_words(atlas: dict) -> str:
    if not _nhwc_timed(atlas):
        return "layouts (NHWC)"
    return ("layouts other than NCHW for the custom kernels (channels_last is measured for "
            "PyTorch's references only, with the conversion outside the timed region)")


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


def _roofline(atlas: dict, blocks) -> str:
    roof = atlas.get("roofline")
    if not roof:
        return ""
    ceil = roof["ceilings"]
    rows = []
    for impl, per in roof["by_implementation"].items():
        for boundary, r in per.items():
            big = r["over_2x_l2_mean_bandwidth_fraction"]
            rows.append(f"| {impl} | {boundary} | {r['geomean_fraction_of_roofline']:.1%} | "
                        f"{'n/a' if big is None else f'{big:.1%}'} |")
    return fill(blocks["roofline"], dram_tbs=f"{ceil['dram_bandwidth_bytes_per_s'] / 1e12:.2f}",
                fma_tflops=f"{ceil['fma_flops_per_s'] / 1e12:.1f}", roofline_rows="\n".join(rows))


def _spread(atlas: dict, blocks) -> str:
    spread = [r for r in atlas.get("cross_job_spread") or [] if r["boundary"] == "graph_device"]
    if not spread:
        return ""
    rows = []
    for r in spread:
        worst = "; ".join(f"{w['shape_id']} {w['slowest_job_median_us']:.1f} / "
                          f"{w['fastest_job_median_us']:.1f} us" for w in r["worst"])
        rows.append(f"| {r['implementation']} | {r['shapes']} | {r['shapes_over_threshold']} | "
                    f"{r['max_spread']:.2f}x | {worst} |")
    return fill(blocks["spread"], threshold=f"{atlas['config']['statistics']['threshold']:.0%}",
                spread_rows="\n".join(rows))


def _algorithms(atlas: dict, blocks) -> str:
    """The cells whose reference ran more than one algorithm; nothing for a record that does
    not name the kernels (its evidence reads as before)."""
    algorithms = atlas.get("reference_algorithms")
    if not algorithms:
        return ""
    changed = algorithms["changed"]
    rows = [f"| {c['shape_id']} | {c['reference']} | " + "; ".join(
        f"`{a['kernels']}` in {', '.join(a['processes'])}: "
        + ("n/a" if a["median_us"] is None else f"{a['median_us']:.2f} us")
        for a in c["algorithms"]) + " |" for c in changed]
    words = ("In every process each reference ran the same kernels on each shape." if not changed
             else f"On {len(changed)} (shape, reference) cells a reference ran more than one "
                  "algorithm: a verdict against it depends on which process paired it, so "
                  "torch_best takes its fastest algorithm (the reference read on the batches of "
                  "the processes that ran it), the best a user of that reference could get. The "
                  "comparisons against the reference itself stay as measured, over every process.")
    table = ("| shape | reference | algorithms, fastest first: kernels, job:process, "
             "graph_device median |\n|---|---|---|\n" + "\n".join(rows)) if rows else ""
    return fill(blocks["algorithms"], named=algorithms["named"], changed_words=words,
                algorithm_rows=table)


def _crosscheck(atlas: dict, blocks) -> str:
    cross = atlas.get("crosscheck")
    if not cross:
        return ""
    rows = []
    for r in cross["rows"]:
        harness, same = r.get("harness_graph_device_median_us"), r["relative_difference"]
        record, rec_diff = r["atlas_graph_device_median_us"], r.get(
            "record_relative_difference", r["relative_difference"] if harness is None else None)
        rows.append(
            f"| {r['shape_id']} | {'n/a' if harness is None else f'{harness:.2f}'} | "
            f"{r['triton_median_us']:.2f} | "
            f"{'n/a' if harness is None or same is None else f'{same:+.1%}'} | "
            f"{'n/a' if record is None else f'{record:.2f}'} | "
            f"{'n/a' if rec_diff is None else f'{rec_diff:+.1%}'} |")
    return fill(blocks["crosscheck"], implementation=cross["implementation"],
                timer=cross["timer"], crosscheck_rows="\n".join(rows))


def evidence_markdown(atlas: dict, template: Path = TEMPLATE) -> str:
    """Plain words: the answer, what was verified, what was measured, under which boundaries,
    what is not claimed. Every figure comes from atlas.json."""
    blocks = template_blocks(template)
    ev, sess, cfg = atlas["evidence"], atlas["session"], atlas["config"]
    st = cfg["statistics"]
    headline, headline_tables = _headline(atlas, blocks)
    caveat_items = list(ev.get("caveats") or [])
    if not sess.get("timing_measured_alone", True):
        caveat_items.append("Timing jobs shared the GPU machine with other jobs (`measure_alone: "
                            "false`, the smoke config's setting): these latencies check that the "
                            "pipeline runs; they are not claims about the kernels.")
    caveats = ""
    if caveat_items or ev.get("amendments"):
        caveats = fill(blocks["caveats"],
                       caveat_items="\n".join(f"- {c}" for c in caveat_items),
                       amendments=("\n\nAmendments to the record: " + " ".join(ev["amendments"]))
                       if ev.get("amendments") else "")
    return fill(
        blocks["document"], headline=headline, headline_tables=headline_tables,
        statement=ev["statement"], device=ev["device"], gpu_name=sess["gpu_name"],
        driver=sess["driver"], cuda_runtime=sess["cuda_runtime"], cudnn=sess["cudnn"],
        torch=sess["torch"], pycuda=sess["pycuda"], precision=sess["precision"],
        shape_count=atlas["shape_set"]["count"], shape_sha256=atlas["shape_set"]["sha256"],
        caveats=caveats, tolerance_factor=cfg["verification_tolerance_factor"],
        verification_rows="\n".join(
            f"| {impl} | {c['correct']} | {c['incorrect']} | {c['unsupported']} |"
            for impl, c in atlas["verification"].items()),
        batches=cfg["timing"]["batches"], samples_per_batch=cfg["timing"]["samples_per_batch"],
        l2_policy=cfg["timing"]["l2_policy"], confidence=int(st["confidence_level"] * 100),
        method_words=METHOD_WORDS.get(st["method"], st["method"])
        + (f", {st['resamples']} resamples" if st["method"] != "t" else "")
        + "; with batches from two or more processes, a t interval over per-process means",
        threshold=f"{st['threshold']:.0%}", comparison_rows="\n".join(_comparison_rows(atlas)),
        **_aa_words(atlas["aa"]), clock_flagged=atlas["clock"]["batches_clock_flagged"],
        clock_total=atlas["clock"]["batches_total"], flag_rule=atlas["clock"]["flag_rule"],
        torch_best_words=_torch_best_words(atlas), layout_words=_layout_words(atlas),
        roofline=_roofline(atlas, blocks), spread=_spread(atlas, blocks),
        algorithms=_algorithms(atlas, blocks), crosscheck=_crosscheck(atlas, blocks))
