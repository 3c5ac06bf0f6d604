/* The containers: what containers.h declares. */

#include "containers.h"

#include <string.h>

/* ------------------------------------------------------------------ pointer maps */

int pm_init(PtrMap *m, size_t cap) {
    m->slot = PyMem_Calloc(cap, sizeof(Slot));
    if (!m->slot) { PyErr_NoMemory(); return -1; }
    m->cap = cap;
    m->n = 0;
    return 0;
}

int pm_fill(PtrMap *m, Slot *s, const void *a, const void *b, void *v, void (*on_move)(void *, Slot *, Slot *)) {
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
void pm_remove(PtrMap *m, Slot *s) {
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

int intset_grow(IntSet *s) {
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

int intset_values(const IntSet *s, int *v) {
    if (!s->slot) {
        memcpy(v, s->small, sizeof(int) * s->n);
        return s->n;
    }
    int m = 0;
    for (int i = 0; i < s->cap; i++)
        if (s->slot[i] != EMPTY) v[m++] = s->slot[i];
    return m;
}

void intset_free(IntSet *s) {
    PyMem_Free(s->slot);
    s->slot = NULL;
    s->cap = s->n = 0;
}

int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
