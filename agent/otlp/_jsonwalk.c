/* _jsonwalk.c -- OTLP/JSON ExportTraceServiceRequest bytes -> SpanBatch columns, or "not mine".
 *
 * Why C, and why not on orjson's objects: orjson.loads alone builds ~100 k spans/s worth of
 * dicts (each span is ~25 small objects), below what the agent ingests over gRPC. This scans the
 * JSON text once, validating it as strictly as orjson does, and builds the rows with the same
 * rule code as the protobuf decoder (_batch.h), touching only the fields agent/otlp/jsonfmt.py
 * reads.
 *
 * It handles the well-formed common case and gives up (returns None) on anything else: a shape
 * jsonfmt would refuse, a snake_case field name, a duplicated field, ``resource`` after
 * ``scopeSpans``, a trace id that is neither 32 hex digits nor 24 characters of base64 of 16
 * bytes, an integer beyond 64 bits, a float that could overflow, a lone surrogate, nesting
 * deeper than MAX_DEPTH, and any byte sequence that is not strict JSON/UTF-8. Python then decodes the request with jsonfmt's walk, which gives today's
 * errors and counters. So a request this accepts is one that orjson accepts and that jsonfmt
 * decodes to the same batch; the differential tests in tests/otlp/test_json_fast.py hold it to
 * that. The scan creates no Python objects and runs without the GIL; strings that carry escapes
 * are decoded into one arena as long as the input (decoding never lengthens a string).
 */
#include "_batch.h"

#define MAX_DEPTH 100 /* orjson's limit is 1024; OTLP needs ~12 */
#define IS(k, lit) ((k).n == (Py_ssize_t)sizeof(lit) - 1 && !memcmp((k).p, lit, sizeof(lit) - 1))

typedef struct {
    Dec d;
    const uint8_t *p, *end;
    uint8_t *arena;
    Py_ssize_t arena_used, size, out_of_range;
} J;

/* A number or an integer string: neg, magnitude, and whether it was too big for 64 bits. */
typedef struct { int is_int, neg, big; uint64_t mag; } Num;

static uint8_t PLAIN[256]; /* 1: a byte that stands for itself inside a JSON string (ASCII) */

/* ---------------------------------------------------------------- lexing */

