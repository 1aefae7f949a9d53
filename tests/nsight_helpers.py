"""What the Nsight Compute tests share (tests/test_nsight.py, tests/test_nsight_table.py): the
real captures and the shapes they name.

tests/fixtures/ncu/ holds real output from the H200 machine (copied from
shared/fixtures/h200-probe): cap.ncu-rep is one launch of PyTorch's conv_depthwise2d_forward_kernel
(default sections), ncu.csv is `ncu --csv --page raw` of a run with two randn kernels and three
depthwise convolutions."""
from pathlib import Path

from groupconv.files import REPO_ROOT
from groupconv_atlas.study.plans.shapes_table import load_shapes, shapes_by_id

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
CAPTURE = FIXTURES / "cap.ncu-rep"
SHAPES = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
BY_ID = shapes_by_id(SHAPES)
DEPTHWISE = "mobilenetv2-n32-c32-112x112-g32"
CPG8 = "regnety-400mf-n32-c48-56x56-g6"  # 8 input channels per group: k2 does not apply
