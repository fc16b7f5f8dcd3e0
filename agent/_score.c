/* _score.c -- the per-span loop of agent.score, in C with the GIL released.
 *
 * agent/score.py's score_batch_reference is the specification; agent/score_fast.py does the
 * per-table work in Python (service keys, region names, intensity rows, measured rates: a few
 * entries per batch) and hands this file the batch's columns plus those small tables. One pass
 * over the spans then does what the reference does with numpy gathers and bincounts: each span's
 * service key and region, first-seen numbering of both, the span's intensity cell (UTC month x
 * hour), kind, energy, carbon and tag codes, and the (service, region) cell sums, per-service
 * requests and the (service, endpoint) op counts in first-seen order.
 *
 * Bit-identical sums: every float is computed by the same IEEE operations in the same order as
 * the reference (energy = (E x weight) x calibration, or the measured rate; carbon = (energy x
 * intensity) x PUE; each cell's sums added span by span from 0.0, as np.bincount adds). Built
 * without -ffast-math and with -ffp-contract=off (no fused multiply-add), see setup.py.
 *
 * Anything this loop does not handle exactly as the reference (an id out of its table, an
 * op_class the weight table has no row for) makes score() return None and the reference
 * scores the batch (agent.score counts it: scorer_fallbacks()). SCORE_VERSION is bumped with
 * every change of what this file computes; agent.score_fast refuses a build that disagrees.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SCORE_VERSION 4
#define ANNUAL_COLUMN 288
#define ROW (ANNUAL_COLUMN + 1)
enum { KIND_ANNUAL, KIND_HOURLY, KIND_MONTHLY_HOURLY, KIND_REAL_TIME };
enum { OP_NONE = 0, OP_HTTP = 6, OP_CLASSES = 8 };
#define NS_PER_HOUR 3600000000000LL
#define NS_PER_DAY (24 * NS_PER_HOUR)

/* The inputs, in the order score() takes them (see agent/score_fast.py, IN_ORDER). */
enum {
    A_SID, A_RID, A_EID, A_OP, A_RESP, A_START, A_ENTRY, A_ROOT,  /* span columns */
    A_KEY_OF_SVC, A_SVC_CUT,        /* per service-table entry: key index, name was cut */
    A_NAME_OF_REG,                  /* per region-table entry: name index, -1 invalid */
    A_NAME_OF_KEY,                  /* per key: region name of its spans without their own */
    A_ROWS, A_PUE, A_KIND, A_LIVE, A_STALE,  /* per region name */
    A_CAL, A_CALIBRATED,            /* per key (empty: no calibration) */
    A_RATE, A_MCODE, A_MSTALE, A_METERED,  /* per key (empty: no measured source) */
    A_E_OP, A_E_HTTP, A_HTTP_EDGES, A_PROXY,  /* energy per op class, per HTTP bucket; tags */
    A_EP_OF_TABLE, A_EP_CUT,        /* per endpoint-table entry (empty: names used as they are) */
    N_BUFFERS
};
static const Py_ssize_t ITEMSIZE[N_BUFFERS] = {
    4, 4, 4, 1, 8, 8, 1, 1,
    8, 1,
    8,
    8,
    8, 8, 1, 1, 1,
    8, 1,
    8, 1, 1, 1,
    8, 8, 8, 1,
    8, 1,
};

typedef struct {
    const int32_t *sid, *rid, *eid;
    const uint8_t *op, *entry, *root, *svc_cut, *stale, *calibrated, *mstale, *metered, *ep_cut;
    const int64_t *resp, *start, *key_of_svc, *name_of_reg, *name_of_key, *ep_of_table, *edges;
    const double *rows, *pue, *cal, *rate, *e_op, *e_http;
    const int8_t *kind, *live, *mcode, *proxy;
    Py_ssize_t n, n_svc, n_reg, n_key, n_name, n_ep, n_eps;
    int has_cal, has_rate, has_http, has_ep_table, has_now;
    int64_t now_ns;
} In;

/* An open-addressing map from a 64-bit code to a dense id in first-insertion order; a slot
 * holds both (one cache line per probe, not two). */
typedef struct { uint64_t key; int64_t id; } MapSlot;
typedef struct { MapSlot *s; size_t mask; int64_t count; } Map;

static int map_init(Map *m, size_t cap) {
    m->mask = cap - 1;
    m->count = 0;
    m->s = malloc(cap * sizeof *m->s);
    if (!m->s) return -1;
    for (size_t i = 0; i < cap; i++) m->s[i].id = -1;
    return 0;
}

static void map_free(Map *m) { free(m->s); m->s = NULL; }

static inline size_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return (size_t)x;
}

static int map_grow(Map *m) {
    Map g;
    if (map_init(&g, (m->mask + 1) * 2)) { map_free(&g); return -1; }
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->s[i].id < 0) continue;
        size_t j = mix(m->s[i].key) & g.mask;
        while (g.s[j].id >= 0) j = (j + 1) & g.mask;
        g.s[j] = m->s[i];
    }
    g.count = m->count;
    map_free(m);
    *m = g;
    return 0;
}

/* The id of code, -1 when absent. */
static inline int64_t map_find(const Map *m, uint64_t code) {
    for (size_t j = mix(code) & m->mask; m->s[j].id >= 0; j = (j + 1) & m->mask)
        if (m->s[j].key == code) return m->s[j].id;
    return -1;
}

/* The id of code, adding it (id = count so far, *added = 1) if new; -1 when out of memory. */
static inline int64_t map_get(Map *m, uint64_t code, int *added) {
    size_t j = mix(code) & m->mask;
    for (; m->s[j].id >= 0; j = (j + 1) & m->mask)
        if (m->s[j].key == code) { *added = 0; return m->s[j].id; }
    if ((size_t)(m->count + 1) * 2 > m->mask + 1) {
        if (map_grow(m)) return -1;
        return map_get(m, code, added);
    }
    m->s[j].key = code;
    m->s[j].id = m->count;
    *added = 1;
    return m->count++;
}

/* Growable per-id arrays (cells: sums and tags; endpoints: key, name, count). */
typedef struct {
    int64_t cap;
    uint64_t *code;
    double *energy, *carbon;
    int64_t *ops, *measured, *spans;
    int8_t *etag;
} Cells;

static int cells_reserve(Cells *c, int64_t need) {
    if (need <= c->cap) return 0;
    int64_t cap = c->cap ? c->cap * 2 : 64;
    while (cap < need) cap *= 2;
#define GROW(f) do { void *p = realloc(c->f, (size_t)cap * sizeof *c->f); if (!p) return -1; c->f = p; } while (0)
    GROW(code); GROW(energy); GROW(carbon); GROW(ops); GROW(measured); GROW(spans); GROW(etag);
#undef GROW
    c->cap = cap;
    return 0;
}

static void cells_free(Cells *c) {
    free(c->code); free(c->energy); free(c->carbon); free(c->ops); free(c->measured);
    free(c->spans); free(c->etag);
}

typedef struct { int64_t cap; uint64_t *code; int64_t *count; } Eps;

static int eps_reserve(Eps *e, int64_t need) {
    if (need <= e->cap) return 0;
    int64_t cap = e->cap ? e->cap * 2 : 64;
    while (cap < need) cap *= 2;
    void *a = realloc(e->code, (size_t)cap * sizeof *e->code);
    if (!a) return -1;
    e->code = a;
    void *b = realloc(e->count, (size_t)cap * sizeof *e->count);
    if (!b) return -1;
    e->count = b;
    e->cap = cap;
    return 0;
}

/* What one pass produces (ids in first-seen order; cells in insertion order until sorted). */
typedef struct {
    int64_t *key_new;      /* (n_key) new id of each key, -1 unused */
    int64_t *name_new;     /* (n_name) */
    int64_t *key_order, *name_order;  /* new id -> old index */
    int64_t n_keys, n_names;
    int64_t *service_region;  /* (new key) new region id of its first span */
    int8_t *region_kind;      /* (new region) */
    int64_t *requests;        /* (new key) */
    Cells cells;
    Map cell_map, ep_map;
    Eps eps;
    int64_t root_spans, svc_cut, reg_invalid, meas_stale, live_stale, ep_cut;
} Out;

enum { OK = 0, E_NOMEM = -1, E_UNSUPPORTED = -2 };

/* Months since 1970-01 of a day since 1970-01-01 (proleptic Gregorian, days >= 0). */
static inline int64_t month_of_day(int64_t z) {
    /* H. Hinnant's civil_from_days: eras of 400 years starting on March 1st */
    z += 719468;
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;  /* 1..12 */
    if (m <= 2) y += 1;
    return (y - 1970) * 12 + (m - 1);
}

