"""What the SLURM profile must cover: the rules that declare `resources: gpu=1`, read from the rule
files (so a new GPU rule without the profile's GPU request fails a test rather than a cluster job
that sbatch sends to a CPU node)."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULE = re.compile(r"^\s*(?:local)?rule (\w+):")


def gpu_rules() -> set[str]:
    rules, current = set(), None
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for line in path.read_text().splitlines():
            if m := RULE.match(line):
                current = m.group(1)
            elif re.search(r"\bgpu=1\b", line) and not line.lstrip().startswith("#"):
                rules.add(current)
    return rules


def profile_gpu_rules() -> dict[str, dict]:
    """The rules the profile's set-resources names, with what it asks for each."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    return profile["set-resources"]
