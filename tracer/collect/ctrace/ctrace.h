/* The C core of dltrace's Python-level collector (tracer/collect/pytrace.py).

   Why: a collector written in Python gets every call, return and line event as a
   Python call, which on 3.11 alone costs more than viztracer's whole recording. This
   core takes the events as C callbacks and records the same call tree as
   PythonTracer.record. On 3.11 the callbacks are a profile function
   (PyEval_SetProfile) and a trace function switched on only while a framework
   function that needs line events runs; on 3.12 and newer they are sys.monitoring's
   (monitoring.c says why and how):

   - what a code object or a C function is (framework node, "ext" hand-off, or
     transparent) is decided once, by PythonTracer's own classification methods
     called back from here, and cached by pointer: an entry leaves the cache when its
     code object or the C function's owner (a class, a module) dies (cache.c), so a
     pointer is never reused while cached and nothing is kept alive by the cache;
   - per event, only a hash look-up and the tree bookkeeping run; an event of code
     outside the framework costs a look-up and nothing else;
   - line events: PythonTracer gives a per-frame line tracer to framework functions
     that may branch (or call ctypes). On 3.11 the trace function is installed while
     such a frame is the one executing and removed otherwise, so no other frame pays
     for line tracing. The frame executing after each event is known from the open
     nodes: a call runs the called frame, a return its caller, a C return the frame
     that called the C function. On 3.12+ only those functions' code objects raise
     line events at all;
   - the finished tree is built here as tracer.trace.Node objects, children in the
     order they were first seen, exactly as _Rec.to_node does.

   The files (built together into one extension module, _ctrace):
     ctrace.h       this header: the structs, and what the files share
     containers.h/c the pointer maps and int sets
     cache.c        the classification caches (code objects, C functions)
     record.c       what every event front-end does with an event, once it knows what it
                    is: the open nodes and the recording's records
     profile.c      3.11's event front-end: profile and trace functions
     monitoring.c   3.12+'s event front-end: sys.monitoring
     tree.c         the finished tree, as tracer.trace.Node objects
     module.c       the Core type, record() and the module
   Built per framework environment by tracer/collect/cbuild.py (standard library only:
   the environment's own compiler settings and headers); each front-end compiles to
   nothing under the other's CPython. tracer/collect/_ctrace.pyi types the module.

   Measurement switches (never in a build dltrace makes): -DCTRACE_FLOOR (the hooks
   return at once: CPython's own cost of C hooks; on 3.12+ every event stays raised),
   -DCTRACE_NO_LINES (no line events), -DCTRACE_NOBUILD (record() returns None for the
   tree). */

#ifndef CTRACE_H
#define CTRACE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stdint.h>
#include <time.h>

#include "containers.h"

#if PY_VERSION_HEX < 0x030B0000
#error "_ctrace is written for CPython 3.11 and newer"
#endif
/* 3.11: profile and trace functions; 3.12 and newer: sys.monitoring (PEP 669) */
#if PY_VERSION_HEX >= 0x030C0000
#define MONITORING 1
#endif

#define HOW_NONE 0
#define HOW_LINES 1
#define HOW_CTYPES 2
#define HOW_STATIC 3

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* what time.perf_counter_ns reads on Linux */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------ caches (cache.c) */

typedef struct {
    PyObject *kind;  /* a _Kind, or NULL: transparent */
    PyObject *frame; /* its tracer.trace.Frame */
    unsigned char is_c, is_ext;
} KindRef;

typedef struct {
    int offset, line;
    KindRef k; /* a "c" kind */
} CtypesCall;

typedef struct CodeEntry CodeEntry;
struct CodeEntry {
    const void *code; /* the key: the code object, alive while the entry is cached */
    PyObject *ref;    /* an EntryRef to it, whose callback takes the entry out of the cache */
    CodeEntry *next_dead; /* the entries of code objects that died, freed when no recording uses them */
    KindRef k;
    unsigned char how;
    int *static_lines; /* HOW_STATIC: the lines it runs */
    int n_static;
    PyObject *static_list; /* the same, a sorted Python list: copied for a node that ran only these */
    CtypesCall *calls; /* HOW_CTYPES: sorted by offset */
    int n_calls;
    int *line_at; /* 3.12+: the line of each code unit, read once from co_lines() when first asked */
    Py_ssize_t n_units;
};

typedef struct CFnEntry CFnEntry;
struct CFnEntry {
    const void *owner; /* the key: a type, a module, or NULL; alive while the entry is cached */
    const void *ml;    /* and the PyMethodDef */
    PyObject *ref;     /* an EntryRef to the owner, or the owner itself where it has no weak references */
    CFnEntry *next_dead;
    KindRef kept, other;
    unsigned char strong; /* ref is the owner */
};

/* ------------------------------------------------------------------ records */

typedef struct Rec Rec;
struct Rec {
    PyObject *kind, *frame; /* borrowed: the caches keep them */
    PyObject *owner; /* the frame running it (a C call: its caller), strong, or NULL */
    const CodeEntry *entry; /* the code running it, while open */
    Rec *parent, *first, *last, *next; /* children, in the order first seen */
    int64_t count, time_ns, t0;
    IntSet call_lines, lines;
    const CodeEntry **statics;
    int n_statics, cap_statics, n_kids;
    size_t slot; /* its place in the children table */
    unsigned char is_c, is_ext, wants_lines;
};