static int pass(const In *in, Out *o) {
    const Py_ssize_t n = in->n;
    int64_t last_day = -1, last_month = 0;
    uint64_t last_cell_code = UINT64_MAX;
    int64_t last_cell = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t s = in->sid[i], r = in->rid[i];
        uint8_t op = in->op[i];
        if (s < 0 || s >= in->n_svc || r < -1 || r >= in->n_reg || op >= OP_CLASSES)
            return E_UNSUPPORTED;
        int64_t k = in->key_of_svc[s];
        int64_t own = r < 0 ? -1 : in->name_of_reg[r];
        if (r >= 0 && own < 0) o->reg_invalid++;
        if (in->svc_cut && in->svc_cut[s]) o->svc_cut++;
        int64_t nm = own >= 0 ? own : in->name_of_key[k];
        /* first-seen numbering */
        int64_t kn = o->key_new[k];
        int64_t rn = o->name_new[nm];
        if (rn < 0) {
            rn = o->name_new[nm] = o->n_names;
            o->name_order[o->n_names++] = nm;
        }
        if (kn < 0) {
            kn = o->key_new[k] = o->n_keys;
            o->key_order[kn] = k;
            o->service_region[kn] = rn;
            o->n_keys++;
        }
        /* the span's time, kind and intensity cell */
        int64_t t = in->start[i];
        if (in->has_now && t <= 0) t = in->now_ns;
        int known = t > 0;
        int8_t kd = in->kind[nm];
        int8_t span_kind = (known || kd == KIND_REAL_TIME) ? kd : KIND_ANNUAL;
        if (span_kind > o->region_kind[rn]) o->region_kind[rn] = span_kind;
        int64_t col = ANNUAL_COLUMN;  /* annual and live rows hold one value in every column */
        if (known && (kd == KIND_HOURLY || kd == KIND_MONTHLY_HOURLY)) {
            int64_t day = t / NS_PER_DAY;
            if (day != last_day) { last_day = day; last_month = month_of_day(day) % 12; }
            col = last_month * 24 + (t / NS_PER_HOUR) % 24;
        }
        /* energy (kWh) and its tag */
        int io = op != OP_NONE;
        double e = in->e_op[op];
        if (in->has_http && op == OP_HTTP) {
            int64_t b = in->resp[i];
            int bucket = (b >= in->edges[0]) + (b >= in->edges[1]) + (b >= in->edges[2]);
            e = in->e_http[bucket];
        }
        if (in->has_cal) e = e * in->cal[k];
        int8_t etag = in->proxy[(in->has_cal ? in->calibrated[k] : 0) * 4 + span_kind];
        int metered = 0;
        if (in->has_rate && io) {
            if (in->mstale[k]) o->meas_stale++;
            double rate = in->rate[k];
            if (!isnan(rate)) {
                e = rate;
                etag = in->mcode[k];
                metered = in->metered[k];
            }
        }
        double c = e * in->rows[nm * ROW + col] * in->pue[nm];
        if (in->stale[nm]) o->live_stale++;
        /* the (service, region) cell */
        uint64_t code = ((uint64_t)kn << 32) | (uint64_t)rn;
        int64_t cell;
        if (code == last_cell_code) {
            cell = last_cell;
        } else {
            int added;
            cell = map_get(&o->cell_map, code, &added);
            if (cell < 0) return E_NOMEM;
            if (added) {
                if (cells_reserve(&o->cells, cell + 1)) return E_NOMEM;
                Cells *cs = &o->cells;
                cs->code[cell] = code;
                cs->energy[cell] = 0.0;
                cs->carbon[cell] = 0.0;
                cs->ops[cell] = cs->measured[cell] = cs->spans[cell] = 0;
                cs->etag[cell] = 0;
            }
            last_cell_code = code;
            last_cell = cell;
        }
        Cells *cs = &o->cells;
        cs->energy[cell] += e;
        cs->carbon[cell] += c;
        cs->spans[cell] += 1;
        if (io) {
            cs->ops[cell] += 1;
            cs->measured[cell] += metered;
            if (etag > cs->etag[cell]) cs->etag[cell] = etag;
            /* the (service, endpoint) op count */
            int32_t ep = in->eid[i];
            if (ep < 0 || ep >= in->n_ep) return E_UNSUPPORTED;
            int64_t epn = ep;
            if (in->has_ep_table) {
                if (in->ep_cut[ep]) o->ep_cut++;
                epn = in->ep_of_table[ep];
            }
            int added;
            int64_t id = map_get(&o->ep_map, ((uint64_t)kn << 32) | (uint64_t)epn, &added);
            if (id < 0) return E_NOMEM;
            if (added) {
                if (eps_reserve(&o->eps, id + 1)) return E_NOMEM;
                o->eps.code[id] = ((uint64_t)kn << 32) | (uint64_t)epn;
                o->eps.count[id] = 0;
            }
            o->eps.count[id] += 1;
        }
        o->requests[kn] += in->entry[i] != 0;
        o->root_spans += in->root[i] != 0;
    }
    return OK;
}

/* Check the small tables' ids once, so that the loop may index them without a test. */
static int tables_ok(const In *in) {
    for (Py_ssize_t j = 0; j < in->n_svc; j++)
        if (in->key_of_svc[j] < 0 || in->key_of_svc[j] >= in->n_key) return 0;
    for (Py_ssize_t j = 0; j < in->n_reg; j++)
        if (in->name_of_reg[j] < -1 || in->name_of_reg[j] >= in->n_name) return 0;
    for (Py_ssize_t j = 0; j < in->n_key; j++)
        if (in->name_of_key[j] < 0 || in->name_of_key[j] >= in->n_name) return 0;
    for (Py_ssize_t j = 0; in->has_ep_table && j < in->n_ep; j++)
        if (in->ep_of_table[j] < 0 || in->ep_of_table[j] >= in->n_eps) return 0;
    for (Py_ssize_t j = 0; j < in->n_name; j++)
        if (in->kind[j] < KIND_ANNUAL || in->kind[j] > KIND_REAL_TIME) return 0;
    for (Py_ssize_t j = 0; in->has_cal && j < in->n_key; j++)
        if (in->calibrated[j] > 1) return 0;
    return 1;
}

/* ---------------------------------------------------------------- sorting the cells */

typedef struct { uint64_t code; int64_t id; } Pair;

static int pair_cmp(const void *a, const void *b) {
    uint64_t x = ((const Pair *)a)->code, y = ((const Pair *)b)->code;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- Python */

static PyObject *bytes_of(const void *p, int64_t n, size_t size) {
    return PyByteArray_FromStringAndSize(n ? (const char *)p : "", (Py_ssize_t)(n * (int64_t)size));
}

/* A list of the items of src at idx[0..n). */
static PyObject *pick(PyObject *src, const int64_t *idx, int64_t n) {
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out) return NULL;
    for (int64_t j = 0; j < n; j++) PyList_SET_ITEM(out, j, Py_NewRef(PyList_GET_ITEM(src, idx[j])));
    return out;
}

/* {(services[a], eps[b]): count} in first-seen order (a later equal key overwrites, as a dict
 * comprehension does). */
static PyObject *endpoint_dict(const Out *o, PyObject *services, PyObject *eps) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int64_t j = 0; j < o->ep_map.count; j++) {
        PyObject *k = PyTuple_Pack(2, PyList_GET_ITEM(services, (Py_ssize_t)(o->eps.code[j] >> 32)),
                                   PyList_GET_ITEM(eps, (Py_ssize_t)(o->eps.code[j] & 0xffffffffu)));
        PyObject *v = PyLong_FromLongLong(o->eps.count[j]);
        int rc = (k && v) ? PyDict_SetItem(d, k, v) : -1;
        Py_XDECREF(k); Py_XDECREF(v);
        if (rc < 0) { Py_DECREF(d); return NULL; }
    }
    return d;
}

static PyObject *result(const In *in, Out *o, PyObject *keys_list, PyObject *names, PyObject *eps) {
    int64_t nc = o->cell_map.count;
    size_t m = (size_t)(nc ? nc : 1);
    Pair *order = malloc(m * sizeof *order);
    int64_t *i64 = malloc(m * 5 * sizeof *i64);
    double *f64 = malloc(m * 2 * sizeof *f64);
    int8_t *tags = malloc(m * 2);
    PyObject *out = NULL, *services = NULL, *regions = NULL, *svc_region = NULL, *endpoints = NULL;
    if (!order || !i64 || !f64 || !tags) { PyErr_NoMemory(); goto done; }
    for (int64_t j = 0; j < nc; j++) { order[j].code = o->cells.code[j]; order[j].id = j; }
    qsort(order, (size_t)nc, sizeof *order, pair_cmp);
    int64_t *cs = i64, *cr = i64 + nc, *ops = i64 + 2 * nc, *meas = i64 + 3 * nc, *spans = i64 + 4 * nc;
    for (int64_t j = 0; j < nc; j++) {
        int64_t id = order[j].id;
        cs[j] = (int64_t)(order[j].code >> 32);
        cr[j] = (int64_t)(order[j].code & 0xffffffffu);
        f64[j] = o->cells.energy[id];
        f64[nc + j] = o->cells.carbon[id];
        ops[j] = o->cells.ops[id];
        meas[j] = o->cells.measured[id];
        spans[j] = o->cells.spans[id];
        tags[j] = o->cells.etag[id];
        tags[nc + j] = ops[j] > 0 ? in->live[o->name_order[cr[j]]] : 0;
    }
    services = pick(keys_list, o->key_order, o->n_keys);
    regions = pick(names, o->name_order, o->n_names);
    svc_region = PyList_New((Py_ssize_t)o->n_keys);
    if (!services || !regions || !svc_region) goto done;
    for (int64_t j = 0; j < o->n_keys; j++) {
        PyObject *v = PyLong_FromLongLong(o->service_region[j]);
        if (!v) goto done;
        PyList_SET_ITEM(svc_region, j, v);
    }
    endpoints = endpoint_dict(o, services, eps);
    if (!endpoints) goto done;
    out = Py_BuildValue(
        "(OOONNNNNNNNNNNNO(LLLLLL))",
        services, regions, svc_region,
        bytes_of(o->name_order, o->n_names, 8), bytes_of(o->region_kind, o->n_names, 1),
        bytes_of(cs, nc, 8), bytes_of(cr, nc, 8),
        bytes_of(f64, nc, 8), bytes_of(f64 + nc, nc, 8),
        bytes_of(ops, nc, 8), bytes_of(meas, nc, 8), bytes_of(spans, nc, 8),
        bytes_of(tags, nc, 1), bytes_of(tags + nc, nc, 1),
        bytes_of(o->requests, o->n_keys, 8), endpoints,
        (long long)o->svc_cut, (long long)o->reg_invalid, (long long)o->meas_stale,
        (long long)o->live_stale, (long long)o->ep_cut, (long long)o->root_spans);
done:
    Py_XDECREF(services); Py_XDECREF(regions); Py_XDECREF(svc_region); Py_XDECREF(endpoints);
    free(order); free(i64); free(f64); free(tags);
    return out;
}

/* Buffer lengths (in items) must agree with the span count and the table sizes. */
static int lengths_ok(const In *in, const Py_ssize_t *len) {
    for (int a = A_SID; a <= A_ROOT; a++) if (len[a] != in->n) return 0;
    if (len[A_SVC_CUT] != 0 && len[A_SVC_CUT] != in->n_svc) return 0;
    if (len[A_ROWS] != in->n_name * ROW || len[A_KIND] != in->n_name ||
        len[A_LIVE] != in->n_name || len[A_STALE] != in->n_name) return 0;
    if (len[A_CAL] != (in->has_cal ? in->n_key : 0) || len[A_CALIBRATED] != len[A_CAL]) return 0;
    if (in->has_rate && (len[A_RATE] != in->n_key || len[A_MCODE] != in->n_key ||
                         len[A_MSTALE] != in->n_key || len[A_METERED] != in->n_key)) return 0;
    if (len[A_E_OP] != OP_CLASSES || (len[A_E_HTTP] != 0 && len[A_E_HTTP] != 4) ||
        len[A_HTTP_EDGES] != 3 || len[A_PROXY] != 8) return 0;
    if (in->has_ep_table && (len[A_EP_OF_TABLE] != in->n_ep || len[A_EP_CUT] != in->n_ep)) return 0;
    return 1;
}

static void out_free(Out *o) {
    free(o->key_new); free(o->name_new); free(o->key_order); free(o->name_order);
    free(o->service_region); free(o->region_kind); free(o->requests);
    cells_free(&o->cells);
    map_free(&o->cell_map); map_free(&o->ep_map);
    free(o->eps.code); free(o->eps.count);
}

