/* The C core of dltrace's Python-level collector (tracer/collect/pytrace.py).

   Why: a collector written in Python gets every call, return and line event as a
   Python call, which on 3.11 alone costs more than viztracer's whole recording. This
   core takes the events as C callbacks and records the same call tree as
   PythonTracer.record. On 3.11 the callbacks are a profile function
   (PyEval_SetProfile) and a trace function switched on only while a framework
   function that needs line events runs; on 3.12 and newer they are sys.monitoring's
   (the second half of the events section says why and how):

   - what a code object or a C function is (framework node, "ext" hand-off, or
     transparent) is decided once, by PythonTracer's own classification methods
     called back from here, and cached by pointer (the code objects and owners are
     kept alive, so a pointer is never reused while cached);
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

   Built per framework environment by tracer/collect/cbuild.py (standard library
   only: the environment's own compiler settings and headers). CPython 3.11 (profile
   and trace functions) and 3.12 and newer (sys.monitoring: see the events below).

   Measurement switches (never in a build dltrace makes): -DCTRACE_FLOOR (the hooks
   return at once: CPython's own cost of C hooks; on 3.12+ every event stays raised),
   -DCTRACE_NO_LINES (no line events), -DCTRACE_NOBUILD (record() returns None for the
   tree). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

/* ------------------------------------------------------------------ pointer maps */

/* Open addressing keyed by a pair of pointers, the keys kept in the slots: a probe
   never reads the value it does not want (a look-up per event must not miss the
   cache for every collision). The hash mixes the high bits down: objects are
   16-byte aligned and their addresses close together. */
typedef struct {
    const void *a, *b;
    void *v;
} Slot;

typedef struct {
    Slot *slot;
    size_t cap, n;
} PtrMap;

static inline size_t hash_ptr(const void *a, const void *b) {
    uint64_t x = ((uint64_t)(uintptr_t)a >> 4) * 0x9E3779B97F4A7C15ull;
    x ^= ((uint64_t)(uintptr_t)b >> 3) * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(x ^ (x >> 32));
}

/* The slot of (a, b), or the empty slot where it would go. */
static inline Slot *pm_slot(const PtrMap *m, const void *a, const void *b) {
    size_t mask = m->cap - 1;
    for (size_t i = hash_ptr(a, b) & mask;; i = (i + 1) & mask) {
        Slot *s = &m->slot[i];
        if (!s->v || (s->a == a && s->b == b)) return s;
    }
}

static int pm_init(PtrMap *m, size_t cap) {
    m->slot = PyMem_Calloc(cap, sizeof(Slot));
    if (!m->slot) { PyErr_NoMemory(); return -1; }
    m->cap = cap;
    m->n = 0;
    return 0;
}

/* Store v in the empty slot s (from pm_slot); grows at half full. Values that keep
   their slot's index (records) are told it through on_move. */
static int pm_fill(PtrMap *m, Slot *s, const void *a, const void *b, void *v, void (*on_move)(void *, Slot *, Slot *)) {
    s->a = a;
    s->b = b;
    s->v = v;
    if (on_move) on_move(v, m->slot, s);
    if (++m->n * 2 <= m->cap) return 0;
    PtrMap bigger;
    if (pm_init(&bigger, m->cap * 2) < 0) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        Slot *old = &m->slot[i];
        if (!old->v) continue;
        Slot *t = pm_slot(&bigger, old->a, old->b);
        *t = *old;
        if (on_move) on_move(t->v, bigger.slot, t);
    }
    bigger.n = m->n;
    PyMem_Free(m->slot);
    *m = bigger;
    return 0;
}

/* Empty the filled slot s, moving back the entries after it that would no longer be
   found (linear probing's deletion, no tombstones: a look-up stays one scan). */
