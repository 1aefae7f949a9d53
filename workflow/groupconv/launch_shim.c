/* The per-call launch of a convolution kernel, as a CPython function: the three pointers written
 * into a launch plan's parameter slots and the driver's cuLaunchKernel called, in one C call.
 * Through ctypes the same launch converts eleven arguments and packs a struct per call (about
 * two microseconds of host time); here it parses five integers.
 *
 * The plan is a `struct shim_plan` that launch.py lays out with ctypes and owns; its address
 * is the first argument. The driver entry point is taken from the plan (launch.py reads it from
 * libcuda.so.1 with ctypes), so this file links against nothing but Python. The GIL is held
 * through the call, so two threads never fill one plan's slots at once. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*launch_fn)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                         void** extra);

struct shim_plan {
    launch_fn launch;  /* cuLaunchKernel */
    void* function;    /* CUfunction */
    unsigned dims[6];  /* grid x, y, z, block x, y, z */
    void** params;     /* the kernel's parameter array; params[0..2] point at pointers[0..2] */
    uint64_t* pointers;
};

/* launch3(plan_address, stream, x, w, y) -> CUresult (0: enqueued) */
static PyObject* launch3(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "launch3(plan, stream, x, w, y) takes 5 integers");
        return NULL;
    }
    uint64_t v[5];
    for (int i = 0; i < 5; ++i) {
        v[i] = PyLong_AsUnsignedLongLong(args[i]);
        if (v[i] == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    }
    struct shim_plan* plan = (struct shim_plan*)(uintptr_t)v[0];
    plan->pointers[0] = v[2];
    plan->pointers[1] = v[3];
    plan->pointers[2] = v[4];
    int result = plan->launch(plan->function, plan->dims[0], plan->dims[1], plan->dims[2],
                              plan->dims[3], plan->dims[4], plan->dims[5], 0,
                              (void*)(uintptr_t)v[1], plan->params, NULL);
    return PyLong_FromLong(result);
}

static PyMethodDef methods[] = {
    {"launch3", (PyCFunction)(void (*)(void))launch3, METH_FASTCALL,
     "launch3(plan, stream, x, w, y) -> CUresult: fill a plan's pointer slots and launch it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "groupconv_launch_shim",
                                    "One C call per kernel launch (see launch.py).", -1, methods};

PyMODINIT_FUNC PyInit_groupconv_launch_shim(void) { return PyModule_Create(&module); }
