/* The finished tree: tracer.trace.Node objects made from a recording's records, children
   in the order they were first seen, exactly as pytrace's _Rec.to_node does. */

#include "ctrace.h"

#include <string.h>

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

PyObject *to_node(Core *self, Rec *root) {
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
