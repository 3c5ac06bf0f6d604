/* The event front-end of CPython 3.12 and newer (under 3.11 this file compiles to
   nothing: profile.c is the front-end there; record.c does the rest). The events
   come from sys.monitoring, to callbacks that are this module's C functions. Why not
   PyEval_SetProfile there: since 3.12 it is itself built on sys.monitoring, with a
   profile function per event on top, and switching a trace function on and off per
   frame (what 3.11 does for lines) re-instruments every code object. Here:
   - calls, returns, C calls and C returns are global events; a code object that is
     no part of the trace (transparent) answers its start and return events with
     DISABLE, so CPython stops raising them for it (until the events change, at the
     next recording);
   - line events are local events of the code objects that want them (the framework
     functions that may branch or call ctypes), set once (see hooks());
   - the events mean what the profile and trace functions of 3.12 are given, so both
     collectors still record the same tree: PY_START, PY_RESUME and PY_THROW are
     "call"; PY_RETURN, PY_YIELD and PY_UNWIND "return"; CALL of a builtin function
     or a method descriptor (bound to its first argument) "c_call"; C_RETURN and
     C_RAISE "c_return";
   - sys.monitoring's events are the whole process's: events of other threads are
     ignored, as a profile function (set per thread) never sees them. */

#include "ctrace.h"

#ifdef MONITORING

#include <pthread.h>

static Core *active; /* the recording Core, or NULL */
static pthread_t active_thread; /* the thread it records */
static int lines_disabled; /* a line event was disabled since the last recording started */
static long last_serial; /* the Core that recorded last */
static int tool = -1; /* the sys.monitoring tool id this module holds, once claimed */
static PyObject *mon, *mon_disable, *mon_missing; /* sys.monitoring, DISABLE, MISSING */

static long ev_start, ev_resume, ev_throw, ev_return, ev_yield, ev_unwind, ev_call, ev_c_return, ev_c_raise, ev_line;

static PyObject *fail(Core *self) {
    /* As a profile function that raises: the events stop, the error propagates into
       the traced code and out of record(). */
    self->failed = 1;
    PyObject *err = PyErr_GetRaisedException();
    PyObject *r = PyObject_CallMethod(mon, "set_events", "ii", tool, 0);
    Py_XDECREF(r);
    PyErr_SetRaisedException(err);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the C collector failed");
    return NULL;
}

/* The recording Core, where this event is its thread's. */
static inline Core *mine(void) {
#ifdef CTRACE_FLOOR
    return NULL;
#endif
    Core *self = active;
    return self && !self->failed && pthread_equal(pthread_self(), active_thread) ? self : NULL;
}