static int out_init(Out *o, const In *in) {
    size_t k = (size_t)(in->n_key ? in->n_key : 1), r = (size_t)(in->n_name ? in->n_name : 1);
    o->key_new = malloc(k * sizeof(int64_t));
    o->name_new = malloc(r * sizeof(int64_t));
    o->key_order = malloc(k * sizeof(int64_t));
    o->name_order = malloc(r * sizeof(int64_t));
    o->service_region = malloc(k * sizeof(int64_t));
    o->region_kind = calloc(r, 1);
    o->requests = calloc(k, sizeof(int64_t));
    /* sized for the batch (at most one cell per span, and per service x region; one endpoint key
     * per span), so that a batch of ~500 services does not rehash its maps four times; a huge
     * batch (a trace file) grows them past 64 Ki entries as it needs */
    size_t cells = 64, eps = 64;
    while (cells < 2 * (size_t)in->n && cells < 2 * k * r && cells < (1u << 16)) cells *= 2;
    while (eps < 2 * (size_t)in->n && eps < (1u << 16)) eps *= 2;
    if (map_init(&o->cell_map, cells) || map_init(&o->ep_map, eps)) return -1;
    if (!o->key_new || !o->name_new || !o->key_order || !o->name_order || !o->service_region ||
        !o->region_kind || !o->requests) return -1;
    for (size_t j = 0; j < k; j++) o->key_new[j] = -1;
    for (size_t j = 0; j < r; j++) o->name_new[j] = -1;
    return 0;
}

static PyObject *score(PyObject *self, PyObject *args) {
    PyObject *bufs, *keys_list, *names, *eps, *now;
    Py_ssize_t n_ep;
    if (!PyArg_ParseTuple(args, "O!O!O!O!nO", &PyTuple_Type, &bufs, &PyList_Type, &keys_list,
                          &PyList_Type, &names, &PyList_Type, &eps, &n_ep, &now)) return NULL;
    Py_ssize_t n_eps = PyList_GET_SIZE(eps);
    if (PyTuple_GET_SIZE(bufs) != N_BUFFERS) {
        PyErr_Format(PyExc_TypeError, "score() takes a tuple of %d buffers", N_BUFFERS);
        return NULL;
    }
    In in;
    memset(&in, 0, sizeof in);
    in.has_now = now != Py_None;
    if (in.has_now) {
        int overflow = 0;
        in.now_ns = PyLong_AsLongLongAndOverflow(now, &overflow);
        if (in.now_ns == -1 && PyErr_Occurred()) return NULL;
        if (overflow) Py_RETURN_NONE;  /* the reference decides what an absurd clock means */
    }
    Py_buffer view[N_BUFFERS];
    Py_ssize_t len[N_BUFFERS];
    int got = 0;
    PyObject *out = NULL;
    for (; got < N_BUFFERS; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, got), &view[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (view[got].itemsize != ITEMSIZE[got] && view[got].len) {
            PyErr_Format(PyExc_TypeError, "score() buffer %d: item size %zd, expected %zd", got,
                         view[got].itemsize, ITEMSIZE[got]);
            PyBuffer_Release(&view[got]);
            goto done;
        }
        len[got] = view[got].len / ITEMSIZE[got];
    }
#define B(a) (view[a].buf)
    in.sid = B(A_SID); in.rid = B(A_RID); in.eid = B(A_EID); in.op = B(A_OP);
    in.resp = B(A_RESP); in.start = B(A_START); in.entry = B(A_ENTRY); in.root = B(A_ROOT);
    in.key_of_svc = B(A_KEY_OF_SVC); in.svc_cut = len[A_SVC_CUT] ? B(A_SVC_CUT) : NULL;
    in.name_of_reg = B(A_NAME_OF_REG); in.name_of_key = B(A_NAME_OF_KEY);
    in.rows = B(A_ROWS); in.pue = B(A_PUE); in.kind = B(A_KIND); in.live = B(A_LIVE);
    in.stale = B(A_STALE); in.cal = B(A_CAL); in.calibrated = B(A_CALIBRATED);
    in.rate = B(A_RATE); in.mcode = B(A_MCODE); in.mstale = B(A_MSTALE); in.metered = B(A_METERED);
    in.e_op = B(A_E_OP); in.e_http = B(A_E_HTTP); in.edges = B(A_HTTP_EDGES); in.proxy = B(A_PROXY);
    in.ep_of_table = B(A_EP_OF_TABLE); in.ep_cut = B(A_EP_CUT);
#undef B
    in.n = len[A_SID]; in.n_svc = len[A_KEY_OF_SVC]; in.n_reg = len[A_NAME_OF_REG];
    in.n_key = len[A_NAME_OF_KEY]; in.n_name = len[A_PUE];
    in.n_ep = n_ep; in.n_eps = n_eps;
    in.has_cal = len[A_CAL] > 0; in.has_rate = len[A_RATE] > 0; in.has_http = len[A_E_HTTP] > 0;
    in.has_ep_table = len[A_EP_OF_TABLE] > 0;
    if (in.n == 0 || in.n_key >= (1LL << 31) || in.n_name >= (1LL << 31) || n_eps >= (1LL << 31) ||
        (!in.has_ep_table && n_ep != n_eps) || PyList_GET_SIZE(keys_list) != in.n_key || PyList_GET_SIZE(names) != in.n_name ||
        !lengths_ok(&in, len) || !tables_ok(&in)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    Out o;
    memset(&o, 0, sizeof o);
    int rc = E_NOMEM;
    if (out_init(&o, &in) == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = pass(&in, &o);
        Py_END_ALLOW_THREADS
    }
    if (rc == OK) out = result(&in, &o, keys_list, names, eps);
    else if (rc == E_UNSUPPORTED) out = Py_NewRef(Py_None);
    else PyErr_NoMemory();
    out_free(&o);
done:
    for (int a = 0; a < got; a++) PyBuffer_Release(&view[a]);
    return out;
}

/* keys(services, service_regions, fallback, index, names, slow, max_bytes): the service keys of
 * a batch's service table (table order), each entry's key index, which entries were cut, and each
 * key's region name (interned into index/names, which the caller filled with the batch's own
 * regions). An ASCII entry of at most max_bytes is lowercased here (that is str.lower, and it
 * cannot be cut); any other entry is slow(entry) -> (key, cut), i.e. bounded(entry.lower()). */
static Py_ssize_t intern_obj(PyObject *index, PyObject *list, PyObject *key) {
    PyObject *at = PyDict_GetItemWithError(index, key);
    if (at) return PyLong_AsSsize_t(at);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t id = PyList_GET_SIZE(list);
    PyObject *num = PyLong_FromSsize_t(id);
    if (!num || PyDict_SetItem(index, key, num) < 0 || PyList_Append(list, key) < 0) {
        Py_XDECREF(num);
        return -1;
    }
    Py_DECREF(num);
    return id;
}

static PyObject *lowered(PyObject *raw, Py_ssize_t max_bytes, PyObject *slow, int *cut) {
    *cut = 0;
    if (PyUnicode_CheckExact(raw) && PyUnicode_IS_ASCII(raw) && PyUnicode_GET_LENGTH(raw) <= max_bytes) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(raw);
        const Py_UCS1 *p = PyUnicode_1BYTE_DATA(raw);
        Py_ssize_t j = 0;
        while (j < n && !(p[j] >= 'A' && p[j] <= 'Z')) j++;
        if (j == n) return Py_NewRef(raw);
        PyObject *low = PyUnicode_New(n, 127);
        if (!low) return NULL;
        Py_UCS1 *q = PyUnicode_1BYTE_DATA(low);
        for (Py_ssize_t k = 0; k < n; k++) q[k] = (p[k] >= 'A' && p[k] <= 'Z') ? p[k] + 32 : p[k];
        return low;
    }
    PyObject *r = PyObject_CallOneArg(slow, raw);
    if (!r) return NULL;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "keys(): slow() must return (key, cut)");
        return NULL;
    }
    PyObject *key = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    *cut = PyObject_IsTrue(PyTuple_GET_ITEM(r, 1));
    Py_DECREF(r);
    if (*cut < 0) { Py_DECREF(key); return NULL; }
    return key;
}

static inline int is_short_ascii(PyObject *raw, Py_ssize_t max_bytes) {
    return PyUnicode_CheckExact(raw) && PyUnicode_IS_ASCII(raw) && PyUnicode_GET_LENGTH(raw) <= max_bytes;
}

/* keys() when every entry is short ASCII (the usual table): the keys are deduplicated in a C
 * table over their (keyed, cached) str hash, with no dict and no int per entry. Same keys,
 * same order as the dict path. */
static int keys_ascii(PyObject *services, PyObject *keys_list, int64_t *of_p) {
    Py_ssize_t n = PyList_GET_SIZE(services);
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    Py_hash_t *hs = malloc(cap * sizeof *hs);
    int64_t *ids = malloc(cap * sizeof *ids);
    int rc = -1;
    if (!hs || !ids) { PyErr_NoMemory(); goto done; }
    for (size_t j = 0; j < cap; j++) ids[j] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyList_GET_ITEM(services, i);
        int cut;
        PyObject *key = lowered(raw, PyUnicode_GET_LENGTH(raw), NULL, &cut);  /* never slow */
        if (!key) goto done;
        Py_hash_t h = PyObject_Hash(key);
        if (h == -1) { Py_DECREF(key); goto done; }
        const Py_UCS1 *p = PyUnicode_1BYTE_DATA(key);
        Py_ssize_t len = PyUnicode_GET_LENGTH(key);
        size_t j = (size_t)h & (cap - 1);
        int64_t id = -1;
        for (; ids[j] >= 0; j = (j + 1) & (cap - 1)) {
            if (hs[j] != h) continue;
            PyObject *k = PyList_GET_ITEM(keys_list, ids[j]);
            if (PyUnicode_GET_LENGTH(k) == len && memcmp(PyUnicode_1BYTE_DATA(k), p, (size_t)len) == 0) {
                id = ids[j];
                break;
            }
        }
        if (id < 0) {
            id = PyList_GET_SIZE(keys_list);
            if (PyList_Append(keys_list, key) < 0) { Py_DECREF(key); goto done; }
            hs[j] = h;
            ids[j] = id;
        }
        Py_DECREF(key);
        of_p[i] = id;
    }
    rc = 0;
done:
    free(hs); free(ids);
    return rc;
}

