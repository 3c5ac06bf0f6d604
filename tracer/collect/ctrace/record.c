/* One recording's records, and what both event front-ends (3.11's profile and
   trace functions in profile.c, 3.12's sys.monitoring callbacks in monitoring.c) do
   with an event once they know what it is. */

#include "ctrace.h"

#include <string.h>

/* ------------------------------------------------------------------ records */

Rec *rec_new(Core *self, const KindRef *k) {
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

/* ------------------------------------------------------------------ events */

int enter(Core *self, CodeEntry *e, PyFrameObject *frame) {
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

int open_c(Core *self, Rec *top, const KindRef *k, PyFrameObject *frame, int line) {
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
int line_ran(Core *self, Rec *rec, int line, PyFrameObject *frame) {
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


/* The end of a recording: what the records hold is released; the first chunk, the
   children table and the stack are kept for the next recording (a probe records
   thousands of steps: their allocation would be a fixed cost of each). */
void free_recording(Core *self) {
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