static inline void ws(J *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static inline int at(J *j, uint8_t c) { return j->p < j->end && *j->p == c; }

static inline int eat(J *j, uint8_t c) {
    ws(j);
    if (!at(j, c)) return -1;
    j->p++;
    return 0;
}

/* Length of the strict UTF-8 sequence at p (no overlongs, surrogates or > U+10FFFF), 0 if none. */
static int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0;
        return 4;
    }
    return 0;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *out) {
    if (end - p < 4) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

static uint8_t *put_utf8(uint8_t *w, uint32_t cp) {
    if (cp < 0x80) { *w++ = (uint8_t)cp; }
    else if (cp < 0x800) { *w++ = (uint8_t)(0xC0 | cp >> 6); *w++ = (uint8_t)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *w++ = (uint8_t)(0xE0 | cp >> 12); *w++ = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); *w++ = (uint8_t)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (uint8_t)(0xF0 | cp >> 18); *w++ = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        *w++ = (uint8_t)(0x80 | (cp >> 6 & 0x3F)); *w++ = (uint8_t)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* One escape at p (just after the backslash), written at *w; 0, or -1 (invalid, lone surrogate). */
static int unescape(const uint8_t **pp, const uint8_t *end, uint8_t **w) {
    const uint8_t *p = *pp;
    if (p >= end) return -1;
    uint8_t e = *p++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit = e ? strchr(from, e) : NULL;
    if (hit) {
        *(*w)++ = (uint8_t)to[hit - from];
    } else if (e == 'u') {
        uint32_t cp, lo;
        if (hex4(p, end, &cp)) return -1;
        p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        *w = put_utf8(*w, cp);
    } else {
        return -1;
    }
    *pp = p;
    return 0;
}

/* The rest of a string that has an escape at p: decoded into the arena. */
static int escaped_string(J *j, const uint8_t *start, const uint8_t *p, Str *out) {
    if (!j->arena && !(j->arena = PyMem_RawMalloc((size_t)j->size + 1))) return oom(&j->d);
    uint8_t *w0 = j->arena + j->arena_used, *w = w0;
    memcpy(w, start, (size_t)(p - start));
    w += p - start;
    for (;;) {
        if (p >= j->end) return -1;
        uint8_t c = *p;
        if (PLAIN[c]) { *w++ = c; p++; }
        else if (c == '"') break;
        else if (c == '\\') { p++; if (unescape(&p, j->end, &w)) return -1; }
        else if (c < 0x80) return -1; /* a control character */
        else {
            int n = utf8_len(p, j->end);
            if (!n) return -1;
            memcpy(w, p, (size_t)n);
            w += n;
            p += n;
        }
    }
    out->p = w0;
    out->n = w - w0;
    j->arena_used += out->n;
    j->p = p + 1;
    return 0;
}

/* A string at p (after whitespace); out points into the input, or into the arena if escaped. */
static int string(J *j, Str *out) {
    ws(j);
    if (!at(j, '"')) return -1;
    const uint8_t *start = ++j->p, *p = start, *end = j->end;
    for (;;) {
        while (p < end && PLAIN[*p]) p++;
        if (p >= end) return -1;
        uint8_t c = *p;
        if (c == '"') break;
        if (c == '\\') return escaped_string(j, start, p, out);
        if (c < 0x80) return -1;
        int n = utf8_len(p, end);
        if (!n) return -1;
        p += n;
    }
    out->p = start;
    out->n = p - start;
    j->p = p + 1;
    return 0;
}

static inline int is_digit(J *j) { return j->p < j->end && *j->p >= '0' && *j->p <= '9'; }

/* A JSON number. Integers beyond int64/uint64 become floats in orjson, and floats that overflow
 * are errors there: give up on both (a float of <= 32 characters with a 2-digit exponent is
 * below 1e132, far from overflow). */
static int number(J *j, Num *n) {
    const uint8_t *start ;
    ws(j);
    start = j->p;
    n->is_int = 1; n->neg = 0; n->big = 0; n->mag = 0;
    if (at(j, '-')) { n->neg = 1; j->p++; }
    if (!is_digit(j)) return -1;
    if (*j->p == '0') j->p++;
    else for (; is_digit(j); j->p++) {
        uint64_t d = (uint64_t)(*j->p - '0');
        if (n->mag > (UINT64_MAX - d) / 10) n->big = 1;
        else n->mag = n->mag * 10 + d;
    }
    if (at(j, '.')) {
        n->is_int = 0;
        j->p++;
        if (!is_digit(j)) return -1;
        while (is_digit(j)) j->p++;
    }
    if (at(j, 'e') || at(j, 'E')) {
        n->is_int = 0;
        j->p++;
        if (at(j, '+') || at(j, '-')) j->p++;
        const uint8_t *exp = j->p;
        if (!is_digit(j)) return -1;
        while (is_digit(j)) j->p++;
        if (j->p - exp > 2) return -1;
    }
    if (!n->is_int) return j->p - start > 32 ? -1 : 0;
    return n->big || (n->neg && n->mag > (uint64_t)INT64_MAX + 1) ? -1 : 0;
}

/* jsonfmt._integer of a string: ``-?[0-9]+``, any size (big: beyond 64 bits); -1 otherwise. */
static int int_text(Str s, Num *n) {
    Py_ssize_t i = 0;
    n->is_int = 1; n->neg = 0; n->big = 0; n->mag = 0;
    if (s.n && s.p[0] == '-') { n->neg = 1; i = 1; }
    if (i >= s.n) return -1;
    for (; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9') return -1;
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (n->mag > (UINT64_MAX - d) / 10) n->big = 1;
        else if (!n->big) n->mag = n->mag * 10 + d;
    }
    return 0;
}

static int literal(J *j, const char *word, size_t len) {
    if ((size_t)(j->end - j->p) < len || memcmp(j->p, word, len)) return -1;
    j->p += len;
    return 0;
}

/* ``null`` at p (after whitespace): consumed, 1; otherwise 0. */
static int null(J *j) {
    ws(j);
    return at(j, 'n') && !literal(j, "null", 4);
}

/* Next member of an object whose '{' is read: 1 with its key (':' consumed), 0 at '}', -1. */
static int member(J *j, int *count, Str *key) {
    ws(j);
    if (at(j, '}')) { j->p++; return 0; }
    if ((*count)++ && eat(j, ',')) return -1;
    if (string(j, key) || eat(j, ':')) return -1;
    return 1;
}

/* Next element of an array whose '[' is read: 1 (an element follows), 0 at ']', -1. */
static int element(J *j, int *count) {
    ws(j);
    if (at(j, ']')) { j->p++; return 0; }
    if ((*count)++ && eat(j, ',')) return -1;
    return 1;
}

/* Any JSON value, checked and skipped. */
static int skip_value(J *j, int depth) {
    Str s;
    Num n;
    int count = 0, more;
    ws(j);
    if (j->p >= j->end) return -1;
    switch (*j->p) {
    case '"': return string(j, &s);
    case 't': return literal(j, "true", 4);
    case 'f': return literal(j, "false", 5);
    case 'n': return literal(j, "null", 4);
    case '{':
        if (depth >= MAX_DEPTH) return -1;
        j->p++;
        while ((more = member(j, &count, &s)) == 1)
            if (skip_value(j, depth + 1)) return -1;
        return more;
    case '[':
        if (depth >= MAX_DEPTH) return -1;
        j->p++;
        while ((more = element(j, &count)) == 1)
            if (skip_value(j, depth + 1)) return -1;
        return more;
    default: return number(j, &n);
    }
}

/* skip_value, giving back the arena room its escaped strings took: the arena then never needs
 * more than the input's length, even for a value read twice (see key_value). */
static int skip(J *j, int depth) {
    Py_ssize_t used = j->arena_used;
    int rc = skip_value(j, depth);
    j->arena_used = used;
    return rc;
}

/* ---------------------------------------------------------------- the OTLP walk */

/* Each walker below reads one object (its '{' not yet read) of the shape jsonfmt reads. */
typedef int (*Walk)(J *j, void *arg);

/* A list field: null (no items) or an array of objects, each read by walk. */
static int list(J *j, Walk walk, void *arg) {
    int count = 0, more;
    if (null(j)) return 0;
    if (eat(j, '[')) return -1;
    while ((more = element(j, &count)) == 1)
        if (eat(j, '{') || walk(j, arg)) return -1;
    return more;
}

/* An AnyValue object: jsonfmt._attr_value. */
static int any_value(J *j, Val *v) {
    Str k, s = {EMPTY, 0};
    Num n;
    int count = 0, more, seen_s = 0, seen_i = 0, have_s = 0, have_i = 0;
    if (eat(j, '{')) return -1;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "stringValue")) {
            if (seen_s++) return -1;
            if (null(j)) continue;
            if (string(j, &s)) return -1;
            have_s = 1;
        } else if (IS(k, "intValue")) {
            if (seen_i++) return -1;
            if (null(j)) continue;
            ws(j);
            if (at(j, '"') ? string(j, &k) || int_text(k, &n) : number(j, &n) || !n.is_int) return -1;
            if (n.big || (n.neg ? n.mag > (uint64_t)INT64_MAX + 1 : n.mag > (uint64_t)INT64_MAX)) return -1;
            have_i = 1;
            v->i = n.neg ? (int64_t)(0 - n.mag) : (int64_t)n.mag;
        } else if (IS(k, "string_value") || IS(k, "int_value")) {
            return -1;
        } else if (skip(j, 11)) {
            return -1;
        }
    }
    if (have_s) { v->kind = V_STR; v->s = s; }
    else v->kind = have_i ? V_INT : V_OTHER;
    return more;
}

