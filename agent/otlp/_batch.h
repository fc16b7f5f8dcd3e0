/* _batch.h -- the SpanBatch builder shared by the C decoders (_wire.c: protobuf, _jsonwalk.c: JSON).
 *
 * Interning tables, the column buffers and the rules of agent/otlp/rules.py (BatchBuilder.add_span,
 * classify, sql_class, valid_region) live here once, so that every C decoder builds its rows by the
 * same code; RULES_VERSION below is the one both extensions report to Python. Only the code moved
 * here from _wire.c; the decoders include this header (each gets its own static copy).
 */
#ifndef CARBONSPAN_BATCH_H
#define CARBONSPAN_BATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Python's seeded bytes hash (SipHash): public from 3.14, exported as _Py_HashBytes before. */
#if PY_VERSION_HEX >= 0x030E0000
#define HASH_BYTES(p, n) Py_HashBuffer((p), (n))
#else
#define HASH_BYTES(p, n) _Py_HashBytes((p), (n))
#endif

/* 2201-01-01T00:00:00Z in ns: a timestamp at or after it is "beyond year 2200" (rules.py). */
#define MAX_TIMESTAMP_NS 7289654400000000000ULL
/* rules.RULES_VERSION: bumped with every change of a rule, so that agent.otlp.fast refuses a
 * stale build instead of silently decoding by old rules. */
#define RULES_VERSION 4

enum { OP_NONE, OP_SELECT, OP_INSERT, OP_UPDATE, OP_DELETE, OP_SQL_OTHER, OP_HTTP, OP_MESSAGING };
enum { C_REGION_INVALID, C_SERVICE_INVALID, C_END_BEFORE_START, C_TS_ABSURD, C_TRACE_INVALID, C_PARENT_INVALID, NCOUNTERS };
/* A span's parent span id: none (a root), a valid id, or present but not a valid id. */
enum { P_ROOT, P_CHILD, P_INVALID };
enum { V_NONE, V_STR, V_INT, V_OTHER };
enum {
    K_CLOUD_REGION, K_DB_SYSTEM, K_DB_SYSTEM_NAME, K_DB_OPERATION_NAME, K_DB_OPERATION,
    K_DB_STATEMENT, K_DB_QUERY_TEXT,
    K_MESSAGING_SYSTEM, K_HTTP_URL, K_URL_FULL, K_SERVER_ADDRESS, K_NET_PEER_NAME,
    K_HTTP_METHOD, K_HTTP_REQUEST_METHOD, K_BODY_SIZE, K_CONTENT_LENGTH,
    N_SPAN_KEYS, K_SERVICE_NAME = N_SPAN_KEYS, N_KEYS
};

typedef struct { const uint8_t *p; Py_ssize_t n; } Str;
typedef struct { int kind; Str s; int64_t i; } Val;

typedef struct { Py_hash_t hash; Py_ssize_t id; } Slot;  /* id -1: empty */
/* items[i] and its SipHash hashes[i] (Python's str hash of it when it is ASCII) */
typedef struct { Slot *slots; size_t mask; Str *items; Py_hash_t *hashes; Py_ssize_t count, cap; } Table;

typedef struct {
    Py_ssize_t n, cap;
    int32_t *service_id, *region_id, *endpoint_id;
    uint8_t *op_class, *is_entry, *is_root;
    int64_t *response_bytes, *start_ns, *duration_ns;
    uint64_t *trace_lo;
} Cols;

typedef struct {
    Val v[N_KEYS];
    uint32_t present;
    int service_valid, region_valid, region_invalid;
    Py_ssize_t service_id, region_id;  /* interned lazily, at the first span that uses them */
} Res;

typedef struct {
    const uint8_t *base;
    Table services, regions, endpoints;
    Cols cols;
    Py_ssize_t counters[NCOUNTERS], rejected, unknown_id;
    int oom;
    /* where _wire.c is, for its error messages (the JSON walker gives up instead) */
    int ctx;
    Py_ssize_t rs, ss, sp, kv;
    char err[320];
} Dec;

static const uint8_t EMPTY[1] = {0};
static const char UNKNOWN_SERVICE[] = "unknown_service";

static int oom(Dec *d) { d->oom = 1; return -1; }

/* ---------------------------------------------------------------- interning */

