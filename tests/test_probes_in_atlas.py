"""The probes of the public op (call overhead, unseen geometries, whole networks) in the atlas:
atlas.json's `probes` section holds each probe's summary figures as its own output JSON has them
(with that file's path), or says that the record did not measure it; `atlas` waits for a probe's
output only where the record holds its raw samples (or, live, where `probes.with_atlas` names
it); the report's probes page shows the tables and states each target with whether it is met.

The smoke record holds no probe (the session's smoke replay); the newest H200 record that holds
the call-overhead benchmark is read here through the probes' own CPU jobs (seconds), and replayed
whole once with the per-record replays (marker records: make test-records)."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from groupconv_atlas.study.artifacts import atlas_document
from groupconv.record_formats import network_probe_document
from groupconv_atlas.study.artifacts.probe_summaries import network_targets, probes_block
from groupconv.files import find_record, sha256_file
from groupconv_atlas.study.records.committed import replay_arguments
from groupconv_atlas.study.report import probes_page
from groupconv_atlas.study.report.html_blocks import unpacked_page
from helpers import ROOT, SMOKE_DEVICE, SMOKE_RECORD, copy_checkout, run_guarded, snakemake

# Each probe: its raw files in a record, its output JSON under results/<device>/, its target.
PROBES = {
    "overhead": ("overhead", ["samples.parquet", "host.parquet", "probe.json"], "overhead.json",
                 "overhead_probe"),
    "unseen": ("probes/unseen", ["samples.parquet", "probe.json"], "probes/unseen.json",
               "unseen_probe"),
    "networks": ("probes/networks", ["samples.parquet", "probe.json"], "probes/networks.json",
                 "network_probe"),
    "epilogue": ("probes/epilogue", ["samples.parquet", "verification.parquet", "probe.json"],
                 "probes/epilogue.json", "epilogue_probe"),
}
# The newest H200 record with the call-overhead benchmark; what else it holds is read from its
# raw/ folder, not assumed.
PROBE_RECORD = find_record(ROOT / "records", "newest", "h200",
                           having="raw/overhead/samples.parquet")


def held(record: Path, probe: str) -> bool:
    folder, files, _, _ = PROBES[probe]
    return all((record / "raw" / folder / f).is_file() for f in files)


HELD = [p for p in PROBES if held(PROBE_RECORD, p)]
DEVICE = json.loads((PROBE_RECORD / "record.json").read_text())["device"]
REPLAY = replay_arguments(ROOT / "records", PROBE_RECORD.name)

# The workflow's probe plan (PLAN.atlas.probe_plan, what assemble_atlas gets), read with
# Snakemake's own parser in a fresh interpreter (parsing changes the working directory).
_DUMP_PLAN = r"""
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

root = Path(sys.argv[1])
config = json.loads(sys.argv[2])
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                            config_settings=ConfigSettings(config=config),
                            snakefile=root / "Snakefile", workdir=root)._workflow
    json.dump(workflow.globals["PLAN"].atlas.probe_plan, sys.stdout)
"""


def probe_plan(root: Path, config: dict) -> dict:
    res = run_guarded([sys.executable, "-c", _DUMP_PLAN, str(root), json.dumps(config)], root)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout)


def assemble_inputs(dry_run_output: str) -> list[str]:
    """The inputs of the assemble_atlas job in a dry run's listing."""
    lines = dry_run_output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "rule assemble_atlas:")
    line = next(line for line in lines[start:] if line.strip().startswith("input:"))
    return [p.strip() for p in line.split("input:", 1)[1].split(",")]


# --- a record without the probes: the session's smoke replay -------------------------------------

