"""Hashes, atomic writes and job records."""
import hashlib
import json

import pandas as pd
import pytest

from groupconv_atlas.provenance import (atomic_path, job_record, sha256_file, write_json,
                                        write_parquet)
from groupconv_atlas.provenance_index import ProvenanceMismatch, build_index, verify_index


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
    assert verify_index(tmp_path / "provenance.json") == 1
    data = bytearray(art.read_bytes())
    data[2] ^= 0x01
    art.write_bytes(bytes(data))
    with pytest.raises(ProvenanceMismatch, match="atlas.json"):
        verify_index(tmp_path / "provenance.json")


def test_launcher_commit_wins_over_a_copied_trees_git(monkeypatch):
    from groupconv_atlas.provenance import git_state

    monkeypatch.setenv("GROUPCONV_GIT_COMMIT", "a" * 40)
    state = git_state()
    assert state["commit"] == "a" * 40 and state["dirty"] is False
    assert "local_git" in state  # what the copy's own .git said stays visible
    monkeypatch.delenv("GROUPCONV_GIT_COMMIT")
    assert "local_git" not in git_state()
