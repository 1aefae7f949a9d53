"""The one precision switch (groupconv/precision.py), on the CPU: strict_fp32 switches TF32 off and
records the API it used, set_conv_tf32 turns it on and off through the same API, the C-level
accessors the op's PyTorch path uses read what the switch wrote; and no other module of the
package writes a TF32 setting (the switch is written once)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from groupconv import precision  # noqa: E402

PACKAGE = Path(precision.__file__).resolve().parents[1]
# An assignment to a TF32 setting: the properties of either API, or PyTorch's C-level setters.
WRITES_TF32 = re.compile(r"(allow_tf32|fp32_precision)\s*=(?!=)|_set_cudnn_allow_tf32\b|"
                         r"_set_fp32_precision_setter\b")


@pytest.fixture
def restored():
    """The process's TF32 settings back after the test, whichever API it has."""
    get, set_, _ = precision.conv_tf32_accessors(torch)
    saved = get()
    yield
    set_(saved)


def test_strict_fp32_switches_tf32_off_and_records_the_api(restored):
    precision.set_conv_tf32(torch, True)
    get, _, strict = precision.conv_tf32_accessors(torch)
    assert get() != strict
    recorded = precision.strict_fp32(torch)
    assert recorded["tf32"] is False and recorded["api"] in ("fp32_precision", "allow_tf32")
    assert get() == strict


def test_the_accessors_read_what_the_switch_wrote(restored):
    get, set_, strict = precision.conv_tf32_accessors(torch)
    precision.set_conv_tf32(torch, False)
    assert get() == strict
    precision.set_conv_tf32(torch, True)
    assert get() != strict
    set_(strict)
    assert get() == strict
    set_(precision.conv_tf32_value(torch, True))  # the TF32 reference's own call
    assert get() != strict
    precision.set_conv_tf32(torch, False)
    assert get() == strict == precision.conv_tf32_value(torch, False)


def test_no_other_module_writes_a_tf32_setting():
    writers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                     if WRITES_TF32.search(path.read_text()))
    assert writers == ["groupconv/precision.py"], writers
