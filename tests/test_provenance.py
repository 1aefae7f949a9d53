"""Hashes, atomic writes and job records."""
import hashlib
import json

import pandas as pd
import pytest

from groupconv.files import sha256_file
from groupconv_atlas.study.records.provenance import (atomic_path, job_record, write_json,
                                                      write_parquet)
from groupconv_atlas.study.records.provenance_index import (ProvenanceMismatch,
                                                            build_complete_index, build_index,
                                                            producing_jobs, verify_index)


def test_sha256_file_matches_hashlib(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"x" * 3_000_000)
    assert sha256_file(p) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_atomic_write_leaves_nothing_when_the_writer_fails(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"half": ')
            raise RuntimeError("killed mid-write")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_the_old_file_until_the_new_one_is_complete(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"v": 1})
    with pytest.raises(ValueError):
        write_json(target, {"v": float("nan")})  # not JSON: refused before the rename
    assert json.loads(target.read_text()) == {"v": 1}


def test_write_json_is_canonical(tmp_path):
    write_json(tmp_path / "a.json", {"b": 1, "a": [1.5, 2]})
    write_json(tmp_path / "b.json", {"a": [1.5, 2], "b": 1})
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_job_record_hashes_inputs_outputs_and_code(tmp_path):
    inp, out, code = tmp_path / "in.txt", tmp_path / "out.parquet", tmp_path / "code.py"
    inp.write_text("input")
    code.write_text("print(1)")
    write_parquet(out, pd.DataFrame({"a": [1, 2]}))
    rec = job_record("rule_x", {"k": "v"}, [inp], [out], {"p": 1}, [code], "t0")
    assert rec["inputs"][0]["sha256"] == sha256_file(inp)
    assert rec["outputs"][0]["sha256"] == sha256_file(out)
    assert rec["code"][0]["sha256"] == sha256_file(code)
    for key in ("git", "environment", "started_utc", "finished_utc", "params"):
        assert key in rec
    assert {"python", "snakemake", "nvcc", "torch", "pycuda"} <= set(rec["environment"])


def test_provenance_index_catches_a_flipped_byte(tmp_path):
    art = tmp_path / "atlas.json"
    art.write_text('{"x": 1}')
    prov = tmp_path / "job.json"
    prov.write_text(json.dumps({"rule": "assemble", "wildcards": {},
                                "outputs": [{"path": str(art)}]}))
    index = build_index([str(prov)], [str(art)], "replay", None)
    assert index["artifacts"][0]["rule"] == "assemble"
    write_json(tmp_path / "provenance.json", index)
    assert verify_index(tmp_path / "provenance.json") == 2  # the artifact and its job record
    data = bytearray(art.read_bytes())
    data[2] ^= 0x01
    art.write_bytes(bytes(data))
    with pytest.raises(ProvenanceMismatch, match="atlas.json"):
        verify_index(tmp_path / "provenance.json")


def test_launcher_commit_wins_over_a_copied_trees_git(monkeypatch):
    from groupconv_atlas.study.records.provenance import git_state

    monkeypatch.setenv("GROUPCONV_GIT_COMMIT", "a" * 40)
    state = git_state()
    assert state["commit"] == "a" * 40 and state["dirty"] is False
    assert "local_git" in state  # what the copy's own .git said stays visible
    monkeypatch.delenv("GROUPCONV_GIT_COMMIT")
    assert "local_git" not in git_state()


def _job(folder, rule, inputs, outputs, wildcards=None):
    """A job record as jobs.Job writes it, for the files given (written first)."""
    for path in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{rule} wrote {path.name}")
    rec = job_record(rule, wildcards or {}, inputs, outputs, {}, [], "t0")
    write_json(folder / f"{rule}.json", rec)
    return folder / f"{rule}.json"


def test_complete_index_follows_job_records_back_from_the_targets(tmp_path):
    """Pages, the tables behind them and the record files read are indexed; a stale job record
    that leads to no target is not."""
    jobs = tmp_path / "provenance"
    record = tmp_path / "records" / "r1" / "raw" / "timing.parquet"
    record.parent.mkdir(parents=True)
    record.write_text("samples")
    table, page = tmp_path / "nsight.parquet", tmp_path / "report" / "nsight.html"
    _job(jobs, "nsight_table", [record], [table])
    _job(jobs, "report_nsight", [table], [page])
    _job(jobs, "stale", [], [tmp_path / "old.svg"])
    found = producing_jobs([str(page)], [str(jobs)])
    assert [p.rsplit("/", 1)[1] for p in found] == ["nsight_table.json", "report_nsight.json"]
    index = build_complete_index([str(page)], [str(jobs)], [], "replay", None, own={})
    rules = {e["path"]: e["rule"] for e in index["artifacts"]}
    assert rules[str(page)] == "report_nsight" and rules[str(table)] == "nsight_table"
    assert str(tmp_path / "old.svg") not in rules
    write_json(tmp_path / "complete.json", index)
    assert verify_index(tmp_path / "complete.json") == 4  # page, table and both job records
    (jobs / "report_nsight.json").write_text("{}")  # a job record rewritten is caught too
    with pytest.raises(ProvenanceMismatch, match="report_nsight.json"):
        verify_index(tmp_path / "complete.json")
