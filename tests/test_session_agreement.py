"""The headline's agreement is read against the record's own nearest same-code session, chosen
from the records' build hashes (records.nearest_same_code), not from a configured list: the
choice on the committed records, the headline's words on synthetic cells (test input, not
measurements), and the plan that asks for it."""
from __future__ import annotations

import json
from datetime import datetime

import pandas as pd
import pytest

from groupconv.files import ATLAS_RECORD, REPO_ROOT
from groupconv_atlas.study.records.committed import (build_files, kernel_sources, nearest_same_code,
                                           vouched_sources)

RECORDS = REPO_ROOT / "records"


def manifests() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in RECORDS.glob("*/record.json")}


@pytest.mark.parametrize("name", sorted(manifests()))
def test_the_nearest_same_code_session_shares_the_most_code_and_is_nearest_in_time(name):
    every = manifests()
    mine = kernel_sources(RECORDS / name)
    files = build_files(RECORDS / name)

    def ran_mine(other, kernel):  # the same hashes, or hashes the other record vouches for
        vouched = vouched_sources(RECORDS / other).get(kernel) or {}
        return (kernel_sources(RECORDS / other).get(kernel) == mine[kernel]
                or bool(vouched) and all(d in vouched.get(p, ()) for p, d in files[kernel].items()))

    same = {other: [k for k in mine if ran_mine(other, k)]
            for other, m in every.items()
            if other != name and m["device"] == every[name]["device"]
            and m["created_utc"] <= every[name]["created_utc"]}
    chosen = nearest_same_code(RECORDS, name)
    most = max((len(v) for v in same.values()), default=0)
    if most == 0:
        assert chosen is None
        return
    assert chosen["kernels"] == list(mine)
    assert chosen["same_code"] == same[chosen["record"]] and len(chosen["same_code"]) == most
    stamp = datetime.fromisoformat(every[name]["created_utc"])

    def gap(other):
        return abs((datetime.fromisoformat(every[other]["created_utc"]) - stamp).total_seconds())

    tied = [o for o, v in same.items() if len(v) == most]
    assert gap(chosen["record"]) == min(gap(o) for o in tied)


def test_the_newest_record_is_read_against_a_session_that_ran_its_code():
    # The newest atlas record (a record of the backward passes alone has no builds to share).
    newest = max(((name, m) for name, m in manifests().items()
                  if any((RECORDS / name).glob(ATLAS_RECORD))),
                 key=lambda kv: (kv[1]["device"] == "h200", kv[1]["created_utc"]))[0]
    chosen = nearest_same_code(RECORDS, newest)
    assert chosen is not None and chosen["record"] != newest
    theirs = kernel_sources(RECORDS / chosen["record"])
    mine = kernel_sources(RECORDS / newest)
    vouched = vouched_sources(RECORDS / chosen["record"])
    files = build_files(RECORDS / newest)
    # the same build hashes, or a source the chosen record vouches compiles to its machine code
    assert all(theirs.get(k) == mine[k]
               or all(d in vouched.get(k, {}).get(p, ()) for p, d in files[k].items())
               for k in chosen["same_code"])
    assert chosen["same_code"], "the newest record shares code with an earlier session"


def _wide(records=("h200-new", "h200-old")) -> pd.DataFrame:
    a, b = records
    return pd.DataFrame({
        "shape_id": ["s1", "s2", "s3", "s4"], "candidate": ["k5", "k5", "k0", "k5"],
        "baseline": ["torch_tuned_nhwc", "torch_tuned_nhwc", "torch_tuned", "torch_default"],
        "boundary": ["graph_device"] * 4,
        f"{a}:class": ["WIN", "WIN", "TIE", "WIN"], f"{b}:class": ["LOSS", "LOSS", "TIE", "WIN"],
        "classes_agree": [False, False, True, True],
        "intervals_overlap": pd.array([False, False, True, True], dtype="boolean"),
        "reversal": [True, True, False, False], "same_code": [True, True, True, False]})


