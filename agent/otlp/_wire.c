/* _wire.c -- the fast OTLP decoder: ExportTraceServiceRequest wire bytes -> SpanBatch columns.
 *
 * Why C: decoding is the whole cost of scoring (the columns make scoring nearly free), and a
 * per-span Python loop over protobuf objects reaches ~0.33 M spans/s. This reads the protobuf
 * wire format directly, descends only into the messages that hold the facts the rules in
 * agent/batch.py name (resource service.name/cloud.region; span trace_id, name, kind, start,
 * end and the attributes of agent.otlp.rules.SPAN_KEYS) and skips every other field by its
 * wire type without looking inside. It mirrors agent/otlp/rules.py line for line; the
 * differential tests in tests/otlp hold both to the same batches.
 *
 * Hostile input: every varint is at most 10 bytes, every length is checked against the end of
 * its enclosing message before use, nesting is fixed (request > resource_spans > scope_spans >
 * span > attribute > value; array/kvlist values are skipped, never descended into), groups are
 * refused. The scan creates no Python objects and runs without the GIL; strings are interned
 * into C hash tables keyed by (pointer, length) into the input and keyed with Python's seeded
 * hash (SipHash), so crafted collisions cannot make interning quadratic. Python strings are
 * made once per distinct string at the end (UTF-8 checked there).
 */
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
#define RULES_VERSION 2

enum { OP_NONE, OP_SELECT, OP_INSERT, OP_UPDATE, OP_DELETE, OP_SQL_OTHER, OP_HTTP, OP_MESSAGING };
enum { C_REGION_INVALID, C_SERVICE_INVALID, C_END_BEFORE_START, C_TS_ABSURD, C_TRACE_INVALID, NCOUNTERS };
enum { V_NONE, V_STR, V_INT, V_OTHER };
enum {
    K_CLOUD_REGION, K_DB_SYSTEM, K_DB_SYSTEM_NAME, K_DB_STATEMENT, K_DB_QUERY_TEXT,
    K_MESSAGING_SYSTEM, K_HTTP_URL, K_URL_FULL, K_SERVER_ADDRESS, K_NET_PEER_NAME,
    K_HTTP_METHOD, K_HTTP_REQUEST_METHOD, K_BODY_SIZE, K_CONTENT_LENGTH,
    N_SPAN_KEYS, K_SERVICE_NAME = N_SPAN_KEYS, N_KEYS
};
enum { CTX_REQUEST, CTX_RS, CTX_RESOURCE, CTX_RES_ATTR, CTX_SS, CTX_SPAN, CTX_SPAN_ATTR };

typedef struct { const uint8_t *p; Py_ssize_t n; } Str;
typedef struct { int kind; Str s; int64_t i; } Val;

typedef struct { Py_hash_t hash; Py_ssize_t id; } Slot;  /* id -1: empty */
typedef struct { Slot *slots; size_t mask; Str *items; Py_ssize_t count, cap; } Table;

typedef struct {
    Py_ssize_t n, cap;
    int32_t *service_id, *region_id, *endpoint_id;
    uint8_t *op_class, *is_entry;
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
    int ctx;
    Py_ssize_t rs, ss, sp, kv;
    int oom;
    char err[320];
} Dec;

static PyObject *WireError;
static const uint8_t EMPTY[1] = {0};
static const char UNKNOWN_SERVICE[] = "unknown_service";

/* ---------------------------------------------------------------- errors */

static void format_path(const Dec *d, char *out, size_t size) {
    switch (d->ctx) {
    case CTX_REQUEST: snprintf(out, size, "the request"); break;
    case CTX_RS: snprintf(out, size, "resource_spans[%zd]", d->rs); break;
    case CTX_RESOURCE: snprintf(out, size, "resource_spans[%zd].resource", d->rs); break;
    case CTX_RES_ATTR:
        snprintf(out, size, "resource_spans[%zd].resource.attributes[%zd]", d->rs, d->kv); break;
    case CTX_SS: snprintf(out, size, "resource_spans[%zd].scope_spans[%zd]", d->rs, d->ss); break;
    case CTX_SPAN:
        snprintf(out, size, "resource_spans[%zd].scope_spans[%zd].spans[%zd]", d->rs, d->ss, d->sp);
        break;
    default:
        snprintf(out, size, "resource_spans[%zd].scope_spans[%zd].spans[%zd].attributes[%zd]",
                 d->rs, d->ss, d->sp, d->kv);
    }
}