static int table_init(Table *t) {
    t->mask = 63;
    t->slots = PyMem_RawMalloc(64 * sizeof(Slot));
    t->cap = 32;
    t->items = PyMem_RawMalloc(32 * sizeof(Str));
    t->hashes = PyMem_RawMalloc(32 * sizeof(Py_hash_t));
    t->count = 0;
    if (!t->slots || !t->items || !t->hashes) return -1;
    for (size_t i = 0; i <= t->mask; i++) t->slots[i].id = -1;
    return 0;
}

static void table_free(Table *t) { PyMem_RawFree(t->slots); PyMem_RawFree(t->items); PyMem_RawFree(t->hashes); }

static int table_grow(Table *t) {
    size_t cap = (t->mask + 1) * 2;
    Slot *slots = PyMem_RawMalloc(cap * sizeof(Slot));
    Str *items = PyMem_RawRealloc(t->items, (size_t)t->cap * 2 * sizeof(Str));
    if (items) t->items = items;
    Py_hash_t *hashes = items ? PyMem_RawRealloc(t->hashes, (size_t)t->cap * 2 * sizeof(Py_hash_t)) : NULL;
    if (hashes) { t->hashes = hashes; t->cap *= 2; }
    if (!slots || !items || !hashes) { PyMem_RawFree(slots); return -1; }
    for (size_t i = 0; i < cap; i++) slots[i].id = -1;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].id < 0) continue;
        size_t j = (size_t)t->slots[i].hash & (cap - 1);
        while (slots[j].id >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

/* Tables of at most this many strings are searched by comparing, not hashing: a request's
 * regions (and a small one's services) are looked up once per resource, and a SipHash costs
 * more than a few memcmp. The ids are the same either way (first-use order). */
#define SMALL_TABLE 8

/* The id of s in t, adding it in first-use order; -1 when out of memory. */
static Py_ssize_t intern(Dec *d, Table *t, Str s) {
    if (t->count <= SMALL_TABLE) {
        for (Py_ssize_t i = 0; i < t->count; i++) {
            const Str *have = &t->items[i];
            if (have->n == s.n && (s.n == 0 || memcmp(have->p, s.p, (size_t)s.n) == 0)) return i;
        }
    }
    Py_hash_t h = s.n ? HASH_BYTES(s.p, s.n) : 0;
    size_t j = (size_t)h & t->mask;
    for (; t->slots[j].id >= 0; j = (j + 1) & t->mask) {
        Slot *slot = &t->slots[j];
        Str *have = &t->items[slot->id];
        if (slot->hash == h && have->n == s.n && (s.n == 0 || memcmp(have->p, s.p, (size_t)s.n) == 0))
            return slot->id;
    }
    if ((size_t)(t->count + 1) * 2 > t->mask + 1 || t->count >= t->cap) {
        if (t->count >= INT32_MAX - 1 || table_grow(t)) return oom(d);
        for (j = (size_t)h & t->mask; t->slots[j].id >= 0; j = (j + 1) & t->mask) {}
    }
    t->slots[j].hash = h;
    t->slots[j].id = t->count;
    t->items[t->count] = s;
    t->hashes[t->count] = h;
    return t->count++;
}

/* ---------------------------------------------------------------- the rules (rules.py) */

static int valid_region(const Val *v) {
    if (v->kind != V_STR || v->s.n < 1 || v->s.n > 64) return 0;
    for (Py_ssize_t i = 0; i < v->s.n; i++) {
        uint8_t c = v->s.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

static int is_letter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* rules._first_word: [*start, *end) is the first run of ASCII letters at or after i, after blanks,
 * '(' and comments; 0 when a comment is unterminated. */
static int first_word(Str s, Py_ssize_t i, Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t n = s.n;
    const uint8_t *p = s.p;
    while (i < n) {
        uint8_t c = p[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(') {
            i++;
        } else if (c == '/' && i + 1 < n && p[i + 1] == '*') {
            Py_ssize_t j = i + 2;
            while (j + 1 < n && !(p[j] == '*' && p[j + 1] == '/')) j++;
            if (j + 1 >= n) return 0;
            i = j + 2;
        } else if (c == '-' && i + 1 < n && p[i + 1] == '-') {
            Py_ssize_t j = i + 2;
            while (j < n && p[j] != '\n') j++;
            if (j >= n) return 0;
            i = j + 1;
        } else {
            break;
        }
    }
    Py_ssize_t j = i;
    while (j < n && is_letter(p[j])) j++;
    *start = i;
    *end = j;
    return 1;
}

/* Is the word p[0..len) equal to the upper-case literal w, ignoring ASCII case? */
static int word_is(const uint8_t *p, Py_ssize_t len, const char *w) {
    Py_ssize_t k = 0;
    for (; w[k]; k++) if (k >= len || (char)(p[k] & ~0x20) != w[k]) return 0;  /* letters only */
    return k == len;
}

static int keyword_class(const uint8_t *p, Py_ssize_t len) {
    if (len != 6) return OP_SQL_OTHER;
    if (word_is(p, len, "SELECT")) return OP_SELECT;
    if (word_is(p, len, "INSERT")) return OP_INSERT;
    if (word_is(p, len, "UPDATE")) return OP_UPDATE;
    if (word_is(p, len, "DELETE")) return OP_DELETE;
    return OP_SQL_OTHER;
}

/* rules.sql_class */
static int sql_class(Str s) {
    Py_ssize_t i, j;
    if (!first_word(s, 0, &i, &j)) return OP_SQL_OTHER;
    return keyword_class(s.p + i, j - i);
}

/* rules.operation_class: "BATCH <op>" takes <op>'s class. */
static int operation_class(Str s) {
    Py_ssize_t i, j;
    if (!first_word(s, 0, &i, &j)) return OP_SQL_OTHER;
    if (word_is(s.p + i, j - i, "BATCH") && !first_word(s, j, &i, &j)) return OP_SQL_OTHER;
    return keyword_class(s.p + i, j - i);
}

/* The first of keys a, b holding a non-empty string (rules._text). */
static const Val *text(const Val *v, uint32_t present, int a, int b) {
    if ((present >> a & 1) && v[a].kind == V_STR && v[a].s.n > 0) return &v[a];
    if (b >= 0 && (present >> b & 1) && v[b].kind == V_STR && v[b].s.n > 0) return &v[b];
    return NULL;
}

/* rules.db_class: db.operation.name (or db.operation) when it names SELECT/INSERT/UPDATE/DELETE,
 * else the first keyword of db.query.text (or db.statement), else other. */
static int db_class(const Val *v, uint32_t present) {
    const Val *name = text(v, present, K_DB_OPERATION_NAME, K_DB_OPERATION);
    if (name) {
        int op = operation_class(name->s);
        if (op != OP_SQL_OTHER) return op;
    }
    const Val *statement = text(v, present, K_DB_QUERY_TEXT, K_DB_STATEMENT);
    return statement ? sql_class(statement->s) : OP_SQL_OTHER;
}

/* rules.classify: only the calling side is I/O; a SERVER (2) or CONSUMER (5) span receives an
 * operation its caller already counted (db proxy, message consumer), so it is never db/messaging. */
static int classify(int32_t kind, const Val *v, uint32_t present, int64_t *size) {
    *size = -1;
    if (kind != 2 && kind != 5) {
        if (text(v, present, K_DB_SYSTEM, K_DB_SYSTEM_NAME)) {
            return db_class(v, present);
        }
        if (text(v, present, K_MESSAGING_SYSTEM, -1)) return OP_MESSAGING;
    }
    if (kind == 3 && (text(v, present, K_URL_FULL, K_HTTP_URL) ||
                      (text(v, present, K_SERVER_ADDRESS, K_NET_PEER_NAME) &&
                       text(v, present, K_HTTP_REQUEST_METHOD, K_HTTP_METHOD)))) {
        for (int k = K_BODY_SIZE; k <= K_CONTENT_LENGTH; k++) {
            if ((present >> k & 1) && v[k].kind == V_INT && v[k].i >= 0) { *size = v[k].i; break; }
        }
        return OP_HTTP;
    }
    return OP_NONE;
}

#define KEY(lit) (k.n == (Py_ssize_t)sizeof(lit) - 1 && !memcmp(k.p, lit, sizeof(lit) - 1))
static int key_id(Str k) {
    switch (k.n) {
    case 8: return KEY("http.url") ? K_HTTP_URL : KEY("url.full") ? K_URL_FULL : -1;
    case 9: return KEY("db.system") ? K_DB_SYSTEM : -1;
    case 11: return KEY("http.method") ? K_HTTP_METHOD : -1;
    case 12: return KEY("cloud.region") ? K_CLOUD_REGION : KEY("db.statement") ? K_DB_STATEMENT
                  : KEY("service.name") ? K_SERVICE_NAME : KEY("db.operation") ? K_DB_OPERATION : -1;
    case 13: return KEY("db.query.text") ? K_DB_QUERY_TEXT : KEY("net.peer.name") ? K_NET_PEER_NAME : -1;
    case 14: return KEY("db.system.name") ? K_DB_SYSTEM_NAME : KEY("server.address") ? K_SERVER_ADDRESS : -1;
    case 16: return KEY("messaging.system") ? K_MESSAGING_SYSTEM : -1;
    case 17: return KEY("db.operation.name") ? K_DB_OPERATION_NAME : -1;
    case 19: return KEY("http.request.method") ? K_HTTP_REQUEST_METHOD : -1;
    case 23: return KEY("http.response.body.size") ? K_BODY_SIZE : -1;
    case 28: return KEY("http.response_content_length") ? K_CONTENT_LENGTH : -1;
    default: return -1;
    }
}
#undef KEY

/* The slot of an attribute key the rules read (span keys, or the resource's two), else -1. */
static int wanted(Str key, int for_span) {
    int k = key_id(key);
    if (k < 0 || (for_span ? k >= N_SPAN_KEYS : (k != K_SERVICE_NAME && k != K_CLOUD_REGION))) return -1;
    return k;
}

/* BatchBuilder.resource: what a resource's attributes contribute to its spans. */
static void resource_done(Res *res) {
    const Val *svc = &res->v[K_SERVICE_NAME], *reg = &res->v[K_CLOUD_REGION];
    res->service_valid = (res->present >> K_SERVICE_NAME & 1) && svc->kind == V_STR && svc->s.n > 0;
    res->region_valid = (res->present >> K_CLOUD_REGION & 1) && valid_region(reg);
    res->region_invalid = (res->present >> K_CLOUD_REGION & 1) && !res->region_valid;
}

/* ---------------------------------------------------------------- rows */

static int cols_grow(Cols *c) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : 256;
    if (cap > PY_SSIZE_T_MAX / 16) return -1;
#define GROW(field)                                                            \
    do {                                                                       \
        void *p = PyMem_RawRealloc(c->field, (size_t)cap * sizeof(*c->field)); \
        if (!p) return -1;                                                     \
        c->field = p;                                                          \
    } while (0)
    GROW(service_id); GROW(region_id); GROW(endpoint_id); GROW(op_class); GROW(is_entry); GROW(is_root);
    GROW(response_bytes); GROW(start_ns); GROW(duration_ns); GROW(trace_lo);
#undef GROW
    c->cap = cap;
    return 0;
}

static void cols_free(Cols *c) {
    PyMem_RawFree(c->service_id); PyMem_RawFree(c->region_id); PyMem_RawFree(c->endpoint_id);
    PyMem_RawFree(c->op_class); PyMem_RawFree(c->is_entry); PyMem_RawFree(c->is_root);
    PyMem_RawFree(c->response_bytes);
    PyMem_RawFree(c->start_ns); PyMem_RawFree(c->duration_ns); PyMem_RawFree(c->trace_lo);
}

typedef struct { Str trace, name; uint64_t kind, start, end; int parent; Val v[N_SPAN_KEYS]; uint32_t present; } Span;

/* P_* of a parent span id's bytes (rules.BatchBuilder.add_span): none is a root; 8 bytes not
 * all zero a valid id; any other length, or all zero (invalid per the OTLP spec), invalid. */
static inline int parent_state(const uint8_t *p, Py_ssize_t n) {
    if (n == 0) return P_ROOT;
    if (n != 8) return P_INVALID;
    uint64_t x;
    memcpy(&x, p, 8);
    return x ? P_CHILD : P_INVALID;
}

/* BatchBuilder.add_span of rules.py. */
static int emit(Dec *d, Res *res, const Span *s) {
    int zero = 1;
    if (s->trace.n == 16)
        for (int i = 0; i < 16; i++) zero &= s->trace.p[i] == 0;
    if (zero) { d->rejected++; d->counters[C_TRACE_INVALID]++; return 0; }
    if (s->parent == P_INVALID) d->counters[C_PARENT_INVALID]++;
    Py_ssize_t service;
    if (res->service_valid) {
        if (res->service_id < 0 && (res->service_id = intern(d, &d->services, res->v[K_SERVICE_NAME].s)) < 0) return -1;
        service = res->service_id;
    } else {
        if (d->unknown_id < 0) {
            Str unknown = {(const uint8_t *)UNKNOWN_SERVICE, (Py_ssize_t)sizeof(UNKNOWN_SERVICE) - 1};
            if ((d->unknown_id = intern(d, &d->services, unknown)) < 0) return -1;
        }
        service = d->unknown_id;
        d->counters[C_SERVICE_INVALID]++;
    }
    int own_present = s->present >> K_CLOUD_REGION & 1;
    int own_valid = own_present && valid_region(&s->v[K_CLOUD_REGION]);
    Py_ssize_t region = -1;
    if (own_valid) {
        if ((region = intern(d, &d->regions, s->v[K_CLOUD_REGION].s)) < 0) return -1;
    } else if (res->region_valid) {
        if (res->region_id < 0 && (res->region_id = intern(d, &d->regions, res->v[K_CLOUD_REGION].s)) < 0) return -1;
        region = res->region_id;
    }
    if ((own_present && !own_valid) || (region < 0 && res->region_invalid)) d->counters[C_REGION_INVALID]++;
    uint64_t start = s->start, duration;
    if (start == 0 || start >= MAX_TIMESTAMP_NS) { d->counters[C_TS_ABSURD]++; start = 0; duration = 0; }
    else if (s->end >= MAX_TIMESTAMP_NS) { d->counters[C_TS_ABSURD]++; duration = 0; }
    else if (s->end < start) { d->counters[C_END_BEFORE_START]++; duration = 0; }
    else duration = s->end - start;
    Py_ssize_t endpoint = intern(d, &d->endpoints, s->name);
    if (endpoint < 0) return -1;
    Cols *c = &d->cols;
    if (c->n == c->cap && cols_grow(c)) return oom(d);
    Py_ssize_t i = c->n++;
    int32_t kind = (int32_t)(uint32_t)s->kind;  /* an int32 enum, as protobuf reads it */
    c->service_id[i] = (int32_t)service;
    c->region_id[i] = (int32_t)region;
    c->endpoint_id[i] = (int32_t)endpoint;
    c->op_class[i] = (uint8_t)classify(kind, s->v, s->present, &c->response_bytes[i]);
    c->start_ns[i] = (int64_t)start;
    c->duration_ns[i] = (int64_t)duration;
    uint64_t lo = 0;
    for (int k = 8; k < 16; k++) lo = (lo << 8) | s->trace.p[k];
    c->trace_lo[i] = lo;
    c->is_entry[i] = kind == 2 || kind == 5;
    c->is_root[i] = s->parent == P_ROOT;
    return 0;
}

/* The strings of t as a list; invalid UTF-8 raises `error` naming `what`. */
static PyObject *table_list(Table *t, const char *what, PyObject *error) {
    PyObject *list = PyList_New(t->count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->items[i].p, t->items[i].n, "strict");
        if (!s) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_Format(error, "invalid UTF-8 in a %s (protobuf strings must be UTF-8)", what);
            }
            return NULL;
        }
#ifndef Py_GIL_DISABLED
        /* An ASCII str's hash is SipHash of its bytes, the very hash interning computed:
         * stored now, so that the scorer's and the window's lookups of ~500 services a fan-in
         * request do not compute it again (tests/otlp: hash() equals a fresh copy's). */
        if (PyUnicode_IS_ASCII(s) && ((PyASCIIObject *)s)->hash == -1 && t->hashes[i] != -1)
            ((PyASCIIObject *)s)->hash = t->hashes[i];
#endif
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

static PyObject *column(const void *data, Py_ssize_t n, size_t width) {
    return PyByteArray_FromStringAndSize(n ? (const char *)data : NULL, n * (Py_ssize_t)width);
}

/* (services, regions, endpoints, 10 column bytearrays, 6 counters, rejected) */
static PyObject *result(Dec *d, PyObject *error) {
    Cols *c = &d->cols;
    PyObject *items[15] = {
        table_list(&d->services, "service name", error),
        table_list(&d->regions, "region", error),
        table_list(&d->endpoints, "span name", error),
        column(c->service_id, c->n, 4), column(c->region_id, c->n, 4), column(c->endpoint_id, c->n, 4),
        column(c->op_class, c->n, 1), column(c->response_bytes, c->n, 8), column(c->start_ns, c->n, 8),
        column(c->duration_ns, c->n, 8), column(c->trace_lo, c->n, 8), column(c->is_entry, c->n, 1),
        column(c->is_root, c->n, 1),
        Py_BuildValue("(nnnnnn)", d->counters[0], d->counters[1], d->counters[2], d->counters[3], d->counters[4],
                      d->counters[5]),
        PyLong_FromSsize_t(d->rejected),
    };
    PyObject *out = NULL;
    int ok = 1;
    for (int i = 0; i < 15; i++) ok &= items[i] != NULL;
    if (ok) out = PyTuple_New(15);
    for (int i = 0; i < 15; i++) {
        if (out) PyTuple_SET_ITEM(out, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    return out;
}

#endif