#define CHUNK 512
typedef struct Chunk {
    struct Chunk *prev;
    int used;
    Rec recs[CHUNK];
} Chunk;

typedef struct {
    PyObject_HEAD
    PyObject *node_type;
    PyObject *fields[6]; /* Node's fields, set one by one on object.__new__(Node); or NULL: Node(...) */
    Py_ssize_t offsets[6]; /* where Node has __slots__: each field's place in the object, or 0 */
    PyObject *empty;
    /* persistent caches: code object -> CodeEntry, (owner, def) -> CFnEntry; an entry
       leaves when its code object or owner dies (cache.c) */
    PtrMap codes, cfns;
    CodeEntry *dead; /* entries whose code objects died, freed at the end of a recording */
    CFnEntry *dead_cfns; /* and whose owners died */
    /* one recording */
    int recording, failed;
    PyThreadState *tstate;
    PyObject *classify_code, *classify_c; /* set during record() */
    Chunk *chunk;
    PtrMap kids; /* (parent, kind) -> child Rec */
    Rec **stack;
    int sp, stack_cap;
    int lines_on;
    int64_t build_ns; /* the last tree's building time */
    PyObject **ints; /* line numbers as Python ints, made once: most lines are above the small-int cache */
    int n_ints;
    int64_t n_profile, n_trace, n_switch; /* events of the last recording, trace function switches */
    int64_t hook_ns; /* 3.12+: the last recording's time spent switching its events on and off */
    long serial; /* which Core this is, of the process's */
} Core;

/* ------------------------------------------------------------------ cache.c */

/* Interned names and types the caches use; once, from the module's init. */
int cache_ready(void);
/* A _Kind's flags and Frame, read once; the references are the caller's to keep. */
int kindref(PyObject *kind, KindRef *out);
void kindref_clear(KindRef *k);

static inline CodeEntry *code_find(Core *self, PyObject *code) {
    return (CodeEntry *)pm_slot(&self->codes, code, NULL)->v;
}

/* A new code object, classified and cached; NULL with an error set. */
CodeEntry *classify_code(Core *self, PyFrameObject *frame, PyObject *code);
/* The entries whose code objects or owners died, freed: no record points to them any more. */
void free_dead(Core *self);
/* Both caches emptied, for good (the Core goes). */
void cache_clear(Core *self);

/* C functions: keyed by (owner, method def) where the owner is a module, a class or
   nothing (the function itself, as PythonTracer keys it), and by (owner's class,
   method def) for a method of an instance (PythonTracer: (class, name)). */
static inline PyObject *cfn_owner(PyObject *fn, const void **ml) {
    PyCFunctionObject *f = (PyCFunctionObject *)fn;
    PyObject *self = f->m_self;
    *ml = f->m_ml;
    if (self == NULL || PyModule_Check(self) || PyType_Check(self)) return self;
    return (PyObject *)Py_TYPE(self);
}

static inline CFnEntry *cfn_find(Core *self, PyObject *owner, const void *ml) {
    return (CFnEntry *)pm_slot(&self->cfns, owner, ml)->v;
}

/* PythonTracer._classify_c(fn) -> (kind when called from a kept frame, kind otherwise) */
int classify_c_call(Core *self, PyObject *fn, KindRef *kept, KindRef *other);
/* A new C function, classified and cached; NULL with an error set. */
CFnEntry *classify_c(Core *self, PyObject *fn, PyObject *owner, const void *ml);

/* ------------------------------------------------------------------ record.c */

Rec *rec_new(Core *self, const KindRef *k);
/* A framework (or ext) Python frame starts: its node under the innermost open one.
   1: a node was opened; 0: the frame stays transparent; -1: an error. */
int enter(Core *self, CodeEntry *e, PyFrameObject *frame);
/* A C function called from ``frame``, at ``line``, opens the node of kind k. */
int open_c(Core *self, Rec *top, const KindRef *k, PyFrameObject *frame, int line);
/* A line ran in ``frame``, the innermost open node's. */
int line_ran(Core *self, Rec *rec, int line, PyFrameObject *frame);
/* The end of a recording: see record.c. */
void free_recording(Core *self);

/* The innermost open node ends when ``running`` (the frame returning, or for a C
   node the frame that called it) is its owner. */
static inline void leave(Core *self, PyObject *running, int is_c) {
    Rec *top = self->stack[self->sp - 1];
    if (top->owner == running && top->is_c == is_c) {
        top->time_ns += now_ns() - top->t0;
        Py_CLEAR(top->owner);
        self->sp--;
    }
}

/* ------------------------------------------------------------------ the event front-end (profile.c or monitoring.c) */

/* Call fn() with the events on, recording under ``root``; fn's result, or NULL with
   the error (fn's own, or why no recording could start: another one in progress). */
PyObject *events_record(Core *self, PyObject *fn, Rec *root);

/* The line a frame is at (the calling line of what it calls). */
#ifdef MONITORING
int frame_line(Core *self, PyFrameObject *f);
#else
static inline int frame_line(Core *self, PyFrameObject *f) {
    (void)self;
    return PyFrame_GetLineNumber(f);
}
#endif

/* ------------------------------------------------------------------ tree.c */

/* The finished tree under root, as tracer.trace.Node objects. */
PyObject *to_node(Core *self, Rec *root);

#endif
