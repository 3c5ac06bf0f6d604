/* The classification caches: what a code object or a C function is, decided once by
   PythonTracer's methods (called back from here) and kept by pointer. */

#include "ctrace.h"

static PyObject *str_is_c, *str_is_ext, *str_frame; /* interned attribute names */

int kindref(PyObject *kind, KindRef *out) {
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

void kindref_clear(KindRef *k) {
    Py_CLEAR(k->kind);
    Py_CLEAR(k->frame);
}

/* The caches keep no code object and no owner of a C function alive: a probe that
   makes new functions or classes step after step (exec, closures, generated code,
   classes made at run time) would otherwise keep them all. Each entry has a weak
   reference to its code object or owner, an EntryRef that knows the entry: when the
   object dies, before its memory can be reused for another, the callback takes the
   entry out of its cache. The entry itself (records of a recording may still point
   to it) is freed at the end of the recording, or of the next one. */
typedef struct {
    PyWeakReference ref;
    Core *core;      /* borrowed, NULL once the entry is out: the Core disarms its EntryRefs before it goes */
    CodeEntry *code; /* the entry: a code object's, or */
    CFnEntry *cfn;   /* a C function owner's */
} EntryRef;

static PyTypeObject EntryRefType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer.collect._ctrace.EntryRef",
    .tp_basicsize = sizeof(EntryRef),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A weak reference to a code object or a C function's owner the C core has classified.",
};

static PyObject *released_cb; /* released(), as a function object */

static PyObject *released(PyObject *Py_UNUSED(m), PyObject *wr) {
    EntryRef *r = (EntryRef *)wr;
    Core *self = r->core;
    if (!self) Py_RETURN_NONE;
    r->core = NULL;
    if (r->code) {
        Slot *s = pm_slot(&self->codes, r->code->code, NULL);
        if (s->v == r->code) pm_remove(&self->codes, s);
        r->code->next_dead = self->dead;
        self->dead = r->code;
    }
    else {
        Slot *s = pm_slot(&self->cfns, r->cfn->owner, r->cfn->ml);
        if (s->v == r->cfn) pm_remove(&self->cfns, s);
        r->cfn->next_dead = self->dead_cfns;
        self->dead_cfns = r->cfn;
    }
    Py_RETURN_NONE;
}

static PyMethodDef released_def = {"_released", released, METH_O, NULL};

/* A weak reference to obj that takes the entry out of its cache when obj dies. */
static PyObject *entry_ref(Core *self, PyObject *obj, CodeEntry *code, CFnEntry *cfn) {
    PyObject *ref = PyObject_CallFunctionObjArgs((PyObject *)&EntryRefType, obj, released_cb, NULL);
    if (ref) {
        ((EntryRef *)ref)->core = self;
        ((EntryRef *)ref)->code = code;
        ((EntryRef *)ref)->cfn = cfn;
    }
    return ref;
}

static void disarm(PyObject *ref) {
    if (ref) ((EntryRef *)ref)->core = NULL;
}

static void code_entry_free(CodeEntry *e) {
    disarm(e->ref);
    Py_CLEAR(e->ref);
    kindref_clear(&e->k);
    for (int i = 0; i < e->n_calls; i++) kindref_clear(&e->calls[i].k);
    PyMem_Free(e->calls);
    PyMem_Free(e->static_lines);
    PyMem_Free(e->line_at);
    Py_XDECREF(e->static_list);
    PyMem_Free(e);
}

static void cfn_entry_free(CFnEntry *e) {
    if (!e->strong) disarm(e->ref);
    Py_CLEAR(e->ref);
    kindref_clear(&e->kept);
    kindref_clear(&e->other);
    PyMem_Free(e);
}

void free_dead(Core *self) {
    while (self->dead || self->dead_cfns) { /* freeing one may add others */
        if (self->dead) {
            CodeEntry *e = self->dead;
            self->dead = e->next_dead;
            code_entry_free(e);
        }
        else {
            CFnEntry *e = self->dead_cfns;
            self->dead_cfns = e->next_dead;
            cfn_entry_free(e);
        }
    }
}