def test_a_record_without_the_probes_names_each_as_not_measured(smoke_replay):
    assert not any(held(ROOT / "records" / SMOKE_RECORD, p) for p in PROBES)  # the premise
    results = smoke_replay / "results" / SMOKE_DEVICE
    probes = json.loads((results / "atlas.json").read_text())["probes"]
    assert set(probes) == set(PROBES)
    for name, (folder, _, output, target) in PROBES.items():
        entry = probes[name]
        assert entry["measured"] is False and entry["status"] == "not measured", entry
        assert SMOKE_RECORD in entry["reason"] and f"raw/{folder}/" in entry["reason"]
        assert entry["snakemake_target"] == target
        assert entry["raw"] == f"records/{SMOKE_RECORD}/raw/{folder}"
        # The atlas did not wait for (or make) an output the record cannot give.
        assert not (results / output).exists(), output
    made_by = json.loads((results / "provenance" / "assemble_atlas.json").read_text())
    read = {i["path"] for i in made_by["inputs"]}
    assert not any(p.endswith(PROBES[n][2]) for n in PROBES for p in read), read


def test_the_report_has_the_probes_page_naming_each_probe_not_measured(smoke_replay):
    results = smoke_replay / "results" / SMOKE_DEVICE
    probes = json.loads((results / "atlas.json").read_text())["probes"]
    page = unpacked_page((results / "report" / "probes.html").read_text())
    for name, (_, _, _, target) in PROBES.items():
        assert f"snakemake {target}" in page
        assert probes[name]["reason"].replace("'", "&#x27;") in page
    assert page.count("Not measured.") == len(PROBES)
    assert f"0 of {len(PROBES)} measured here" in page
    # In the bundled report, with its caption.
    bundle = (smoke_replay / "reports" / "atlas.html").read_text()
    assert "probes.html" in bundle and "call-overhead benchmark" in bundle


# --- a record with probes: the DAG, the section, the page ----------------------------------------

@pytest.fixture(scope="module")
def probe_repo(tmp_path_factory) -> Path:
    """A copy of the checkout with the probe record's probe outputs made by their own jobs
    (overhead_stats, probe_stats: the record's check, then the statistics of each probe)."""
    assert HELD, f"{PROBE_RECORD.name} holds the call-overhead benchmark"  # the premise
    root = copy_checkout(tmp_path_factory.mktemp("probes") / "repo")
    outputs = [f"results/{DEVICE}/{PROBES[p][2]}" for p in HELD]
    snakemake(root, "--cores", "1", *outputs, *REPLAY)
    return root


def test_the_atlas_waits_for_the_probes_its_record_holds(probe_repo):
    res = snakemake(probe_repo, "-n", "--cores", "1", "atlas", *REPLAY)
    inputs = assemble_inputs(res.stdout + res.stderr)
    for name, (_, _, output, _) in PROBES.items():
        assert (f"results/{DEVICE}/{output}" in inputs) == (name in HELD), (name, inputs)


def test_a_live_run_measures_the_probes_the_config_names(probe_repo):
    # Live (the DAG only: a dry run on this machine without a GPU), into a folder of its own (a
    # live run refuses one holding a replay): none by default, as before the probes joined the
    # atlas; with probes.with_atlas, the named ones, measured first.
    live = ["mode=live", "device=probes-live"]
    res = snakemake(probe_repo, "-n", "--cores", "1", "atlas", "--config", *live)
    plain = res.stdout + res.stderr
    assert not [p for p in assemble_inputs(plain) if "probes/" in p or "overhead" in p]
    assert "rule probe_measure:" not in plain and "rule overhead_measure:" not in plain
    res = snakemake(probe_repo, "-n", "--cores", "1", "atlas", "--config", *live,
                    "probes={with_atlas: [overhead, networks]}")
    named = res.stdout + res.stderr
    inputs = assemble_inputs(named)
    assert "results/probes-live/overhead.json" in inputs
    assert "results/probes-live/probes/networks.json" in inputs
    assert "results/probes-live/probes/unseen.json" not in inputs
    assert "rule overhead_measure:" in named and "rule probe_measure:" in named
    assert "probe=networks" in named and "probe=unseen" not in named
    plan = probe_plan(probe_repo, {"mode": "live", "device": "probes-live"})
    assert all(e["result"] is None and "probes.with_atlas" in e["reason"] for e in plan.values())


