"""tools/same_machine_code.py: whether the tree's kernel sources compile to the machine code a
record measured. Fast: the comparison on planted differences, in SASS text and in two tiny
kernels compiled with the build stage's flags. Integration: every kernel of the tree against
the newest record's cubins (compiles all ten, about a minute on 2 cores)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import machine_code_tools_missing

from groupconv import build
from groupconv_atlas.study.probes import machine_code_identity as smc
from groupconv_atlas.study.probes import sass

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "same_machine_code.py"



def code(sass_text: str, resources: str = "", elf: str = "") -> dict:
    return {"sass": smc.split_sass(sass_text), "resources": smc.split_resources(resources),
            "attributes": smc.split_attributes(elf)}


SASS = """
	code for sm_90
		Function : demo
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;          /* 0x00000a00ff017b82 */
                                                                   /* 0x000fe20000000800 */
        /*0010*/                   FFMA R2, R3, R4, R2 ;           /* 0x0000000403027223 */
                                                                   /* 0x000fe20000000002 */
        /*0020*/                   EXIT ;                          /* 0x000000000000794d */
                                                                   /* 0x000fea0003800000 */
		Function : other
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   EXIT ;                          /* 0x000000000000794d */
                                                                   /* 0x000fea0003800000 */
"""
RESOURCES = """
Resource usage:
 Common:
  GLOBAL:0
 Function demo:
  REG:40 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:596 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function other:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:528 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
ELF = """
.nv.info.demo
	<0x1>
	Attribute:	EIATTR_MAX_THREADS
	Format:	EIFMT_SVAL
	Value:	0x100 0x1 0x1
	<0x2>
	Attribute:	EIATTR_PARAM_CBANK
	Format:	EIFMT_SVAL
	Value:	0xe 0x440210

.nv.callgraph
 <0,-1>
"""


def test_the_same_code_is_identical_and_the_padding_of_lines_does_not_count():
    assert smc.first_difference(code(SASS, RESOURCES, ELF), code(SASS, RESOURCES, ELF)) is None
    # cuobjdump pads every line to the function's longest instruction
    repadded = SASS.replace("LDC R1, c[0x0][0x28] ;    ", "LDC R1, c[0x0][0x28] ;")
    assert smc.first_difference(code(SASS), code(repadded)) is None


def test_a_changed_instruction_names_its_function_and_line():
    planted = SASS.replace("FFMA R2, R3, R4, R2 ;           /* 0x0000000403027223 */",
                           "FFMA R2, R4, R3, R2 ;           /* 0x0000000304027223 */")
    found = smc.first_difference(code(SASS), code(planted))
    assert found is not None and found.startswith("demo: sass line 4:")
    assert "FFMA R2, R3, R4, R2" in found and "FFMA R2, R4, R3, R2" in found


def test_a_changed_control_word_differs():
    """The second comment of an instruction is its scheduling control (stalls, barriers)."""
    planted = SASS.replace("/* 0x000fe20000000002 */", "/* 0x000fc40000000002 */")
    assert smc.first_difference(code(SASS), code(planted)).startswith("demo: sass line 5:")


def test_a_function_on_one_side_only_differs():
    without_other = SASS[:SASS.index("\t\tFunction : other")]
    assert smc.first_difference(code(SASS), code(without_other)) == \
        "other: in the record's cubin, not built from the tree"
    assert smc.first_difference(code(without_other), code(SASS)) == \
        "other: built from the tree, not in the record's cubin"