typedef struct { Val *slots; uint32_t *present; int for_span; } Attrs;

/* A KeyValue: its value is stored when the rules read its key (the last of a repeated key wins).
 * A missing key is "" (read by no rule); a value before its key is checked as JSON, then read
 * again once the key says it is wanted. */
static int key_value(J *j, void *arg) {
    Attrs *a = arg;
    Str k, key;
    Val v = {V_OTHER, {EMPTY, 0}, 0};
    const uint8_t *value_at = NULL;
    int count = 0, more, slot = -1, have_key = 0, have_value = 0;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "key")) {
            if (have_key++ || string(j, &key)) return -1;
            slot = wanted(key, a->for_span);
        } else if (IS(k, "value")) {
            if (have_value++) return -1;
            ws(j);
            if (!have_key) value_at = j->p;
            if (!have_key || slot < 0 ? skip(j, 10) : !null(j) && any_value(j, &v)) return -1;
        } else if (skip(j, 10)) {
            return -1;
        }
    }
    if (more == 0 && slot >= 0) {
        if (value_at) {
            const uint8_t *after = j->p;
            j->p = value_at;
            if (!null(j) && any_value(j, &v)) return -1;
            j->p = after;
        }
        a->slots[slot] = v;
        *a->present |= 1u << slot;
    }
    return more;
}