static PyObject *keys(PyObject *self, PyObject *args) {
    PyObject *services, *regions_of, *fallback, *index, *names, *slow;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!On", &PyList_Type, &services, &PyDict_Type, &regions_of,
                          &fallback, &PyDict_Type, &index, &PyList_Type, &names, &slow, &max_bytes))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(services);
    int ascii = 1;
    for (Py_ssize_t i = 0; i < n && ascii; i++) ascii = is_short_ascii(PyList_GET_ITEM(services, i), max_bytes);
    PyObject *keys_list = PyList_New(0), *key_index = PyDict_New();
    PyObject *of = PyByteArray_FromStringAndSize(NULL, n * 8), *cuts = PyByteArray_FromStringAndSize(NULL, n);
    PyObject *by_key = NULL, *out = NULL;
    if (!keys_list || !key_index || !of || !cuts) goto done;
    int64_t *of_p = (int64_t *)PyByteArray_AS_STRING(of);
    uint8_t *cut_p = (uint8_t *)PyByteArray_AS_STRING(cuts);
    int any_cut = 0;
    if (ascii && keys_ascii(services, keys_list, of_p) < 0) goto done;
    for (Py_ssize_t i = 0; i < n && !ascii; i++) {
        int cut;
        PyObject *key = lowered(PyList_GET_ITEM(services, i), max_bytes, slow, &cut);
        if (!key) goto done;
        Py_ssize_t id = intern_obj(key_index, keys_list, key);
        Py_DECREF(key);
        if (id < 0) goto done;
        of_p[i] = id;
        cut_p[i] = (uint8_t)cut;
        any_cut |= cut;
    }
    Py_ssize_t nk = PyList_GET_SIZE(keys_list);
    by_key = PyByteArray_FromStringAndSize(NULL, nk * 8);
    if (!by_key) goto done;
    int64_t *by_p = (int64_t *)PyByteArray_AS_STRING(by_key);
    Py_ssize_t fallback_id = -1;  /* no [green.service_regions] (usual): one lookup */
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *region = NULL;
        if (PyDict_GET_SIZE(regions_of)) {
            region = PyDict_GetItemWithError(regions_of, PyList_GET_ITEM(keys_list, k));
            if (!region && PyErr_Occurred()) goto done;
        }
        Py_ssize_t id;
        if (region) id = intern_obj(index, names, region);
        else id = fallback_id >= 0 ? fallback_id : (fallback_id = intern_obj(index, names, fallback));
        if (id < 0) goto done;
        by_p[k] = id;
    }
    if (!any_cut && PyByteArray_Resize(cuts, 0) < 0) goto done;
    out = PyTuple_Pack(4, keys_list, of, cuts, by_key);
done:
    Py_XDECREF(keys_list); Py_XDECREF(key_index); Py_XDECREF(of); Py_XDECREF(cuts); Py_XDECREF(by_key);
    return out;
}

/* ---------------------------------------------------------------- the window accumulator
 *
 * Accumulator: an open window's partial, merged into in place (agent.carbon.partial's
 * WindowAccumulator keeps one). add() does what WindowPartial.merge does to the services,
 * regions, cells, per-region facts, requests and endpoints of a window, with the caps, in the
 * same order and with the same float additions in the same order (each cell's sums added
 * partial by partial from 0.0, as merge's np.bincount adds), but over the partial's entries
 * only: the service/region indexes, the cell map and the endpoint dict persist across adds.
 * Counters and trace ids stay in Python (a handful of entries, and numpy). */

/* Names: str -> dense id in insertion order, as a C open-addressing table over Python's own
 * (keyed, cached) str hash with each name's UTF-8 bytes in one arena, so that a lookup touches
 * the table and the arena, not a dict entry and the stored key's object (cache misses that made
 * a 4,096-service window's lookups cost ~3 x a dict's in a busy agent). A str that is not valid
 * UTF-8 (a lone surrogate) is compared by its surrogatepass bytes: equal strs, equal bytes. */
#define NAME_INLINE 16
typedef struct {  /* one cache line holds two: a lookup of a short name reads one */
    Py_hash_t hash;
    int32_t id, len;  /* id -1: empty */
    union { char inl[NAME_INLINE]; int64_t off; } b;  /* the bytes, or their offset in arena */
} NameSlot;

typedef struct {
    PyObject *list;            /* the names, by id */
    NameSlot *slots;
    size_t mask;
    int64_t n;
    char *arena;               /* bytes of names longer than NAME_INLINE */
    size_t arena_n, arena_cap;
} Names;

static int names_init(Names *t) {
    memset(t, 0, sizeof *t);
    t->list = PyList_New(0);
    t->mask = 63;
    t->slots = malloc(64 * sizeof *t->slots);
    if (!t->list || !t->slots) return -1;
    for (size_t j = 0; j < 64; j++) t->slots[j].id = -1;
    return 0;
}

static void names_free(Names *t) {
    Py_XDECREF(t->list);
    free(t->arena); free(t->slots);
}

/* The bytes a name is compared by (*tmp: a bytes object to release, or NULL). */
static int str_bytes(PyObject *s, const char **p, Py_ssize_t *n, PyObject **tmp) {
    *tmp = NULL;
    if (PyUnicode_IS_ASCII(s)) {
        *p = (const char *)PyUnicode_1BYTE_DATA(s);
        *n = PyUnicode_GET_LENGTH(s);
        return 0;
    }
    *p = PyUnicode_AsUTF8AndSize(s, n);
    if (*p) return 0;
    PyErr_Clear();
    *tmp = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (!*tmp) return -1;
    *p = PyBytes_AS_STRING(*tmp);
    *n = PyBytes_GET_SIZE(*tmp);
    return 0;
}

static inline int name_is(const Names *t, const NameSlot *e, Py_hash_t h, const char *p, Py_ssize_t n) {
    if (e->hash != h || e->len != n) return 0;
    return memcmp(n <= NAME_INLINE ? e->b.inl : t->arena + e->b.off, p, (size_t)n) == 0;
}

/* The id of s (a str); absent: added (add != 0) or -1. -2 on error. */
static int64_t names_get(Names *t, PyObject *s, int add) {
    Py_hash_t h = PyObject_Hash(s);
    if (h == -1 && PyErr_Occurred()) return -2;
    const char *p;
    Py_ssize_t n;
    PyObject *tmp;
    if (str_bytes(s, &p, &n, &tmp) < 0) return -2;
    size_t j = (size_t)h & t->mask;
    int64_t id = -1;
    for (; t->slots[j].id >= 0; j = (j + 1) & t->mask)
        if (name_is(t, &t->slots[j], h, p, n)) { id = t->slots[j].id; goto done; }
    if (!add) goto done;
    id = -2;
    if (n > INT32_MAX || t->n >= INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "a name table past 2^31"); goto done; }
    if ((size_t)(t->n + 1) * 2 > t->mask + 1) {  /* grow the table, then find the slot again */
        size_t cap = (t->mask + 1) * 2;
        NameSlot *slots = malloc(cap * sizeof *slots);
        if (!slots) { PyErr_NoMemory(); goto done; }
        for (size_t k = 0; k < cap; k++) slots[k].id = -1;
        for (size_t k = 0; k <= t->mask; k++) {
            if (t->slots[k].id < 0) continue;
            size_t q = (size_t)t->slots[k].hash & (cap - 1);
            while (slots[q].id >= 0) q = (q + 1) & (cap - 1);
            slots[q] = t->slots[k];
        }
        free(t->slots);
        t->slots = slots;
        t->mask = cap - 1;
        for (j = (size_t)h & t->mask; t->slots[j].id >= 0; j = (j + 1) & t->mask) {}
    }
    NameSlot e;
    e.hash = h;
    e.len = (int32_t)n;
    if (n <= NAME_INLINE) {
        memcpy(e.b.inl, p, (size_t)n);
    } else {
        if (t->arena_n + (size_t)n > t->arena_cap) {
            size_t cap = t->arena_cap ? t->arena_cap : 4096;
            while (cap < t->arena_n + (size_t)n) cap *= 2;
            char *a = realloc(t->arena, cap);
            if (!a) { PyErr_NoMemory(); goto done; }
            t->arena = a;
            t->arena_cap = cap;
        }
        memcpy(t->arena + t->arena_n, p, (size_t)n);
        e.b.off = (int64_t)t->arena_n;
    }
    if (PyList_Append(t->list, s) < 0) goto done;
    if (n > NAME_INLINE) t->arena_n += (size_t)n;
    id = e.id = (int32_t)t->n++;
    t->slots[j] = e;
done:
    Py_XDECREF(tmp);
    return id;
}

enum { OV_OPS, OV_MEASURED, OV_SPANS, OV_REQUESTS, OV_ENDPOINT, N_BOUNDS };

/* *total += |v|; 1 when that would pass int64 (INT64_MIN has no |v|). */
static inline int bound_add(int64_t *total, int64_t v) {
    if (v == INT64_MIN) return 1;
    return __builtin_add_overflow(*total, v < 0 ? -v : v, total);
}

/* *most = max(*most, |v|), v a sum the checked add let in (never INT64_MIN). */
static inline void bound_max(int64_t *most, int64_t v) {
    int64_t m = v < 0 ? -v : v;
    if (m > *most) *most = m;
}

/* Lookups ahead of use: a window's tables outgrow the caches (4,096 services, their cells and
 * endpoints), and a batch of the fan-in shape looks up ~500 names, ~500 cells and ~360
 * endpoints at random places in them; each loop below asks for the line of the entry
 * PREFETCH_AHEAD steps on, so that its miss overlaps the work in between. Nothing read or
 * written changes (a prefetch is a hint). */
#define PREFETCH_AHEAD 8

/* Prefetch the slot where s's lookup in t starts (s a str: its hash is cached after the first
 * time, and the lookup itself computes it anyway). */
static inline void names_prefetch(const Names *t, PyObject *s) {
    Py_hash_t h = PyObject_Hash(s);
    if (h == -1) { PyErr_Clear(); return; }  /* names_get reports it */
    __builtin_prefetch(&t->slots[(size_t)h & t->mask]);
}

static inline void map_prefetch(const Map *m, uint64_t code) {
    __builtin_prefetch(&m->s[mix(code) & m->mask]);
}

