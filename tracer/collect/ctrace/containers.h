/* The C core's two containers (tracer/collect/ctrace/ctrace.h says what the core is):
   a map keyed by a pair of pointers, and a set of ints (line numbers). Look-ups run on
   every event, so they are inline here; growing and the rest are in containers.c. */

#ifndef CTRACE_CONTAINERS_H
#define CTRACE_CONTAINERS_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <limits.h>
#include <stdint.h>

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

int pm_init(PtrMap *m, size_t cap);
/* Store v in the empty slot s (from pm_slot); grows at half full. Values that keep
   their slot's index (records) are told it through on_move. */
int pm_fill(PtrMap *m, Slot *s, const void *a, const void *b, void *v, void (*on_move)(void *, Slot *, Slot *));
/* Empty the filled slot s. */
void pm_remove(PtrMap *m, Slot *s);

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

int intset_grow(IntSet *s);

static inline int intset_add(IntSet *s, int v) {
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
int intset_values(const IntSet *s, int *v);
void intset_free(IntSet *s);

/* qsort's comparison of ints */
int cmp_int(const void *a, const void *b);

#endif