def test_the_headline_names_the_session_it_is_read_against_and_the_reversals_by_reference():
    from groupconv_atlas.study.artifacts.headline import session_agreement
    from groupconv_atlas.study.artifacts.agreement_lines import agreement_lines

    pair = {"record": "h200-new", "nearest": "h200-old", "same_code": ["k0", "k1", "k2", "k5"],
            "kernels": ["k0", "k1", "k2", "k5", "k9"]}
    block = session_agreement(_wide(), "k5", pair)
    assert block["chosen"]["nearest"] == "h200-old" and block["records"] == ["h200-new",
                                                                             "h200-old"]
    graph = block["boundaries"]["graph_device"]
    # The cell whose code changed (s4) is left out; both reversals are torch_tuned_nhwc's.
    assert (graph["cells"], graph["classes_agree"], graph["reversals"]) == (3, 1, 2)
    assert graph["reversals_by_baseline"] == {"torch_tuned_nhwc": 2}
    [line] = agreement_lines(block, "k5")
    assert line.startswith("This record (h200-new) against its nearest same-code session, "
                           "h200-old (the same kernel sources and headers for k0, k1, k2, k5, "
                           "4 of its 5 kernels; chosen from the records' build hashes)"), line
    assert "on the cells timed in both sessions with the same code: at graph_device, " \
        "per-shape classes agree in 33.3% of 3 cells" in line
    assert ("with 2 WIN/LOSS reversals (against torch_tuned_nhwc: 2); left out of 4 shared "
            "cells: 1 timed with other code.") in line
    # Every reversal with its cause: nothing these cells name changed, so it is unexplained.
    assert ("at graph_device 2, 2 with the same code and no change found, unexplained (against "
            "torch_tuned_nhwc on 2;") in line
    # Neither record names the kernels cuDNN ran: the reversals' cause is said to be unknown.
    assert line.endswith("is not known: a record here does not name the kernels it ran.")
    changes = [{"shape_id": "s1", "reference": "torch_tuned_nhwc",
                "algorithms": {"h200-new": ["A"], "h200-old": ["B"]}}]
    named = session_agreement(_wide(), "k5", {**pair, "reference_algorithm_changes": changes})
    [line] = agreement_lines(named, "k5")
    assert line.endswith("A reference ran another cuDNN algorithm in one session than in the "
                         "other on 1 (shape, reference) cells (torch_tuned_nhwc: 1).")


def test_the_headline_states_the_timed_share_what_it_leaves_out_and_each_reversals_cause():
    from groupconv_atlas.study.artifacts.compare_records import KEY, side_by_side, with_code
    from groupconv_atlas.study.artifacts.headline import session_agreement
    from groupconv_atlas.study.artifacts.agreement_lines import agreement_lines

    def session(classes, targets, own):
        rows = [(s, c, "torch_tuned", "graph_device", cls, 1.2) for (s, c), cls in zip(
            [("s1", "dispatch"), ("s2", "dispatch"), ("s3", "k5"), ("s4", "k5")], classes)]
        frame = pd.DataFrame(rows, columns=[*KEY, "class", "ratio"])
        frame = frame.assign(ci_low=1.1, ci_high=1.3, batches=10, samples_per_batch=30, job="j")
        # k5's sources differ; one identity compared stands for a SASS comparison's verdict.
        return with_code(frame, {"k5": "k5@1", "k12": "k12@1"}, own, targets)

    new = session(["UNSUPPORTED", "WIN", "TIE", "WIN"], {"s2": {"dispatch": "k12"}},
                  {"k5": "k5@2", "k12": "k12@1"})
    old = session(["UNSUPPORTED", "LOSS", "TIE", "INCONCLUSIVE"], {"s2": {"dispatch": "k5"}},
                  {"k5": "k5@1", "k12": "k12@1"})
    wide = side_by_side({"h200-new": new, "h200-old": old})
    pair = {"record": "h200-new", "nearest": "h200-old", "same_code": ["k5", "k12"],
            "kernels": ["k5", "k12"], "same_source": ["k12"],
            "same_machine_code": [{"kernel": "k5", "records": ["h200-new", "h200-old"],
                                   "vouched_by": "h200-old", "cubin": "raw/builds/k5.cubin",
                                   "functions": 2, "how": "SASS"}]}
    block = session_agreement(wide, "dispatch", pair)
    graph = block["boundaries"]["graph_device"]
    assert (graph["shared"], graph["cells"], graph["classes_agree"]) == (4, 2, 1)
    assert graph["untimed"] == {"cells": 1, "in_no_session": 1, "in_some_sessions": 0}
    assert (graph["code_changed"], graph["same_code_by_machine_code"]) == (1, 2)
    assert graph["reversals_by_cause"] == {"dispatch_target": 1}
    [reversal] = block["reversals"]
    assert reversal["targets"] == {"h200-new": "k12", "h200-old": "k5"}
    [line] = agreement_lines(block, "dispatch")
    assert ("(the same kernel sources and headers for k12; other sources but the same machine "
            "code by a SASS comparison for k5: 2 of its 2 kernels;") in line
    assert ("at graph_device, per-shape classes agree in 50.0% of 2 cells, with 0 WIN/LOSS "
            "reversals; left out of 4 shared cells: 1 not timed in every session (unsupported, "
            "incorrect or not measured: 1 in none, 0 in some), 1 timed with other code.") in line
    assert ("Of the cells counted, 2 at graph_device are the same code by machine code only"
            in line and "k5 by h200-old's SASS comparison" in line)
    assert ("at graph_device 1, 1 where the NCHW dispatcher (dispatch) ran another target "
            "(h200-new / h200-old: k12 / k5 on 1).") in line