static void pm_remove(PtrMap *m, Slot *s) {
    size_t mask = m->cap - 1, i = (size_t)(s - m->slot), j = i;
    for (;;) {
        j = (j + 1) & mask;
        Slot *t = &m->slot[j];
        if (!t->v) break;
        size_t home = hash_ptr(t->a, t->b) & mask;
        /* t stays where it is when its home lies cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        m->slot[i] = *t;
        i = j;
    }
    m->slot[i] = (Slot){NULL, NULL, NULL};
    m->n--;
}

/* ------------------------------------------------------------------ int sets (lines) */

/* Most sets hold a line or two (a call's calling line, a short function's lines):
   those stay in the record itself, scanned; a set that outgrows it moves to a hash
   table. No allocation for the common case, where a malloc and a free per record
   were a tenth of the cost of a small step. */
#define SMALL 4

typedef struct {
    int *slot; /* the hash table, or NULL while the values fit in small */
    int cap, n;
    int small[SMALL];
} IntSet;

#define EMPTY INT_MIN

static int intset_grow(IntSet *s) {
    int cap = s->cap ? s->cap * 2 : 16;
    int *slot = PyMem_Malloc(sizeof(int) * cap);
    if (!slot) return -1;
    for (int i = 0; i < cap; i++) slot[i] = EMPTY;
    const int *old = s->slot ? s->slot : s->small;
    int n_old = s->slot ? s->cap : s->n;
    for (int i = 0; i < n_old; i++) {
        int v = old[i];
        if (v == EMPTY) continue;
        unsigned h = (unsigned)v * 2654435761u;
        for (int j = h & (cap - 1);; j = (j + 1) & (cap - 1))
            if (slot[j] == EMPTY) { slot[j] = v; break; }
    }
    PyMem_Free(s->slot);
    s->slot = slot;
    s->cap = cap;
    return 0;
}

static int intset_add(IntSet *s, int v) {
    if (v == EMPTY) return 0;
    if (!s->slot) {
        for (int i = 0; i < s->n; i++)
            if (s->small[i] == v) return 0;
        if (s->n < SMALL) { s->small[s->n++] = v; return 0; }
        if (intset_grow(s) < 0) return -1;
    }
    else if ((s->n + 1) * 2 > s->cap && intset_grow(s) < 0) return -1;
    unsigned h = (unsigned)v * 2654435761u;
    for (int j = h & (s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
        if (s->slot[j] == v) return 0;
        if (s->slot[j] == EMPTY) { s->slot[j] = v; s->n++; return 0; }
    }
}

/* Its values, unordered, into v (room for s->n); returns how many. */
static int intset_values(const IntSet *s, int *v) {
    if (!s->slot) {
        memcpy(v, s->small, sizeof(int) * s->n);
        return s->n;
    }
    int m = 0;
    for (int i = 0; i < s->cap; i++)
        if (s->slot[i] != EMPTY) v[m++] = s->slot[i];
    return m;
}

static void intset_free(IntSet *s) {
    PyMem_Free(s->slot);
    s->slot = NULL;
    s->cap = s->n = 0;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------ caches */

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
    PyObject *ref;    /* a CodeRef to it, whose callback takes the entry out of the cache */
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

typedef struct {
    PyObject *owner; /* strong reference (a type, a module, or NULL) */
    const void *ml;  /* the PyMethodDef */
    KindRef kept, other;
} CFnEntry;

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
    /* persistent caches: code object -> CodeEntry (an entry leaves when its code object
       dies), (owner, def) -> CFnEntry */
    PtrMap codes, cfns;
    CodeEntry *dead; /* entries whose code objects died, freed at the end of a recording */
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

#ifndef MONITORING
static int trace_cb(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);
#endif

static Rec *rec_new(Core *self, const KindRef *k) {
    if (!self->chunk || self->chunk->used == CHUNK) {
        Chunk *c = PyMem_Malloc(sizeof(Chunk));
        if (!c) { PyErr_NoMemory(); return NULL; }
        c->prev = self->chunk;
        c->used = 0;
        self->chunk = c;
    }
    Rec *r = &self->chunk->recs[self->chunk->used++];
    memset(r, 0, sizeof(Rec)); /* chunks are reused from one recording to the next */
    r->kind = k->kind;
    r->frame = k->frame;
    r->is_c = k->is_c;
    r->is_ext = k->is_ext;
    return r;
}

/* Children are found by (parent, kind) in one table per recording; a record knows
   its slot, so the table is emptied slot by slot. */
static void kid_moved(void *v, Slot *base, Slot *s) {
    ((Rec *)v)->slot = (size_t)(s - base);
}

static Rec *child(Core *self, Rec *parent, const KindRef *k) {
    Slot *s = pm_slot(&self->kids, parent, k->kind);
    if (s->v) return (Rec *)s->v;
    Rec *r = rec_new(self, k);
    if (!r) return NULL;
    r->parent = parent;
    parent->n_kids++;
    if (parent->last) parent->last->next = r;
    else parent->first = r;
    parent->last = r;
    if (pm_fill(&self->kids, s, parent, k->kind, r, kid_moved) < 0) return NULL;
    return r;
}

static int add_static(Rec *r, const CodeEntry *e) {
    for (int i = 0; i < r->n_statics; i++)
        if (r->statics[i] == e || (r->statics[i]->n_static == e->n_static &&
                                   !memcmp(r->statics[i]->static_lines, e->static_lines, sizeof(int) * e->n_static)))
            return 0;
    if (r->n_statics == r->cap_statics) {
        int cap = r->cap_statics ? r->cap_statics * 2 : 2;
        const CodeEntry **s = PyMem_Realloc(r->statics, sizeof(CodeEntry *) * cap);
        if (!s) { PyErr_NoMemory(); return -1; }
        r->statics = s;
        r->cap_statics = cap;
    }
    r->statics[r->n_statics++] = e;
    return 0;
}

static int push(Core *self, Rec *r) {
    if (self->sp == self->stack_cap) {
        int cap = self->stack_cap * 2;
        Rec **s = PyMem_Realloc(self->stack, sizeof(Rec *) * cap);
        if (!s) { PyErr_NoMemory(); return -1; }
        self->stack = s;
        self->stack_cap = cap;
    }
    self->stack[self->sp++] = r;
    return 0;
}

/* ------------------------------------------------------------------ classification */

static PyObject *str_is_c, *str_is_ext, *str_frame; /* interned attribute names */

/* A _Kind's flags and Frame, read once; the references are the caller's to keep. */
static int kindref(PyObject *kind, KindRef *out) {
    out->kind = out->frame = NULL;
    out->is_c = out->is_ext = 0;
    if (kind == Py_None) return 0;
    PyObject *c = PyObject_GetAttr(kind, str_is_c);
    PyObject *e = c ? PyObject_GetAttr(kind, str_is_ext) : NULL;
    PyObject *f = e ? PyObject_GetAttr(kind, str_frame) : NULL;
    if (f) {
        out->is_c = PyObject_IsTrue(c) == 1;
        out->is_ext = PyObject_IsTrue(e) == 1;
        Py_INCREF(kind);
        out->kind = kind;
        out->frame = f;
    }
    Py_XDECREF(c);
    Py_XDECREF(e);
    return f ? 0 : -1;
}

static void kindref_clear(KindRef *k) {
    Py_CLEAR(k->kind);
    Py_CLEAR(k->frame);
}

static inline CodeEntry *code_find(Core *self, PyObject *code) {
    return (CodeEntry *)pm_slot(&self->codes, code, NULL)->v;
}

/* The cache holds no code object: a probe that makes new functions step after step
   (exec, closures, generated code) would otherwise keep them all. Each entry has a
   weak reference to its code object, a CodeRef, that knows the entry: when the code
   object dies, before its memory can be reused for another, the callback takes the
   entry out of the cache. The entry itself (which records of a recording may still
   point to) is freed at the end of the recording, or of the next one. */
typedef struct {
    PyWeakReference ref;
    Core *core; /* borrowed: the Core releases its CodeRefs before it goes */
    CodeEntry *entry;
} CodeRef;

static PyTypeObject CodeRefType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_ctrace.CodeRef",
    .tp_basicsize = sizeof(CodeRef),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A weak reference to a code object the C core has classified.",
};

static PyObject *released_cb; /* code_released, as a function object */

static PyObject *code_released(PyObject *Py_UNUSED(m), PyObject *wr) {
    CodeRef *r = (CodeRef *)wr;
    Core *self = r->core;
    if (!self) Py_RETURN_NONE;
    r->core = NULL;
    Slot *s = pm_slot(&self->codes, r->entry->code, NULL);
    if (s->v == r->entry) pm_remove(&self->codes, s);
    r->entry->next_dead = self->dead;
    self->dead = r->entry;
    Py_RETURN_NONE;
}

static PyMethodDef released_def = {"_code_released", code_released, METH_O, NULL};

static void code_entry_free(CodeEntry *e) {
    if (e->ref) ((CodeRef *)e->ref)->core = NULL;
    Py_CLEAR(e->ref);
    kindref_clear(&e->k);
    for (int i = 0; i < e->n_calls; i++) kindref_clear(&e->calls[i].k);
    PyMem_Free(e->calls);
    PyMem_Free(e->static_lines);
    PyMem_Free(e->line_at);
    Py_XDECREF(e->static_list);
    PyMem_Free(e);
}

static void free_dead(Core *self) {
    while (self->dead) {
        CodeEntry *e = self->dead;
        self->dead = e->next_dead;
        code_entry_free(e);
    }
}

static int code_insert(Core *self, CodeEntry *e, PyObject *code) {
    e->ref = PyObject_CallFunctionObjArgs((PyObject *)&CodeRefType, code, released_cb, NULL);
    if (!e->ref) return -1;
    ((CodeRef *)e->ref)->core = self;
    ((CodeRef *)e->ref)->entry = e;
    /* the slot is found after the call: a collection during it may have emptied some */
    return pm_fill(&self->codes, pm_slot(&self->codes, code, NULL), code, NULL, e, NULL);
}

static int cmp_call(const void *a, const void *b) {
    const CtypesCall *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Where a code object calls ctypes, {offset: [(line, kind), ...]}, into a sorted C table. */
static int read_ctypes(PyObject *calls, CodeEntry *e) {
    Py_ssize_t pos = 0, n = 0;
    PyObject *off, *lst;
    while (PyDict_Next(calls, &pos, &off, &lst)) n += PyList_Size(lst);
    e->calls = PyMem_Calloc(n ? n : 1, sizeof(CtypesCall));
    if (!e->calls) { PyErr_NoMemory(); return -1; }
    pos = 0;
    while (PyDict_Next(calls, &pos, &off, &lst)) {
        int offset = (int)PyLong_AsLong(off);
        for (Py_ssize_t i = 0; i < PyList_Size(lst); i++) {
            PyObject *pair = PyList_GET_ITEM(lst, i);
            CtypesCall *c = &e->calls[e->n_calls++];
            c->offset = offset;
            c->line = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
            if (kindref(PyTuple_GET_ITEM(pair, 1), &c->k) < 0) return -1;
        }
    }
    if (PyErr_Occurred()) return -1;
    /* stable: the calls of one offset keep their order */
    for (int i = 1; i < e->n_calls; i++) {
        CtypesCall x = e->calls[i];
        int j = i - 1;
        while (j >= 0 && cmp_call(&e->calls[j], &x) > 0) { e->calls[j + 1] = e->calls[j]; j--; }
        e->calls[j + 1] = x;
    }
    return 0;
}

static int read_static(PyObject *lines, CodeEntry *e) {
    Py_ssize_t n = PySet_Size(lines);
    if (n < 0) return -1;
    e->static_lines = PyMem_Malloc(sizeof(int) * (n ? n : 1));
    if (!e->static_lines) { PyErr_NoMemory(); return -1; }
    PyObject *it = PyObject_GetIter(lines), *v;
    if (!it) return -1;
    while ((v = PyIter_Next(it))) {
        e->static_lines[e->n_static++] = (int)PyLong_AsLong(v);
        Py_DECREF(v);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    qsort(e->static_lines, e->n_static, sizeof(int), cmp_int);
    if (!(e->static_list = PyList_New(e->n_static))) return -1;
    for (int i = 0; i < e->n_static; i++) {
        PyObject *x = PyLong_FromLong(e->static_lines[i]);
        if (!x) return -1;
        PyList_SET_ITEM(e->static_list, i, x);
    }
    return 0;
}

/* A new code object: classify_code(frame) -> None or (kind, how), how: "lines", a
   set (the lines of a branch-free function), a dict (where it calls ctypes) or "". */
static CodeEntry *classify_code(Core *self, PyFrameObject *frame, PyObject *code) {
    PyObject *res = PyObject_CallOneArg(self->classify_code, (PyObject *)frame);
    if (!res) return NULL;
    CodeEntry *e = PyMem_Calloc(1, sizeof(CodeEntry));
    if (!e) { Py_DECREF(res); PyErr_NoMemory(); return NULL; }
    e->code = code;
    int err = 0;
    if (res != Py_None) {
        PyObject *how = PyTuple_GET_ITEM(res, 1);
        err = kindref(PyTuple_GET_ITEM(res, 0), &e->k);
        if (!err && PyUnicode_Check(how)) {
            if (PyUnicode_CompareWithASCIIString(how, "lines") == 0) e->how = HOW_LINES;
        }
        else if (!err && PyDict_Check(how)) {
            e->how = HOW_CTYPES;
            err = read_ctypes(how, e);
        }
        else if (!err && PyAnySet_Check(how) && PySet_Size(how) > 0) {
            e->how = HOW_STATIC;
            err = read_static(how, e);
        }
    }
    Py_DECREF(res);
    if (err < 0 || code_insert(self, e, code) < 0) {
        code_entry_free(e); /* kept out of the cache */
        return NULL;
    }
    return e;
}

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

static int cfn_insert(Core *self, CFnEntry *e) {
    return pm_fill(&self->cfns, pm_slot(&self->cfns, e->owner, e->ml), e->owner, e->ml, e, NULL);
}

/* PythonTracer._classify_c(fn) -> (kind when called from a kept frame, kind otherwise) */
static int classify_c_call(Core *self, PyObject *fn, KindRef *kept, KindRef *other) {
    PyObject *res = PyObject_CallOneArg(self->classify_c, fn);
    if (!res) return -1;
    int err = kindref(PyTuple_GET_ITEM(res, 0), kept);
    if (!err && (err = kindref(PyTuple_GET_ITEM(res, 1), other)) < 0) kindref_clear(kept);
    Py_DECREF(res);
    return err;
}

static CFnEntry *classify_c(Core *self, PyObject *fn, PyObject *owner, const void *ml) {
    CFnEntry *e = PyMem_Calloc(1, sizeof(CFnEntry));
    if (!e) { PyErr_NoMemory(); return NULL; }
    if (classify_c_call(self, fn, &e->kept, &e->other) < 0) { PyMem_Free(e); return NULL; }
    Py_XINCREF(owner);
    e->owner = owner;
    e->ml = ml;
    if (cfn_insert(self, e) < 0) {
        kindref_clear(&e->kept);
        kindref_clear(&e->other);
        Py_XDECREF(owner);
        PyMem_Free(e);
        return NULL;
    }
    return e;
}

/* ------------------------------------------------------------------ events */

/* What both front-ends (3.11's profile and trace functions, 3.12's sys.monitoring
   callbacks) do with an event, once they know what it is. */

#ifdef MONITORING
static int frame_line(Core *self, PyFrameObject *f);
#else
#define frame_line(self, f) PyFrame_GetLineNumber(f)
#endif

/* A framework (or ext) Python frame starts: its node under the innermost open one.
   1: a node was opened; 0: the frame stays transparent; -1: an error. */
static int enter(Core *self, CodeEntry *e, PyFrameObject *frame) {
    Rec *top = self->stack[self->sp - 1];
    PyObject *caller = top->owner; /* innermost kept frame (a C call's caller); NULL at the root */
    PyFrameObject *back = NULL;
    if (e->k.is_ext) {
        /* an ext frame only counts when framework code calls it directly */
        if (caller == NULL || top->is_ext) return 0;
        back = PyFrame_GetBack(frame);
        Py_XDECREF(back);
        if ((PyObject *)back != caller) return 0;
    }
    Rec *rec = child(self, top, &e->k);
    if (!rec) return -1;
    rec->count++;
    if (caller == NULL) {
        back = PyFrame_GetBack(frame);
        if (back && intset_add(&rec->call_lines, frame_line(self, back)) < 0) {
            Py_DECREF(back);
            return -1;
        }
        Py_XDECREF(back);
    }
    else if (intset_add(&rec->call_lines, frame_line(self, (PyFrameObject *)caller)) < 0)
        return -1;
    Py_INCREF(frame);
    Py_XSETREF(rec->owner, (PyObject *)frame);
    rec->entry = e;
    rec->wants_lines = e->how == HOW_LINES || e->how == HOW_CTYPES;
    if (e->how == HOW_STATIC && add_static(rec, e) < 0) return -1;
    if (push(self, rec) < 0) return -1;
    rec->t0 = now_ns();
    return 1;
}

/* A C function called from ``frame``, at ``line``, opens the node of kind k. */
static int open_c(Core *self, Rec *top, const KindRef *k, PyFrameObject *frame, int line) {
    Rec *rec = child(self, top, k);
    if (!rec) return -1;
    rec->count++;
    if (intset_add(&rec->call_lines, line) < 0) return -1;
    Py_INCREF(frame);
    Py_XSETREF(rec->owner, (PyObject *)frame);
    rec->entry = NULL;
    rec->wants_lines = 0;
    if (push(self, rec) < 0) return -1;
    rec->t0 = now_ns();
    return 0;
}

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

static const CtypesCall *ctypes_at(const CodeEntry *e, int offset, int *n) {
    int lo = 0, hi = e->n_calls;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (e->calls[mid].offset < offset) lo = mid + 1;
        else hi = mid;
    }
    int end = lo;
    while (end < e->n_calls && e->calls[end].offset == offset) end++;
    *n = end - lo;
    return e->calls + lo;
}

/* A line ran in ``frame``, the innermost open node's. A ctypes call raises no event:
   recorded when its line starts. */
static int line_ran(Core *self, Rec *rec, int line, PyFrameObject *frame) {
    if (intset_add(&rec->lines, line) < 0) return -1;
    const CodeEntry *e = rec->entry;
    if (e && e->how == HOW_CTYPES) {
        int n;
        const CtypesCall *c = ctypes_at(e, PyFrame_GetLasti(frame), &n);
        for (int i = 0; i < n; i++) {
            Rec *kid = child(self, rec, &c[i].k);
            if (!kid) return -1;
            kid->count++;
            if (intset_add(&kid->call_lines, c[i].line) < 0) return -1;
        }
    }
    return 0;
}

#ifndef MONITORING

/* Line events only while a frame that wants them is the one executing: the trace
   function is switched in the thread state directly (PyEval_SetTrace would run the
   audit hooks and touch reference counts on every switch). */
static inline void lines(Core *self, int on) {
#ifdef CTRACE_NO_LINES
    on = 0;
#endif
    if (on != self->lines_on) {
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

#else /* MONITORING */

/* 3.12 and newer: the events come from sys.monitoring, to callbacks that are this
   module's C functions. Why not PyEval_SetProfile there: since 3.12 it is itself
   built on sys.monitoring, with a profile function per event on top, and switching a
   trace function on and off per frame (what 3.11 does for lines) re-instruments
   every code object. Here:
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

static int frame_line(Core *self, PyFrameObject *f) {
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

#endif /* MONITORING */

/* ------------------------------------------------------------------ the finished tree */

#define MAX_CACHED_LINE 200000

static PyObject *line_int(Core *self, int v) {
    if (v < 0 || v >= MAX_CACHED_LINE) return PyLong_FromLong(v);
    if (v >= self->n_ints) {
        int n = self->n_ints ? self->n_ints : 1024;
        while (n <= v) n *= 2;
        PyObject **t = PyMem_Realloc(self->ints, sizeof(PyObject *) * n);
        if (!t) return PyErr_NoMemory();
        memset(t + self->n_ints, 0, sizeof(PyObject *) * (n - self->n_ints));
        self->ints = t;
        self->n_ints = n;
    }
    if (!self->ints[v] && !(self->ints[v] = PyLong_FromLong(v))) return NULL;
    Py_INCREF(self->ints[v]);
    return self->ints[v];
}

/* Sorted and without repeats, in place; insertion sort (a node's lines are few). */
static int sort_unique(int *v, int m) {
    for (int i = 1; i < m; i++) {
        int x = v[i], j = i - 1;
        while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
    int u = 0;
    for (int i = 0; i < m; i++)
        if (u == 0 || v[u - 1] != v[i]) v[u++] = v[i];
    return u;
}

static PyObject *sorted_list(Core *self, const IntSet *set, const Rec *r) {
    if (r && set->n == 0 && r->n_statics == 1) /* a branch-free function: its lines, known */
        return PyList_GetSlice(r->statics[0]->static_list, 0, PY_SSIZE_T_MAX);
    int n = set->n;
    for (int i = 0; r && i < r->n_statics; i++) n += r->statics[i]->n_static;
    int local[64];
    int *v = n <= 64 ? local : PyMem_Malloc(sizeof(int) * n);
    if (!v) return PyErr_NoMemory();
    int m = intset_values(set, v);
    for (int i = 0; r && i < r->n_statics; i++)
        for (int j = 0; j < r->statics[i]->n_static; j++) v[m++] = r->statics[i]->static_lines[j];
    if (m > 64) qsort(v, m, sizeof(int), cmp_int);
    int u = sort_unique(v, m);
    PyObject *list = PyList_New(u);
    for (int i = 0; list && i < u; i++) {
        PyObject *x = line_int(self, v[i]);
        if (!x) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, i, x);
    }
    if (v != local) PyMem_Free(v);
    return list;
}

/* Node(frame, count, time_ns, call_lines, lines, children); *kids: its children list
   (borrowed: the node holds it). Where the Python side gave Node's fields, the node is
   object.__new__(Node) with the six attributes set: what Node's generated __init__
   does, without a Python call per node. */
static PyObject *make_node(Core *self, const Rec *r, PyObject **kids) {
    PyObject *args[6] = {NULL};
    PyObject *node = NULL;
    args[0] = r->frame;
    Py_INCREF(args[0]);
    args[1] = PyLong_FromLongLong(r->count);
    args[2] = PyLong_FromLongLong(r->time_ns);
    args[3] = sorted_list(self, &r->call_lines, NULL);
    args[4] = sorted_list(self, &r->lines, r);
    args[5] = PyList_New(r->n_kids); /* filled by to_node, in order */
    if (args[1] && args[2] && args[3] && args[4] && args[5]) {
        PyTypeObject *type = (PyTypeObject *)self->node_type;
        if (self->offsets[0] && (node = type->tp_alloc(type, 0))) {
            /* a slotted Node: its fields are stored where its member descriptors
               read them (object.__setattr__ would look each name up in the type) */
            for (int i = 0; i < 6; i++) {
                *(PyObject **)((char *)node + self->offsets[i]) = args[i];
                if (i != 5) args[i] = NULL; /* the node's reference now; the children list is lent to *kids below */
                else Py_INCREF(args[i]);
            }
        }
        else if (self->fields[0] && !self->offsets[0]) {
            node = type->tp_new(type, self->empty, NULL);
            for (int i = 0; node && i < 6; i++)
                if (PyObject_GenericSetAttr(node, self->fields[i], args[i]) < 0) Py_CLEAR(node);
        }
        else if (!self->offsets[0]) node = PyObject_Vectorcall(self->node_type, args, 6, NULL);
        else node = PyObject_Vectorcall(self->node_type, args, 6, NULL);
    }
    *kids = args[5];
    for (int i = 0; i < 6; i++) Py_XDECREF(args[i]);
    return node;
}

static PyObject *to_node(Core *self, Rec *root) {
    PyObject *kids;
    PyObject *top = make_node(self, root, &kids);
    if (!top) return NULL;
    typedef struct { Rec *rec; PyObject *kids; } Todo;
    int n = 0, cap = 64;
    Todo *todo = PyMem_Malloc(sizeof(Todo) * cap);
    if (!todo) { Py_DECREF(top); return PyErr_NoMemory(); }
    todo[n++] = (Todo){root, kids};
    while (n) {
        Todo t = todo[--n];
        Py_ssize_t i = 0;
        for (Rec *k = t.rec->first; k; k = k->next) {
            PyObject *node = make_node(self, k, &kids);
            if (!node) {
                PyMem_Free(todo);
                Py_DECREF(top);
                return NULL;
            }
            PyList_SET_ITEM(t.kids, i++, node); /* the list's reference */
            if (k->first) {
                if (n == cap) {
                    Todo *g = PyMem_Realloc(todo, sizeof(Todo) * cap * 2);
                    if (!g) { PyMem_Free(todo); Py_DECREF(top); return PyErr_NoMemory(); }
                    todo = g;
                    cap *= 2;
                }
                todo[n++] = (Todo){k, kids};
            }
        }
    }
    PyMem_Free(todo);
    return top;
}

/* The end of a recording: what the records hold is released; the first chunk, the
   children table and the stack are kept for the next recording (a probe records
   thousands of steps: their allocation would be a fixed cost of each). */
static void free_recording(Core *self) {
    while (self->chunk) {
        Chunk *c = self->chunk;
        for (int i = 0; i < c->used; i++) {
            Rec *r = &c->recs[i];
            Py_CLEAR(r->owner);
            intset_free(&r->call_lines);
            intset_free(&r->lines);
            PyMem_Free(r->statics);
            if (r->parent) self->kids.slot[r->slot].v = NULL; /* only the slots used are emptied */
        }
        c->used = 0;
        if (!c->prev) break;
        self->chunk = c->prev;
        PyMem_Free(c);
    }
    self->kids.n = 0;
    self->sp = 0;
    Py_CLEAR(self->classify_code);
    Py_CLEAR(self->classify_c);
    self->recording = 0;
    free_dead(self); /* no record points to them any more */
}

/* ------------------------------------------------------------------ the type */

PyDoc_STRVAR(record_doc,
"record(fn, root_kind, classify_code, classify_c) -> (Node, fn's result)\n\n"
"Call fn() with the C hooks installed and return the call tree rooted at root_kind\n"
"(a _Kind). classify_code(frame) and classify_c(fn) are called once per new code\n"
"object (as long as it lives) or C function (see tracer/collect/ctracer.py).");

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

#ifdef MONITORING
    if (active) {
        PyErr_SetString(PyExc_RuntimeError, "another C collector is recording in this process");
        free_recording(self);
        return NULL;
    }
    if (claim_tool() < 0) {
        free_recording(self);
        return NULL;
    }
    int64_t t0 = now_ns();
    active = self;
    active_thread = pthread_self();
    int hooked = hooks(self, 1);
    self->hook_ns = now_ns() - t0;
    PyObject *result = hooked == 0 ? PyObject_CallNoArgs(args[0]) : NULL;
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
#else
    PyThreadState *ts = self->tstate;
    if (ts->c_profilefunc == profile_cb) {
        /* its profile function would replace the one recording, and be removed at its
           end: the outer tree would stop there */
        PyErr_SetString(PyExc_RuntimeError, "another C collector is recording in this thread");
        free_recording(self);
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
    PyObject *result = PyObject_CallNoArgs(args[0]);
    PyEval_SetProfile(other_profile, other_profile_obj);
    PyEval_SetTrace(other_trace, other_trace_obj);
    Py_XDECREF(other_profile_obj);
    Py_XDECREF(other_trace_obj);
    root->time_ns = now_ns() - t0;
#endif

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
    /* no callback may reach this Core once it starts going: disarmed first, as freeing
       what an entry holds may free other code objects */
    for (size_t i = 0; i < self->codes.cap; i++)
        if (self->codes.slot[i].v) ((CodeRef *)((CodeEntry *)self->codes.slot[i].v)->ref)->core = NULL;
    for (size_t i = 0; i < self->codes.cap; i++) {
        CodeEntry *e = self->codes.slot[i].v;
        if (!e) continue;
        self->codes.slot[i].v = NULL;
        code_entry_free(e);
    }
    free_dead(self);
    for (size_t i = 0; i < self->cfns.cap; i++) {
        CFnEntry *e = self->cfns.slot[i].v;
        if (!e) continue;
        kindref_clear(&e->kept);
        kindref_clear(&e->other);
        Py_XDECREF(e->owner);
        PyMem_Free(e);
    }
    PyMem_Free(self->codes.slot);
    PyMem_Free(self->cfns.slot);
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
     "Sizes of the caches; the last recording's events (profile: calls and returns; trace: lines), trace\n"
     "function switches (3.11), time switching the events on and off (3.12+) and tree building time."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_ctrace.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(Node, fields=None): the event hooks and call tree of one PythonTracer; fields:\n"
    "Node's six field names in its __init__'s order, to build nodes without calling it.",
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
    CodeRefType.tp_base = &_PyWeakref_RefType; /* and its garbage collector support */
    CodeRefType.tp_traverse = _PyWeakref_RefType.tp_traverse;
    CodeRefType.tp_clear = _PyWeakref_RefType.tp_clear;
    if (PyType_Ready(&CodeRefType) < 0) return NULL;
    if (!released_cb && !(released_cb = PyCFunction_New(&released_def, NULL))) return NULL;
    if (!str_is_c && !(str_is_c = PyUnicode_InternFromString("is_c"))) return NULL;
    if (!str_is_ext && !(str_is_ext = PyUnicode_InternFromString("is_ext"))) return NULL;
    if (!str_frame && !(str_frame = PyUnicode_InternFromString("frame"))) return NULL;
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
