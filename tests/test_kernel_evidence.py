"""A kernel lands with measured evidence or is not offered to the dispatcher: every kernel of the
registry (which `kernels: all` times and autotuning on an unseen GPU tries) was tuned or timed
in a committed record's raw layer, or has a bench table committed beside it
(kernels/bench/<device>/<kernel>-<subset>.json, written by `snakemake kernel_bench`;
study/measuring/bench.kernel_evidence reads both)."""
import json

from helpers import ROOT

from groupconv.kernels import KERNELS
from groupconv_atlas.study.measuring.bench import FORMAT, kernel_evidence


def test_every_kernel_of_the_registry_has_measured_evidence():
    evidence = kernel_evidence(ROOT)
    missing = [kernel for kernel in KERNELS if not evidence.get(kernel)]
    assert not missing, (
        f"no measured evidence for {', '.join(missing)}: no committed record tuned or timed it "
        "(records/<name>/raw/tuning/, raw/timing/) and no bench table is committed for it. "
        "Measure it on a GPU with `snakemake kernel_bench --config mode=live "
        "bench_kernel=<kernel> bench_shapes=<subset>` and commit results/<device>/bench/"
        "<kernel>-<subset>.json and .md under kernels/bench/<device>/, or take it out of "
        "groupconv/kernels.KERNELS until it is measured")


def test_a_kernel_is_found_by_a_record_or_by_its_committed_bench_table_alone(tmp_path):
    # A record that timed k3 (its A/A twin counts as k3) and tuned k5; the references and the
    # dispatcher are not kernels.
    raw = tmp_path / "records" / "h100-test" / "raw"
    (raw / "timing").mkdir(parents=True)
    (raw / "tuning").mkdir()
    (raw / "timing" / "aa.json").write_text(json.dumps(
        {"implementations": ["k3", "k3_twin"], "candidates": ["k3"], "references": ["k3_twin"]}))
    (raw / "timing" / "default.json").write_text(json.dumps(
        {"implementations": ["dispatch", "torch_default"], "candidates": ["dispatch"],
         "references": ["torch_default"]}))
    (raw / "tuning" / "k5.json").write_text("{}")
    assert kernel_evidence(tmp_path) == {"k3": ["records/h100-test"], "k5": ["records/h100-test"]}
    # A kernel no record holds: evidence once a bench table that timed it is committed.
    bench = tmp_path / "kernels" / "bench" / "h100"
    bench.mkdir(parents=True)
    row = {"shape_id": "s", "boundary": "graph_device", "kernel_median_us": 3.0, "class": "TIE"}
    (bench / "k12-depthwise.json").write_text(json.dumps(
        {"format": FORMAT, "kernel": "k12", "rows": [row]}))
    assert kernel_evidence(tmp_path)["k12"] == ["kernels/bench/h100/k12-depthwise.json"]