static int fail(Dec *d, const uint8_t *at, const char *fmt, ...) {
    char what[96], path[160];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    format_path(d, path, sizeof path);
    snprintf(d->err, sizeof d->err, "%s at byte %zd in %s", what, (Py_ssize_t)(at - d->base), path);
    return -1;
}

static int oom(Dec *d) { d->oom = 1; return -1; }

/* ---------------------------------------------------------------- wire primitives */

static inline int rd_varint(Dec *d, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end) return fail(d, *pp, "truncated varint");
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *pp = p; *out = v; return 0; }
    }
    return fail(d, *pp, "varint longer than 10 bytes");
}

static inline int rd_tag(Dec *d, const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt) {
    const uint8_t *at = *pp;
    uint64_t v = 0;
    if (at < end && *at < 0x80) { v = *at; *pp = at + 1; }  /* one-byte tags: the common case */
    else if (rd_varint(d, pp, end, &v)) return -1;
    if ((v >> 3) == 0 || (v >> 3) > 0x1FFFFFFF) return fail(d, at, "invalid field number %llu", (unsigned long long)(v >> 3));
    *field = (uint32_t)(v >> 3);
    *wt = (int)(v & 7);
    return 0;
}

/* A length-delimited payload; errors point at the field's tag (tag_at). */
static inline int rd_len(Dec *d, const uint8_t **pp, const uint8_t *end, Str *out, const uint8_t *tag_at) {
    const uint8_t *at = tag_at;
    uint64_t n = 0;
    if (*pp < end && **pp < 0x80) n = *(*pp)++;  /* one-byte lengths: the common case */
    else if (rd_varint(d, pp, end, &n)) return -1;
    if (n > (uint64_t)(end - *pp)) return fail(d, at, "truncated length-delimited field (%llu bytes declared, %zd left)", (unsigned long long)n, (Py_ssize_t)(end - *pp));
    out->p = *pp;
    out->n = (Py_ssize_t)n;
    *pp += n;
    return 0;
}

static inline int rd_fixed64(Dec *d, const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (end - p < 8) return fail(d, p, "truncated 64-bit field");
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    *out = v;
    *pp = p + 8;
    return 0;
}

static int skip(Dec *d, const uint8_t **pp, const uint8_t *end, int wt, const uint8_t *tag_at) {
    uint64_t v = 0;
    Str s;
    switch (wt) {
    case 0: return rd_varint(d, pp, end, &v);
    case 1: return rd_fixed64(d, pp, end, &v);
    case 2: return rd_len(d, pp, end, &s, tag_at);
    case 5:
        if (end - *pp < 4) return fail(d, *pp, "truncated 32-bit field");
        *pp += 4;
        return 0;
    case 3: case 4: return fail(d, tag_at, "unsupported group wire type %d", wt);
    default: return fail(d, tag_at, "invalid wire type %d", wt);
    }
}

/* ---------------------------------------------------------------- interning */

static int table_init(Table *t) {
    t->mask = 63;
    t->slots = PyMem_RawMalloc(64 * sizeof(Slot));
    t->cap = 32;
    t->items = PyMem_RawMalloc(32 * sizeof(Str));
    t->count = 0;
    if (!t->slots || !t->items) return -1;
    for (size_t i = 0; i <= t->mask; i++) t->slots[i].id = -1;
    return 0;
}

static void table_free(Table *t) { PyMem_RawFree(t->slots); PyMem_RawFree(t->items); }