typedef struct {
    PyObject_HEAD
    Names svc, reg;                  /* the window's services and regions */
    Names ep_svc, ep_name;           /* the names in its endpoint keys (service, endpoint) */
    Map ep_map;                      /* (ep_svc id << 32 | ep_name id) -> slot */
    uint64_t *ep_code;               /* per slot, in first-insertion order */
    int64_t *ep_count, ep_cap, n_ep; /* I/O ops per slot */
    int64_t *other_slot, other_cap;  /* per ep_svc id: slot of (service, "(other)"), -1 none yet */
    int64_t real_svc, real_reg;      /* names other than "(other)" / "unknown" */
    int64_t n_svc_cap, n_reg_cap;
    int64_t *service_region, *requests;  /* per service */
    int8_t *kind; uint8_t *est;          /* per region */
    Map cell_map;                        /* (service << 32 | region) -> cell */
    int64_t n_cells, cell_cap;
    int64_t *cell_svc, *cell_reg, *ops, *measured, *spans;
    double *energy, *carbon;
    int8_t *etag, *ltag;
    /* per count (OV_*): the largest |sum| the window holds; an add() whose own total of |v|
     * could take it past int64 is declined (returns None, nothing changed) and the caller goes
     * on with the reference, whose ints are unbounded */
    int64_t bound[N_BOUNDS];
} Acc;

static int grow_to(void **p, int64_t old_cap, int64_t cap, size_t size) {
    void *q = realloc(*p, (size_t)cap * size);
    if (!q) return -1;
    memset((char *)q + (size_t)old_cap * size, 0, (size_t)(cap - old_cap) * size);
    *p = q;
    return 0;
}

static int acc_reserve_svc(Acc *a, int64_t need) {
    if (need <= a->n_svc_cap) return 0;
    int64_t cap = a->n_svc_cap ? a->n_svc_cap : 64;
    while (cap < need) cap *= 2;
    if (grow_to((void **)&a->service_region, a->n_svc_cap, cap, 8) ||
        grow_to((void **)&a->requests, a->n_svc_cap, cap, 8)) return -1;
    a->n_svc_cap = cap;
    return 0;
}

static int acc_reserve_reg(Acc *a, int64_t need) {
    if (need <= a->n_reg_cap) return 0;
    int64_t cap = a->n_reg_cap ? a->n_reg_cap : 16;
    while (cap < need) cap *= 2;
    if (grow_to((void **)&a->kind, a->n_reg_cap, cap, 1) ||
        grow_to((void **)&a->est, a->n_reg_cap, cap, 1)) return -1;
    a->n_reg_cap = cap;
    return 0;
}

static int acc_reserve_cells(Acc *a, int64_t need) {
    if (need <= a->cell_cap) return 0;
    int64_t cap = a->cell_cap ? a->cell_cap : 64, old = a->cell_cap;
    while (cap < need) cap *= 2;
    if (grow_to((void **)&a->cell_svc, old, cap, 8) || grow_to((void **)&a->cell_reg, old, cap, 8) ||
        grow_to((void **)&a->ops, old, cap, 8) || grow_to((void **)&a->measured, old, cap, 8) ||
        grow_to((void **)&a->spans, old, cap, 8) || grow_to((void **)&a->energy, old, cap, 8) ||
        grow_to((void **)&a->carbon, old, cap, 8) || grow_to((void **)&a->etag, old, cap, 1) ||
        grow_to((void **)&a->ltag, old, cap, 1)) return -1;
    a->cell_cap = cap;
    return 0;
}

static void acc_dealloc(Acc *a) {
    names_free(&a->svc); names_free(&a->reg); names_free(&a->ep_svc); names_free(&a->ep_name);
    map_free(&a->ep_map);
    free(a->ep_code); free(a->ep_count); free(a->other_slot);
    free(a->service_region); free(a->requests); free(a->kind); free(a->est);
    map_free(&a->cell_map);
    free(a->cell_svc); free(a->cell_reg); free(a->ops); free(a->measured); free(a->spans);
    free(a->energy); free(a->carbon); free(a->etag); free(a->ltag);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyObject *acc_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "Accumulator() takes no arguments");
        return NULL;
    }
    Acc *a = (Acc *)type->tp_alloc(type, 0);
    if (!a) return NULL;
    if (names_init(&a->svc) || names_init(&a->reg) || names_init(&a->ep_svc) ||
        names_init(&a->ep_name) || map_init(&a->ep_map, 64) ||
        map_init(&a->cell_map, 64) || acc_reserve_svc(a, 1) || acc_reserve_reg(a, 1) ||
        acc_reserve_cells(a, 1)) {
        Py_DECREF(a);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    return (PyObject *)a;
}

/* The window id of name in t (adding it, with the cap: a new name past max_real real names is
 * replaced by spill, *spilled = 1); -2 on error. */
static int64_t acc_intern(Names *t, int64_t *real, PyObject *name, PyObject *spill,
                          int64_t max_real, int *spilled) {
    *spilled = 0;
    int64_t id = names_get(t, name, 0);
    if (id != -1) return id;
    int is_spill = PyUnicode_Compare(name, spill);
    if (is_spill == -1 && PyErr_Occurred()) return -2;
    if (is_spill != 0 && *real >= max_real) {
        *spilled = 1;
        return names_get(t, spill, 1);
    }
    id = names_get(t, name, 1);
    if (id >= 0) *real += is_spill != 0;
    return id;
}

/* The endpoint slot of (service, endpoint) (adding a slot, count 0, when add != 0; else -1
 * when absent); -2 on error. */
static int64_t acc_ep_slot(Acc *a, PyObject *svc, PyObject *name, int add) {
    int64_t s = names_get(&a->ep_svc, svc, add), e = s < 0 ? s : names_get(&a->ep_name, name, add);
    if (e < 0) return e;
    if (s >= a->other_cap) {
        int64_t cap = a->other_cap ? a->other_cap : 64;
        while (cap <= s) cap *= 2;
        if (grow_to((void **)&a->other_slot, a->other_cap, cap, 8)) { PyErr_NoMemory(); return -2; }
        for (int64_t j = a->other_cap; j < cap; j++) a->other_slot[j] = -1;
        a->other_cap = cap;
    }
    uint64_t code = ((uint64_t)s << 32) | (uint64_t)e;
    if (!add) return map_find(&a->ep_map, code);
    int added;
    int64_t slot = map_get(&a->ep_map, code, &added);
    if (slot < 0) { PyErr_NoMemory(); return -2; }
    if (added) {
        if (slot >= a->ep_cap) {
            int64_t cap = a->ep_cap ? a->ep_cap * 2 : 64;
            if (grow_to((void **)&a->ep_count, a->ep_cap, cap, 8) ||
                grow_to((void **)&a->ep_code, a->ep_cap, cap, 8)) { PyErr_NoMemory(); return -2; }
            a->ep_cap = cap;
        }
        a->ep_code[slot] = code;
        a->ep_count[slot] = 0;
        a->n_ep = slot + 1;
    }
    return slot;
}

/* {(service, endpoint): count} in slot order (first-insertion order, as the reference's dict). */
static PyObject *acc_endpoint_dict(Acc *a) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int64_t j = 0; j < a->n_ep; j++) {
        PyObject *k = PyTuple_Pack(2, PyList_GET_ITEM(a->ep_svc.list, (Py_ssize_t)(a->ep_code[j] >> 32)),
                                   PyList_GET_ITEM(a->ep_name.list, (Py_ssize_t)(a->ep_code[j] & 0xffffffffu)));
        PyObject *v = PyLong_FromLongLong(a->ep_count[j]);
        int rc = (k && v) ? PyDict_SetItem(d, k, v) : -1;
        Py_XDECREF(k); Py_XDECREF(v);
        if (rc < 0) { Py_DECREF(d); return NULL; }
    }
    return d;
}

enum {
    P_REGION_KIND, P_REGION_EST, P_CELL_SVC, P_CELL_REG, P_ENERGY, P_CARBON, P_OPS, P_MEASURED,
    P_SPANS, P_ETAG, P_LTAG, P_REQUESTS, P_TO_UNKNOWN, N_PARTS
};
static const Py_ssize_t PART_ITEMSIZE[N_PARTS] = {1, 1, 8, 8, 8, 8, 8, 8, 8, 1, 1, 8, 1};

/* add(services, service_region, regions, endpoints, buffers, caps, names) -> (service_overflow spans,
 * region_overflow spans, endpoint_overflow ops)
 *   buffers: (region_kind i8, region_estimated bool, cell_svc i64, cell_reg i64, energy f64,
 *             carbon f64, ops i64, measured_ops i64, span_count i64, etag i8, ltag i8,
 *             requests i64, TO_UNKNOWN i8)
 *   caps: (MAX_SERVICES, MAX_REGIONS, MAX_ENDPOINTS)
 *   names: (OTHER_SERVICE, UNKNOWN, OTHER_ENDPOINT)
 * or None, nothing changed, when a sum could pass int64 (the window's largest sum of a count
 * plus this partial's total of it would, or an endpoint count is past it): the reference's ints are unbounded, so the caller goes on
 * with it (agent.carbon.partial.WindowAccumulator, fallback "count_overflow"). */
