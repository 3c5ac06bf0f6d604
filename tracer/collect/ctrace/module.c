/* The module: the Core type (one per PythonTracer: its caches, and record(), which
   runs one recording through the event front-end and builds its tree) and _ctrace. */

#include "ctrace.h"

#include <structmember.h>

PyDoc_STRVAR(record_doc,
"record($self, fn, root_kind, classify_code, classify_c, /)\n--\n\n"
"Call fn() with the C hooks installed; return (the call tree rooted at root_kind, a\n"
"_Kind, fn's result). classify_code(frame) and classify_c(fn) are called once per new\n"
"code object (as long as it lives) or C function (see tracer/collect/ctracer.py).");

static PyObject *Core_record(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record() takes 4 arguments");
        return NULL;
    }
    if (self->recording) {
        PyErr_SetString(PyExc_RuntimeError, "record() is already running");
        return NULL;
    }
    self->recording = 1;
    self->failed = 0;
    Py_INCREF(args[2]); self->classify_code = args[2];
    Py_INCREF(args[3]); self->classify_c = args[3];
    if (!self->stack) {
        self->stack_cap = 256;
        self->stack = PyMem_Malloc(sizeof(Rec *) * self->stack_cap);
    }
    KindRef rk;
    if (!self->stack || kindref(args[1], &rk) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        free_recording(self);
        return NULL;
    }
    Rec *root = rec_new(self, &rk);
    kindref_clear(&rk); /* the tracer's table keeps the root's kind and frame */
    if (!root || (!self->kids.slot && pm_init(&self->kids, 1024) < 0)) { free_recording(self); return NULL; }
    root->count = 1;
    self->stack[self->sp++] = root;
    self->tstate = PyThreadState_Get();
    self->lines_on = 0;
    self->n_profile = self->n_trace = self->n_switch = 0;

    PyObject *result = events_record(self, args[0], root);

    if (!result) { free_recording(self); return NULL; }
    if (self->failed && !PyErr_Occurred()) {
        /* the traced code swallowed the collector's error: the tree is incomplete */
        Py_DECREF(result);
        free_recording(self);
        PyErr_SetString(PyExc_RuntimeError, "the C collector failed during the recording");
        return NULL;
    }
    int64_t t1 = now_ns();
#ifdef CTRACE_NOBUILD
    PyObject *tree = Py_NewRef(Py_None);
#else
    PyObject *tree = to_node(self, root);
#endif
    self->build_ns = now_ns() - t1;
    free_recording(self);
    if (!tree) { Py_DECREF(result); return NULL; }
    PyObject *pair = PyTuple_Pack(2, tree, result);
    Py_DECREF(tree);
    Py_DECREF(result);
    return pair;
}

static PyObject *Core_stats(Core *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("{s:n,s:n,s:L,s:L,s:L,s:L,s:L}", "code_objects", (Py_ssize_t)self->codes.n, "c_functions",
                         (Py_ssize_t)self->cfns.n, "last_build_ns", (long long)self->build_ns,
                         "profile_events", (long long)self->n_profile, "trace_events", (long long)self->n_trace,
                         "trace_switches", (long long)self->n_switch, "hook_ns", (long long)self->hook_ns);
}

static int Core_init(Core *self, PyObject *args, PyObject *kwds) {
    PyObject *node_type, *fields = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:Core", &node_type, &fields)) return -1;
    if (fields != Py_None) {
        if (!PyType_Check(node_type) || !PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 6) {
            PyErr_SetString(PyExc_TypeError, "Core(Node, fields): fields must be a tuple of Node's 6 field names");
            return -1;
        }
        for (int i = 0; i < 6; i++) {
            PyObject *name = PyTuple_GET_ITEM(fields, i);
            if (!PyUnicode_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "Core(Node, fields): field names must be strings");
                return -1;
            }
            Py_INCREF(name);
            PyUnicode_InternInPlace(&name);
            Py_XSETREF(self->fields[i], name);
        }
        /* __slots__: every field a plain object member of Node itself */
        PyObject *dict = ((PyTypeObject *)node_type)->tp_dict;
        for (int i = 0; i < 6; i++) {
            PyObject *d = dict ? PyDict_GetItemWithError(dict, self->fields[i]) : NULL;
            if (!d && PyErr_Occurred()) return -1;
            PyMemberDef *m = d && Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
            if (!m || m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset <= 0) {
                memset(self->offsets, 0, sizeof(self->offsets));
                break;
            }
            self->offsets[i] = m->offset;
        }
    }
    static long serials;
    if (!self->serial) self->serial = ++serials;
    if (!self->empty && !(self->empty = PyTuple_New(0))) return -1;
    Py_INCREF(node_type);
    Py_XSETREF(self->node_type, node_type);
    if (!self->codes.slot && pm_init(&self->codes, 4096) < 0) return -1;
    if (!self->cfns.slot && pm_init(&self->cfns, 1024) < 0) return -1;
    return 0;
}

static void Core_dealloc(Core *self) {
    free_recording(self);
    PyMem_Free(self->chunk);
    PyMem_Free(self->kids.slot);
    PyMem_Free(self->stack);
    cache_clear(self);
    for (int i = 0; i < self->n_ints; i++) Py_XDECREF(self->ints[i]);
    PyMem_Free(self->ints);
    Py_XDECREF(self->node_type);
    for (int i = 0; i < 6; i++) Py_XDECREF(self->fields[i]);
    Py_XDECREF(self->empty);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Core_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Core_record, METH_FASTCALL, record_doc},
    {"stats", (PyCFunction)Core_stats, METH_NOARGS,
     "stats($self, /)\n--\n\n"
     "Sizes of the caches; the last recording's events (profile: calls and returns; trace: lines), trace\n"
     "function switches (3.11), time switching the events on and off (3.12+) and tree building time."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer.collect._ctrace.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(node_type, fields=None, /)\n--\n\n"
    "The event hooks and call tree of one PythonTracer; fields: Node's six field names\n"
    "in its __init__'s order, to build nodes without calling it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ctrace",
    "The C core of dltrace's Python-level collector (see tracer/collect/ctracer.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__ctrace(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    if (cache_ready() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