static int code_insert(Core *self, CodeEntry *e, PyObject *code) {
    if (!(e->ref = entry_ref(self, code, e, NULL))) return -1;
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
CodeEntry *classify_code(Core *self, PyFrameObject *frame, PyObject *code) {
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

static int cfn_insert(Core *self, CFnEntry *e, PyObject *owner) {
    if (owner) {
        e->ref = entry_ref(self, owner, NULL, e);
        if (!e->ref) { /* an owner without weak references (none is known): kept alive instead */
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
            PyErr_Clear();
            e->ref = Py_NewRef(owner);
            e->strong = 1;
        }
    }
    return pm_fill(&self->cfns, pm_slot(&self->cfns, owner, e->ml), owner, e->ml, e, NULL);
}

int classify_c_call(Core *self, PyObject *fn, KindRef *kept, KindRef *other) {
    PyObject *res = PyObject_CallOneArg(self->classify_c, fn);
    if (!res) return -1;
    int err = kindref(PyTuple_GET_ITEM(res, 0), kept);
    if (!err && (err = kindref(PyTuple_GET_ITEM(res, 1), other)) < 0) kindref_clear(kept);
    Py_DECREF(res);
    return err;
}

CFnEntry *classify_c(Core *self, PyObject *fn, PyObject *owner, const void *ml) {
    CFnEntry *e = PyMem_Calloc(1, sizeof(CFnEntry));
    if (!e) { PyErr_NoMemory(); return NULL; }
    if (classify_c_call(self, fn, &e->kept, &e->other) < 0) { PyMem_Free(e); return NULL; }
    e->owner = owner;
    e->ml = ml;
    if (cfn_insert(self, e, owner) < 0) {
        cfn_entry_free(e); /* kept out of the cache */
        return NULL;
    }
    return e;
}

void cache_clear(Core *self) {
    /* no callback may reach this Core once it starts going: disarmed first, as freeing
       what an entry holds may free other code objects and owners */
    for (size_t i = 0; i < self->codes.cap; i++)
        if (self->codes.slot[i].v) disarm(((CodeEntry *)self->codes.slot[i].v)->ref);
    for (size_t i = 0; i < self->cfns.cap; i++) {
        CFnEntry *e = self->cfns.slot[i].v;
        if (e && !e->strong) disarm(e->ref);
    }
    for (size_t i = 0; i < self->codes.cap; i++) {
        CodeEntry *e = self->codes.slot[i].v;
        if (!e) continue;
        self->codes.slot[i].v = NULL;
        code_entry_free(e);
    }
    for (size_t i = 0; i < self->cfns.cap; i++) {
        CFnEntry *e = self->cfns.slot[i].v;
        if (!e) continue;
        self->cfns.slot[i].v = NULL;
        cfn_entry_free(e);
    }
    free_dead(self);
    PyMem_Free(self->codes.slot);
    PyMem_Free(self->cfns.slot);
    self->codes = self->cfns = (PtrMap){NULL, 0, 0};
}

int cache_ready(void) {
    EntryRefType.tp_base = &_PyWeakref_RefType; /* and its garbage collector support */
    EntryRefType.tp_traverse = _PyWeakref_RefType.tp_traverse;
    EntryRefType.tp_clear = _PyWeakref_RefType.tp_clear;
    if (PyType_Ready(&EntryRefType) < 0) return -1;
    if (!released_cb && !(released_cb = PyCFunction_New(&released_def, NULL))) return -1;
    if (!str_is_c && !(str_is_c = PyUnicode_InternFromString("is_c"))) return -1;
    if (!str_is_ext && !(str_is_ext = PyUnicode_InternFromString("is_ext"))) return -1;
    if (!str_frame && !(str_frame = PyUnicode_InternFromString("frame"))) return -1;
    return 0;
}