def test_a_probe_the_config_names_must_be_known():
    from groupconv_atlas.study.plans.config_check import config_errors
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert config["probes"] == {"with_atlas": []}  # today's behaviour: the probes run alone
    config["probes"] = {"with_atlas": ["overhead", "netwerks"]}
    errors = config_errors(config)
    assert errors and errors[0].startswith("probes.with_atlas.1: 'netwerks', must be one of")


def _section(root: Path, plan: dict) -> dict:
    """What assemble_atlas.py makes of the plan: each planned output read as it stands."""
    docs = {n: json.loads((root / e["result"]).read_text()) for n, e in plan.items() if e["result"]}
    sha = {n: sha256_file(root / plan[n]["result"]) for n in docs}
    return atlas_document.clean(probes_block(plan, docs, sha))


def test_the_probes_section_holds_each_probe_outputs_figures(probe_repo):
    plan = probe_plan(probe_repo, {"mode": "replay", "record": PROBE_RECORD.name,
                                   "device": DEVICE})
    for name, (folder, _, output, _) in PROBES.items():
        assert plan[name]["raw"] == f"records/{PROBE_RECORD.name}/raw/{folder}"
        assert plan[name]["result"] == (f"results/{DEVICE}/{output}" if name in HELD else None)
    section = _section(probe_repo, plan)
    assert set(section) == set(PROBES)
    for name in HELD:
        path = plan[name]["result"]
        doc = json.loads((probe_repo / path).read_text())
        entry = section[name]
        assert entry["measured"] and entry["source"] == {
            "path": path, "sha256": sha256_file(probe_repo / path)}
        assert entry["raw"] == doc["sources"] and entry["settings"] == doc["settings"]
        assert entry["summary_lines"] == doc["summary_lines"] and entry["mode"] == "replay"
        if name == "overhead":
            assert entry["shapes"] == doc["shapes"] and entry["resolved"] == doc["resolved"]
        else:
            assert entry["summary"] == doc["summary"]
            # Details as the file has them, less the per-layer and per-trial lists.
            for key, details in doc["details"].items():
                trimmed = entry["details"][key]
                assert "layers" not in trimmed and "trials" not in trimmed.get("autotune", {})
                assert trimmed == {k: v for k, v in details.items() if k != "layers"} | (
                    {"autotune": {k: v for k, v in details["autotune"].items() if k != "trials"}}
                    if "autotune" in details else {}) | (
                    {"layouts": {lay: {k: v for k, v in d.items() if k != "layers"}
                                 for lay, d in details["layouts"].items()}}
                    if name == "networks" else {})
    for name in set(PROBES) - set(HELD):
        assert section[name]["measured"] is False
        assert PROBE_RECORD.name in section[name]["reason"]