static PyObject *acc_add(Acc *a, PyObject *args) {
    PyObject *services, *sreg_list, *regions, *endpoints, *bufs, *other_svc, *unknown, *other_ep;
    long long max_svc, max_reg, max_ep;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!(LLL)(UUU)", &PyList_Type, &services, &PyList_Type, &sreg_list, &PyList_Type,
                          &regions, &PyDict_Type, &endpoints, &PyTuple_Type, &bufs, &max_svc,
                          &max_reg, &max_ep, &other_svc, &unknown, &other_ep)) return NULL;
    if (PyTuple_GET_SIZE(bufs) != N_PARTS) {
        PyErr_Format(PyExc_TypeError, "add() takes a tuple of %d buffers", N_PARTS);
        return NULL;
    }
    Py_buffer view[N_PARTS];
    Py_ssize_t len[N_PARTS];
    int got = 0;
    PyObject *out = NULL, *folded_names = NULL;
    int64_t *s_map = NULL, *r_map = NULL, *o_sreg = NULL, *c_map = NULL;
    uint8_t *renamed = NULL, *folded = NULL;
    for (; got < N_PARTS; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, got), &view[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (view[got].itemsize != PART_ITEMSIZE[got] && view[got].len) {
            PyErr_Format(PyExc_TypeError, "add() buffer %d: item size %zd, expected %zd", got,
                         view[got].itemsize, PART_ITEMSIZE[got]);
            PyBuffer_Release(&view[got]);
            goto done;
        }
        len[got] = view[got].len / PART_ITEMSIZE[got];
    }
    const int8_t *o_kind = view[P_REGION_KIND].buf, *o_etag = view[P_ETAG].buf, *o_ltag = view[P_LTAG].buf;
    const int8_t *to_unknown = view[P_TO_UNKNOWN].buf;
    const uint8_t *o_est = view[P_REGION_EST].buf;
    const int64_t *o_csvc = view[P_CELL_SVC].buf, *o_creg = view[P_CELL_REG].buf;
    const int64_t *o_ops = view[P_OPS].buf, *o_meas = view[P_MEASURED].buf, *o_spans = view[P_SPANS].buf;
    const int64_t *o_req = view[P_REQUESTS].buf;
    const double *o_energy = view[P_ENERGY].buf, *o_carbon = view[P_CARBON].buf;
    Py_ssize_t ns = PyList_GET_SIZE(services), nr = PyList_GET_SIZE(regions), nc = len[P_CELL_SVC];
    Py_ssize_t n_tags = len[P_TO_UNKNOWN];
    int64_t nb[N_BOUNDS] = {0};  /* this add's total of |v| per count */
    int over = 0;
    /* check everything before changing anything */
    if (len[P_REGION_KIND] != nr || len[P_REGION_EST] != nr || len[P_REQUESTS] != ns ||
        PyList_GET_SIZE(sreg_list) != ns) {
        PyErr_SetString(PyExc_ValueError, "add(): a per-service or per-region array has another length than its list");
        goto done;
    }
    for (int p = P_CELL_REG; p <= P_LTAG; p++)
        if (len[p] != nc) { PyErr_SetString(PyExc_ValueError, "add(): cell arrays of different lengths"); goto done; }
    for (Py_ssize_t i = 0; i < nc; i++)
        if (o_csvc[i] < 0 || o_csvc[i] >= ns || o_creg[i] < 0 || o_creg[i] >= nr ||
            o_etag[i] < 0 || o_etag[i] >= n_tags) {
            PyErr_SetString(PyExc_ValueError, "add(): a cell's service, region or tag is outside its table");
            goto done;
        }
    o_sreg = malloc((size_t)(ns ? ns : 1) * 8);
    if (!o_sreg) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < ns; i++) {
        o_sreg[i] = PyLong_AsLongLong(PyList_GET_ITEM(sreg_list, i));
        if (o_sreg[i] == -1 && PyErr_Occurred()) goto done;
    }
    for (Py_ssize_t i = 0; i < ns; i++)
        if (o_sreg[i] < 0 || o_sreg[i] >= nr) {
            PyErr_SetString(PyExc_ValueError, "add(): a service's region is outside the region table");
            goto done;
        }
    for (Py_ssize_t i = 0; i < ns; i++)
        if (!PyUnicode_Check(PyList_GET_ITEM(services, i))) { PyErr_SetString(PyExc_TypeError, "add(): a service is not a str"); goto done; }
    for (Py_ssize_t i = 0; i < nr; i++)
        if (!PyUnicode_Check(PyList_GET_ITEM(regions, i))) { PyErr_SetString(PyExc_TypeError, "add(): a region is not a str"); goto done; }
    {
        Py_ssize_t pos = 0;
        PyObject *key, *n;
        while (PyDict_Next(endpoints, &pos, &key, &n)) {
            if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 ||
                !PyUnicode_Check(PyTuple_GET_ITEM(key, 0)) || !PyUnicode_Check(PyTuple_GET_ITEM(key, 1))) {
                PyErr_SetString(PyExc_TypeError, "add(): an endpoint key is not a (service, endpoint) pair of str");
                goto done;
            }
            if (!PyLong_Check(n)) { PyErr_SetString(PyExc_TypeError, "add(): an endpoint count is not an int"); goto done; }
            int big;
            long long cnt = PyLong_AsLongLongAndOverflow(n, &big);
            if (cnt == -1 && PyErr_Occurred()) goto done;
            over |= big || bound_add(&nb[OV_ENDPOINT], cnt);
        }
    }
    if (over) goto decline;
    /* the checked add: every sum this add makes stays within int64, or nothing is added */
    for (Py_ssize_t i = 0; i < nc; i++)
        if (bound_add(&nb[OV_OPS], o_ops[i]) || bound_add(&nb[OV_MEASURED], o_meas[i]) ||
            bound_add(&nb[OV_SPANS], o_spans[i])) goto decline;
    for (Py_ssize_t j = 0; j < ns; j++)
        if (bound_add(&nb[OV_REQUESTS], o_req[j])) goto decline;
    for (int f = 0; f < N_BOUNDS; f++) {  /* no sum can then pass the largest one + this total */
        int64_t top;
        if (__builtin_add_overflow(a->bound[f], nb[f], &top)) goto decline;
    }
    size_t ms = (size_t)(ns ? ns : 1), mr = (size_t)(nr ? nr : 1);
    s_map = malloc(ms * 8); r_map = malloc(mr * 8); renamed = calloc(ms, 1); folded = calloc(mr, 1);
    if (!s_map || !r_map || !renamed || !folded) { PyErr_NoMemory(); goto done; }
    /* services, then regions: other's first-seen order after the window's */
    int64_t before_svc = a->svc.n;
    int any_renamed = 0;
    for (Py_ssize_t j = 0; j < ns && j < PREFETCH_AHEAD; j++)
        names_prefetch(&a->svc, PyList_GET_ITEM(services, j));
    for (Py_ssize_t j = 0; j < ns; j++) {
        int spilled;
        if (j + PREFETCH_AHEAD < ns) names_prefetch(&a->svc, PyList_GET_ITEM(services, j + PREFETCH_AHEAD));
        int64_t id = acc_intern(&a->svc, &a->real_svc, PyList_GET_ITEM(services, j), other_svc,
                                max_svc - 1, &spilled);
        if (id < 0) goto done;
        s_map[j] = id;
        renamed[j] = (uint8_t)spilled;
        any_renamed |= spilled;
    }
    long long svc_over = 0, reg_over = 0;
    if (any_renamed)
        for (Py_ssize_t i = 0; i < nc; i++) if (renamed[o_csvc[i]]) svc_over += o_spans[i];
    for (Py_ssize_t j = 0; j < nr; j++) {
        int spilled;
        int64_t id = acc_intern(&a->reg, &a->real_reg, PyList_GET_ITEM(regions, j), unknown,
                                max_reg, &spilled);
        if (id < 0) goto done;
        r_map[j] = id;
        folded[j] = (uint8_t)spilled;
    }
    int64_t n_svc = a->svc.n, n_reg = a->reg.n;
    if (acc_reserve_svc(a, n_svc) || acc_reserve_reg(a, n_reg)) { PyErr_NoMemory(); goto done; }
    /* cells, in other's order: acc + a (+ b ...); first each cell's window cell (the map's
     * slots prefetched ahead), then the sums (the cell arrays prefetched ahead): the same
     * additions in the same order as one pass */
    c_map = malloc((size_t)(nc ? nc : 1) * 8);
    if (!c_map) { PyErr_NoMemory(); goto done; }
#define CELL_CODE(i) (((uint64_t)s_map[o_csvc[i]] << 32) | (uint64_t)r_map[o_creg[i]])
    for (Py_ssize_t i = 0; i < nc && i < PREFETCH_AHEAD; i++) map_prefetch(&a->cell_map, CELL_CODE(i));
    for (Py_ssize_t i = 0; i < nc; i++) {
        if (i + PREFETCH_AHEAD < nc) map_prefetch(&a->cell_map, CELL_CODE(i + PREFETCH_AHEAD));
        int64_t s = s_map[o_csvc[i]], r = r_map[o_creg[i]];
        int added;
        int64_t cell = map_get(&a->cell_map, CELL_CODE(i), &added);
        if (cell < 0 || (added && acc_reserve_cells(a, cell + 1))) { PyErr_NoMemory(); goto done; }
        if (added) { a->cell_svc[cell] = s; a->cell_reg[cell] = r; a->n_cells = cell + 1; }
        c_map[i] = cell;
    }
#undef CELL_CODE
    for (Py_ssize_t i = 0; i < nc; i++) {
        if (i + PREFETCH_AHEAD < nc) {
            int64_t ahead = c_map[i + PREFETCH_AHEAD];
            __builtin_prefetch(&a->energy[ahead], 1); __builtin_prefetch(&a->carbon[ahead], 1);
            __builtin_prefetch(&a->ops[ahead], 1); __builtin_prefetch(&a->measured[ahead], 1);
            __builtin_prefetch(&a->spans[ahead], 1);
        }
        int f = folded[o_creg[i]];
        if (f) reg_over += o_spans[i];
        int64_t cell = c_map[i];
        a->energy[cell] += o_energy[i];
        a->carbon[cell] += f ? 0.0 : o_carbon[i];
        a->ops[cell] += o_ops[i];
        a->measured[cell] += o_meas[i];
        a->spans[cell] += o_spans[i];
        bound_max(&a->bound[OV_OPS], a->ops[cell]);
        bound_max(&a->bound[OV_MEASURED], a->measured[cell]);
        bound_max(&a->bound[OV_SPANS], a->spans[cell]);
        int8_t et = f ? to_unknown[o_etag[i]] : o_etag[i], lt = f ? 0 : o_ltag[i];
        if (et > a->etag[cell]) a->etag[cell] = et;
        if (lt > a->ltag[cell]) a->ltag[cell] = lt;
    }
    for (Py_ssize_t j = 0; j < nr; j++) {
        if (folded[j]) continue;
        int64_t r = r_map[j];
        if (o_kind[j] > a->kind[r]) a->kind[r] = o_kind[j];
        if (o_est[j]) a->est[r] = 1;
    }
    for (Py_ssize_t j = 0; j < ns; j++) {
        a->requests[s_map[j]] += o_req[j];
        bound_max(&a->bound[OV_REQUESTS], a->requests[s_map[j]]);
    }
    for (Py_ssize_t j = 0, next = before_svc; j < ns; j++)  /* a new row takes its first service's region */
        if (s_map[j] == next) a->service_region[next++] = r_map[o_sreg[j]];
    /* endpoints: those of services folded into "(other)" go with them; past the cap, new keys
     * fold into (service, "(other)") */
    if (any_renamed) {
        folded_names = PySet_New(NULL);
        if (!folded_names) goto done;
        for (Py_ssize_t j = 0; j < ns; j++)
            if (renamed[j] && PySet_Add(folded_names, PyList_GET_ITEM(services, j)) < 0) goto done;
    }
    long long ep_over = 0;
    int capped = a->n_ep + PyDict_GET_SIZE(endpoints) > max_ep;
    Py_ssize_t pos = 0, ahead_pos = 0;
    PyObject *key, *n, *ahead_key, *ahead_n;
    for (int k = 0; k < PREFETCH_AHEAD && PyDict_Next(endpoints, &ahead_pos, &ahead_key, &ahead_n); k++) {
        names_prefetch(&a->ep_svc, PyTuple_GET_ITEM(ahead_key, 0));
        names_prefetch(&a->ep_name, PyTuple_GET_ITEM(ahead_key, 1));
    }
    while (PyDict_Next(endpoints, &pos, &key, &n)) {
        if (PyDict_Next(endpoints, &ahead_pos, &ahead_key, &ahead_n)) {
            names_prefetch(&a->ep_svc, PyTuple_GET_ITEM(ahead_key, 0));
            names_prefetch(&a->ep_name, PyTuple_GET_ITEM(ahead_key, 1));
        }
        long long cnt = PyLong_AsLongLong(n);  /* checked above */
        PyObject *svc = PyTuple_GET_ITEM(key, 0), *name = PyTuple_GET_ITEM(key, 1);
        if (folded_names) {
            int in = PySet_Contains(folded_names, svc);
            if (in < 0) goto done;
            if (in) svc = other_svc;
        }
        int64_t slot = acc_ep_slot(a, svc, name, 0);
        if (slot == -2) goto done;
        if (slot < 0 && capped && a->n_ep >= max_ep) {
            int is_other = PyUnicode_Compare(name, other_ep);
            if (is_other == -1 && PyErr_Occurred()) goto done;
            if (is_other != 0) {  /* a new key past the cap: into (service, "(other)") */
                ep_over += cnt;
                int64_t sid = names_get(&a->ep_svc, svc, 1);  /* its "(other)" slot, cached */
                if (sid < 0) goto done;
                if (sid < a->other_cap && a->other_slot[sid] >= 0) {
                    slot = a->other_slot[sid];
                } else {
                    slot = acc_ep_slot(a, svc, other_ep, 1);  /* grows other_slot past sid */
                    if (slot < 0) goto done;
                    a->other_slot[sid] = slot;
                }
            }
        }
        if (slot < 0 && (slot = acc_ep_slot(a, svc, name, 1)) < 0) goto done;
        a->ep_count[slot] += cnt;
        bound_max(&a->bound[OV_ENDPOINT], a->ep_count[slot]);
    }
    out = Py_BuildValue("(LLL)", svc_over, reg_over, ep_over);
    goto done;
