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
 * ``scopeSpans``, a trace id or parent span id that is neither hex nor padded base64 of the
 * right length (unless it is certainly invalid: 32/16 characters that are not hex), an integer beyond 64 bits, a float that could overflow, a lone surrogate, nesting
 * deeper than MAX_DEPTH, and any byte sequence that is not strict JSON/UTF-8. Python then decodes the request with jsonfmt's walk, which gives today's
 * errors and counters. So a request this accepts is one that orjson accepts and that jsonfmt
 * decodes to the same batch; the differential tests in tests/otlp/test_json_fast.py hold it to
 * that. The scan creates no Python objects and runs without the GIL; strings that carry escapes
 * are decoded into one arena as long as the input (decoding never lengthens a string).
 */
#include "_jsonlex.h"

#define IS(k, lit) ((k).n == (Py_ssize_t)sizeof(lit) - 1 && !memcmp((k).p, lit, sizeof(lit) - 1))

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
/* The literal lit (no whitespace) at p: consumed, 1; otherwise 0 and nothing consumed. */
#define LIT(j, lit) ((j)->end - (j)->p >= (Py_ssize_t)sizeof(lit) - 1 && \
                     !memcmp((j)->p, lit, sizeof(lit) - 1) && ((j)->p += sizeof(lit) - 1, 1))

/* key_value's common layout, {"key":"K","value":V} as exporters write it (no whitespace, the
 * key first): read without the member loop; 1 done, 0 not that layout (nothing consumed, the
 * arena as it was), -1 invalid. Its reads are the loop's, in the loop's order. */
/* An attribute value no rule reads, skipped (checked as JSON): {"stringValue":"..."} read
 * straight, anything else by skip. 0, or -1 invalid. */
static int skip_unread_value(J *j) {
    const uint8_t *start = j->p;
    Py_ssize_t used = j->arena_used;
    Str s;
    if (LIT(j, "{\"stringValue\":") && at(j, '"') && !string(j, &s) && at(j, '}')) {
        j->p++;
        j->arena_used = used;
        return 0;
    }
    j->p = start;
    j->arena_used = used;
    return skip(j, 10);
}

static int key_value_common(J *j, Attrs *a) {
    const uint8_t *start = j->p;
    Py_ssize_t used = j->arena_used;
    Str key;
    Val v = {V_OTHER, {EMPTY, 0}, 0};
    int slot;
    if (!LIT(j, "\"key\":")) return 0;
    if (!at(j, '"') || string(j, &key) || !LIT(j, ",\"value\":")) goto other;
    slot = wanted(key, a->for_span);
    ws(j);
    if (slot < 0 ? skip_unread_value(j) : !null(j) && any_value(j, &v)) return -1;
    ws(j);
    if (!at(j, '}')) goto other;
    j->p++;
    if (slot >= 0) {
        a->slots[slot] = v;
        *a->present |= 1u << slot;
    }
    return 1;
other:
    j->p = start;
    j->arena_used = used;
    return 0;
}

static int key_value(J *j, void *arg) {
    Attrs *a = arg;
    Str k, key;
    Val v = {V_OTHER, {EMPTY, 0}, 0};
    const uint8_t *value_at = NULL;
    int count = 0, more, slot = -1, have_key = 0, have_value = 0;
    if ((more = key_value_common(j, a)) != 0) return more < 0 ? -1 : 0;
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

/* Value of each byte as a hex digit and as a base64 digit (either alphabet); -1: not one. */
static int8_t HEX_DIGIT[256], B64_DIGIT[256];

static void digits_init(void) {
    for (int c = 0; c < 256; c++) {
        HEX_DIGIT[c] = (int8_t)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1);
        B64_DIGIT[c] = (int8_t)(c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
                                : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' || c == '-' ? 62
                                : c == '/' || c == '_' ? 63 : -1);
    }
}

/* An id of `size` bytes (16: a trace id, 8: a span id): 2 x size hex digits or padded base64
 * (either alphabet) of size bytes, as jsonfmt.id_bytes; 1 valid, 0 certainly invalid, -1 some
 * other string (jsonfmt decides). Table lookups without a branch per digit: ids are hot. */
