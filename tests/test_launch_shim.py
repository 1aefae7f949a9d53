"""The per-call launch path on a machine without a GPU: the C launch shim (launch_shim.c) is
compiled with the machine's C compiler, and a LaunchPlan's `launch3` hands the driver's launch
entry exactly what the ctypes path hands it (function, grid, block, stream, the three pointers
and the scalars packed once). The driver is replaced by a recording C-callable stand-in."""
from __future__ import annotations

import ctypes

import pytest

from groupconv import launch

VP, UINT = ctypes.c_void_p, ctypes.c_uint
LAUNCH_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, VP, UINT, UINT, UINT, UINT, UINT, UINT, UINT, VP,
                                ctypes.POINTER(VP), ctypes.POINTER(VP))
FORMAT = "PPPiiiiii"
SCALARS = (2, 8, 16, 5, 7, 8)


class _RecordingDriver:
    """What LaunchPlan takes from launch.driver(): the launch entry (here a C callback that
    records its arguments and reads the kernel parameters the way the driver would) and check."""

    def __init__(self, result: int = 0):
        self.calls, self.result = [], result

        def entry(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointers = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64))[0]
                        for i in range(3)]
            scalars = [ctypes.cast(params[3 + i], ctypes.POINTER(ctypes.c_int))[0]
                       for i in range(len(SCALARS))]
            self.calls.append({"function": function, "dims": (gx, gy, gz, bx, by, bz),
                               "shared": shared, "stream": stream, "pointers": pointers,
                               "scalars": scalars, "extra": bool(extra)})
            return self.result

        self.launch = LAUNCH_PROTO(entry)

        class _Lib:
            cuLaunchKernel = self.launch

        self.lib = _Lib()

    def check(self, result, call):
        if result:
            raise launch.CudaError(f"{call} failed: ({result})")


@pytest.fixture
def fresh_shim(tmp_path, monkeypatch):
    """The shim built into an empty cache, and the module's memo of it reset (and restored)."""
    monkeypatch.setenv("GROUPCONV_CACHE", str(tmp_path))
    monkeypatch.setattr(launch, "_SHIM", None)
    monkeypatch.setattr(launch, "_SHIM_TRIED", False)
    return tmp_path


def _plan(monkeypatch, driver) -> launch.LaunchPlan:
    monkeypatch.setattr(launch, "_DRIVER", driver)
    return launch.LaunchPlan(0xF00D, (3, 1, 1), (256, 1, 1), FORMAT, "k_test", SCALARS)


def test_the_shim_compiles_into_the_cache_and_loads(fresh_shim):
    module = launch.shim()
    assert module is not None, "the C shim did not build: see the warning logged"
    assert launch.launch_mechanism() == "c shim"
    built = list((fresh_shim / "host").rglob(launch.SHIM_MODULE + "*"))
    assert len(built) == 1 and built[0].stat().st_size > 0


@pytest.mark.parametrize("mechanism", ["c shim", "ctypes"])
def test_launch3_hands_the_driver_the_plan_and_the_call_s_pointers(mechanism, fresh_shim,
                                                                   monkeypatch):
    if mechanism == "ctypes":
        monkeypatch.setenv("GROUPCONV_LAUNCH_SHIM", "0")
    driver = _RecordingDriver()
    plan = _plan(monkeypatch, driver)
    assert launch.launch_mechanism() == mechanism
    plan.launch3(0xABC0, 0x1000, 0x2000, 0x3000)
    plan.launch3(0xABC0, 0x1100, 0x2200, 0x3300)  # a second call: only the pointers change
    assert [c["pointers"] for c in driver.calls] == [[0x1000, 0x2000, 0x3000],
                                                     [0x1100, 0x2200, 0x3300]]
    for call in driver.calls:
        assert call["function"] == 0xF00D and call["stream"] == 0xABC0
        assert call["dims"] == (3, 1, 1, 256, 1, 1) and call["shared"] == 0
        assert call["scalars"] == list(SCALARS) and not call["extra"]


@pytest.mark.parametrize("mechanism", ["c shim", "ctypes"])
def test_launch3_outlives_its_plan_object(mechanism, fresh_shim, monkeypatch):
    """conv2d keeps only a plan's launch3: the memory the shim writes into (the parameter
    array, the pointer slots) must live as long as that function."""
    import gc

    if mechanism == "ctypes":
        monkeypatch.setenv("GROUPCONV_LAUNCH_SHIM", "0")
    driver = _RecordingDriver()
    enqueue = _plan(monkeypatch, driver).launch3
    gc.collect()
    for i in range(50):  # churn the allocator over the plan's old memory
        ctypes.create_string_buffer(64)
        enqueue(0x10 + i, 0x1000 + i, 0x2000 + i, 0x3000 + i)
    assert [c["pointers"] for c in driver.calls] == [[0x1000 + i, 0x2000 + i, 0x3000 + i]
                                                     for i in range(50)]
    assert all(c["scalars"] == list(SCALARS) for c in driver.calls)


@pytest.mark.parametrize("mechanism", ["c shim", "ctypes"])
def test_a_refused_launch_raises_naming_the_entry(mechanism, fresh_shim, monkeypatch):
    if mechanism == "ctypes":
        monkeypatch.setenv("GROUPCONV_LAUNCH_SHIM", "0")
    plan = _plan(monkeypatch, _RecordingDriver(result=1))
    with pytest.raises(launch.CudaError, match=r"cuLaunchKernel\(k_test\)"):
        plan.launch3(0, 1, 2, 3)


def test_the_shim_refuses_a_wrong_call(fresh_shim):
    module = launch.shim()
    with pytest.raises(TypeError, match="5 integers"):
        module.launch3(1, 2, 3)
    with pytest.raises(OverflowError):
        module.launch3(-1, 0, 0, 0, 0)


def test_without_a_compiler_launches_fall_back_to_ctypes(fresh_shim, monkeypatch):
    import sysconfig

    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var",
                        lambda name: "/nonexistent/cc" if name == "CC" else real(name))
    assert launch.shim() is None and launch.launch_mechanism() == "ctypes"
    driver = _RecordingDriver()
    _plan(monkeypatch, driver).launch3(7, 1, 2, 3)
    assert driver.calls[0]["pointers"] == [1, 2, 3]
