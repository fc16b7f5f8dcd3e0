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

#define SCORE_VERSION 2
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

/* An open-addressing map from a 64-bit code to a dense id in first-insertion order. */
typedef struct { uint64_t *keys; int64_t *ids; size_t mask; int64_t count; } Map;

static int map_init(Map *m, size_t cap) {
    m->mask = cap - 1;
    m->count = 0;
    m->keys = malloc(cap * sizeof *m->keys);
    m->ids = malloc(cap * sizeof *m->ids);
    if (!m->keys || !m->ids) return -1;
    for (size_t i = 0; i < cap; i++) m->ids[i] = -1;
    return 0;
}

static void map_free(Map *m) { free(m->keys); free(m->ids); }

static inline size_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return (size_t)x;
}

static int map_grow(Map *m) {
    Map g;
    if (map_init(&g, (m->mask + 1) * 2)) { map_free(&g); return -1; }
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->ids[i] < 0) continue;
        size_t j = mix(m->keys[i]) & g.mask;
        while (g.ids[j] >= 0) j = (j + 1) & g.mask;
        g.keys[j] = m->keys[i];
        g.ids[j] = m->ids[i];
    }
    g.count = m->count;
    map_free(m);
    *m = g;
    return 0;
}

/* The id of code, adding it (id = count so far, *added = 1) if new; -1 when out of memory. */
static inline int64_t map_get(Map *m, uint64_t code, int *added) {
    size_t j = mix(code) & m->mask;
    for (; m->ids[j] >= 0; j = (j + 1) & m->mask)
        if (m->keys[j] == code) { *added = 0; return m->ids[j]; }
    if ((size_t)(m->count + 1) * 2 > m->mask + 1) {
        if (map_grow(m)) return -1;
        return map_get(m, code, added);
    }
    m->keys[j] = code;
    m->ids[j] = m->count;
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
    if (map_init(&o->cell_map, 64) || map_init(&o->ep_map, 64)) return -1;
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

static PyObject *keys(PyObject *self, PyObject *args) {
    PyObject *services, *regions_of, *fallback, *index, *names, *slow;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!On", &PyList_Type, &services, &PyDict_Type, &regions_of,
                          &fallback, &PyDict_Type, &index, &PyList_Type, &names, &slow, &max_bytes))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(services);
    PyObject *keys_list = PyList_New(0), *key_index = PyDict_New();
    PyObject *of = PyByteArray_FromStringAndSize(NULL, n * 8), *cuts = PyByteArray_FromStringAndSize(NULL, n);
    PyObject *by_key = NULL, *out = NULL;
    if (!keys_list || !key_index || !of || !cuts) goto done;
    int64_t *of_p = (int64_t *)PyByteArray_AS_STRING(of);
    uint8_t *cut_p = (uint8_t *)PyByteArray_AS_STRING(cuts);
    int any_cut = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
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
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *region = PyDict_GetItemWithError(regions_of, PyList_GET_ITEM(keys_list, k));
        if (!region && PyErr_Occurred()) goto done;
        Py_ssize_t id = intern_obj(index, names, region ? region : fallback);
        if (id < 0) goto done;
        by_p[k] = id;
    }
    if (!any_cut && PyByteArray_Resize(cuts, 0) < 0) goto done;
    out = PyTuple_Pack(4, keys_list, of, cuts, by_key);
done:
    Py_XDECREF(keys_list); Py_XDECREF(key_index); Py_XDECREF(of); Py_XDECREF(cuts); Py_XDECREF(by_key);
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
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_score", "The scorer's per-span pass (see _score.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__score(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "SCORE_VERSION", SCORE_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "ANNUAL_COLUMN", ANNUAL_COLUMN) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