static int json_id(Str s, uint8_t *out, int size) {
    int hex = 2 * size, data = (size * 8 + 5) / 6, padded = (size + 2) / 3 * 4, bad = 0;
    if (s.n == hex) {
        for (int i = 0; i < size; i++) {
            int hi = HEX_DIGIT[s.p[2 * i]], lo = HEX_DIGIT[s.p[2 * i + 1]];
            bad |= hi | lo;  /* negative once any digit is not hex */
            out[i] = (uint8_t)((hi & 15) << 4 | (lo & 15));
        }
        return bad >= 0; /* 2 x size characters of base64 would be 1.5 x size bytes */
    }
    if (s.n == 0) return 0;
    if (s.n != padded) return -1;
    for (int i = data; i < padded; i++)
        if (s.p[i] != '=') return -1;
    uint32_t acc = 0;
    int bits = 0, o = 0;
    for (int i = 0; i < data; i++) {
        int d = B64_DIGIT[s.p[i]];
        bad |= d;
        acc = acc << 6 | (uint32_t)(d & 63);
        bits += 6;
        if (bits >= 8) { bits -= 8; out[o++] = (uint8_t)(acc >> bits); }
    }
    return bad < 0 ? -1 : 1; /* the bits left over (4 of a trace id, 2 of a span id) are ignored, as binascii does */
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

enum { F_TRACE = 1, F_NAME = 2, F_KIND = 4, F_START = 8, F_END = 16, F_ATTRS = 32, F_PARENT = 64 };

/* Claim field f of an object once (a repeated field: give up, orjson keeps the last). */
#define ONCE(f) do { if (seen & (f)) return -1; seen |= (f); } while (0)

static int span(J *j, void *arg) {
    Res *res = arg;
    Span s;
    Str k, t;
    uint8_t tid[16], pid[8];
    int count = 0, more, seen = 0, id_ok = 0, oor = 0, ok;
    Attrs attrs = {s.v, &s.present, 1};
    s.name.p = EMPTY; s.name.n = 0;
    s.kind = s.start = s.end = 0;
    s.parent = P_ROOT; /* no parentSpanId (or null, or ""): a root span */
    s.present = 0;
    while ((more = member(j, &count, &k)) == 1) {
        if (IS(k, "traceId")) {
            ONCE(F_TRACE);
            ws(j);
            if (at(j, '"')) {
                if (string(j, &t) || (id_ok = json_id(t, tid, 16)) < 0) return -1;
            } else if (skip(j, 8)) {
                return -1;
            }
        } else if (IS(k, "parentSpanId")) {
            ONCE(F_PARENT);
            ws(j);
            if (at(j, '"')) {
                if (string(j, &t)) return -1;
                if (t.n) {
                    if ((ok = json_id(t, pid, 8)) < 0) return -1;
                    s.parent = ok ? parent_state(pid, 8) : P_INVALID;
                }
            } else if (!null(j)) {
                if (skip(j, 8)) return -1;
                s.parent = P_INVALID; /* not a string: not an id (jsonfmt.parent_span_id_bytes) */
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
        } else if (IS(k, "trace_id") || IS(k, "parent_span_id") || IS(k, "start_time_unix_nano") ||
                   IS(k, "end_time_unix_nano")) {
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
     "decode(data) -> ((services, regions, endpoints, 10 column bytearrays, counters, rejected),\n"
     "                 timestamp_out_of_range) or None\n\n"
     "Decode an OTLP/JSON ExportTraceServiceRequest; None when it is not the common\n"
     "well-formed case (agent.otlp.jsonfmt then decodes it and reports what is wrong)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonwalk", "Fast OTLP/JSON decoding (see _jsonwalk.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jsonwalk(void) {
    lex_init();
    digits_init();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObject(m, "MAX_TIMESTAMP_NS", PyLong_FromUnsignedLongLong(MAX_TIMESTAMP_NS)) < 0 ||
        PyModule_AddIntConstant(m, "RULES_VERSION", RULES_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