decline:
    out = Py_NewRef(Py_None);
done:
    for (int p = 0; p < got; p++) PyBuffer_Release(&view[p]);
    free(s_map); free(r_map); free(renamed); free(folded); free(o_sreg); free(c_map);
    Py_XDECREF(folded_names);
    return out;
}

static int cell_order_cmp(const void *x, const void *y) { return pair_cmp(x, y); }

/* snapshot() -> (services, service_region, regions, region_kind, region_estimated, requests,
 *                cell_svc, cell_reg, energy, carbon, ops, measured_ops, span_count, etag, ltag,
 *                endpoints): copies, cells sorted by (service, region) */
static PyObject *acc_snapshot(Acc *a, PyObject *unused) {
    int64_t nc = a->n_cells, ns = a->svc.n, nr = a->reg.n;
    size_t m = (size_t)(nc ? nc : 1);
    Pair *order = malloc(m * sizeof *order);
    int64_t *i64 = malloc(m * 5 * 8);
    double *f64 = malloc(m * 2 * 8);
    int8_t *tags = malloc(m * 2);
    PyObject *out = NULL, *svc_region = NULL;
    if (!order || !i64 || !f64 || !tags) { PyErr_NoMemory(); goto done; }
    for (int64_t j = 0; j < nc; j++) {
        order[j].code = ((uint64_t)a->cell_svc[j] << 32) | (uint64_t)a->cell_reg[j];
        order[j].id = j;
    }
    qsort(order, (size_t)nc, sizeof *order, cell_order_cmp);
    for (int64_t j = 0; j < nc; j++) {
        int64_t id = order[j].id;
        i64[j] = a->cell_svc[id]; i64[nc + j] = a->cell_reg[id]; i64[2 * nc + j] = a->ops[id];
        i64[3 * nc + j] = a->measured[id]; i64[4 * nc + j] = a->spans[id];
        f64[j] = a->energy[id]; f64[nc + j] = a->carbon[id];
        tags[j] = a->etag[id]; tags[nc + j] = a->ltag[id];
    }
    svc_region = PyList_New((Py_ssize_t)ns);
    if (!svc_region) goto done;
    for (int64_t j = 0; j < ns; j++) {
        PyObject *v = PyLong_FromLongLong(a->service_region[j]);
        if (!v) goto done;
        PyList_SET_ITEM(svc_region, j, v);
    }
    out = Py_BuildValue(
        "(NONNNNNNNNNNNNNN)",
        PyList_GetSlice(a->svc.list, 0, ns), svc_region, PyList_GetSlice(a->reg.list, 0, nr),
        bytes_of(a->kind, nr, 1), bytes_of(a->est, nr, 1), bytes_of(a->requests, ns, 8),
        bytes_of(i64, nc, 8), bytes_of(i64 + nc, nc, 8), bytes_of(f64, nc, 8),
        bytes_of(f64 + nc, nc, 8), bytes_of(i64 + 2 * nc, nc, 8), bytes_of(i64 + 3 * nc, nc, 8),
        bytes_of(i64 + 4 * nc, nc, 8), bytes_of(tags, nc, 1), bytes_of(tags + nc, nc, 1),
        acc_endpoint_dict(a));
done:
    Py_XDECREF(svc_region);
    free(order); free(i64); free(f64); free(tags);
    return out;
}

static PyObject *acc_services(Acc *a, void *unused) { return Py_NewRef(a->svc.list); }
static PyObject *acc_regions(Acc *a, void *unused) { return Py_NewRef(a->reg.list); }
static PyObject *acc_endpoints(Acc *a, void *unused) { return acc_endpoint_dict(a); }
static PyObject *acc_cells(Acc *a, void *unused) { return PyLong_FromLongLong(a->n_cells); }

static PyGetSetDef acc_getset[] = {
    {"services", (getter)acc_services, NULL, "the window's service names (the list itself: do not change it)", NULL},
    {"regions", (getter)acc_regions, NULL, "the window's region names (the list itself: do not change it)", NULL},
    {"endpoints", (getter)acc_endpoints, NULL, "the window's (service, endpoint) -> I/O ops (a copy)", NULL},
    {"cells", (getter)acc_cells, NULL, "cells in use", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef acc_methods[] = {
    {"add", (PyCFunction)acc_add, METH_VARARGS,
     "add(services, service_region, regions, endpoints, buffers, caps, names) -> (service_overflow,\n"
     "region_overflow, endpoint_overflow): merge one partial in, as WindowPartial.merge does;\n"
     "None (nothing changed) when a count's sum could pass int64"},
    {"snapshot", (PyCFunction)acc_snapshot, METH_NOARGS,
     "the window's lists, per-region/per-service arrays, sorted cells and endpoints (copies)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AccType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "agent._score.Accumulator",
    .tp_basicsize = sizeof(Acc),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An open window's partial, merged into in place (see _score.c).",
    .tp_new = acc_new,
    .tp_dealloc = (destructor)acc_dealloc,
    .tp_methods = acc_methods,
    .tp_getset = acc_getset,
};

/* ---------------------------------------------------------------- the WAL record
 *
 * partial_bytes(): WindowPartial.to_bytes() (orjson.dumps of the record's document) written
 * here from the partial's lists and arrays, the same bytes: compact, keys in the document's
 * order, strings escaped as orjson escapes them (", \ and U+0000..U+001F, \b \t \n \f \r
 * short, the others \u00xx; everything else as UTF-8). The two float arrays come rendered by
 * orjson itself (orjson.dumps(array, OPT_SERIALIZE_NUMPY): its float writer, the same bytes as
 * for the list, and ~30 ns a float where PyOS_double_to_string takes ~600). Anything else (a str that is not valid UTF-8, an int past
 * 64 bits, a value of another type) returns None and the caller uses orjson. */

typedef struct { char *p; size_t n, cap; } Buf;

static int buf_need(Buf *b, size_t more) {
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const char *s, size_t n) {
    if (buf_need(b, n)) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

#define PUTS(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

enum { J_OK = 0, J_NOMEM = -1, J_OTHER = -2 };  /* J_OTHER: not ours to write, use orjson */

static const char DIGITS2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* v in decimal at o (at most 20 bytes); the end. snprintf("%lld") takes ~80 ns. */
static inline char *w_i64(char *o, long long v) {
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) { unsigned d = (unsigned)(u % 100); u /= 100; q -= 2; memcpy(q, DIGITS2 + 2 * d, 2); }
    if (u >= 10) { q -= 2; memcpy(q, DIGITS2 + 2 * u, 2); } else *--q = (char)('0' + u);
    if (v < 0) *--q = '-';
    size_t n = (size_t)(e - q);
    memcpy(o, q, n);
    return o + n;
}

static int put_i64(Buf *b, long long v) {
    if (buf_need(b, 21)) return J_NOMEM;
    b->n = (size_t)(w_i64(b->p + b->n, v) - b->p);
    return J_OK;
}

static int put_str(Buf *b, PyObject *s) {
    if (!PyUnicode_Check(s)) return J_OTHER;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) { PyErr_Clear(); return J_OTHER; }
    if (buf_need(b, (size_t)n * 6 + 2)) return J_NOMEM;
    char *o = b->p + b->n;
    *o++ = '"';
    Py_ssize_t plain = 0;  /* the usual name needs no escape: copy it whole */
    while (plain < n && (unsigned char)u[plain] >= 0x20 && u[plain] != '"' && u[plain] != '\\') plain++;
    memcpy(o, u, (size_t)plain);
    o += plain;
    for (Py_ssize_t i = plain; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c >= 0x20 && c != '"' && c != '\\') { *o++ = (char)c; continue; }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u'; *o++ = '0'; *o++ = '0';
            *o++ = "0123456789abcdef"[c >> 4]; *o++ = "0123456789abcdef"[c & 15];
        }
    }
    *o++ = '"';
    b->n = (size_t)(o - b->p);
    return J_OK;
}

static int put_int_obj(Buf *b, PyObject *v) {
    if (!PyLong_CheckExact(v)) return J_OTHER;  /* bool, numpy ints: orjson decides */
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) { PyErr_Clear(); return J_OTHER; }
    if (overflow) return J_OTHER;
    return put_i64(b, x);
}

#define TRY(expr) do { int rc_ = (expr); if (rc_) return rc_; } while (0)

static int put_str_list(Buf *b, PyObject *list) {
    if (!PyList_CheckExact(list)) return J_OTHER;
    TRY(PUTS(b, "[") ? J_NOMEM : J_OK);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        if (i) TRY(PUTS(b, ",") ? J_NOMEM : J_OK);
        TRY(put_str(b, PyList_GET_ITEM(list, i)));
    }
    return PUTS(b, "]") ? J_NOMEM : J_OK;
}