def test_each_target_verdict_follows_from_the_figures(probe_repo):
    plan = probe_plan(probe_repo, {"mode": "replay", "record": PROBE_RECORD.name,
                                   "device": DEVICE})
    section = _section(probe_repo, plan)
    if "overhead" in HELD:
        shapes = section["overhead"]["shapes"]
        verdicts = {t["id"]: t for t in section["overhead"]["targets"]}
        slower = sorted(s for s, v in shapes.items()
                        if v["host_us_per_call"]["op"] > v["host_us_per_call"]["torch"])
        assert verdicts["eager_host_us_per_call"]["met"] == (not slower)
        assert sorted(verdicts["eager_host_us_per_call"]["failing"]) == slower
        over = sorted(s for s, v in shapes.items()
                      if abs(v["graph_device"]["op_minus_kernel_us"]) > 0.1)
        assert verdicts["in_graph_op_minus_kernel_us"]["met"] == (not over)
        assert sorted(verdicts["in_graph_op_minus_kernel_us"]["failing"]) == over
        assert all(t["checked"] == len(shapes) for t in verdicts.values())
    if "unseen" in HELD:
        rows = pd.DataFrame(section["unseen"]["summary"])
        verdicts = {t["id"]: t for t in section["unseen"]["targets"]}
        dispatch = rows[(rows["candidate"] == "dispatch") & (rows["against"] == "torch_best_nchw")]
        autotune = rows[(rows["candidate"] == "autotune") & (rows["against"] == "best_nchw")]
        assert verdicts["unseen_dispatch_vs_torch_best"]["met"] == bool(
            (dispatch["ratio"] >= 0.97).all())
        assert sorted(verdicts["unseen_dispatch_vs_torch_best"]["failing"]) == sorted(
            dispatch.loc[dispatch["ratio"] < 0.97, "geometry"])
        assert verdicts["unseen_autotune_vs_best"]["met"] == bool(
            (autotune["ratio"] >= 1 / 1.05).all())
        assert verdicts["unseen_dispatch_vs_torch_best"]["checked"] == \
            len(section["unseen"]["details"])
    for name in HELD:
        for t in section[name]["targets"]:
            # The sentence states the target and the verdict the data give.
            assert t["statement"].startswith(f"Target: {t['target']}. ")
            assert ("Not met" in t["statement"]) != t["met"]


def test_the_probes_page_lists_the_tables_and_the_verdicts(probe_repo):
    plan = probe_plan(probe_repo, {"mode": "replay", "record": PROBE_RECORD.name,
                                   "device": DEVICE})
    section = _section(probe_repo, plan)
    page = unpacked_page(probes_page(section, {"statement": "replayed"}))
    for name in HELD:
        entry = section[name]
        assert entry["source"]["path"] in page and entry["source"]["sha256"] in page
        for t in entry["targets"]:
            assert t["statement"].replace("'", "&#x27;") in page
    if "overhead" in HELD:
        for shape_id, s in section["overhead"]["shapes"].items():
            row = page.split(f"<td>{shape_id}</td>", 1)[1].split("</tr>", 1)[0]
            assert f"{s['host_us_per_call']['op']:.2f}" in row
            assert f"{s['host_us_per_call']['torch']:.2f}" in row
            assert f"{s['graph_device']['op_minus_kernel_us']:+.3f}" in row
    if "unseen" in HELD:
        for r in section["unseen"]["summary"]:
            if r["against"] == "torch_best_nchw":
                row = page.split(f"<td>{r['geometry']}</td>", 1)[1].split("</tr>", 1)[0]
                assert f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" in row
    for name in set(PROBES) - set(HELD):
        assert section[name]["reason"].replace("'", "&#x27;") in page
    assert f"{len(HELD)} of {len(PROBES)} measured here" in page


# --- the network probe (no committed record holds it yet): synthetic samples, test input -------

def _samples(network: str, means: dict, boundaries=("graph_device", "sync_api")) -> pd.DataFrame:
    rng = np.random.default_rng(len(network))
    return pd.DataFrame([{"shape_id": network, "implementation": impl, "boundary": b,
                          "batch": batch, "sample": s, "latency_us": mean * rng.lognormal(0, 0.01),
                          "clock_flagged": False, "process": 0}
                         for impl, (mean_graph, mean_eager) in means.items()
                         for b, mean in zip(boundaries, (mean_graph, mean_eager))
                         for batch in range(6) for s in range(4)])


