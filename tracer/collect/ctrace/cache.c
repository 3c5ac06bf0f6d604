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
    .tp_name = "tracer.collect._ctrace.CodeRef",
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

void free_dead(Core *self) {
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

static int cfn_insert(Core *self, CFnEntry *e) {
    return pm_fill(&self->cfns, pm_slot(&self->cfns, e->owner, e->ml), e->owner, e->ml, e, NULL);
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


static void cfn_entry_free(CFnEntry *e) {
    kindref_clear(&e->kept);
    kindref_clear(&e->other);
    Py_XDECREF(e->owner);
    PyMem_Free(e);
}

void cache_clear(Core *self) {
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
        self->cfns.slot[i].v = NULL;
        cfn_entry_free(e);
    }
    PyMem_Free(self->codes.slot);
    PyMem_Free(self->cfns.slot);
    self->codes = self->cfns = (PtrMap){NULL, 0, 0};
}

int cache_ready(void) {
    CodeRefType.tp_base = &_PyWeakref_RefType; /* and its garbage collector support */
    CodeRefType.tp_traverse = _PyWeakref_RefType.tp_traverse;
    CodeRefType.tp_clear = _PyWeakref_RefType.tp_clear;
    if (PyType_Ready(&CodeRefType) < 0) return -1;
    if (!released_cb && !(released_cb = PyCFunction_New(&released_def, NULL))) return -1;
    if (!str_is_c && !(str_is_c = PyUnicode_InternFromString("is_c"))) return -1;
    if (!str_is_ext && !(str_is_ext = PyUnicode_InternFromString("is_ext"))) return -1;
    if (!str_frame && !(str_frame = PyUnicode_InternFromString("frame"))) return -1;
    return 0;
}