/* A trace id: 32 hex digits or base64 (either alphabet) of 16 bytes, as jsonfmt.trace_id_bytes;
 * 1 valid, 0 certainly invalid, -1 some other string (jsonfmt decides). */
static int trace_id(Str s, uint8_t out[16]) {
    if (s.n == 32) {
        for (int i = 0; i < 32; i++) {
            uint8_t c = s.p[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return 0; /* 32 characters of base64 would be 24 bytes */
            out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] | d : d << 4);
        }
        return 1;
    }
    if (s.n == 0) return 0;
    if (s.n != 24 || s.p[22] != '=' || s.p[23] != '=') return -1;
    uint32_t acc = 0;
    int bits = 0, o = 0;
    for (int i = 0; i < 22; i++) {
        uint8_t c = s.p[i];
        int d = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
              : c == '+' || c == '-' ? 62 : c == '/' || c == '_' ? 63 : -1;
        if (d < 0) return -1;
        acc = acc << 6 | (uint32_t)d;
        bits += 6;
        if (bits >= 8) { bits -= 8; out[o++] = (uint8_t)(acc >> bits); }
    }
    return 1; /* the 4 bits left over are ignored, as binascii does */
}

static const char *const KIND_NAMES[] = {
    "SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER",
};

static int kind(J *j, uint64_t *out) {
    Str s;
    Num n;
    ws(j);
    if (at(j, '"')) {
        if (string(j, &s)) return -1;
        for (int i = 0; i < 6; i++)
            if (s.n == (Py_ssize_t)strlen(KIND_NAMES[i]) && !memcmp(s.p, KIND_NAMES[i], (size_t)s.n)) {
                *out = (uint64_t)i;
                return 0;
            }
        return -1;
    }
    if (number(j, &n) || !n.is_int || n.mag > (n.neg ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX)) return -1;
    *out = (uint32_t)(n.neg ? (int32_t)(0 - (uint32_t)n.mag) : (int32_t)n.mag);
    return 0;
}

/* A timestamp (jsonfmt._integer): *oor when it is outside [0, 2**64). */
static int timestamp(J *j, uint64_t *out, int *oor) {
    Str s;
    Num n;
    ws(j);
    if (at(j, '"') ? string(j, &s) || int_text(s, &n) : number(j, &n) || !n.is_int) return -1;
    if (n.big || (n.neg && n.mag)) *oor = 1;
    *out = n.mag;
    return 0;
}

typedef struct { Res *res; } SpanArg;

enum { F_TRACE = 1, F_NAME = 2, F_KIND = 4, F_START = 8, F_END = 16, F_ATTRS = 32 };

/* Claim field f of an object once (a repeated field: give up, orjson keeps the last). */
#define ONCE(f) do { if (seen & (f)) return -1; seen |= (f); } while (0)

static int span(J *j, void *arg) {
    Res *res = arg;
    Span s;
    Str k, t;
    uint8_t tid[16];
    int count = 0, more, seen = 0, id_ok = 0, oor = 0;
    Attrs attrs = {s.v, &s.present, 1};
    s.name.p = EMPTY; s.name.n = 0;
    s.kind = s.start = s.end = 0;
    s.present = 0;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "traceId")) {
            ONCE(F_TRACE);
            ws(j);
            if (at(j, '"')) {
                if (string(j, &t) || (id_ok = trace_id(t, tid)) < 0) return -1;
            } else if (skip(j, 8)) {
                return -1;
            }
        } else if (IS(k, "name")) {
            ONCE(F_NAME);
            if (!null(j) && string(j, &s.name)) return -1;
        } else if (IS(k, "kind")) {
            ONCE(F_KIND);
            if (!null(j) && kind(j, &s.kind)) return -1;
        } else if (IS(k, "startTimeUnixNano")) {
            ONCE(F_START);
            if (!null(j) && timestamp(j, &s.start, &oor)) return -1;
        } else if (IS(k, "endTimeUnixNano")) {
            ONCE(F_END);
            if (!null(j) && timestamp(j, &s.end, &oor)) return -1;
        } else if (IS(k, "attributes")) {
            ONCE(F_ATTRS);
            if (list(j, key_value, &attrs)) return -1;
        } else if (IS(k, "trace_id") || IS(k, "start_time_unix_nano") || IS(k, "end_time_unix_nano")) {
            return -1;
        } else if (skip(j, 8)) {
            return -1;
        }
    }
    if (more) return -1;
    int zero = 1;
    for (int i = 0; id_ok && i < 16; i++) zero &= tid[i] == 0;
    if (zero) { j->d.rejected++; j->d.counters[C_TRACE_INVALID]++; return 0; }
    if (oor) { j->d.rejected++; j->out_of_range++; return 0; }
    s.trace.p = tid;
    s.trace.n = 16;
    return emit(&j->d, res, &s);
}

