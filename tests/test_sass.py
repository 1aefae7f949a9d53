"""SASS parsing on committed dumps, and the machine-code table.

tests/fixtures/sass/<kernel>.sass is `cuobjdump -sass` (pip nvidia-cuda-cuobjdump 13.5 with
nvidia-cuda-nvdisasm) of the cubin that groupconv.build.compile_kernel made with nvcc 13.0
for sm_90; <kernel>.build.json is that build's record. Regenerate both together after a kernel
edit: compile_kernel(k, "k.cubin"), json.dump(record), `cuobjdump -sass k.cubin > k.sass`.
"""
import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import machine_code_tools_missing
from groupconv_atlas.study.probes import sass
from groupconv.kernels import entries

FIXTURES = Path(__file__).parent / "fixtures" / "sass"
FIXTURE_KERNELS = ("k0", "k1", "k2", "k3")  # the kernels whose dumps are committed


def fixture_text(kernel: str) -> str:
    return (FIXTURES / f"{kernel}.sass").read_text()


def fixture_record(kernel: str) -> dict:
    return json.loads((FIXTURES / f"{kernel}.build.json").read_text())


def test_base_opcode_strips_modifiers():
    assert sass.base_opcode("LDG.E.128.CONSTANT") == "LDG"
    assert sass.base_opcode("FFMA") == "FFMA"
    assert sass.base_opcode("ISETP.GE.U32.AND") == "ISETP"


def test_parse_strips_predicates_and_trailing_padding():
    text = """
        Function : demo
        /*0000*/                   LDC R1, c[0x0][0x28] ;      /* 0x00000a00ff017b82 */
                                                               /* 0x000fe20000000800 */
        /*0010*/              @!P0 BRA 0x150 ;                 /* 0x00000000002c8947 */
        /*0020*/               @P1 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0030*/                   NOP ;
        /*0040*/                   EXIT ;
        /*0050*/                   BRA 0x50;
        /*0060*/                   NOP;
        /*0070*/                   NOP;
        ..........
    """
    assert sass.parse_sass(text) == {"demo": ["LDC", "BRA", "LDG.E.128", "NOP", "EXIT", "BRA"]}


def test_every_kernel_dump_has_exactly_the_registry_entry_points():
    for kernel in FIXTURE_KERNELS:
        assert sorted(sass.parse_sass(fixture_text(kernel))) == sorted(entries(kernel)), kernel


def test_fma_counts_follow_the_unrolled_3x3_loops():
    k2 = sass.parse_sass(fixture_text("k2"))
    # k2 unrolls 9 taps for each of its C_in/groups channels: 9, 18 and 36 FFMA.
    for cpg in (1, 2, 4):
        assert sass.opcode_histogram(k2[f"k2_shared_halo_cpg{cpg}"])["FFMA"] == 9 * cpg
    # k1 unrolls the 9 taps inside its channel loop; k3 computes four outputs: 4 x 9.
    assert sass.opcode_histogram(sass.parse_sass(fixture_text("k1"))["k1_spatial"])["FFMA"] == 9
    assert sass.opcode_histogram(sass.parse_sass(fixture_text("k3"))["k3_four_wide"])["FFMA"] == 36


def test_only_the_shared_memory_kernel_uses_shared_memory_and_barriers():
    for kernel in ("k0", "k1", "k3"):
        for function, mnemonics in sass.parse_sass(fixture_text(kernel)).items():
            hist = sass.opcode_histogram(mnemonics)
            assert not {"LDS", "STS", "BAR"} & set(hist), function
    for function, mnemonics in sass.parse_sass(fixture_text("k2")).items():
        hist = sass.opcode_histogram(mnemonics)
        assert hist["BAR"] >= 1 and hist["STS"] >= 1, function
        assert hist["LDS"] == hist["FFMA"], function  # each tap is read from the shared tile


def test_kernel_table_joins_ptxas_resources_and_keeps_full_mnemonics():
    table = sass.kernel_table("k2", fixture_text("k2"), fixture_record("k2"))
    assert list(table.columns) == sass.TABLE_COLUMNS
    cpg4 = table[table.function == "k2_shared_halo_cpg4"]
    assert set(cpg4.registers_per_thread) == {31}
    assert set(cpg4.static_shared_memory_bytes) == {4 * 10 * 34 * 4}  # the staged tile, 5440 B
    assert set(cpg4.spill_store_bytes) == {0} and set(cpg4.local_memory_bytes) == {0}
    # The full mnemonic rows add up to their base opcode's count.
    ldg = cpg4[cpg4.opcode == "LDG"]
    assert ldg.mnemonic_count.sum() == ldg.opcode_count.iloc[0]
    assert "LDG.E.CONSTANT" in set(ldg.mnemonic)
    assert cpg4.mnemonic_count.sum() == cpg4.function_instructions.iloc[0]


def test_machine_code_table_of_all_kernels_round_trips_through_parquet(tmp_path):
    from groupconv_atlas.study.records.provenance import write_parquet

    table = sass.machine_code_table(
        [sass.kernel_table(k, fixture_text(k), fixture_record(k)) for k in FIXTURE_KERNELS])
    write_parquet(tmp_path / "machine_code.parquet", table)
    back = pd.read_parquet(tmp_path / "machine_code.parquet")
    assert sorted(back.function.unique()) == sorted(e for k in FIXTURE_KERNELS for e in entries(k))
    regs = back.groupby("function").registers_per_thread.first().to_dict()
    assert regs == {name: res["registers"] for k in FIXTURE_KERNELS
                    for name, res in fixture_record(k)["functions"].items()}


def test_function_missing_from_the_build_record_is_an_error():
    record = fixture_record("k2")
    del record["functions"]["k2_shared_halo_cpg2"]
    with pytest.raises(sass.SassError,
                       match="k2_shared_halo_cpg2 is in the SASS but not in the build record"):
        sass.kernel_table("k2", fixture_text("k2"), record)


def test_record_of_another_build_is_refused(tmp_path):
    cubin = tmp_path / "k1.cubin"
    cubin.write_bytes(b"not the recorded cubin")
    with pytest.raises(sass.SassError, match="does not match"):
        sass.check_record_matches("k1", cubin, fixture_record("k1"))


    return None


@pytest.mark.skipif(machine_code_tools_missing() is not None,
                    reason=str(machine_code_tools_missing()))
def test_cuobjdump_of_a_fresh_build_parses_like_the_fixture(tmp_path):
    from groupconv.build import compile_kernel

    record = compile_kernel("k2", tmp_path / "k2.cubin")
    sass.check_record_matches("k2", tmp_path / "k2.cubin", record)
    text = sass.dump_sass(tmp_path / "k2.cubin")
    table = sass.kernel_table("k2", text, record)
    assert sorted(table.function.unique()) == sorted(entries("k2"))
    ffma = table[table.opcode == "FFMA"].groupby("function").opcode_count.first().to_dict()
    assert ffma == {"k2_shared_halo_cpg1": 9, "k2_shared_halo_cpg2": 18, "k2_shared_halo_cpg4": 36}


def test_missing_cuobjdump_is_reported(monkeypatch):
    monkeypatch.setattr(sass, "_find_tool", lambda name: None)
    with pytest.raises(sass.SassError, match="cuobjdump not found"):
        sass.find_cuobjdump()
