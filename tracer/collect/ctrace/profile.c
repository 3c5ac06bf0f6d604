/* The event front-end of CPython 3.11: a C profile function for calls, returns and C
   calls, and a C trace function for lines, switched on only while a framework frame
   that wants them runs (record.c does the rest). Under 3.12 and newer this file
   compiles to nothing: monitoring.c is the front-end there. */

#include "ctrace.h"

#ifndef MONITORING

static int trace_cb(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* Line events only while a frame that wants them is the one executing: the trace
   function is switched in the thread state directly (PyEval_SetTrace would run the
   audit hooks and touch reference counts on every switch). Only while the trace
   function is still this Core's: where the traced code set its own (sys.settrace),
   switching would call trace_cb with that function as its Core. */
static inline void lines(Core *self, int on) {
#ifdef CTRACE_NO_LINES
    on = 0;
#endif
    if (on != self->lines_on && self->tstate->c_traceobj == (PyObject *)self) {
        self->n_switch++;
        self->tstate->c_tracefunc = on ? trace_cb : NULL;
        self->lines_on = on;
    }
}

/* After the events that hand control back to ``running``: lines are on when the
   innermost open node is a Python frame that wants them and is that frame. */
static inline void lines_for(Core *self, PyObject *running) {
    Rec *top = self->stack[self->sp - 1];
    lines(self, top->wants_lines && top->owner == running);
}

static int fail(Core *self) {
    /* As a Python profile function that raises: the hooks are removed, the error
       propagates into the traced code and out of record(). */
    self->failed = 1;
    PyEval_SetProfile(NULL, NULL);
    PyEval_SetTrace(NULL, NULL);
    return -1;
}

static int on_call(Core *self, PyFrameObject *frame) {
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    CodeEntry *e = code_find(self, code);
    if (!e) e = classify_code(self, frame, code);
    Py_DECREF(code);
    if (!e) return fail(self);
    lines(self, 0);
    if (!e->k.kind) return 0;
    int opened = enter(self, e, frame);
    if (opened < 0) return fail(self);
    if (opened && self->stack[self->sp - 1]->wants_lines) lines(self, 1);
    return 0;
}

static int on_return(Core *self, PyFrameObject *frame) {
    leave(self, (PyObject *)frame, 0);
    Rec *top = self->stack[self->sp - 1];
    if (top->wants_lines && top->owner) {
        PyFrameObject *back = PyFrame_GetBack(frame); /* the frame that runs next */
        Py_XDECREF(back);
        lines(self, top->owner == (PyObject *)back);
    }
    else lines(self, 0);
    return 0;
}

static int on_c_call(Core *self, PyFrameObject *frame, PyObject *fn) {
    Rec *top = self->stack[self->sp - 1];
    if (PyCFunction_Check(fn)) {
        const void *ml;
        PyObject *owner = cfn_owner(fn, &ml);
        CFnEntry *e = cfn_find(self, owner, ml);
        if (!e && !(e = classify_c(self, fn, owner, ml))) return fail(self);
        const KindRef *k = top->owner == (PyObject *)frame ? &e->kept : &e->other;
        if (k->kind && open_c(self, top, k, frame, PyFrame_GetLineNumber(frame)) < 0) return fail(self);
        return 0;
    }
    /* not a builtin function object (3.11's eval loop raises c_call for those only):
       classified each time, uncached */
    KindRef kept, other;
    if (classify_c_call(self, fn, &kept, &other) < 0) return fail(self);
    const KindRef *k = top->owner == (PyObject *)frame ? &kept : &other;
    int err = k->kind ? open_c(self, top, k, frame, PyFrame_GetLineNumber(frame)) : 0;
    /* the tracer's table keeps the kinds alive; these references were only ours */
    kindref_clear(&kept);
    kindref_clear(&other);
    return err < 0 ? fail(self) : 0;
}

static int on_c_return(Core *self, PyFrameObject *frame) {
    leave(self, (PyObject *)frame, 1);
    lines_for(self, (PyObject *)frame);
    return 0;
}

static int profile_cb(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    Core *self = (Core *)obj;
    self->n_profile++;
#ifdef CTRACE_FLOOR
    return 0;
#endif
    switch (what) {
    case PyTrace_CALL: return on_call(self, frame);
    case PyTrace_RETURN: return on_return(self, frame);
    case PyTrace_C_CALL: return on_c_call(self, frame, arg);
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION: return on_c_return(self, frame);
    }
    return 0;
}

static int trace_cb(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    Core *self = (Core *)obj;
    self->n_trace++;
    if (what != PyTrace_LINE) return 0;
    return line_ran(self, self->stack[self->sp - 1], PyFrame_GetLineNumber(frame), frame) < 0 ? fail(self) : 0;
}

PyObject *events_record(Core *self, PyObject *fn, Rec *root) {
    PyThreadState *ts = self->tstate;
    if (ts->c_profilefunc == profile_cb) {
        /* its profile function would replace the one recording, and be removed at its
           end: the outer tree would stop there */
        PyErr_SetString(PyExc_RuntimeError, "another C collector is recording in this thread");
        return NULL;
    }
    /* Another tool's profile and trace functions (coverage.py's, a debugger's, the
       Python collector's) are put back afterwards: they miss the recording's events
       only. */
    Py_tracefunc other_profile = ts->c_profilefunc, other_trace = ts->c_tracefunc;
    PyObject *other_profile_obj = Py_XNewRef(ts->c_profileobj), *other_trace_obj = Py_XNewRef(ts->c_traceobj);
    int64_t t0 = now_ns();
    PyEval_SetTrace(trace_cb, (PyObject *)self);
    ts->c_tracefunc = NULL; /* switched on only where a frame wants lines */
    PyEval_SetProfile(profile_cb, (PyObject *)self);
    PyObject *result = PyObject_CallNoArgs(fn);
    /* The traced code may have set a profile or trace function of its own (a nested
       Python collector, a debugger): what it set stays, and the tree, which misses
       the events from then on, is an error rather than a tree cut short. */
    int profile_ours = ts->c_profilefunc == profile_cb && ts->c_profileobj == (PyObject *)self;
    int trace_ours = ts->c_traceobj == (PyObject *)self; /* trace_cb, or NULL while switched off */
    if (profile_ours || self->failed) PyEval_SetProfile(other_profile, other_profile_obj);
    if (trace_ours || self->failed) PyEval_SetTrace(other_trace, other_trace_obj);
    Py_XDECREF(other_profile_obj);
    Py_XDECREF(other_trace_obj);
    root->time_ns = now_ns() - t0;
    if (result && !self->failed && !(profile_ours && trace_ours)) {
        Py_CLEAR(result);
        PyErr_Format(PyExc_RuntimeError, "the traced code replaced the C collector's %s function (sys.%s): "
                     "its tree would miss what ran after that", profile_ours ? "trace" : "profile",
                     profile_ours ? "settrace" : "setprofile");
    }
    return result;
}

#endif /* !MONITORING */