static int table_grow(Table *t) {
    size_t cap = (t->mask + 1) * 2;
    Slot *slots = PyMem_RawMalloc(cap * sizeof(Slot));
    Str *items = PyMem_RawRealloc(t->items, (size_t)t->cap * 2 * sizeof(Str));
    if (items) { t->items = items; t->cap *= 2; }
    if (!slots || !items) { PyMem_RawFree(slots); return -1; }
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

/* The id of s in t, adding it in first-use order; -1 when out of memory. */
static Py_ssize_t intern(Dec *d, Table *t, Str s) {
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

static int sql_class(Str s) {
    Py_ssize_t i = 0, n = s.n;
    const uint8_t *p = s.p;
    while (i < n) {
        uint8_t c = p[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(') {
            i++;
        } else if (c == '/' && i + 1 < n && p[i + 1] == '*') {
            Py_ssize_t j = i + 2;
            while (j + 1 < n && !(p[j] == '*' && p[j + 1] == '/')) j++;
            if (j + 1 >= n) return OP_SQL_OTHER;
            i = j + 2;
        } else if (c == '-' && i + 1 < n && p[i + 1] == '-') {
            Py_ssize_t j = i + 2;
            while (j < n && p[j] != '\n') j++;
            if (j >= n) return OP_SQL_OTHER;
            i = j + 1;
        } else {
            break;
        }
    }
    Py_ssize_t j = i;
    while (j < n && is_letter(p[j])) j++;
    if (j - i != 6) return OP_SQL_OTHER;
    char word[7];
    for (int k = 0; k < 6; k++) word[k] = (char)(p[i + k] & ~0x20);  /* ASCII upper case */
    word[6] = 0;
    if (!strcmp(word, "SELECT")) return OP_SELECT;
    if (!strcmp(word, "INSERT")) return OP_INSERT;
    if (!strcmp(word, "UPDATE")) return OP_UPDATE;
    if (!strcmp(word, "DELETE")) return OP_DELETE;
    return OP_SQL_OTHER;
}

/* The first of keys a, b holding a non-empty string (rules._text). */
static const Val *text(const Val *v, uint32_t present, int a, int b) {
    if ((present >> a & 1) && v[a].kind == V_STR && v[a].s.n > 0) return &v[a];
    if (b >= 0 && (present >> b & 1) && v[b].kind == V_STR && v[b].s.n > 0) return &v[b];
    return NULL;
}

/* rules.classify: only the calling side is I/O; a SERVER (2) or CONSUMER (5) span receives an
 * operation its caller already counted (db proxy, message consumer), so it is never db/messaging. */
static int classify(int32_t kind, const Val *v, uint32_t present, int64_t *size) {
    *size = -1;
    if (kind != 2 && kind != 5) {
        if (text(v, present, K_DB_SYSTEM, K_DB_SYSTEM_NAME)) {
            const Val *statement = text(v, present, K_DB_QUERY_TEXT, K_DB_STATEMENT);
            return statement ? sql_class(statement->s) : OP_SQL_OTHER;
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
                  : KEY("service.name") ? K_SERVICE_NAME : -1;
    case 13: return KEY("db.query.text") ? K_DB_QUERY_TEXT : KEY("net.peer.name") ? K_NET_PEER_NAME : -1;
    case 14: return KEY("db.system.name") ? K_DB_SYSTEM_NAME : KEY("server.address") ? K_SERVER_ADDRESS : -1;
    case 16: return KEY("messaging.system") ? K_MESSAGING_SYSTEM : -1;
    case 19: return KEY("http.request.method") ? K_HTTP_REQUEST_METHOD : -1;
    case 23: return KEY("http.response.body.size") ? K_BODY_SIZE : -1;
    case 28: return KEY("http.response_content_length") ? K_CONTENT_LENGTH : -1;
    default: return -1;
    }
}
#undef KEY

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
    GROW(service_id); GROW(region_id); GROW(endpoint_id); GROW(op_class); GROW(is_entry);
    GROW(response_bytes); GROW(start_ns); GROW(duration_ns); GROW(trace_lo);
#undef GROW
    c->cap = cap;
    return 0;
}

static void cols_free(Cols *c) {
    PyMem_RawFree(c->service_id); PyMem_RawFree(c->region_id); PyMem_RawFree(c->endpoint_id);
    PyMem_RawFree(c->op_class); PyMem_RawFree(c->is_entry); PyMem_RawFree(c->response_bytes);
    PyMem_RawFree(c->start_ns); PyMem_RawFree(c->duration_ns); PyMem_RawFree(c->trace_lo);
}

typedef struct { Str trace, name; uint64_t kind, start, end; Val v[N_SPAN_KEYS]; uint32_t present; } Span;

/* BatchBuilder.add_span of rules.py. */
static int emit(Dec *d, Res *res, const Span *s) {
    int zero = 1;
    if (s->trace.n == 16)
        for (int i = 0; i < 16; i++) zero &= s->trace.p[i] == 0;
    if (zero) { d->rejected++; d->counters[C_TRACE_INVALID]++; return 0; }
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
    return 0;
}

/* ---------------------------------------------------------------- messages */

static int any_value(Dec *d, Str body, Val *v) {
    const uint8_t *p = body.p, *end = p + body.n;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; uint64_t x = 0; Str s = {EMPTY, 0};
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) { if (rd_len(d, &p, end, &s, at)) return -1; v->kind = V_STR; v->s = s; }
        else if (f == 3 && wt == 0) { if (rd_varint(d, &p, end, &x)) return -1; v->kind = V_INT; v->i = (int64_t)x; }
        else if (((f == 2 || f == 8) && wt == 0) || (f == 4 && wt == 1) || (f >= 5 && f <= 7 && wt == 2)) {
            if (skip(d, &p, end, wt, at)) return -1;
            v->kind = V_OTHER;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return 0;
}

static int wanted(Str key, int for_span) {
    int k = key_id(key);
    if (k < 0 || (for_span ? k >= N_SPAN_KEYS : (k != K_SERVICE_NAME && k != K_CLOUD_REGION))) return -1;
    return k;
}

/* One KeyValue: store its value under its key when the key is one the rules read.
 * The key nearly always comes first, so the value of a key the rules ignore is skipped
 * unread; if a wanted key turns up after a skipped value (legal, never seen in practice),
 * the values are read in a second pass. */
static int key_value(Dec *d, Str body, Val *slots, uint32_t *present, int for_span) {
    const uint8_t *p = body.p, *end = p + body.n;
    Str key = {EMPTY, 0};
    Val v = {V_NONE, {EMPTY, 0}, 0};
    int k = -1, have_key = 0, skipped = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) {
            if (rd_len(d, &p, end, &key, at)) return -1;
            k = wanted(key, for_span);
            have_key = 1;
        } else if (f == 2 && wt == 2) {
            if (rd_len(d, &p, end, &s, at)) return -1;
            if (have_key && k < 0) skipped = 1;
            else if (any_value(d, s, &v)) return -1;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    k = wanted(key, for_span);
    if (k < 0) return 0;
    if (skipped) {  /* second pass: every value, in order (the structure is already checked) */
        v.kind = V_NONE;
        for (p = body.p; p < end;) {
            const uint8_t *at = p;
            uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
            if (rd_tag(d, &p, end, &f, &wt)) return -1;
            if (f == 2 && wt == 2) { if (rd_len(d, &p, end, &s, at) || any_value(d, s, &v)) return -1; }
            else if (skip(d, &p, end, wt, at)) return -1;
        }
    }
    if (v.kind == V_NONE) v.kind = V_OTHER;  /* a key without a value is present, not a string */
    slots[k] = v;
    *present |= 1u << k;
    return 0;
}

static int resource(Dec *d, Str body, Res *res) {
    const uint8_t *p = body.p, *end = p + body.n;
    d->ctx = CTX_RESOURCE;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) {
            if (rd_len(d, &p, end, &s, at)) return -1;
            d->ctx = CTX_RES_ATTR;
            if (key_value(d, s, res->v, &res->present, 0)) return -1;
            d->ctx = CTX_RESOURCE;
            d->kv++;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return 0;
}

static int span(Dec *d, Str body, Res *res) {
    const uint8_t *p = body.p, *end = p + body.n;
    Span s;
    s.trace.p = s.name.p = EMPTY;
    s.trace.n = s.name.n = 0;
    s.kind = s.start = s.end = 0;
    s.present = 0;
    d->ctx = CTX_SPAN;
    d->kv = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str a = {EMPTY, 0};
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) { if (rd_len(d, &p, end, &s.trace, at)) return -1; }
        else if (f == 5 && wt == 2) { if (rd_len(d, &p, end, &s.name, at)) return -1; }
        else if (f == 6 && wt == 0) { if (rd_varint(d, &p, end, &s.kind)) return -1; }
        else if (f == 7 && wt == 1) { if (rd_fixed64(d, &p, end, &s.start)) return -1; }
        else if (f == 8 && wt == 1) { if (rd_fixed64(d, &p, end, &s.end)) return -1; }
        else if (f == 9 && wt == 2) {
            if (rd_len(d, &p, end, &a, at)) return -1;
            d->ctx = CTX_SPAN_ATTR;
            if (key_value(d, a, s.v, &s.present, 1)) return -1;
            d->ctx = CTX_SPAN;
            d->kv++;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return emit(d, res, &s);
}

static int scope_spans(Dec *d, Str body, Res *res) {
    const uint8_t *p = body.p, *end = p + body.n;
    d->sp = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        d->ctx = CTX_SS;
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 2 && wt == 2) {
            if (rd_len(d, &p, end, &s, at) || span(d, s, res)) return -1;
            d->sp++;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return 0;
}

/* A ResourceSpans: resource first (it may come after the spans on the wire), then spans. */
static int resource_spans(Dec *d, Str body) {
    const uint8_t *p = body.p, *end = p + body.n;
    Res res;
    res.present = 0;
    res.service_id = res.region_id = -1;
    d->kv = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        d->ctx = CTX_RS;
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) { if (rd_len(d, &p, end, &s, at) || resource(d, s, &res)) return -1; }
        else if (skip(d, &p, end, wt, at)) return -1;
    }
    const Val *svc = &res.v[K_SERVICE_NAME], *reg = &res.v[K_CLOUD_REGION];
    res.service_valid = (res.present >> K_SERVICE_NAME & 1) && svc->kind == V_STR && svc->s.n > 0;
    res.region_valid = (res.present >> K_CLOUD_REGION & 1) && valid_region(reg);
    res.region_invalid = (res.present >> K_CLOUD_REGION & 1) && !res.region_valid;
    d->ss = 0;
    for (p = body.p; p < end;) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        d->ctx = CTX_RS;
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 2 && wt == 2) {
            if (rd_len(d, &p, end, &s, at) || scope_spans(d, s, &res)) return -1;
            d->ss++;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return 0;
}

static int request(Dec *d, Str body) {
    const uint8_t *p = body.p, *end = p + body.n;
    d->rs = 0;
    while (p < end) {
        const uint8_t *at = p;
        uint32_t f = 0; int wt = 0; Str s = {EMPTY, 0};
        d->ctx = CTX_REQUEST;
        if (rd_tag(d, &p, end, &f, &wt)) return -1;
        if (f == 1 && wt == 2) {
            if (rd_len(d, &p, end, &s, at) || resource_spans(d, s)) return -1;
            d->rs++;
        } else if (skip(d, &p, end, wt, at)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- Python */

static PyObject *table_list(Table *t, const char *what) {
    PyObject *list = PyList_New(t->count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->items[i].p, t->items[i].n, "strict");
        if (!s) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                PyErr_Format(WireError, "invalid UTF-8 in a %s (protobuf strings must be UTF-8)", what);
            }
            return NULL;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

static PyObject *column(const void *data, Py_ssize_t n, size_t width) {
    return PyByteArray_FromStringAndSize(n ? (const char *)data : NULL, n * (Py_ssize_t)width);
}

static PyObject *result(Dec *d) {
    Cols *c = &d->cols;
    PyObject *items[14] = {
        table_list(&d->services, "service name"),
        table_list(&d->regions, "region"),
        table_list(&d->endpoints, "span name"),
        column(c->service_id, c->n, 4), column(c->region_id, c->n, 4), column(c->endpoint_id, c->n, 4),
        column(c->op_class, c->n, 1), column(c->response_bytes, c->n, 8), column(c->start_ns, c->n, 8),
        column(c->duration_ns, c->n, 8), column(c->trace_lo, c->n, 8), column(c->is_entry, c->n, 1),
        Py_BuildValue("(nnnnn)", d->counters[0], d->counters[1], d->counters[2], d->counters[3], d->counters[4]),
        PyLong_FromSsize_t(d->rejected),
    };
    PyObject *out = NULL;
    int ok = 1;
    for (int i = 0; i < 14; i++) ok &= items[i] != NULL;
    if (ok) out = PyTuple_New(14);
    for (int i = 0; i < 14; i++) {
        if (out) PyTuple_SET_ITEM(out, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    return out;
}

static PyObject *decode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Dec d;
    memset(&d, 0, sizeof d);
    d.base = view.buf;
    d.unknown_id = -1;
    PyObject *out = NULL;
    if (table_init(&d.services) || table_init(&d.regions) || table_init(&d.endpoints)) {
        PyErr_NoMemory();
        goto done;
    }
    Str body = {view.len ? (const uint8_t *)view.buf : EMPTY, view.len};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = request(&d, body);
    Py_END_ALLOW_THREADS
    if (rc == 0) out = result(&d);
    else if (d.oom) PyErr_NoMemory();
    else PyErr_SetString(WireError, d.err);
done:
    table_free(&d.services);
    table_free(&d.regions);
    table_free(&d.endpoints);
    cols_free(&d.cols);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O,
     "decode(data) -> (services, regions, endpoints, 9 column bytearrays, counters, rejected)\n\n"
     "Decode a serialized ExportTraceServiceRequest; raises WireError on malformed input."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "Fast OTLP protobuf decoding (see _wire.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__wire(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    WireError = PyErr_NewException("agent.otlp._wire.WireError", PyExc_ValueError, NULL);
    if (!WireError || PyModule_AddObjectRef(m, "WireError", WireError) < 0 ||
        PyModule_AddObject(m, "MAX_TIMESTAMP_NS", PyLong_FromUnsignedLongLong(MAX_TIMESTAMP_NS)) < 0 ||
        PyModule_AddIntConstant(m, "RULES_VERSION", RULES_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