static int scope_spans(J *j, void *arg) {
    Str k;
    int count = 0, more, seen = 0;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "spans")) {
            ONCE(1);
            if (list(j, span, arg)) return -1;
        } else if (skip(j, 6)) {
            return -1;
        }
    }
    return more;
}

static int resource(J *j, Res *res) {
    Str k;
    int count = 0, more, seen = 0;
    Attrs attrs = {res->v, &res->present, 0};
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "attributes")) {
            ONCE(1);
            if (list(j, key_value, &attrs)) return -1;
        } else if (skip(j, 5)) {
            return -1;
        }
    }
    return more;
}

/* A ResourceSpans; its resource must come before its spans (jsonfmt reads it first). */
static int resource_spans(J *j, void *arg) {
    Res res;
    Str k;
    int count = 0, more, seen = 0;
    res.present = 0;
    res.service_id = res.region_id = -1;
    resource_done(&res);
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "resource")) {
            if (seen) return -1; /* a second resource, or one after the spans */
            seen = 1;
            if (null(j)) continue;
            if (eat(j, '{') || resource(j, &res)) return -1;
            resource_done(&res);
        } else if (IS(k, "scopeSpans")) {
            if (seen & 2) return -1;
            seen |= 3;
            if (list(j, scope_spans, &res)) return -1;
        } else if (IS(k, "scope_spans")) {
            return -1;
        } else if (skip(j, 3)) {
            return -1;
        }
    }
    return more;
}

/* The whole document: one request object and nothing after it but whitespace. */
static int document(J *j) {
    Str k;
    int count = 0, more, seen = 0;
    if (eat(j, '{')) return -1;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "resourceSpans")) {
            ONCE(1);
            if (list(j, resource_spans, NULL)) return -1;
        } else if (IS(k, "resource_spans")) {
            return -1;
        } else if (skip(j, 1)) {
            return -1;
        }
    }
    ws(j);
    return more || j->p != j->end ? -1 : 0;
}

/* ---------------------------------------------------------------- Python */

static PyObject *decode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    J j;
    memset(&j, 0, sizeof j);
    j.d.base = view.len ? (const uint8_t *)view.buf : EMPTY;
    j.d.unknown_id = -1;
    j.p = j.d.base;
    j.end = j.p + view.len;
    j.size = view.len;
    PyObject *out = NULL;
    if (table_init(&j.d.services) || table_init(&j.d.regions) || table_init(&j.d.endpoints)) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = document(&j);
    Py_END_ALLOW_THREADS
    if (j.d.oom) {
        PyErr_NoMemory();
    } else if (rc) {
        out = Py_NewRef(Py_None);
    } else {
        PyObject *batch = result(&j.d, PyExc_ValueError);
        if (batch) out = Py_BuildValue("(Nn)", batch, j.out_of_range);
    }
done:
    table_free(&j.d.services);
    table_free(&j.d.regions);
    table_free(&j.d.endpoints);
    cols_free(&j.d.cols);
    PyMem_RawFree(j.arena);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O,
     "decode(data) -> ((services, regions, endpoints, 9 column bytearrays, counters, rejected),\n"
     "                 timestamp_out_of_range) or None\n\n"
     "Decode an OTLP/JSON ExportTraceServiceRequest; None when it is not the common\n"
     "well-formed case (agent.otlp.jsonfmt then decodes it and reports what is wrong)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonwalk", "Fast OTLP/JSON decoding (see _jsonwalk.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonwalk(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObject(m, "MAX_TIMESTAMP_NS", PyLong_FromUnsignedLongLong(MAX_TIMESTAMP_NS)) < 0 ||
        PyModule_AddIntConstant(m, "RULES_VERSION", RULES_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