/* Line events for this code object from now on (see hooks()). */
static int want_lines(PyObject *code) {
#ifdef CTRACE_NO_LINES
    return 0;
#endif
    PyObject *r = PyObject_CallMethod(mon, "set_local_events", "iOl", tool, code, ev_line);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* The line of a code offset (bytes). PyCode_Addr2Line walks the line table from
   its start each time (3.11's tracing kept f_lineno up to date; 3.12 does not), so a
   code object's lines are read once into a table. */
static int build_lines(CodeEntry *e, PyObject *code) {
    Py_ssize_t n = Py_SIZE(code);
    int *t = PyMem_Malloc(sizeof(int) * (n ? n : 1));
    if (!t) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) t[i] = -1;
    PyObject *it = PyObject_CallMethod(code, "co_lines", NULL), *row;
    if (!it) { PyMem_Free(t); return -1; }
    while ((row = PyIter_Next(it))) {
        long start = PyLong_AsLong(PyTuple_GET_ITEM(row, 0)), end = PyLong_AsLong(PyTuple_GET_ITEM(row, 1));
        PyObject *ln = PyTuple_GET_ITEM(row, 2);
        int line = ln == Py_None ? -1 : (int)PyLong_AsLong(ln);
        for (long u = start / 2; u < end / 2 && u < n; u++) t[u] = line;
        Py_DECREF(row);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) { PyMem_Free(t); return -1; }
    e->line_at = t;
    e->n_units = n;
    return 0;
}

static int line_of(Core *self, PyObject *code, int offset) {
    CodeEntry *e = code_find(self, code);
    if (e && offset >= 0 && !e->line_at && build_lines(e, code) < 0)
        PyErr_Clear(); /* a line table that cannot be read: CPython's own look-up below */
    if (e && e->line_at && offset >= 0 && offset / 2 < e->n_units) return e->line_at[offset / 2];
    return PyCode_Addr2Line((PyCodeObject *)code, offset);
}

int frame_line(Core *self, PyFrameObject *f) {
    PyCodeObject *code = PyFrame_GetCode(f);
    int line = line_of(self, (PyObject *)code, PyFrame_GetLasti(f));
    Py_DECREF(code);
    return line;
}

static PyObject *on_start(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Core *self = mine();
    if (!self || nargs < 2) Py_RETURN_NONE;
    self->n_profile++;
    PyObject *code = args[0];
    CodeEntry *e = code_find(self, code);
    PyFrameObject *frame = NULL;
    if (!e) {
        frame = PyEval_GetFrame();
        if (!frame || !(e = classify_code(self, frame, code))) return fail(self);
        if (e->how == HOW_LINES || e->how == HOW_CTYPES) {
            if (want_lines(code) < 0) return fail(self);
        }
    }
    if (!e->k.kind) /* transparent: no more starts of it (PY_THROW cannot be disabled) */
        return Py_NewRef(nargs == 2 ? mon_disable : Py_None);
    if (!frame && !(frame = PyEval_GetFrame())) Py_RETURN_NONE;
    if (enter(self, e, frame) < 0) return fail(self);
    Py_RETURN_NONE;
}

static PyObject *returned(Core *self, PyObject *code) {
    Rec *top = self->stack[self->sp - 1];
    if (!top->is_c && top->owner && top->entry && top->entry->code == (const void *)code) /* else no frame to look up */
        leave(self, (PyObject *)PyEval_GetFrame(), 0);
    Py_RETURN_NONE;
}

/* PY_RETURN, PY_YIELD: (code, offset, value) */
static PyObject *on_return(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Core *self = mine();
    if (!self || nargs < 1) Py_RETURN_NONE;
    self->n_profile++;
    CodeEntry *e = code_find(self, args[0]);
    if (e && !e->k.kind) return Py_NewRef(mon_disable);
    return returned(self, args[0]);
}

/* PY_UNWIND: (code, offset, exception); cannot be disabled */
static PyObject *on_unwind(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Core *self = mine();
    if (!self || nargs < 1) Py_RETURN_NONE;
    self->n_profile++;
    return returned(self, args[0]);
}

/* CALL: (code, offset, callable, first argument or MISSING). A C call as the
   profile function sees it: a builtin function, or a method descriptor bound to the
   first argument (3.12's legacy profiling binds it; nothing is bound here unless
   the function is classified for the first time). */
static PyObject *on_call(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Core *self = mine();
    if (!self || nargs < 4) Py_RETURN_NONE;
    self->n_profile++;
    PyObject *fn = args[2], *arg0 = args[3], *owner;
    const void *ml;
    int descr = Py_IS_TYPE(fn, &PyMethodDescr_Type);
    if (PyCFunction_Check(fn)) owner = cfn_owner(fn, &ml);
    else if (descr && arg0 != mon_missing) {
        ml = ((PyMethodDescrObject *)fn)->d_method;
        owner = PyModule_Check(arg0) || PyType_Check(arg0) ? arg0 : (PyObject *)Py_TYPE(arg0);
    }
    else Py_RETURN_NONE;
    CFnEntry *e = cfn_find(self, owner, ml);
    if (!e) {
        PyObject *bound = descr ? Py_TYPE(fn)->tp_descr_get(fn, arg0, (PyObject *)Py_TYPE(arg0)) : Py_NewRef(fn);
        if (!bound) return fail(self);
        e = classify_c(self, bound, owner, ml);
        Py_DECREF(bound);
        if (!e) return fail(self);
    }
    if (!e->kept.kind && !e->other.kind) Py_RETURN_NONE;
    PyFrameObject *frame = PyEval_GetFrame();
    if (!frame) Py_RETURN_NONE;
    Rec *top = self->stack[self->sp - 1];
    const KindRef *k = top->owner == (PyObject *)frame ? &e->kept : &e->other;
    if (!k->kind) Py_RETURN_NONE;
    if (open_c(self, top, k, frame, line_of(self, args[0], (int)PyLong_AsLong(args[1]))) < 0) return fail(self);
    Py_RETURN_NONE;
}

/* C_RETURN, C_RAISE: (code, offset, callable, first argument) */
static PyObject *on_c_return(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Core *self = mine();
    if (!self) Py_RETURN_NONE;
    self->n_profile++;
    if (self->stack[self->sp - 1]->is_c) leave(self, (PyObject *)PyEval_GetFrame(), 1);
    Py_RETURN_NONE;
}

/* LINE: (code, line). Counted for the innermost open node when it is this frame
   (what the 3.11 core's switched trace function sees). */
static PyObject *on_line(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    if (!active) { /* between recordings: this line is not raised again until the next one */
        lines_disabled = 1;
        return Py_NewRef(mon_disable);
    }
    Core *self = mine();
    if (!self || nargs < 2) Py_RETURN_NONE;
    self->n_trace++;
    Rec *rec = self->stack[self->sp - 1];
    const CodeEntry *e = rec->entry;
    if (!rec->wants_lines || !e || e->code != (const void *)args[0]) Py_RETURN_NONE;
    PyFrameObject *frame = PyEval_GetFrame();
    if (rec->owner != (PyObject *)frame) Py_RETURN_NONE;
    if (line_ran(self, rec, (int)PyLong_AsLong(args[1]), frame) < 0) return fail(self);
    Py_RETURN_NONE;
}

static PyMethodDef callbacks[] = {
    {"on_start", (PyCFunction)(void (*)(void))on_start, METH_FASTCALL, NULL},
    {"on_return", (PyCFunction)(void (*)(void))on_return, METH_FASTCALL, NULL},
    {"on_unwind", (PyCFunction)(void (*)(void))on_unwind, METH_FASTCALL, NULL},
    {"on_call", (PyCFunction)(void (*)(void))on_call, METH_FASTCALL, NULL},
    {"on_c_return", (PyCFunction)(void (*)(void))on_c_return, METH_FASTCALL, NULL},
    {"on_line", (PyCFunction)(void (*)(void))on_line, METH_FASTCALL, NULL},
};

static int event(PyObject *events, const char *name, long *out) {
    PyObject *v = PyObject_GetAttrString(events, name);
    if (!v) return -1;
    *out = PyLong_AsLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int register_cb(int i, long events) {
    PyObject *fn = PyCFunction_New(&callbacks[i], NULL);
    if (!fn) return -1;
    for (long bit = 1; bit <= events; bit <<= 1) {
        if (!(events & bit)) continue;
        PyObject *r = PyObject_CallMethod(mon, "register_callback", "ilO", tool, bit, fn);
        if (!r) { Py_DECREF(fn); return -1; }
        Py_DECREF(r);
    }
    Py_DECREF(fn);
    return 0;
}

/* Once per process: a sys.monitoring tool id and the callbacks. They stay
   registered; with no events set they cost nothing. */
static int claim_tool(void) {
    if (tool >= 0) return 0;
    PyObject *sys = PyImport_ImportModule("sys");
    if (!sys) return -1;
    mon = PyObject_GetAttrString(sys, "monitoring");
    Py_DECREF(sys);
    if (!mon) return -1;
    PyObject *events = PyObject_GetAttrString(mon, "events");
    if (!events || !(mon_disable = PyObject_GetAttrString(mon, "DISABLE")) ||
        !(mon_missing = PyObject_GetAttrString(mon, "MISSING")) || event(events, "PY_START", &ev_start) < 0 ||
        event(events, "PY_RESUME", &ev_resume) < 0 || event(events, "PY_THROW", &ev_throw) < 0 ||
        event(events, "PY_RETURN", &ev_return) < 0 || event(events, "PY_YIELD", &ev_yield) < 0 ||
        event(events, "PY_UNWIND", &ev_unwind) < 0 || event(events, "CALL", &ev_call) < 0 ||
        event(events, "C_RETURN", &ev_c_return) < 0 || event(events, "C_RAISE", &ev_c_raise) < 0 ||
        event(events, "LINE", &ev_line) < 0) {
        Py_XDECREF(events);
        return -1;
    }
    Py_DECREF(events);
    /* 3 and 4 first: the ids no standard tool claims (cProfile holds PROFILER_ID, 2,
       while it profiles; coverage.py 1; debuggers 0) */
    static const int order[] = {3, 4, 5, 2, 1, 0};
    for (int i = 0; i < 6 && tool < 0; i++) {
        int id = order[i];
        PyObject *holder = PyObject_CallMethod(mon, "get_tool", "i", id);
        if (!holder) return -1;
        int free_id = holder == Py_None;
        Py_DECREF(holder);
        if (!free_id) continue;
        PyObject *r = PyObject_CallMethod(mon, "use_tool_id", "is", id, "dltrace");
        if (!r) return -1;
        Py_DECREF(r);
        tool = id;
    }
    if (tool < 0) {
        PyErr_SetString(PyExc_RuntimeError, "every sys.monitoring tool id is taken");
        return -1;
    }
    if (register_cb(0, ev_start | ev_resume | ev_throw) < 0 || register_cb(1, ev_return | ev_yield) < 0 ||
        register_cb(2, ev_unwind) < 0 || register_cb(3, ev_call) < 0 ||
        register_cb(4, ev_c_return | ev_c_raise) < 0 || register_cb(5, ev_line) < 0)
        return -1;
    return 0;
}

/* Events on, or off. The line events of the code objects that want them stay set:
   switching a code object's local events re-instruments it at once (1 to 3 µs each,
   hundreds per step), so instead a line raised between recordings is disabled where
   it is, and restart_events() raises them all again for the next recording (it only
   marks the code objects, re-instrumented when they next run, as the change of the
   global events here does anyway). */
static int hooks(Core *self, int on) {
    long all = ev_start | ev_resume | ev_throw | ev_return | ev_yield | ev_unwind | ev_call | ev_c_return | ev_c_raise;
    /* Starts and returns disabled for another Core's transparent code stay disabled in
       a code object that did not run between the two recordings: another Core (other
       framework roots) restarts them too. */
    if (on && (lines_disabled || self->serial != last_serial)) {
        PyObject *r = PyObject_CallMethod(mon, "restart_events", NULL);
        if (!r) return -1;
        Py_DECREF(r);
        lines_disabled = 0;
        last_serial = self->serial;
    }
    PyObject *r = PyObject_CallMethod(mon, "set_events", "il", tool, on ? all : 0L);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

PyObject *events_record(Core *self, PyObject *fn, Rec *root) {
    if (active) {
        PyErr_SetString(PyExc_RuntimeError, "another C collector is recording in this process");
        return NULL;
    }
    if (claim_tool() < 0) return NULL;
    int64_t t0 = now_ns();
    active = self;
    active_thread = pthread_self();
    int hooked = hooks(self, 1);
    self->hook_ns = now_ns() - t0;
    PyObject *result = hooked == 0 ? PyObject_CallNoArgs(fn) : NULL;
    active = NULL;
    PyObject *exc = PyErr_GetRaisedException();
    int64_t t_off = now_ns();
    int unhooked = hooks(self, 0);
    self->hook_ns += now_ns() - t_off;
    if (unhooked < 0) {
        Py_CLEAR(result);
        if (exc) PyErr_Clear(); /* the traced code's own error is the one to see */
    }
    if (exc) PyErr_SetRaisedException(exc);
    root->time_ns = now_ns() - t0;
    return result;
}

#endif /* MONITORING */