def test_the_network_target_and_table_come_from_the_probes_summary():
    from groupconv_atlas.study.probes.networks import network_lines, summarize_networks
    from groupconv_atlas.study.statistics.stats import StatsConfig

    # a: converted faster in the graph, slower eager (the target fails there); b: faster in
    # both; c: slower in the graph (the target does not apply to it).
    samples = pd.concat([
        _samples("a-n1", {"original": (100.0, 300.0), "converted": (80.0, 330.0)}),
        _samples("b-n8", {"original": (500.0, 600.0), "converted": (400.0, 500.0)}),
        _samples("c-n1", {"original": (100.0, 300.0), "converted": (120.0, 310.0)})])
    table = summarize_networks(samples, StatsConfig(seed=1, resamples=2000))
    details = {key: {"model": key.split("-")[0], "n": int(key.split("-n")[1]), "image": 96,
                     "convs": 52, "swapped": 17, "launches_per_replay": 1,
                     "output": {"top1_agreement": 1.0, "max_abs_difference": 2e-6,
                                "max_abs_output": 4.0}, "layers": [{"layer": "x"}]}
               for key in ("a-n1", "b-n8", "c-n1")}
    details = network_probe_document({"details": details})["details"]  # as the stats job reads
    doc = {"summary": json.loads(table.to_json(orient="records")), "details": details,
           "settings": {}, "sources": {}, "mode": "replay",
           "summary_lines": network_lines(table, details)}
    plan = {"networks": {"snakemake_target": "network_probe", "raw": "r",
                         "result": "results/x/probes/networks.json", "reason": None}}
    entry = probes_block(plan, {"networks": doc}, {"networks": "0" * 64})["networks"]
    [target] = entry["targets"]
    assert not target["met"] and target["failing"] == ["a-n1"] and target["checked"] == 2
    assert "layers" not in entry["details"]["a-n1"] and entry["summary"] == doc["summary"]
    page = probes_page({"networks": entry}, {"statement": "test input"})
    for r in doc["summary"]:
        assert f"<td>{r['network']}</td>" in page
        assert f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" in page
    assert "17 of 52" in page and "5.00e-07" in page  # swapped convs, output difference
    # Without network c and with b's eager ratio the only one checked, the target holds.
    kept = [r for r in doc["summary"] if r["network"] == "b-n8"]
    [target] = network_targets(kept)
    assert target["met"] and target["checked"] == 1
    [target] = network_targets([r for r in doc["summary"] if r["network"] == "c-n1"])
    assert target["met"] and target["checked"] == 0 and "vacuously" in target["statement"]


# --- the whole replay of the probe record ---------------------------------------------------------

# A whole committed record replayed (many minutes on 2 cores): with the per-record replays.
@pytest.mark.integration
@pytest.mark.records
def test_the_probe_record_replays_its_probes_into_atlas_json_and_the_report(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    snakemake(root, "--cores", "2", "atlas", *REPLAY)
    snakemake(root, "--cores", "1", "--report", "reports/atlas.html", *REPLAY)
    results = root / "results" / DEVICE
    probes = json.loads((results / "atlas.json").read_text())["probes"]
    assert {n for n, e in probes.items() if e["measured"]} == set(HELD)
    for name in HELD:
        output = results / PROBES[name][2]
        doc = json.loads(output.read_text())
        entry = probes[name]
        assert entry["source"] == {"path": f"results/{DEVICE}/{PROBES[name][2]}",
                                   "sha256": sha256_file(output)}
        figures = ("shapes",) if name == "overhead" else ("summary",)
        assert all(entry[k] == doc[k] for k in figures)
    for name in set(PROBES) - set(HELD):
        assert probes[name]["status"] == "not measured"
        assert f"record {PROBE_RECORD.name}" in probes[name]["reason"]
    page = unpacked_page((results / "report" / "probes.html").read_text())
    for name in HELD:
        for t in probes[name]["targets"]:
            assert t["statement"].replace("'", "&#x27;") in page
    bundle = (root / "reports" / "atlas.html").read_text()
    assert "probes.html" in bundle
    complete = json.loads((results / "provenance-complete.json").read_text())
    indexed = {e["path"] for e in complete["artifacts"]}
    assert f"results/{DEVICE}/report/probes.html" in indexed
    assert all(f"results/{DEVICE}/{PROBES[n][2]}" in indexed for n in HELD)
    snakemake(root, "verify_provenance", *REPLAY)