def test_a_tree_that_only_adds_functions_extends_the_record():
    """New entries beside the record's unchanged ones: the record's measurements stand (it never
    ran the new ones); a changed recorded function still differs, whatever was added."""
    without_other = SASS[:SASS.index("\t\tFunction : other")]
    assert smc.compare_code(code(SASS), code(SASS)) == ("identical", "")
    verdict, detail = smc.compare_code(code(without_other), code(SASS))
    assert verdict == "extends" and "1 functions identical, 1 added" in detail
    assert "(first other)" in detail
    changed = SASS.replace("FFMA R2, R3, R4, R2", "FFMA R2, R3, R5, R2")
    assert smc.compare_code(code(without_other), code(changed))[0] == "differs"
    assert smc.compare_code(code(SASS), code(without_other))[0] == "differs"  # one removed
    assert smc.exit_status([{"verdict": "extends"}, {"verdict": "identical"}]) == 0


def test_resources_and_launch_attributes_count_the_parameter_section_index_does_not():
    more_registers = RESOURCES.replace("REG:40", "REG:48")
    assert smc.first_difference(code(SASS, RESOURCES), code(SASS, more_registers)) \
        .startswith("demo: resources line 1:")
    other_bounds = ELF.replace("0x100 0x1 0x1", "0x80 0x1 0x1")
    assert smc.first_difference(code(SASS, RESOURCES, ELF), code(SASS, RESOURCES, other_bounds)) \
        .startswith("demo: attributes line 4:")
    # the section holding the parameters moves when -lineinfo adds a debug section; their size
    # and offset (the second value) do not move
    moved = ELF.replace("0xe 0x440210", "0xf 0x440210")
    assert smc.first_difference(code(SASS, RESOURCES, ELF), code(SASS, RESOURCES, moved)) is None
    resized = ELF.replace("0xe 0x440210", "0xe 0x480210")
    assert smc.first_difference(code(SASS, RESOURCES, ELF), code(SASS, RESOURCES, resized)) \
        is not None


KERNEL = """
{helper}
extern "C" __global__ void __launch_bounds__(256) scale(const float* __restrict__ x,
                                                       float* __restrict__ y, int n) {{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {expression};
}}
"""
HELPER = "__device__ __forceinline__ float twice(float v) { return v * 2.0f; }"


def compiled(folder: Path, expression: str, helper: str = "") -> Path:
    folder.mkdir(parents=True)
    source = folder / "scale.cu"
    source.write_text(KERNEL.format(helper=helper, expression=expression))
    build.compile_kernel_source(source, folder / "scale.cubin", arch=build.DEFAULT_ARCH)
    return folder / "scale.cubin"


@pytest.mark.skipif(machine_code_tools_missing() is not None,
                    reason=str(machine_code_tools_missing()))
def test_compiled_kernels_differ_only_where_their_code_does(tmp_path):
    """The same source built in another folder, or with its expression moved into an inlined
    helper (which adds a debug section and moves the parameters' section index), is the same
    machine code though the cubins' bytes differ; a changed constant is not."""
    first = compiled(tmp_path / "a", "x[i] * 2.0f")
    recorded = smc.machine_code(first)
    elsewhere = compiled(tmp_path / "elsewhere" / "b", "x[i] * 2.0f")
    inlined = compiled(tmp_path / "c", "twice(x[i])", HELPER)
    changed = compiled(tmp_path / "d", "x[i] * 3.0f")
    assert elsewhere.read_bytes() != first.read_bytes()  # the line table names the folder
    assert smc.first_difference(recorded, smc.machine_code(elsewhere)) is None
    assert inlined.read_bytes() != first.read_bytes()
    assert smc.first_difference(recorded, smc.machine_code(inlined)) is None
    found = smc.first_difference(recorded, smc.machine_code(changed))
    assert found is not None and found.startswith("scale: sass line ")


@pytest.mark.integration
@pytest.mark.skipif(machine_code_tools_missing() is not None,
                    reason=str(machine_code_tools_missing()))
