"""Which backward dispatch table the network probe's converted models train with (CPU): the run's
own where it measured the passes, else the package's for the GPU, else none."""
import json

from groupconv.packaged_tables import TABLES_DIR, load_packaged
from groupconv_atlas.study.probes.networks import probe_backward_table

H200 = "NVIDIA H200"


def test_the_runs_own_table_comes_first(tmp_path):
    table = {"input_grad": {"nchw": {"s": {"implementation": "ig_nchw", "median_us": 1.0,
                                           "geometry": [1, 8, 8, 4, 4, 8], "reason": "r"}}},
             "weight_grad": {}}
    path = tmp_path / "backward.json"
    path.write_text(json.dumps({"boundary": "graph_device", "passes": table}))
    tuning = tmp_path / "wg_nhwc.json"
    tuning.write_text(json.dumps({"layout": "nhwc", "choices": {"s": {
        "geometry": [1, 8, 8, 4, 4, 8], "keywords": {"vec": 2, "rows": 4}}}}))
    got, cuts, source = probe_backward_table(str(path), H200, run_tunings=[str(tuning)])
    assert got == {("input_grad", "nchw", (1, 8, 8, 4, 4, 8)): "ig_nchw"}
    assert cuts == {("nhwc", (1, 8, 8, 4, 4, 8)): {"vec": 2, "rows": 4}}
    assert source == "this run's (backward.json)"


def test_without_one_the_packages_table_for_the_gpu_is_taken():
    got, cuts, source = probe_backward_table(None, H200)
    packaged = load_packaged(H200)
    assert got == packaged["tables"]["backward_dispatch"] and got
    assert cuts == (packaged["tables"].get("wgrad_tunings") or {})
    assert source == (f"the package's (nvidia-h200.json, record "
                      f"{packaged['backward_record']['record']})")
    assert (TABLES_DIR / "nvidia-h200.json").is_file()


def test_a_gpu_the_package_has_no_table_for_trains_with_pytorchs_backward(tmp_path):
    got, cuts, source = probe_backward_table(None, "NVIDIA H200", tables_folder=tmp_path)
    assert got == {} and cuts == {} and source.startswith("none: every pass PyTorch's")
