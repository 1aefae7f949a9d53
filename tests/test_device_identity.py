"""A record is named for the GPU that made it: the device key read from the GPU's own name, and a
configured device that names another GPU refused before anything is measured (the ceilings job
calls check_device first). CPU only: the names are the strings the driver reports."""
import pytest

from groupconv.sessions import check_device, device_key


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA H100 NVL", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA L40S", "l40s")])
def test_the_key_comes_from_the_model_in_the_gpu_s_name(name, key):
    assert device_key(name) == key


def test_a_configured_device_naming_another_gpu_is_refused_naming_both():
    with pytest.raises(ValueError) as err:
        check_device("h200", "NVIDIA H100 80GB HBM3")
    message = str(err.value)
    assert "'h200'" in message and "NVIDIA H100 80GB HBM3" in message and "device=h100" in message


def test_a_suffix_after_the_key_is_the_configuration_s_own():
    assert check_device("h200-smoke", "NVIDIA H200") == "h200"
    assert check_device("h100", "NVIDIA H100 80GB HBM3") == "h100"


def test_a_name_without_a_model_number_is_refused():
    with pytest.raises(ValueError, match="no model number"):
        device_key("NVIDIA Graphics Device")
