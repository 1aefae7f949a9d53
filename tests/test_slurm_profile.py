"""profiles/slurm asks a GPU of the model for every rule that declares one, and for no other rule
(no cluster needed: the rule files and the profile are read)."""
from slurm_profile import gpu_rules, profile_gpu_rules


def test_the_rule_files_declare_gpu_rules():
    found = gpu_rules()
    # the forward study's GPU stages are among them whatever else is added
    assert {"build_kernel", "verify", "time_job"} <= found, sorted(found)
    assert None not in found


def test_the_profile_names_every_gpu_rule_and_only_those():
    declared, profiled = gpu_rules(), profile_gpu_rules()
    assert set(profiled) == declared, {"missing": sorted(declared - set(profiled)),
                                       "not a GPU rule": sorted(set(profiled) - declared)}
    for rule, given in profiled.items():
        assert given.get("gpu_model"), rule