def test_an_algorithm_change_between_sessions_is_found_where_both_records_name_the_kernels():
    from groupconv_atlas.study.statistics.reference_algorithms import (algorithm_table,
                                                                       session_changes)

    def table(per_process):
        return algorithm_table({"tuned": {"shapes": [
            {"shape_id": "s1", "reference_kernels": {"torch_tuned_nhwc": per_process,
                                                     "torch_tuned": [["C"]] * 2}}]}})

    found = session_changes({"new": table([["A"], ["A"]]), "old": table([["B"], ["A"]])})
    assert found == [{"shape_id": "s1", "reference": "torch_tuned_nhwc",
                      "algorithms": {"new": ["A"], "old": ["A", "B"]}}]
    assert session_changes({"new": table([["A"], ["A"]]), "old": table([["A"], ["A"]])}) == []
    assert session_changes({"new": table([["A"]]), "old": algorithm_table({})}) is None


def test_without_a_same_code_session_the_headline_says_so():
    from groupconv_atlas.study.artifacts.headline import session_agreement
    from groupconv_atlas.study.artifacts.agreement_lines import agreement_lines

    [line] = agreement_lines(session_agreement(None, "k5", None), "k5")
    assert line == ("Agreement between sessions is absent: no other committed record of this "
                    "device ran the same kernel code.")


def test_a_replay_asks_for_its_records_agreement_and_a_live_run_does_not(monkeypatch):
    from test_run_plan import a_gpu, config_of, no_gpu

    from groupconv_atlas.study.plans.run_plan import RunPlan

    monkeypatch.chdir(REPO_ROOT)
    replay = RunPlan.from_config(config_of(), REPO_ROOT, 2, gpu_available=no_gpu)
    pair = replay.atlas.agreement_pair
    assert pair == {"record": replay.record_name,
                    **{("nearest" if k == "record" else k): v for k, v in
                       nearest_same_code(RECORDS, replay.record_name).items()}}
    assert replay.atlas.session_agreement_input() == [
        f"results/h200/session-agreement.{s}" for s in ("parquet", "json")]
    inputs = replay.atlas.session_agreement_records()
    assert inputs["manifests"] == [f"records/{pair['record']}/record.json",
                                   f"records/{pair['nearest']}/record.json"]
    assert replay.prov("session_agreement") in replay.atlas.all_jobs_provenance()
    live = RunPlan.from_config(config_of(mode="live"), REPO_ROOT, 2, gpu_available=a_gpu)
    assert live.atlas.agreement_pair is None and live.atlas.session_agreement_input() == []