static int put_int_list(Buf *b, PyObject *list) {
    if (!PyList_CheckExact(list)) return J_OTHER;
    TRY(PUTS(b, "[") ? J_NOMEM : J_OK);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        if (i) TRY(PUTS(b, ",") ? J_NOMEM : J_OK);
        TRY(put_int_obj(b, PyList_GET_ITEM(list, i)));
    }
    return PUTS(b, "]") ? J_NOMEM : J_OK;
}

/* an array as a JSON list: kind 'q' int64, 'b' int8, '?' bool, 't' int8 tag codes written as
 * the names in tags; 'r': bytes already rendered as a JSON list, copied */
static int put_array(Buf *b, const Py_buffer *v, char kind, PyObject *tags) {
    if (kind == 'r') return buf_put(b, v->buf, (size_t)v->len) ? J_NOMEM : J_OK;
    Py_ssize_t n = v->len / v->itemsize;
    if (kind == 't') {  /* tag codes: each tag's JSON rendered once */
        Py_ssize_t nt = PyTuple_GET_SIZE(tags);
        Buf tb = {NULL, 0, 0};
        size_t at[128], len[128];
        if (nt > 128) return J_OTHER;
        int rc = J_OK;
        for (Py_ssize_t t = 0; t < nt && rc == J_OK; t++) {
            at[t] = tb.n;
            rc = put_str(&tb, PyTuple_GET_ITEM(tags, t));
            len[t] = tb.n - at[t];
        }
        size_t most = 0;
        for (Py_ssize_t t = 0; t < nt; t++) if (len[t] > most) most = len[t];
        if (rc == J_OK && buf_need(b, (size_t)n * (most + 1) + 2)) rc = J_NOMEM;
        if (rc == J_OK) {
            char *o = b->p + b->n;
            *o++ = '[';
            for (Py_ssize_t i = 0; i < n; i++) {
                int8_t c = ((const int8_t *)v->buf)[i];
                if (c < 0 || c >= nt) { rc = J_OTHER; break; }
                if (i) *o++ = ',';
                memcpy(o, tb.p + at[c], len[c]);
                o += len[c];
            }
            *o++ = ']';
            if (rc == J_OK) b->n = (size_t)(o - b->p);
        }
        free(tb.p);
        return rc;
    }
    if (buf_need(b, (size_t)n * 22 + 2)) return J_NOMEM;  /* "-9223372036854775808," */
    char *o = b->p + b->n;
    *o++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *o++ = ',';
        switch (kind) {
        case 'q': o = w_i64(o, ((const int64_t *)v->buf)[i]); break;
        case 'b': o = w_i64(o, ((const int8_t *)v->buf)[i]); break;
        default:
            if (((const uint8_t *)v->buf)[i]) { memcpy(o, "true", 4); o += 4; }
            else { memcpy(o, "false", 5); o += 5; }
        }
    }
    *o++ = ']';
    b->n = (size_t)(o - b->p);
    return J_OK;
}

static int put_base64(Buf *b, const unsigned char *p, Py_ssize_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (buf_need(b, (size_t)(n + 2) / 3 * 4 + 2)) return J_NOMEM;
    char *o = b->p + b->n;
    *o++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = A[(v >> 6) & 63]; *o++ = A[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = A[(v >> 6) & 63]; *o++ = '=';
    }
    *o++ = '"';
    b->n = (size_t)(o - b->p);
    return J_OK;
}

/* the arrays partial_bytes() takes, in the order it writes them */
enum { B_REGION_KIND, B_REGION_EST, B_REQUESTS, B_TRACES, B_CELL_SVC, B_CELL_REG, B_ENERGY,
       B_CARBON, B_OPS, B_MEASURED, B_SPANS, B_ETAG, B_LTAG, N_BODY };
static const Py_ssize_t BODY_ITEMSIZE[N_BODY] = {1, 1, 8, 8, 8, 8, 1, 1, 8, 8, 8, 1, 1};
static const char BODY_KIND[N_BODY] = {'b', '?', 'q', 0, 'q', 'q', 'r', 'r', 'q', 'q', 'q', 't', 't'};

static int write_partial(Buf *b, PyObject *lists, const Py_buffer *v, PyObject *endpoints,
                         PyObject *spans, PyObject *counters, PyObject *root_spans, PyObject *tags) {
    PyObject *services = PyTuple_GET_ITEM(lists, 0), *service_region = PyTuple_GET_ITEM(lists, 1);
    PyObject *regions = PyTuple_GET_ITEM(lists, 2);
    TRY(PUTS(b, "{\"v\":2,\"services\":") ? J_NOMEM : J_OK);
    TRY(put_str_list(b, services));
    TRY(PUTS(b, ",\"service_region\":") ? J_NOMEM : J_OK);
    TRY(put_int_list(b, service_region));
    TRY(PUTS(b, ",\"regions\":") ? J_NOMEM : J_OK);
    TRY(put_str_list(b, regions));
    TRY(PUTS(b, ",\"region_kind\":") ? J_NOMEM : J_OK);
    TRY(put_array(b, &v[B_REGION_KIND], 'b', tags));
    TRY(PUTS(b, ",\"region_estimated\":") ? J_NOMEM : J_OK);
    TRY(put_array(b, &v[B_REGION_EST], '?', tags));
    TRY(PUTS(b, ",\"requests\":") ? J_NOMEM : J_OK);
    TRY(put_array(b, &v[B_REQUESTS], 'q', tags));
    TRY(PUTS(b, ",\"endpoints\":[") ? J_NOMEM : J_OK);
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *n;
    while (PyDict_Next(endpoints, &pos, &key, &n)) {
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) return J_OTHER;
        TRY((k++ ? PUTS(b, ",[") : PUTS(b, "[")) ? J_NOMEM : J_OK);
        TRY(put_str(b, PyTuple_GET_ITEM(key, 0)));
        TRY(PUTS(b, ",") ? J_NOMEM : J_OK);
        TRY(put_str(b, PyTuple_GET_ITEM(key, 1)));
        TRY(PUTS(b, ",") ? J_NOMEM : J_OK);
        TRY(put_int_obj(b, n));
        TRY(PUTS(b, "]") ? J_NOMEM : J_OK);
    }
    TRY(PUTS(b, "],\"traces\":") ? J_NOMEM : J_OK);
    TRY(put_base64(b, v[B_TRACES].buf, v[B_TRACES].len));
    TRY(PUTS(b, ",\"spans\":") ? J_NOMEM : J_OK);
    TRY(put_int_obj(b, spans));
    TRY(PUTS(b, ",\"counters\":{") ? J_NOMEM : J_OK);
    pos = 0; k = 0;
    while (PyDict_Next(counters, &pos, &key, &n)) {
        if (k++) TRY(PUTS(b, ",") ? J_NOMEM : J_OK);
        if (!PyUnicode_CheckExact(key)) return J_OTHER;
        TRY(put_str(b, key));
        TRY(PUTS(b, ":") ? J_NOMEM : J_OK);
        TRY(put_int_obj(b, n));
    }
    TRY(PUTS(b, "},\"root_spans\":") ? J_NOMEM : J_OK);
    TRY(put_int_obj(b, root_spans));
    static const char *const names[] = {",\"cell_svc\":", ",\"cell_reg\":", ",\"energy\":",
        ",\"carbon\":", ",\"ops\":", ",\"measured_ops\":", ",\"span_count\":", ",\"etag\":", ",\"ltag\":"};
    for (int a = B_CELL_SVC; a < N_BODY; a++) {
        TRY(buf_put(b, names[a - B_CELL_SVC], strlen(names[a - B_CELL_SVC])) ? J_NOMEM : J_OK);
        TRY(put_array(b, &v[a], BODY_KIND[a], tags));
    }
    return PUTS(b, "}") ? J_NOMEM : J_OK;
}

/* partial_bytes((services, service_region, regions), buffers, endpoints, spans, counters,
 *               root_spans, tags) -> bytes, or None: use orjson */
static PyObject *partial_bytes(PyObject *self, PyObject *args) {
    PyObject *lists, *bufs, *endpoints, *spans, *counters, *root_spans, *tags;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!OO!", &PyTuple_Type, &lists, &PyTuple_Type, &bufs,
                          &PyDict_Type, &endpoints, &spans, &PyDict_Type, &counters, &root_spans,
                          &PyTuple_Type, &tags)) return NULL;
    if (PyTuple_GET_SIZE(lists) != 3 || PyTuple_GET_SIZE(bufs) != N_BODY) {
        PyErr_SetString(PyExc_TypeError, "partial_bytes(): 3 lists and 13 buffers");
        return NULL;
    }
    Py_buffer view[N_BODY];
    int got = 0;
    PyObject *out = NULL;
    Buf b = {NULL, 0, 0};
    for (; got < N_BODY; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, got), &view[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (view[got].itemsize != BODY_ITEMSIZE[got] && view[got].len) {
            PyErr_Format(PyExc_TypeError, "partial_bytes() buffer %d: item size %zd, expected %zd",
                         got, view[got].itemsize, BODY_ITEMSIZE[got]);
            PyBuffer_Release(&view[got]);
            goto done;
        }
    }
    int rc = write_partial(&b, lists, view, endpoints, spans, counters, root_spans, tags);
    if (rc == J_OK) out = PyBytes_FromStringAndSize(b.p, (Py_ssize_t)b.n);
    else if (rc == J_OTHER) out = Py_NewRef(Py_None);
    else PyErr_NoMemory();
done:
    for (int a = 0; a < got; a++) PyBuffer_Release(&view[a]);
    free(b.p);
    return out;
}

static PyMethodDef methods[] = {
    {"keys", keys, METH_VARARGS,
     "keys(services, service_regions, fallback, index, names, slow, max_bytes)\n"
     "-> (keys, key of each entry, cut flags or empty, region name of each key)"},
    {"score", score, METH_VARARGS,
     "score(buffers, keys, names, endpoint_names, n_endpoints, now_ns) -> tuple or None\n\n"
     "The per-span pass of agent.score over a batch's columns and the small tables that\n"
     "agent.score_fast prepares; None when the batch needs the reference scorer."},
    {"partial_bytes", partial_bytes, METH_VARARGS,
     "partial_bytes((services, service_region, regions), buffers, endpoints, spans, counters,\n"
     "root_spans, tags) -> bytes or None\n\n"
     "WindowPartial.to_bytes(), written in C (the same bytes as orjson's); None: use orjson."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_score", "The scorer's per-span pass (see _score.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__score(void) {
    if (PyType_Ready(&AccType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Accumulator", (PyObject *)&AccType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SCORE_VERSION", SCORE_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "ANNUAL_COLUMN", ANNUAL_COLUMN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