def test_the_tree_compiles_to_the_newest_records_machine_code():
    """Every kernel source of the tree compiles to the machine code of the newest record's
    cubins, so that record's measurements are those of the tree's kernels. A kernel edit meant to
    change the code fails here until a record measures it; one not meant to (a refactor) must
    pass. Another nvcc than the record's cannot say: skipped with the tool's reason."""
    res = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True,
                         check=False, cwd=ROOT)
    if res.returncode == 2:
        pytest.skip(res.stdout + res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()[1:]
    assert lines and all(": identical (" in line or ": extends: " in line or "not in record" in line
                         for line in lines), res.stdout


def _drift_fixture(tmp_path):
    """A tree with k0's source and a record whose k0 build hashed an older source and header."""
    from groupconv.files import sha256_file
    from groupconv_atlas.study.records.record_writing import snapshot

    tree = tmp_path / "tree"
    (tree / "kernels").mkdir(parents=True)
    (tree / "kernels" / "k0_direct.cu").write_text("// recorded\n")
    (tree / "kernels" / "common.cuh").write_text("// header\n")
    results = tmp_path / "results"
    (results / "raw" / "builds").mkdir(parents=True)
    (results / "provenance").mkdir()
    (results / "shapes.json").write_text('{"sha256": "x"}')
    (results / "raw" / "builds" / "k0.json").write_text(json.dumps({
        "kernel": "k0", "source": "kernels/k0_direct.cu",
        "source_sha256": sha256_file(tree / "kernels" / "k0_direct.cu"),
        "header_sha256": {"kernels/common.cuh": sha256_file(tree / "kernels" / "common.cuh")}}))
    snapshot(results, tmp_path / "records" / "dev-1", "dev", {})
    return tree, tmp_path / "records" / "dev-1"


def _identical(tree, files):
    from groupconv.files import sha256_file
    return [{"kernel": "k0", "verdict": "identical", "detail": "", "functions": 1,
             "files": {rel: sha256_file(tree / rel) for rel in files}}]


def test_a_vouched_refactor_is_not_drift_and_a_later_edit_is(tmp_path):
    from groupconv_atlas.study.records.record_check import check, recorded_sources, source_drift

    tree, record = _drift_fixture(tmp_path)
    assert source_drift(record, tree) == []
    (tree / "kernels" / "k0_direct.cu").write_text("// refactored, same machine code\n")
    (tree / "kernels" / "stage.cuh").write_text("// a header the record's build did not have\n")
    assert [d["file"] for d in source_drift(record, tree)] == ["kernels/k0_direct.cu"]

    files = ["kernels/k0_direct.cu", "kernels/common.cuh", "kernels/stage.cuh"]
    smc.vouch(record, _identical(tree, files), "nvcc 13.0")
    assert check(record)["amendments"][0]["files"] == ["raw/same_machine_code.json"]
    assert source_drift(record, tree) == []
    assert "kernels/stage.cuh" in recorded_sources(record, tree)  # an edit reruns the check

    (tree / "kernels" / "stage.cuh").write_text("// edited after the vouch\n")
    assert [(d["file"], d["recorded_sha256"]) for d in source_drift(record, tree)] == \
        [("kernels/stage.cuh", None)]
    (tree / "kernels" / "k0_direct.cu").write_text("// recorded\n")  # back to the record's bytes
    assert "kernels/k0_direct.cu" not in {d["file"] for d in source_drift(record, tree)}


def test_nothing_is_vouched_unless_every_kernel_is_identical(tmp_path):
    tree, record = _drift_fixture(tmp_path)
    results = _identical(tree, ["kernels/k0_direct.cu"])
    results.append({"kernel": "k1", "verdict": "differs", "detail": "k1: sass line 3",
                    "functions": 0, "files": {}})
    manifest = (record / "record.json").read_bytes()
    with pytest.raises(ValueError, match="nothing vouched"):
        smc.vouch(record, results, "nvcc 13.0")
    assert not (record / "raw" / "same_machine_code.json").exists()
    assert (record / "record.json").read_bytes() == manifest
    results[1]["verdict"] = "cannot compare"
    assert smc.exit_status(results) == 2
    with pytest.raises(ValueError):
        smc.vouch(record, results, "nvcc 13.0")
