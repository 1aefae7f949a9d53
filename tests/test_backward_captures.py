"""tools/backward_captures.py off the GPU: what it refuses before capturing, and its table of a
pass's captures read with the Nsight page's reader (a committed capture as the pass's)."""
import importlib.util
import shutil

import pandas as pd
import pytest

from groupconv.files import REPO_ROOT
from nsight_helpers import CAPTURE, DEPTHWISE


def _tool():
    path = REPO_ROOT / "tools" / "backward_captures.py"
    spec = importlib.util.spec_from_file_location("backward_captures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_capture_of_an_unknown_pass_or_shape_is_refused_naming_it(tmp_path):
    shapes = REPO_ROOT / "records" / "h200-2026-12-04b-passes" / "raw" / "shapes.json"
    tool = _tool()
    with pytest.raises(SystemExit, match="the pass must be one of input_grad, weight_grad"):
        tool.capture(str(shapes), tmp_path, ["forward:x:wg_nhwc"])
    with pytest.raises(SystemExit, match="no shape 'no-such-shape'"):
        tool.capture(str(shapes), tmp_path, ["weight_grad:no-such-shape:wg_nhwc"])
    assert not list(tmp_path.glob("*.ncu-rep"))


def test_the_table_names_each_capture_by_pass_shape_and_implementation(tmp_path, capsys):
    shutil.copy(CAPTURE, tmp_path / f"weight_grad__{DEPTHWISE}__torch_tuned_nhwc.ncu-rep")
    assert _tool().main(["table", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "captures.csv")
    assert table[["pass", "shape_id", "implementation"]].drop_duplicates().values.tolist() == [
        ["weight_grad", DEPTHWISE, "torch_tuned_nhwc"]]
    assert (table["duration_ns"] > 0).all() and table["kernel"].notna().all()
    assert "weight_grad" in capsys.readouterr().out


def test_without_a_command_it_prints_its_usage(capsys):
    assert _tool().main([]) == 2
    assert "backward_captures.py capture" in capsys.readouterr().err


def test_bytes_reads_a_committed_capture_table_against_the_pass_s_least_read(capsys):
    """The weight gradient's captures on the H100 passes record: cuDNN's channels_last kernel
    reads x and dY once (1.00x the least), the custom strips 1.2x on the 128-channel maps, where
    it loses; at its own bandwidth the least bytes would take less than cuDNN's time."""
    record = REPO_ROOT / "records" / "h100-2026-12-06-passes"
    csv = record / "device-logs" / "wgrad-nsight" / "captures.csv"
    shapes = record / "raw" / "shapes.json"
    frame = _tool().read_bytes(str(csv), str(shapes)).set_index(["shape_id", "implementation"])
    wide = "mobilenetv1-n64-c128-56x56-g128"
    assert frame.loc[(wide, "torch_tuned_nhwc"), "read_over_least"] == pytest.approx(1.0, abs=0.01)
    ours = frame.loc[(wide, "wg_nhwc")]
    assert ours["read_over_least"] == pytest.approx(1.211, abs=0.001)
    assert ours["duration_us"] > frame.loc[(wide, "torch_tuned_nhwc"), "duration_us"] \
        > ours["least_at_that_rate_us"]
    assert _tool().main(["bytes", str(csv), str(shapes)]) == 0
    assert "read_over_least" in capsys.readouterr().out
