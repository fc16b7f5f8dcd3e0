/* _wire.c -- the fast OTLP decoder: ExportTraceServiceRequest wire bytes -> SpanBatch columns.
 *
 * Why C: decoding is the whole cost of scoring (the columns make scoring nearly free), and a
 * per-span Python loop over protobuf objects reaches ~0.33 M spans/s. This reads the protobuf
 * wire format directly, descends only into the messages that hold the facts the rules in
 * agent/batch.py name (resource service.name/cloud.region; span trace_id, parent_span_id, name,
 * kind, start, end and the attributes of agent.otlp.rules.SPAN_KEYS) and skips every other field by its
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
#include "_batch.h"

enum { CTX_REQUEST, CTX_RS, CTX_RESOURCE, CTX_RES_ATTR, CTX_SS, CTX_SPAN, CTX_SPAN_ATTR };

static PyObject *WireError;

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

/* One KeyValue: store its value under its key when the key is one the rules read.
 * The key nearly always comes first, so the value of a key the rules ignore is skipped
 * unread; if a wanted key turns up after a skipped value (legal, never seen in practice),
 * the values are read in a second pass. */
static int key_value(Dec *d, Str body, Val *slots, uint32_t *present, int for_span) {
    const uint8_t *p = body.p, *end = p + body.n;
    Str key = {EMPTY, 0};
    Val v = {V_NONE, {EMPTY, 0}, 0};
    int k = -1, have_key = 0, skipped = 0;
    /* The layout every encoder writes: key (field 1) then value (field 2), each with a one-byte
     * length, filling the body exactly. The general loop below reads it to the same result and
     * finds no error in it, so it is taken in one step: an ignored key is then done at once (a
     * resource's ~9 attributes, of which the rules read 2, are the per-resource cost). */
    if (body.n >= 4 && p[0] == 0x0A && p[1] < 0x80 && (Py_ssize_t)p[1] + 4 <= body.n &&
        p[2 + p[1]] == 0x12 && p[3 + p[1]] < 0x80 && (Py_ssize_t)p[1] + 4 + p[3 + p[1]] == body.n) {
        key.p = p + 2;
        key.n = p[1];
        if ((k = wanted(key, for_span)) < 0) return 0;
        Str s = {p + 4 + p[1], p[3 + p[1]]};
        if (any_value(d, s, &v)) return -1;
        if (v.kind == V_NONE) v.kind = V_OTHER;
        slots[k] = v;
        *present |= 1u << k;
        return 0;
    }
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
    if (k < 0) return 0;  /* k is wanted() of the last key read (the last one wins), -1 if none */
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
    Str parent = {EMPTY, 0};
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
        else if (f == 4 && wt == 2) { if (rd_len(d, &p, end, &parent, at)) return -1; }
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
    s.parent = parent_state(parent.p, parent.n);  /* the last parent_span_id wins, as in protobuf */
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
    resource_done(&res);
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
    if (rc == 0) out = result(&d, WireError);
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
     "decode(data) -> (services, regions, endpoints, 10 column bytearrays, counters, rejected)\n\n"
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
