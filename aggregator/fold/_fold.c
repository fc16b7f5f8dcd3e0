/* _fold.c -- the aggregator's C accelerator: a plain runtime window line checked and its
 * per-service sums added, for aggregator/fold/fast.py.
 *
 * Why C: after orjson.loads, the Python fold of a plain line is a few dozen type and range
 * checks and seven float/int additions per service, each a bytecode round trip. This does
 * the checks and the per-service additions on the loaded dict.
 *
 * Interface (small and explicit: nothing of AggregateState is read or written here):
 *
 *   fold_plain(rec, names, tags, targets, cells, regions) -> tuple | None
 *
 * `names` and `tags` are the cached layout's (aggregator.fold.sums.Layout), `targets` and
 * `cells` its services' ServiceSums and their cells in the window's time bucket, `regions`
 * the state's region accumulators (name -> RegionSums). It first *checks* - the line's
 * per-service maps list exactly `names` with exactly `tags`, every figure and every
 * per-service leaf is one the sanitiser would pass unchanged, no host rows, no measured
 * ratio to add, not backfilled (methodology.backfill == "true") - and returns None having
 * changed nothing if anything differs: the caller then folds the line by the reference fold
 * (aggregator/fold/reference.py). Once checked it adds each entry to its target and cell, in
 * order, with the same IEEE doubles (no fast-math), folds the region rows into `regions` when
 * every row is plain (a known region, "resolved", its four fields present and clean), and
 * returns the window's deltas for the caller to add to the totals with the reference fold's
 * own functions:
 *
 *   (app_energy, app_carbon, requests, traces, embodied_g, database_g, messaging_g,
 *    rows or None, root_spans or None, energy_without_carbon or None, methodology or None, hash)
 *
 * `requests` is the entries' sum, or window.traces when that is 0; `rows` is the line's region
 * rows when they were not all plain (the reference folds them), else None; `hash` is "" when
 * unusable. tests/aggregator/test_fold_accel.py holds this to the reference on hostile archives.
 *
 * Counts (requests, I/O ops) are exact: they are summed as unsigned 128-bit integers (each
 * accepted count is at most 2**53, so no sum a real or hostile archive can reach overflows)
 * and converted to Python ints on access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>
#include <structmember.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* aggregator.fold.ext.FOLD_VERSION: bumped with every change of the fold's rules, so that a
 * stale build is refused instead of silently folding by old rules. */
#define FOLD_VERSION 17
/* The contract's facts this file uses, given by aggregator/fold/ext.py at load (configure(),
 * from schema/ and aggregator.sanitize; docs/archive-format.md, "Where the facts live"): the
 * values below are only what they are before that call. */
static double MAX_FIGURE = 1e15;                 /* aggregator.sanitize.MAX_FIGURE */
static long long MAX_COUNT = 9007199254740992LL; /* aggregator.sanitize.MAX_COUNT = 2**53 */
static char BODY_KEY[64] = "report";             /* schema.archive.BODY_KEY */

typedef unsigned __int128 u128;

/* ---------------------------------------------------------------------- exact counts */

typedef struct { uint64_t lo, hi; } Count; /* a u128 without its 16-byte alignment demand */

static inline u128 count_get(const Count *c) { return ((u128)c->hi << 64) | c->lo; }
static inline void count_set(Count *c, u128 v) { c->lo = (uint64_t)v; c->hi = (uint64_t)(v >> 64); }

static PyObject *u128_to_py(u128 v) {
    uint64_t hi = (uint64_t)(v >> 64), lo = (uint64_t)v;
    if (hi == 0)
        return PyLong_FromUnsignedLongLong(lo);
    PyObject *h = PyLong_FromUnsignedLongLong(hi), *l = PyLong_FromUnsignedLongLong(lo);
    PyObject *shift = PyLong_FromLong(64), *hs = NULL, *out = NULL;
    if (h && l && shift && (hs = PyNumber_Lshift(h, shift)))
        out = PyNumber_Or(hs, l);
    Py_XDECREF(h); Py_XDECREF(l); Py_XDECREF(shift); Py_XDECREF(hs);
    return out;
}

static int py_to_u128(PyObject *v, u128 *out, const char *what) {
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what, Py_TYPE(v)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long small = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (small == -1 && PyErr_Occurred())
        return -1;
    if (overflow == 0) {
        if (small < 0) {
            PyErr_Format(PyExc_ValueError, "%s cannot be negative (got %lld)", what, small);
            return -1;
        }
        *out = (u128)(unsigned long long)small;
        return 0;
    }
    if (overflow < 0) {
        PyErr_Format(PyExc_ValueError, "%s cannot be negative", what);
        return -1;
    }
    PyObject *shift = PyLong_FromLong(64), *mask = PyLong_FromUnsignedLongLong(UINT64_MAX);
    PyObject *hi = NULL, *lo = NULL;
    int rc = -1;
    if (shift && mask && (hi = PyNumber_Rshift(v, shift)) && (lo = PyNumber_And(v, mask))) {
        unsigned long long h = PyLong_AsUnsignedLongLong(hi);
        if (!(h == (unsigned long long)-1 && PyErr_Occurred())) {
            *out = ((u128)h << 64) | (u128)PyLong_AsUnsignedLongLong(lo);
            rc = 0;
        } else {
            PyErr_Format(PyExc_OverflowError, "%s does not fit in 128 bits", what);
        }
    }
    Py_XDECREF(shift); Py_XDECREF(mask); Py_XDECREF(hi); Py_XDECREF(lo);
    return rc;
}

/* ---------------------------------------------------------------------- Sums types */

typedef struct {
    PyObject_HEAD
    double energy; /* kWh */
    double carbon; /* kg CO2e */
    Count count;   /* ServiceSums.requests / RegionSums.io_ops */
    long long n;   /* ServiceSums.windows / RegionSums.rows */
} Sums;

/* The exact count of a Sums or a BucketSums: one getter and one setter, the Count's offset in
 * the object (offsetof) in the closure. */
typedef struct { Py_ssize_t offset; const char *what; } CountField;

static inline Count *count_at(PyObject *self, void *closure) {
    return (Count *)((char *)self + ((const CountField *)closure)->offset);
}

static PyObject *count_getter(PyObject *self, void *closure) { return u128_to_py(count_get(count_at(self, closure))); }

static int count_setter(PyObject *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a running count cannot be deleted");
        return -1;
    }
    u128 v;
    if (py_to_u128(value, &v, ((const CountField *)closure)->what) < 0)
        return -1;
    count_set(count_at(self, closure), v);
    return 0;
}

static CountField SERVICE_REQUESTS = {offsetof(Sums, count), "requests"}, REGION_IO_OPS = {offsetof(Sums, count), "io_ops"};

static PyMemberDef service_members[] = {
    {"energy", T_DOUBLE, offsetof(Sums, energy), 0, "energy (kWh) credited so far"},
    {"carbon", T_DOUBLE, offsetof(Sums, carbon), 0, "operational carbon (kg CO2e) credited so far"},
    {"windows", T_LONGLONG, offsetof(Sums, n), 0, "windows that credited this service"},
    {NULL},
};
static PyGetSetDef service_getset[] = {
    {"requests", count_getter, count_setter, "requests credited so far (exact int)", &SERVICE_REQUESTS},
    {NULL},
};
static PyMemberDef region_members[] = {
    {"energy", T_DOUBLE, offsetof(Sums, energy), 0, "energy (kWh) of this grid region's rows"},
    {"carbon", T_DOUBLE, offsetof(Sums, carbon), 0, "carbon (kg CO2e) of this grid region's rows"},
    {"rows", T_LONGLONG, offsetof(Sums, n), 0, "region rows folded"},
    {NULL},
};
static PyGetSetDef region_getset[] = {
    {"io_ops", count_getter, count_setter, "I/O operations of the rows (exact int)", &REGION_IO_OPS},
    {NULL},
};

static PyTypeObject ServiceSumsType;

/* ServiceSums.add_sums(other): energy, carbon, requests and windows of `other` (a ServiceSums)
 * added to this one's, each as `self.x += other.x` adds it (the merge of states; no Python
 * int made for the exact count). */
static PyObject *service_add_sums(PyObject *self, PyObject *other) {
    if (!PyObject_TypeCheck(other, &ServiceSumsType)) {
        PyErr_Format(PyExc_TypeError, "add_sums needs a ServiceSums, not %.80s", Py_TYPE(other)->tp_name);
        return NULL;
    }
    Sums *a = (Sums *)self, *b = (Sums *)other;
    u128 x = count_get(&a->count), y = count_get(&b->count);
    long long n;
    if (x + y < x || __builtin_add_overflow(a->n, b->n, &n)) {
        PyErr_SetString(PyExc_OverflowError, "a running count does not fit");
        return NULL;
    }
    a->energy += b->energy;
    a->carbon += b->carbon;
    count_set(&a->count, x + y);
    a->n = n;
    Py_RETURN_NONE;
}

static PyMethodDef service_methods[] = {
    {"add_sums", service_add_sums, METH_O,
     "add_sums(other): add other's energy, carbon, requests and windows to these (in place)"},
    {NULL},
};

static PyTypeObject ServiceSumsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aggregator._fold.ServiceSums",
    .tp_doc = "Running sums of one service: energy, carbon, requests, windows (C fields).",
    .tp_basicsize = sizeof(Sums),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = service_members,
    .tp_getset = service_getset,
    .tp_methods = service_methods,
};
static PyTypeObject RegionSumsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aggregator._fold.RegionSums",
    .tp_doc = "Running sums of one grid region: energy, carbon, io_ops, rows (C fields).",
    .tp_basicsize = sizeof(Sums),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = region_members,
    .tp_getset = region_getset,
};


/* The window-level sums of one time bucket (aggregator.fold.sums.Bucket is its Python
 * subclass; compact storage: the C fold adds the dropped entries to it, Python the window sums). */
typedef struct {
    PyObject_HEAD
    double energy, host_energy;                         /* kWh */
    double operational, embodied, database, messaging;  /* kg CO2e */
    double dropped_energy, dropped_carbon;              /* entries past the service cap */
    Count requests;
    long long windows;
} BucketSumsObj;

static CountField BUCKET_REQUESTS = {offsetof(BucketSumsObj, requests), "requests"};

static PyMemberDef bucket_members[] = {
    {"energy", T_DOUBLE, offsetof(BucketSumsObj, energy), 0, "application + host energy (kWh)"},
    {"host_energy", T_DOUBLE, offsetof(BucketSumsObj, host_energy), 0, "host energy in totals (kWh)"},
    {"operational", T_DOUBLE, offsetof(BucketSumsObj, operational), 0, "operational carbon (kg CO2e)"},
    {"embodied", T_DOUBLE, offsetof(BucketSumsObj, embodied), 0, "embodied carbon (kg CO2e)"},
    {"database", T_DOUBLE, offsetof(BucketSumsObj, database), 0, "database host carbon (kg CO2e)"},
    {"messaging", T_DOUBLE, offsetof(BucketSumsObj, messaging), 0, "broker host carbon (kg CO2e)"},
    {"dropped_energy", T_DOUBLE, offsetof(BucketSumsObj, dropped_energy), 0, "energy past the service cap"},
    {"dropped_carbon", T_DOUBLE, offsetof(BucketSumsObj, dropped_carbon), 0, "carbon past the service cap"},
    {"windows", T_LONGLONG, offsetof(BucketSumsObj, windows), 0, "windows starting in the bucket"},
    {NULL},
};
static PyGetSetDef bucket_getset[] = {
    {"requests", count_getter, count_setter, "requests (exact int)", &BUCKET_REQUESTS},
    {NULL},
};

static PyTypeObject BucketSumsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aggregator._fold.BucketSums",
    .tp_doc = "Running sums of one time bucket (aggregate.series): the totals' terms (C fields).",
    .tp_basicsize = sizeof(BucketSumsObj),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = bucket_members,
    .tp_getset = bucket_getset,
};


/* ---------------------------------------------------------------------- names */

enum {
    S_REPORT, S_GREEN_SUMMARY, S_ENERGY_MAP, S_CARBON_MAP, S_REQUESTS_MAP, S_REGION_MAP,
    S_MODEL_MAP, S_CO2, S_TOTAL, S_HOSTS, S_WINDOW, S_TRACES, S_TOTAL_IO_OPS, S_ENERGY_KWH,
    S_OPERATIONAL, S_EMBODIED, S_DATABASE, S_MESSAGING, S_MID, S_REGIONS, S_METHODOLOGY,
    S_HASH, S_REGION, S_IO_OPS, S_CO2_GCO2, S_START, S_ROOT_SPANS, S_WITHOUT_CARBON, S_STATUS,
    S_END, S_MEASURED_MAP, S_BACKFILL, N_NAMES
};
static const char *const NAME_TEXT[N_NAMES] = {
    "report", "green_summary", "per_service_energy_kwh", "per_service_carbon_kgco2eq",
    "per_service_requests", "per_service_region", "per_service_energy_model", "co2", "total",
    "hosts", "window", "traces", "total_io_ops", "energy_kwh", "operational_gco2",
    "embodied_gco2", "database_gco2", "messaging_gco2", "mid", "regions", "methodology", "hash",
    "region", "io_ops", "co2_gco2", "start", "root_spans", "energy_without_carbon_kwh", "status",
    "end", "per_service_measured_ratio", "backfill",
};
static PyObject *N[N_NAMES];
static PyObject *EMPTY_STR, *ONE;

/* d[key] (borrowed) or NULL when absent; d must be a dict. */
static inline PyObject *get(PyObject *d, int key) { return PyDict_GetItemWithError(d, N[key]); }

/* A figure the sanitiser passes unchanged: an exact float in [0, MAX_FIGURE] (NaN fails);
 * absent (NULL) is the default 0.0. */
static inline int clean_figure(PyObject *v, double *out) {
    if (v == NULL) {
        *out = 0.0;
        return 1;
    }
    if (!PyFloat_CheckExact(v))
        return 0;
    double d = PyFloat_AS_DOUBLE(v);
    if (!(d >= 0.0 && d <= MAX_FIGURE))
        return 0;
    *out = d;
    return 1;
}

/* A count the sanitiser passes unchanged: an exact int (not a bool) in [0, MAX_COUNT]. */
static inline int clean_int(PyObject *v, long long *out) {
    if (v == NULL) {
        *out = 0;
        return 1;
    }
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow); /* cannot fail on an exact int */
    if (overflow || x < 0 || x > MAX_COUNT)
        return 0;
    *out = x;
    return 1;
}

/* Does d list exactly the names of tuple `names`, in order? */
static int same_keys(PyObject *d, PyObject *names) {
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyDict_GET_SIZE(d) != n)
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
        PyObject *want = PyTuple_GET_ITEM(names, i++);
        if (key != want) {
            int eq = PyObject_RichCompareBool(key, want, Py_EQ);
            if (eq <= 0) {
                PyErr_Clear();
                return 0;
            }
        }
    }
    return 1;
}


/* An exact str equal to "resolved" (a region row whose energy has carbon). */
static inline int is_resolved(PyObject *v) {
    return v && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 8
           && PyUnicode_CompareWithASCIIString(v, "resolved") == 0;
}

/* A per_service_measured_ratio map with nothing to add: absent, null, or a dict whose values
 * are all an exact 0 (float or int). Any other map is folded by the reference, which adds
 * each service's measured energy (energy x ratio) and sanitises the ratios. */
static int no_measured(PyObject *m) {
    if (m == NULL || m == Py_None)
        return 1;
    if (!PyDict_CheckExact(m))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(m, &pos, &k, &v)) {
        if (PyFloat_CheckExact(v)) {
            if (PyFloat_AS_DOUBLE(v) != 0.0)
                return 0;
        } else {
            int overflow = 0;
            if (!PyLong_CheckExact(v) || PyLong_AsLongLongAndOverflow(v, &overflow) != 0 || overflow)
                return 0;
        }
    }
    return 1;
}


/* ---------------------------------------------------------------------- region rows */

/* 1: every row is plain (an object naming a region `regions` holds as a RegionSums, status
 * "resolved", io_ops / energy_kwh / co2_gco2 present and clean); 0: some row is not. */
static int rows_plain(PyObject *rows, PyObject *regions) { /* -1: error */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *name, *acc, *v;
        double e;
        long long io;
        if (!(PyDict_CheckExact(row) && (name = get(row, S_REGION)) != NULL && PyUnicode_CheckExact(name)
              && (acc = PyDict_GetItemWithError(regions, name)) != NULL && PyObject_TypeCheck(acc, &RegionSumsType)
              && is_resolved(get(row, S_STATUS)) && (v = get(row, S_IO_OPS)) != NULL && clean_int(v, &io)
              && (v = get(row, S_ENERGY_KWH)) != NULL && clean_figure(v, &e)
              && (v = get(row, S_CO2_GCO2)) != NULL && clean_figure(v, &e)))
            return PyErr_Occurred() ? -1 : 0;
    }
    return 1;
}

/* The plain rows' additions (rows_plain said 1), in the reference fold's order per row. */
static void add_rows(PyObject *rows, PyObject *regions) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        Sums *acc = (Sums *)PyDict_GetItemWithError(regions, get(row, S_REGION));
        long long io = 0;
        double energy = 0.0, co2 = 0.0;
        clean_int(get(row, S_IO_OPS), &io);
        clean_figure(get(row, S_ENERGY_KWH), &energy);
        clean_figure(get(row, S_CO2_GCO2), &co2);
        acc->n += 1;
        count_set(&acc->count, count_get(&acc->count) + (u128)io);
        acc->energy += energy;
        acc->carbon += co2 / 1000.0;
    }
}

/* ---------------------------------------------------------------------- window figures */

typedef struct {
    PyObject *rows, *meta, *hash;  /* region rows, methodology, line hash: borrowed, may be NULL */
    PyObject *root_spans;          /* window.root_spans, borrowed, NULL when absent or null */
    PyObject *without;             /* energy_without_carbon_kwh, borrowed, NULL when absent or null */
    long long io_ops, traces;      /* window.traces, green_summary.total_io_ops (0 when absent) */
    double kwh, operational, mid, embodied, database, messaging;
} Figures;

/* 1: every window-level figure is clean, no host rows, region rows a list of objects, not
 * backfilled (f filled); 0: decline; -1: error. */
static int check_figures(PyObject *rec, PyObject *report, PyObject *gs, Figures *f) {
    PyObject *co2 = get(gs, S_CO2), *hosts = get(gs, S_HOSTS), *window = get(report, S_WINDOW), *total = NULL;
    if (PyErr_Occurred())
        return -1;
    if ((co2 && !PyDict_CheckExact(co2)) || window == NULL || !PyDict_CheckExact(window))
        return 0;
    if (co2 && (total = get(co2, S_TOTAL)) != NULL && !PyDict_CheckExact(total))
        return 0;
    if (hosts && !(PyList_CheckExact(hosts) && PyList_GET_SIZE(hosts) == 0))
        return 0;
    if (!(clean_int(get(window, S_TRACES), &f->traces) && clean_int(get(gs, S_TOTAL_IO_OPS), &f->io_ops)
          && clean_figure(get(gs, S_ENERGY_KWH), &f->kwh)
          && clean_figure(co2 ? get(co2, S_OPERATIONAL) : NULL, &f->operational)
          && clean_figure(co2 ? get(co2, S_EMBODIED) : NULL, &f->embodied)
          && clean_figure(co2 ? get(co2, S_DATABASE) : NULL, &f->database)
          && clean_figure(co2 ? get(co2, S_MESSAGING) : NULL, &f->messaging)
          && clean_figure(total ? get(total, S_MID) : NULL, &f->mid)))
        return PyErr_Occurred() ? -1 : 0;
    f->rows = get(gs, S_REGIONS);
    if (f->rows) {
        if (!PyList_CheckExact(f->rows))
            return 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(f->rows); i++)
            if (!PyDict_CheckExact(PyList_GET_ITEM(f->rows, i)))
                return 0;
    }
    /* root spans and energy without carbon: absent or null is "not recorded"; else clean */
    long long root;
    double without;
    f->root_spans = get(window, S_ROOT_SPANS);
    f->without = get(gs, S_WITHOUT_CARBON);
    if (f->root_spans == Py_None)
        f->root_spans = NULL;
    if (f->without == Py_None)
        f->without = NULL;
    if ((f->root_spans && !clean_int(f->root_spans, &root)) || (f->without && !clean_figure(f->without, &without)))
        return PyErr_Occurred() ? -1 : 0;
    f->meta = get(report, S_METHODOLOGY);
    f->hash = get(rec, S_HASH);
    if (PyErr_Occurred())
        return -1;
    /* a backfilled line (rules.is_backfill): the reference keeps the report's backfill term */
    PyObject *backfill = f->meta && PyDict_CheckExact(f->meta) ? get(f->meta, S_BACKFILL) : NULL;
    if (backfill && PyUnicode_CheckExact(backfill) && PyUnicode_GET_LENGTH(backfill) == 4
        && PyUnicode_CompareWithASCIIString(backfill, "true") == 0)
        return 0;
    return PyErr_Occurred() ? -1 : 1;
}

/* ---------------------------------------------------------------------- per-service maps */

/* Do the line's tags (the model map's values when it lists the names in order, else
 * map.get(name)) equal the layout's `tags`, as the reference fold's key comparison sees it? */
static int same_tags(PyObject *models, PyObject *names, PyObject *tags) {
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (models && same_keys(models, names)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        while (PyDict_Next(models, &pos, &k, &v)) {
            int eq = PyObject_RichCompareBool(v, PyTuple_GET_ITEM(tags, i++), Py_EQ);
            if (eq <= 0) {
                PyErr_Clear();
                return 0;
            }
        }
        return 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = models ? PyDict_GetItemWithError(models, PyTuple_GET_ITEM(names, i)) : NULL;
        if (v == NULL && PyErr_Occurred())
            return -1;
        int eq = PyObject_RichCompareBool(v ? v : Py_None, PyTuple_GET_ITEM(tags, i), Py_EQ);
        if (eq <= 0) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Are all of a map's values clean figures (floats) / clean counts (ints)? */
static int all_clean(PyObject *map, int counts) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    double d;
    long long x;
    while (PyDict_Next(map, &pos, &k, &v))
        if (!(counts ? clean_int(v, &x) : clean_figure(v, &d)))
            return 0;
    return 1;
}

/* 1: the maps are the layout's, every leaf clean (*carbon_out, *requests_out set; requests
 * NULL when absent or empty); 0: decline; -1: error. */
static int check_maps(PyObject *gs, PyObject *energy, PyObject *names, PyObject *tags, PyObject **carbon_out,
                      PyObject **requests_out) {
    PyObject *carbon = get(gs, S_CARBON_MAP), *requests = get(gs, S_REQUESTS_MAP);
    PyObject *regmap = get(gs, S_REGION_MAP), *models = get(gs, S_MODEL_MAP), *measured = get(gs, S_MEASURED_MAP);
    if (PyErr_Occurred())
        return -1;
    if (!no_measured(measured))
        return 0;
    if (!PyDict_CheckExact(energy) || PyDict_GET_SIZE(energy) == 0 || carbon == NULL || !PyDict_CheckExact(carbon)
        || (requests && !PyDict_CheckExact(requests)) || (regmap && !PyDict_CheckExact(regmap))
        || (models && !PyDict_CheckExact(models)))
        return 0;
    if (requests && PyDict_GET_SIZE(requests) == 0)
        requests = NULL;
    if (!same_keys(energy, names) || !same_keys(carbon, names) || (requests && !same_keys(requests, names)))
        return 0;
    int same = same_tags(models, names, tags);
    if (same <= 0)
        return same;
    if (!all_clean(energy, 0) || !all_clean(carbon, 0) || (requests && !all_clean(requests, 1)))
        return 0;
    *carbon_out = carbon;
    *requests_out = requests;
    return 1;
}

/* A list of n ServiceSums? */
static int sums_list(PyObject *list, Py_ssize_t n) {
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyObject_TypeCheck(PyList_GET_ITEM(list, i), &ServiceSumsType))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------- the entry point */

static PyObject *fold_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "fold_plain(rec, names, tags, targets, cells, regions) takes 6 arguments");
        return NULL;
    }
    PyObject *rec = args[0], *names = args[1], *tags = args[2], *targets = args[3], *cells = args[4];
    PyObject *regions = args[5];
    if (!PyTuple_CheckExact(names) || !PyTuple_CheckExact(tags) || !PyDict_CheckExact(regions)) {
        PyErr_SetString(PyExc_TypeError, "fold_plain: names and tags must be tuples, regions a dict");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(tags) != n || !sums_list(targets, n) || !sums_list(cells, n)) {
        PyErr_SetString(PyExc_TypeError, "fold_plain: one tag, one ServiceSums target and one cell per name");
        return NULL;
    }
    PyObject *report, *gs, *energy, *carbon = NULL, *requests = NULL;
    if (!PyDict_CheckExact(rec) || (report = get(rec, S_REPORT)) == NULL || !PyDict_CheckExact(report)
        || (gs = get(report, S_GREEN_SUMMARY)) == NULL || !PyDict_CheckExact(gs)
        || (energy = get(gs, S_ENERGY_MAP)) == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Figures f;
    int ok = check_maps(gs, energy, names, tags, &carbon, &requests);
    if (ok == 1)
        ok = check_figures(rec, report, gs, &f);
    int plain_rows = 1;
    if (ok == 1 && f.rows && PyList_GET_SIZE(f.rows))
        plain_rows = rows_plain(f.rows, regions);
    if (ok < 0 || plain_rows < 0)
        return NULL;
    if (ok == 0)
        Py_RETURN_NONE;
    /* checked: the additions of the reference's _credit_raw, in order */
    double app_energy = 0.0, app_carbon = 0.0;
    u128 app_requests = 0;
    Py_ssize_t pe = 0, pc = 0, pr = 0;
    PyObject *k, *e_v, *c_v, *r_v;
    for (Py_ssize_t i = 0; i < n; i++) {
        Sums *acc = (Sums *)PyList_GET_ITEM(targets, i), *cell = (Sums *)PyList_GET_ITEM(cells, i);
        double e = 0.0, c = 0.0;
        long long r = 0;
        PyDict_Next(energy, &pe, &k, &e_v); /* sizes and leaves were checked */
        PyDict_Next(carbon, &pc, &k, &c_v);
        clean_figure(e_v, &e);
        clean_figure(c_v, &c);
        if (requests) {
            PyDict_Next(requests, &pr, &k, &r_v);
            clean_int(r_v, &r);
        }
        acc->energy += e;
        acc->carbon += c;
        count_set(&acc->count, count_get(&acc->count) + (u128)r);
        acc->n += 1;
        cell->energy += e;
        cell->carbon += c;
        count_set(&cell->count, count_get(&cell->count) + (u128)r);
        app_energy += e;
        app_carbon += c;
        app_requests += (u128)r;
    }
    PyObject *rows_left = Py_None;
    if (f.rows && PyList_GET_SIZE(f.rows)) {
        if (plain_rows)
            add_rows(f.rows, regions);
        else
            rows_left = f.rows;
    }
    PyObject *meta = f.meta && PyDict_CheckExact(f.meta) && PyDict_GET_SIZE(f.meta) ? f.meta : Py_None;
    PyObject *hash = f.hash && PyUnicode_CheckExact(f.hash) && PyUnicode_GET_LENGTH(f.hash) <= 128 ? f.hash : EMPTY_STR;
    PyObject *req = u128_to_py(app_requests ? app_requests : (u128)f.traces);
    if (req == NULL)
        return NULL;
    /* N: steals the new reference to req; O: new references to the borrowed objects */
    return Py_BuildValue("(ddNLdddOOOOO)", app_energy, app_carbon, req, f.traces, f.embodied, f.database,
                         f.messaging, rows_left, f.root_spans ? f.root_spans : Py_None,
                         f.without ? f.without : Py_None, meta, hash);
}

/* ---------------------------------------------------------------------- window_start */

static PyObject *py_window_start; /* aggregator.read.window_start: every form but the usual one */

static int two(const char *s) { return (s[0] - '0') * 10 + (s[1] - '0'); }

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
 * Low-Level Date Algorithms", days_from_civil). */
static long long days_from_civil(long long y, int m, int d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Epoch seconds of "YYYY-MM-DDTHH:MM:SSZ" or "YYYY-MM-DDTHH:MM:SS.ffffffZ" (the agent's own
 * form: ASCII digits, a real date and time), or 0 when the text is not exactly of either form
 * (the caller then asks the Python parser). With microseconds the value is total microseconds
 * / 1e6, one correctly rounded division, which is what datetime.timestamp() computes. */
static int usual_time(const char *s, Py_ssize_t len, double *out) {
    if (len != 20 && len != 27)
        return 0;
    static const char shape20[] = "0000-00-00T00:00:00Z", shape27[] = "0000-00-00T00:00:00.000000Z";
    const char *shape = len == 20 ? shape20 : shape27;
    for (int i = 0; i < len; i++)
        if (shape[i] == '0' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return 0;
    int year = two(s) * 100 + two(s + 2), month = two(s + 5), day = two(s + 8);
    int hour = two(s + 11), minute = two(s + 14), second = two(s + 17);
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > mdays[month - 1] + (month == 2 && leap)
        || hour > 23 || minute > 59 || second > 59)
        return 0;
    long long seconds = days_from_civil(year, month, day) * 86400LL + hour * 3600 + minute * 60 + second;
    if (len == 20) {
        *out = (double)seconds;
        return 1;
    }
    long long micro = 0;
    for (int i = 20; i < 26; i++)
        micro = micro * 10 + (s[i] - '0');
    long long total = seconds * 1000000LL + micro;
    if (total > (1LL << 53) || total < -(1LL << 53))
        return 0; /* not exact as a double: let Python divide */
    *out = (double)total / 1e6;
    return 1;
}

static int usual_start(PyObject *text, double *out) {
    Py_ssize_t len = PyUnicode_IS_COMPACT_ASCII(text) ? PyUnicode_GET_LENGTH(text) : 0;
    return len && usual_time((const char *)PyUnicode_DATA(text), len, out);
}

/* report.window.<key> of the usual forms in C; any other line goes to the Python parser
 * `module.name` (imported on first need into *fallback), which gives the answer. */
static PyObject *window_time(PyObject *rec, int key, PyObject **fallback, const char *module, const char *name) {
    PyObject *report, *window, *text;
    double epoch;
    if (PyDict_CheckExact(rec) && (report = get(rec, S_REPORT)) && PyDict_CheckExact(report)
        && (window = get(report, S_WINDOW)) && PyDict_CheckExact(window)
        && (text = get(window, key)) && PyUnicode_CheckExact(text) && usual_start(text, &epoch))
        return PyFloat_FromDouble(epoch);
    if (PyErr_Occurred())
        return NULL;
    if (*fallback == NULL) {
        PyObject *mod = PyImport_ImportModule(module);
        *fallback = mod ? PyObject_GetAttrString(mod, name) : NULL;
        Py_XDECREF(mod);
        if (*fallback == NULL)
            return NULL;
    }
    return PyObject_CallOneArg(*fallback, rec);
}

static PyObject *window_start(PyObject *module, PyObject *rec) {
    return window_time(rec, S_START, &py_window_start, "aggregator.read", "window_start");
}

static PyObject *py_window_end; /* aggregator.coverage.window_end: every form but the usual two */

/* Epoch seconds of report.window.end, or None when absent or not a time (coverage.window_end). */
static PyObject *window_end(PyObject *module, PyObject *rec) {
    return window_time(rec, S_END, &py_window_end, "aggregator.coverage", "window_end");
}

/* ---------------------------------------------------------------------- from the bytes */

/* fold_raw: the same fold as fold_plain, straight from the line's bytes, for lines whose
 * layout is the cached one. The scan reads the keys the fold needs and skips every other
 * value (per_endpoint_io_ops, counters, the methodology's texts) while checking that the whole
 * line is JSON orjson reads the same way: anything else - invalid UTF-8, an escape in a
 * string the fold reads, a surrogate escape anywhere, a number past the double range, a
 * duplicate of a key the fold reads, nesting past 512 levels - declines, and the line goes the
 * long way (orjson.loads, then fold_plain or the reference), which decides.
 *
 * Speed: strings are scanned 16 bytes at a time (SSE2), skipped values by one iterative loop
 * with a stack of container kinds, and numbers are read in one pass whose double is computed
 * by Clinger's fast path or Eisel-Lemire (exact, as orjson's; exact_double, CPython's
 * locale-independent correctly rounded reader, only for what those cannot decide). tests/aggregator/test_fold_numbers.py holds both to orjson. */

typedef struct {
    const char *p, *end;
    int depth;
} Scan;

#define MAX_DEPTH 512
#define MAX_ROWS 64
#define MAX_NAMES 64

/* Bytes classes: PLAIN[c] is 1 for a byte that stands for itself inside a JSON string
 * (printable ASCII but '"' and '\\'); ESCAPE[c] for the byte after a backslash of a
 * one-letter escape. Filled at module init. */
static uint8_t PLAIN[256], ESCAPE[256];

static inline int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static inline void ws(Scan *s) {
    while (s->p < s->end && is_ws(*s->p))
        s->p++;
}

static inline int eat(Scan *s, char c) {
    if (s->p < s->end && *s->p == c) { /* compact JSON (the agent's): no whitespace to skip */
        s->p++;
        return 1;
    }
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

static inline int hexd(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* The first byte at or after q that is not PLAIN (end if none): 16 bytes at a time. */
static inline const char *plain_run(const char *q, const char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        /* signed compare: 0x20 > v for the control bytes and for every byte >= 0x80 */
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                    _mm_cmpgt_epi8(space, v));
        int m = _mm_movemask_epi8(stop);
        if (m)
            return q + __builtin_ctz((unsigned)m);
        q += 16;
    }
#endif
    while (q < end && PLAIN[(unsigned char)*q])
        q++;
    return q;
}

/* Past a short plain string at p (p[0] == '"'): its closing quote within 16 bytes and nothing
 * but PLAIN bytes before it; NULL otherwise (string_end then decides). */
static inline const char *short_string(const char *p, const char *end) {
#ifdef __SSE2__
    const char *q = p + 1;
    if (end - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                    _mm_cmpgt_epi8(_mm_set1_epi8(0x20), v));
        int m = _mm_movemask_epi8(stop);
        if (m) {
            q += __builtin_ctz((unsigned)m);
            if (*q == '"')
                return q + 1;
        }
    }
#endif
    (void)p;
    (void)end;
    return NULL;
}

/* Length of the strict UTF-8 sequence at p (no overlong form, no surrogate, <= U+10FFFF: what
 * orjson accepts), 0 if there is none. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0))
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90))
            return 0;
        return 4;
    }
    return 0;
}

/* The characters of valid UTF-8 text (its bytes less the continuation bytes). */
static Py_ssize_t utf8_chars(const char *t, Py_ssize_t len) {
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        n += ((unsigned char)t[i] & 0xC0) != 0x80;
    return n;
}

/* Past the string whose opening quote is at p: the byte after its closing quote, or NULL when
 * it is not a string orjson reads as we do (a control byte, invalid UTF-8, a bad escape or a
 * surrogate escape: orjson's pairing rules decide those). *escaped is set when it holds an
 * escape (its bytes are then not its text). */
static inline const char *string_end(const char *p, const char *end, int *escaped) {
    const char *q = p + 1;
    for (;;) {
        q = plain_run(q, end);
        if (q >= end)
            return NULL;
        unsigned char c = (unsigned char)*q;
        if (c == '"')
            return q + 1;
        if (c == '\\') {
            *escaped = 1;
            if (end - q < 2)
                return NULL;
            if (q[1] == 'u') {
                if (end - q < 6 || !hexd(q[2]) || !hexd(q[3]) || !hexd(q[4]) || !hexd(q[5]))
                    return NULL;
                if ((q[2] == 'd' || q[2] == 'D') && !(q[3] >= '0' && q[3] <= '7'))
                    return NULL; /* a surrogate */
                q += 6;
            } else if (ESCAPE[(unsigned char)q[1]]) {
                q += 2;
            } else {
                return NULL;
            }
        } else if (c >= 0x80) {
            int n = utf8_len((const unsigned char *)q, (const unsigned char *)end);
            if (n == 0)
                return NULL;
            q += n;
        } else {
            return NULL; /* a control byte */
        }
    }
}

/* A string at s->p: its text (between the quotes) and whether it holds an escape; 0 when it
 * is not a string orjson reads as we do. */
static inline int string(Scan *s, const char **text, Py_ssize_t *len, int *escaped) {
    if (!(s->p < s->end && *s->p == '"')) {
        ws(s);
        if (!(s->p < s->end && *s->p == '"'))
            return 0;
    }
    *escaped = 0;
    const char *after = short_string(s->p, s->end);
    if (after == NULL)
        after = string_end(s->p, s->end, escaped);
    if (after == NULL)
        return 0;
    *text = s->p + 1;
    *len = after - s->p - 2;
    s->p = after;
    return 1;
}

/* A number token, read in one pass: JSON's grammar, its significant digits (up to 19 kept
 * in w; more sets `many`) and decimal exponent (value = w x 10^q), whether orjson makes it a
 * float (a fraction or an exponent). */
typedef struct {
    const char *tok;
    Py_ssize_t len;
    uint64_t w;
    int64_t q;
    int neg, is_float, many, digits; /* digits: significant digits read (capped) */
} Num;

#define EXP_CAP 100000 /* an exponent past this is saturated (the value is 0 or past the range) */

/* The correctly rounded double of a JSON number token (NUL-terminated) that the fast paths
 * cannot decide: PyOS_string_to_double, CPython's own reader (David Gay's correctly rounded
 * strtod in Python/dtoa.c where sys.float_repr_style is "short", as on every platform we
 * build for), which is independent of the C locale: a host process that sets LC_NUMERIC to
 * a comma-decimal locale changes nothing here, where the C library's strtod would read "1.5"
 * as 1. It needs the GIL (the fold holds it throughout). Past the range it gives +-HUGE_VAL;
 * should it fail (no memory), NAN, which no figure accepts: the line is declined and folded
 * the long way, and counted so (Folder.declined). Nothing in this file calls a
 * locale-sensitive C function (tests/aggregator/test_fold_locale.py). */
static double exact_double(const char *buf) {
    double d = PyOS_string_to_double(buf, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return NAN;
    }
    return d;
}

/* The number at p: the byte after it, or NULL when it is not JSON or past the double range
 * (orjson refuses 1e400; it reads 1e-400 as 0.0). */
static const char *number_end(const char *p, const char *end, Num *n) {
    const char *q = p;
    uint64_t w = 0;
    int64_t q10 = 0;
    int digits = 0, many = 0, fl = 0;
    n->neg = 0;
    if (q < end && *q == '-') {
        n->neg = 1;
        q++;
    }
    if (q >= end)
        return NULL;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        do {
            if (digits < 19)
                w = w * 10 + (uint64_t)(*q - '0'), digits++;
            else
                many = 1, q10++;
            q++;
        } while (q < end && *q >= '0' && *q <= '9');
    } else {
        return NULL;
    }
    if (q < end && *q == '.') {
        fl = 1;
        q++;
        if (q >= end || !(*q >= '0' && *q <= '9'))
            return NULL;
        do {
            if (digits == 0 && *q == '0')
                q10--; /* a leading zero of the fraction: not significant */
            else if (digits < 19)
                w = w * 10 + (uint64_t)(*q - '0'), digits++, q10--;
            else
                many = 1;
            q++;
        } while (q < end && *q >= '0' && *q <= '9');
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        fl = 1;
        q++;
        int eneg = 0;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        if (q >= end || !(*q >= '0' && *q <= '9'))
            return NULL;
        int64_t e = 0;
        do {
            if (e < EXP_CAP)
                e = e * 10 + (*q - '0');
            q++;
        } while (q < end && *q >= '0' && *q <= '9');
        q10 += eneg ? -e : e;
    }
    n->tok = p;
    n->len = q - p;
    n->w = w;
    n->q = q10;
    n->is_float = fl;
    n->many = many;
    n->digits = digits;
    /* past the double range? value < 10^(digits + q); beyond 10^300 ask exact_double */
    if (w != 0 && digits + q10 > 300) {
        char buf[400];
        if (n->len >= (Py_ssize_t)sizeof buf)
            return NULL;
        memcpy(buf, p, n->len);
        buf[n->len] = 0;
        double d = exact_double(buf);
        if (!(d > -HUGE_VAL && d < HUGE_VAL))
            return NULL; /* past the range (or NAN: not read) */
    }
    return q;
}

static inline int number(Scan *s, Num *n) {
    ws(s);
    const char *after = number_end(s->p, s->end, n);
    if (after == NULL)
        return 0;
    s->p = after;
    return 1;
}

/* Powers of five as 128-bit mantissas, for the Eisel-Lemire conversion (D. Lemire, "Number
 * Parsing at a Gigabyte per Second", 2021; the table of fast_float, for 5^POW5_MIN ..
 * 5^POW5_MAX). tests/aggregator/test_fold_numbers.py regenerates it and compares. */
#define POW5_MIN (-80)
#define POW5_MAX 40
static const uint64_t POW5[POW5_MAX - POW5_MIN + 1][2] = {
    {0x97c560ba6b0919a5u, 0xdccd879fc967d41au}, /* 5^-80 */
    {0xbdb6b8e905cb600fu, 0x5400e987bbc1c920u}, /* 5^-79 */
    {0xed246723473e3813u, 0x290123e9aab23b68u}, /* 5^-78 */
    {0x9436c0760c86e30bu, 0xf9a0b6720aaf6521u}, /* 5^-77 */
    {0xb94470938fa89bceu, 0xf808e40e8d5b3e69u}, /* 5^-76 */
    {0xe7958cb87392c2c2u, 0xb60b1d1230b20e04u}, /* 5^-75 */
    {0x90bd77f3483bb9b9u, 0xb1c6f22b5e6f48c2u}, /* 5^-74 */
    {0xb4ecd5f01a4aa828u, 0x1e38aeb6360b1af3u}, /* 5^-73 */
    {0xe2280b6c20dd5232u, 0x25c6da63c38de1b0u}, /* 5^-72 */
    {0x8d590723948a535fu, 0x579c487e5a38ad0eu}, /* 5^-71 */
    {0xb0af48ec79ace837u, 0x2d835a9df0c6d851u}, /* 5^-70 */
    {0xdcdb1b2798182244u, 0xf8e431456cf88e65u}, /* 5^-69 */
    {0x8a08f0f8bf0f156bu, 0x1b8e9ecb641b58ffu}, /* 5^-68 */
    {0xac8b2d36eed2dac5u, 0xe272467e3d222f3fu}, /* 5^-67 */
    {0xd7adf884aa879177u, 0x5b0ed81dcc6abb0fu}, /* 5^-66 */
    {0x86ccbb52ea94baeau, 0x98e947129fc2b4e9u}, /* 5^-65 */
    {0xa87fea27a539e9a5u, 0x3f2398d747b36224u}, /* 5^-64 */
    {0xd29fe4b18e88640eu, 0x8eec7f0d19a03aadu}, /* 5^-63 */
    {0x83a3eeeef9153e89u, 0x1953cf68300424acu}, /* 5^-62 */
    {0xa48ceaaab75a8e2bu, 0x5fa8c3423c052dd7u}, /* 5^-61 */
    {0xcdb02555653131b6u, 0x3792f412cb06794du}, /* 5^-60 */
    {0x808e17555f3ebf11u, 0xe2bbd88bbee40bd0u}, /* 5^-59 */
    {0xa0b19d2ab70e6ed6u, 0x5b6aceaeae9d0ec4u}, /* 5^-58 */
    {0xc8de047564d20a8bu, 0xf245825a5a445275u}, /* 5^-57 */
    {0xfb158592be068d2eu, 0xeed6e2f0f0d56712u}, /* 5^-56 */
    {0x9ced737bb6c4183du, 0x55464dd69685606bu}, /* 5^-55 */
    {0xc428d05aa4751e4cu, 0xaa97e14c3c26b886u}, /* 5^-54 */
    {0xf53304714d9265dfu, 0xd53dd99f4b3066a8u}, /* 5^-53 */
    {0x993fe2c6d07b7fabu, 0xe546a8038efe4029u}, /* 5^-52 */
    {0xbf8fdb78849a5f96u, 0xde98520472bdd033u}, /* 5^-51 */
    {0xef73d256a5c0f77cu, 0x963e66858f6d4440u}, /* 5^-50 */
    {0x95a8637627989aadu, 0xdde7001379a44aa8u}, /* 5^-49 */
    {0xbb127c53b17ec159u, 0x5560c018580d5d52u}, /* 5^-48 */
    {0xe9d71b689dde71afu, 0xaab8f01e6e10b4a6u}, /* 5^-47 */
    {0x9226712162ab070du, 0xcab3961304ca70e8u}, /* 5^-46 */
    {0xb6b00d69bb55c8d1u, 0x3d607b97c5fd0d22u}, /* 5^-45 */
    {0xe45c10c42a2b3b05u, 0x8cb89a7db77c506au}, /* 5^-44 */
    {0x8eb98a7a9a5b04e3u, 0x77f3608e92adb242u}, /* 5^-43 */
    {0xb267ed1940f1c61cu, 0x55f038b237591ed3u}, /* 5^-42 */
    {0xdf01e85f912e37a3u, 0x6b6c46dec52f6688u}, /* 5^-41 */
    {0x8b61313bbabce2c6u, 0x2323ac4b3b3da015u}, /* 5^-40 */
    {0xae397d8aa96c1b77u, 0xabec975e0a0d081au}, /* 5^-39 */
    {0xd9c7dced53c72255u, 0x96e7bd358c904a21u}, /* 5^-38 */
    {0x881cea14545c7575u, 0x7e50d64177da2e54u}, /* 5^-37 */
    {0xaa242499697392d2u, 0xdde50bd1d5d0b9e9u}, /* 5^-36 */
    {0xd4ad2dbfc3d07787u, 0x955e4ec64b44e864u}, /* 5^-35 */
    {0x84ec3c97da624ab4u, 0xbd5af13bef0b113eu}, /* 5^-34 */
    {0xa6274bbdd0fadd61u, 0xecb1ad8aeacdd58eu}, /* 5^-33 */
    {0xcfb11ead453994bau, 0x67de18eda5814af2u}, /* 5^-32 */
    {0x81ceb32c4b43fcf4u, 0x80eacf948770ced7u}, /* 5^-31 */
    {0xa2425ff75e14fc31u, 0xa1258379a94d028du}, /* 5^-30 */
    {0xcad2f7f5359a3b3eu, 0x096ee45813a04330u}, /* 5^-29 */
    {0xfd87b5f28300ca0du, 0x8bca9d6e188853fcu}, /* 5^-28 */
    {0x9e74d1b791e07e48u, 0x775ea264cf55347eu}, /* 5^-27 */
    {0xc612062576589ddau, 0x95364afe032a819eu}, /* 5^-26 */
    {0xf79687aed3eec551u, 0x3a83ddbd83f52205u}, /* 5^-25 */
    {0x9abe14cd44753b52u, 0xc4926a9672793543u}, /* 5^-24 */
    {0xc16d9a0095928a27u, 0x75b7053c0f178294u}, /* 5^-23 */
    {0xf1c90080baf72cb1u, 0x5324c68b12dd6339u}, /* 5^-22 */
    {0x971da05074da7beeu, 0xd3f6fc16ebca5e04u}, /* 5^-21 */
    {0xbce5086492111aeau, 0x88f4bb1ca6bcf585u}, /* 5^-20 */
    {0xec1e4a7db69561a5u, 0x2b31e9e3d06c32e6u}, /* 5^-19 */
    {0x9392ee8e921d5d07u, 0x3aff322e62439fd0u}, /* 5^-18 */
    {0xb877aa3236a4b449u, 0x09befeb9fad487c3u}, /* 5^-17 */
    {0xe69594bec44de15bu, 0x4c2ebe687989a9b4u}, /* 5^-16 */
    {0x901d7cf73ab0acd9u, 0x0f9d37014bf60a11u}, /* 5^-15 */
    {0xb424dc35095cd80fu, 0x538484c19ef38c95u}, /* 5^-14 */
    {0xe12e13424bb40e13u, 0x2865a5f206b06fbau}, /* 5^-13 */
    {0x8cbccc096f5088cbu, 0xf93f87b7442e45d4u}, /* 5^-12 */
    {0xafebff0bcb24aafeu, 0xf78f69a51539d749u}, /* 5^-11 */
    {0xdbe6fecebdedd5beu, 0xb573440e5a884d1cu}, /* 5^-10 */
    {0x89705f4136b4a597u, 0x31680a88f8953031u}, /* 5^-9 */
    {0xabcc77118461cefcu, 0xfdc20d2b36ba7c3eu}, /* 5^-8 */
    {0xd6bf94d5e57a42bcu, 0x3d32907604691b4du}, /* 5^-7 */
    {0x8637bd05af6c69b5u, 0xa63f9a49c2c1b110u}, /* 5^-6 */
    {0xa7c5ac471b478423u, 0x0fcf80dc33721d54u}, /* 5^-5 */
    {0xd1b71758e219652bu, 0xd3c36113404ea4a9u}, /* 5^-4 */
    {0x83126e978d4fdf3bu, 0x645a1cac083126eau}, /* 5^-3 */
    {0xa3d70a3d70a3d70au, 0x3d70a3d70a3d70a4u}, /* 5^-2 */
    {0xccccccccccccccccu, 0xcccccccccccccccdu}, /* 5^-1 */
    {0x8000000000000000u, 0x0000000000000000u}, /* 5^0 */
    {0xa000000000000000u, 0x0000000000000000u}, /* 5^1 */
    {0xc800000000000000u, 0x0000000000000000u}, /* 5^2 */
    {0xfa00000000000000u, 0x0000000000000000u}, /* 5^3 */
    {0x9c40000000000000u, 0x0000000000000000u}, /* 5^4 */
    {0xc350000000000000u, 0x0000000000000000u}, /* 5^5 */
    {0xf424000000000000u, 0x0000000000000000u}, /* 5^6 */
    {0x9896800000000000u, 0x0000000000000000u}, /* 5^7 */
    {0xbebc200000000000u, 0x0000000000000000u}, /* 5^8 */
    {0xee6b280000000000u, 0x0000000000000000u}, /* 5^9 */
    {0x9502f90000000000u, 0x0000000000000000u}, /* 5^10 */
    {0xba43b74000000000u, 0x0000000000000000u}, /* 5^11 */
    {0xe8d4a51000000000u, 0x0000000000000000u}, /* 5^12 */
    {0x9184e72a00000000u, 0x0000000000000000u}, /* 5^13 */
    {0xb5e620f480000000u, 0x0000000000000000u}, /* 5^14 */
    {0xe35fa931a0000000u, 0x0000000000000000u}, /* 5^15 */
    {0x8e1bc9bf04000000u, 0x0000000000000000u}, /* 5^16 */
    {0xb1a2bc2ec5000000u, 0x0000000000000000u}, /* 5^17 */
    {0xde0b6b3a76400000u, 0x0000000000000000u}, /* 5^18 */
    {0x8ac7230489e80000u, 0x0000000000000000u}, /* 5^19 */
    {0xad78ebc5ac620000u, 0x0000000000000000u}, /* 5^20 */
    {0xd8d726b7177a8000u, 0x0000000000000000u}, /* 5^21 */
    {0x878678326eac9000u, 0x0000000000000000u}, /* 5^22 */
    {0xa968163f0a57b400u, 0x0000000000000000u}, /* 5^23 */
    {0xd3c21bcecceda100u, 0x0000000000000000u}, /* 5^24 */
    {0x84595161401484a0u, 0x0000000000000000u}, /* 5^25 */
    {0xa56fa5b99019a5c8u, 0x0000000000000000u}, /* 5^26 */
    {0xcecb8f27f4200f3au, 0x0000000000000000u}, /* 5^27 */
    {0x813f3978f8940984u, 0x4000000000000000u}, /* 5^28 */
    {0xa18f07d736b90be5u, 0x5000000000000000u}, /* 5^29 */
    {0xc9f2c9cd04674edeu, 0xa400000000000000u}, /* 5^30 */
    {0xfc6f7c4045812296u, 0x4d00000000000000u}, /* 5^31 */
    {0x9dc5ada82b70b59du, 0xf020000000000000u}, /* 5^32 */
    {0xc5371912364ce305u, 0x6c28000000000000u}, /* 5^33 */
    {0xf684df56c3e01bc6u, 0xc732000000000000u}, /* 5^34 */
    {0x9a130b963a6c115cu, 0x3c7f400000000000u}, /* 5^35 */
    {0xc097ce7bc90715b3u, 0x4b9f100000000000u}, /* 5^36 */
    {0xf0bdc21abb48db20u, 0x1e86d40000000000u}, /* 5^37 */
    {0x96769950b50d88f4u, 0x1314448000000000u}, /* 5^38 */
    {0xbc143fa4e250eb31u, 0x17d955a000000000u}, /* 5^39 */
    {0xeb194f8e1ae525fdu, 0x5dcfab0800000000u}, /* 5^40 */
};

static const double P10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* w x 10^q correctly rounded (round half to even), w != 0 with at most 19 digits: 1 and *out,
 * or 0 when this cannot decide (out of the table, subnormal, an ambiguous product): the caller
 * then asks exact_double. */
static int eisel_lemire(uint64_t w, int64_t q, double *out) {
    if (q >= -22 && q <= 22 && w <= (1ULL << 53)) { /* Clinger's fast path: exact operands */
        double d = (double)w;
        *out = q < 0 ? d / P10[-q] : d * P10[q];
        return 1;
    }
    if (q < POW5_MIN || q > POW5_MAX)
        return 0;
    int lz = __builtin_clzll(w);
    w <<= lz;
    const uint64_t *t = POW5[q - POW5_MIN];
    u128 first = (u128)w * t[0];
    uint64_t hi = (uint64_t)(first >> 64), lo = (uint64_t)first;
    if ((hi & 0x1FF) == 0x1FF) { /* the low bits may carry: the second word */
        uint64_t second_hi = (uint64_t)(((u128)w * t[1]) >> 64);
        lo += second_hi;
        if (second_hi > lo)
            hi++;
    }
    if (lo == UINT64_MAX)
        return 0; /* cannot tell (fast_float's old guard, kept: exact_double decides) */
    int upper = (int)(hi >> 63);
    int shift = upper + 64 - 52 - 3;
    uint64_t mantissa = hi >> shift;
    int64_t power2 = (((152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023;
    if (power2 <= 0)
        return 0; /* subnormal */
    if (lo <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == hi)
        mantissa &= ~1ULL; /* exactly halfway: round to even */
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >= (2ULL << 52)) {
        mantissa = 1ULL << 52;
        power2++;
    }
    mantissa &= ~(1ULL << 52);
    if (power2 >= 0x7FF)
        return 0; /* infinite */
    uint64_t bits = mantissa | ((uint64_t)power2 << 52);
    memcpy(out, &bits, sizeof bits);
    return 1;
}

/* The double orjson reads for a number token (n from number_end). */
static double num_value(const Num *n) {
    double d;
    if (n->w == 0)
        d = 0.0;
    else if (n->many || !eisel_lemire(n->w, n->q, &d)) {
        char buf[400];
        if (n->len >= (Py_ssize_t)sizeof buf)
            return NAN; /* never a clean figure: declined */
        memcpy(buf, n->tok, n->len);
        buf[n->len] = 0;
        return exact_double(buf);
    }
    return n->neg ? -d : d;
}

/* Skip (and check) any JSON value at s->p, iteratively: strings by plain_run, containers by
 * a stack of their kinds. Checks what orjson checks (grammar, strings, numbers in range,
 * nesting below MAX_DEPTH in all), but not duplicate keys: a skipped value is not read. */
static int skip(Scan *s) {
    const char *p = s->p, *end = s->end;
    int depth = 0, room = MAX_DEPTH - s->depth;
    unsigned char object[MAX_DEPTH + 1];
    Num n;
    int e;
value:
    while (p < end && is_ws(*p))
        p++;
    if (p >= end)
        return 0;
    switch (*p) {
    case '"': {
        const char *q = short_string(p, end);
        if (q != NULL) {
            p = q;
            goto after;
        }
        if ((p = string_end(p, end, &e)) == NULL)
            return 0;
        goto after;
    }
    case '{':
    case '[':
        if (++depth > room)
            return 0;
        object[depth] = *p++ == '{';
        while (p < end && is_ws(*p))
            p++;
        if (p < end && *p == (object[depth] ? '}' : ']')) {
            p++;
            depth--;
            goto after;
        }
        if (object[depth])
            goto key;
        goto value;
    case 't':
        if (end - p < 4 || memcmp(p, "true", 4) != 0)
            return 0;
        p += 4;
        goto after;
    case 'f':
        if (end - p < 5 || memcmp(p, "false", 5) != 0)
            return 0;
        p += 5;
        goto after;
    case 'n':
        if (end - p < 4 || memcmp(p, "null", 4) != 0)
            return 0;
        p += 4;
        goto after;
    case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9': {
        const char *q = p + 1; /* the usual skipped number: a small int */
        while (q < end && *q >= '0' && *q <= '9')
            q++;
        if (q - p <= 18 && !(q < end && (*q == '.' || *q == 'e' || *q == 'E'))) {
            p = q;
            goto after;
        }
    }
    /* fall through */
    default:
        if ((p = number_end(p, end, &n)) == NULL)
            return 0;
        goto after;
    }
key:
    while (p < end && is_ws(*p))
        p++;
    if (p >= end || *p != '"')
        return 0;
    {
        const char *q = short_string(p, end);
        if (q == NULL && (q = string_end(p, end, &e)) == NULL)
            return 0;
        p = q;
    }
    if (p < end && *p == ':') {
        p++;
        goto value;
    }
    while (p < end && is_ws(*p))
        p++;
    if (p >= end || *p != ':')
        return 0;
    p++;
    goto value;
after:
    if (depth == 0) {
        s->p = p;
        return 1;
    }
    while (p < end && is_ws(*p))
        p++;
    if (p >= end)
        return 0;
    if (*p == ',') {
        p++;
        if (object[depth])
            goto key;
        goto value;
    }
    if (*p == (object[depth] ? '}' : ']')) {
        p++;
        depth--;
        goto after;
    }
    return 0;
}

static inline int is_null(Scan *s) {
    ws(s);
    if (s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        return 1;
    }
    return 0;
}

/* A clean figure: a float token whose value is in [0, MAX_FIGURE] (-0.0 included, as the
 * sanitiser passes it). */
static int figure(Scan *s, double *out) {
    Num n;
    if (!number(s, &n) || !n.is_float)
        return 0;
    double d = num_value(&n);
    if (!(d >= 0.0 && d <= MAX_FIGURE))
        return 0;
    *out = d;
    return 1;
}

/* A clean count: an int token in [0, MAX_COUNT] ("-0" is 0, as orjson reads it). */
static int count(Scan *s, long long *out) {
    Num n;
    if (!number(s, &n) || n.is_float || n.many)
        return 0;
    if (n.neg && n.w != 0)
        return 0;
    if (n.w > (uint64_t)MAX_COUNT)
        return 0;
    *out = (long long)n.w;
    return 1;
}

/* A key and the ':' after it (no escape: a key the fold reads is compared by its bytes). */
static int key(Scan *s, const char **k, Py_ssize_t *kl) {
    int e;
    return string(s, k, kl, &e) && !e && eat(s, ':');
}

static inline int is_key(const char *k, Py_ssize_t kl, const char *want) {
    size_t n = strlen(want);
    return (size_t)kl == n && memcmp(k, want, n) == 0;
}

/* After a member: 1 another follows, 0 the object ends, -1 not JSON. */
static inline int next_member(Scan *s) {
    if (eat(s, ','))
        return 1;
    if (eat(s, '}'))
        return 0;
    return -1;
}

/* Open an object: 1 with a first member to read, 0 empty ({}), -1 not an object. */
static inline int open_object(Scan *s) { /* the caller closes it: s->depth-- after its members */
    if (!eat(s, '{'))
        return -1;
    if (++s->depth > MAX_DEPTH)
        return -1;
    return eat(s, '}') ? 0 : 1;
}

#define SEEN(bit) do { if (seen & (1u << (bit))) return 0; seen |= 1u << (bit); } while (0)
#define MEMBERS(s) for (int more_ = open_object(s); more_ != 0; more_ = next_member(s)) if (more_ < 0) return 0; else

/* The entries of the per-service maps: the line's names (the first map's keys; every other
 * map must list the same, in order), their figures, tags and regions, and what the Folder
 * decided for each. One set per Folder (a fold may call Python - enter, ServiceAcc(region) -
 * and so let another thread's fold run: nothing of a line is kept where another fold writes),
 * grown as needed. */
#define MAX_ENTRIES 8192
typedef struct {
    Py_ssize_t cap;
    const char **key, **tag, **reg;
    Py_ssize_t *klen, *tlen, *rlen; /* rlen: -1 no region (unknown), -2 an escaped one */
    double *e, *c;
    long long *r;
    Py_ssize_t *slot, *tagi;        /* the entry's slot (or SLOT_NEW / SLOT_DROP), its tag's index */
    uint64_t *hash;
    PyObject **name;                /* a new service's name (a new reference, phase A to B) */
    /* the region rows' RegionSums met so far, by name (a state's regions are never replaced) */
    struct { char key[64]; Py_ssize_t len; PyObject *acc; } rc[32];
    int nrc;
} Entries;

#define ent_key (E->key)
#define ent_tag (E->tag)
#define ent_reg (E->reg)
#define ent_klen (E->klen)
#define ent_tlen (E->tlen)
#define ent_rlen (E->rlen)
#define ent_e (E->e)
#define ent_c (E->c)
#define ent_r (E->r)
#define ent_slot (E->slot)
#define ent_tagi (E->tagi)
#define ent_hash (E->hash)
#define ent_name (E->name)

static int entries_room(Entries *E, Py_ssize_t n) {
    if (n < E->cap)
        return 1;
    if (n >= MAX_ENTRIES)
        return 0;
    Py_ssize_t cap = E->cap ? E->cap * 2 : 256;
    while (cap <= n)
        cap *= 2;
#define GROW(arr, T) do { T *x = PyMem_Realloc((void *)arr, cap * sizeof(T)); if (x == NULL) return 0; arr = x; } while (0)
    GROW(ent_key, const char *);
    GROW(ent_tag, const char *);
    GROW(ent_reg, const char *);
    GROW(ent_klen, Py_ssize_t);
    GROW(ent_tlen, Py_ssize_t);
    GROW(ent_rlen, Py_ssize_t);
    GROW(ent_e, double);
    GROW(ent_c, double);
    GROW(ent_r, long long);
    GROW(ent_slot, Py_ssize_t);
    GROW(ent_tagi, Py_ssize_t);
    GROW(ent_hash, uint64_t);
    GROW(ent_name, PyObject *);
#undef GROW
    E->cap = cap;
    return 1;
}

static void entries_free(Entries *E) {
    PyMem_Free((void *)E->key); PyMem_Free((void *)E->tag); PyMem_Free((void *)E->reg);
    PyMem_Free(E->klen); PyMem_Free(E->tlen); PyMem_Free(E->rlen);
    PyMem_Free(E->e); PyMem_Free(E->c); PyMem_Free(E->r);
    PyMem_Free(E->slot); PyMem_Free(E->tagi); PyMem_Free(E->hash); PyMem_Free(E->name);
    for (int i = 0; i < E->nrc; i++)
        Py_XDECREF(E->rc[i].acc);
    memset(E, 0, sizeof *E);
}

typedef struct {
    Py_ssize_t n;              /* entries (-1 until a map has been read) */
    int has_requests, has_tags;
    /* window */
    double start, end;
    int has_end;
    long long traces, root_spans;
    int has_root;
    /* green_summary */
    long long io_ops;
    double kwh, operational, embodied, database, messaging, mid, without;
    int has_without;
    Py_ssize_t rows;
    int rows_plain;                /* every row one the C fold adds (else Python folds rows_text) */
    const char *rows_text;         /* the region rows' array, its bytes */
    Py_ssize_t rows_len;
    int region_map;                /* REGIONS_NONE / _POSITIONAL / _OTHER */
    PyObject *row_acc[MAX_ROWS];   /* borrowed RegionSums */
    long long row_io[MAX_ROWS];
    double row_e[MAX_ROWS], row_c[MAX_ROWS];
    /* methodology, hash */
    const char *meta;
    Py_ssize_t meta_len;
    int meta_object;           /* a non-empty object */
    const char *hash;
    Py_ssize_t hash_len;
    int hash_ok;
    PyObject *regions;
    Entries *e;                /* where the entries go (the Folder's) */
} Raw;

enum { REGIONS_NONE, REGIONS_POSITIONAL, REGIONS_OTHER }; /* Raw.region_map */

/* Does the str `u` have exactly these UTF-8 bytes? */
static inline int str_is(PyObject *u, const char *k, Py_ssize_t kl) {
    Py_ssize_t n;
    const char *b = PyUnicode_AsUTF8AndSize(u, &n);
    return b != NULL && n == kl && memcmp(b, k, n) == 0;
}

/* A per-service map. which: 0 energy figures, 1 carbon figures, 2 request counts, 3 tags (the
 * first map read fixes the names; every other lists the same, in order), 4 the measured
 * ratios (each 0 or 0.0, any names), 5 anything (checked and skipped). 0: decline. */
static int service_map(Scan *s, Raw *w, int which, int *empty) {
    Entries *E = w->e;
    Py_ssize_t i = 0;
    int record = which <= 3 && w->n < 0;
    *empty = 1;
    MEMBERS(s) {
        const char *k;
        Py_ssize_t kl;
        *empty = 0;
        if (!key(s, &k, &kl))
            return 0;
        if (which == 4) { /* no_measured: only exact zeros (any name) */
            Num n;
            if (!number(s, &n) || !((n.len == 1 && n.tok[0] == '0') || (n.len == 3 && memcmp(n.tok, "0.0", 3) == 0)))
                return 0;
            continue;
        }
        if (which == 5) { /* the regions: recorded where the names are the entries', in order */
            if (w->region_map == REGIONS_POSITIONAL && i < w->n && ent_klen[i] == kl
                && memcmp(ent_key[i], k, kl) == 0) {
                ws(s);
                if (s->p < s->end && *s->p == '"') {
                    const char *t;
                    Py_ssize_t tl;
                    int e;
                    if (!string(s, &t, &tl, &e))
                        return 0;
                    ent_reg[i] = t;
                    ent_rlen[i] = e ? -2 : tl;
                } else {
                    if (!skip(s))
                        return 0;
                    ent_rlen[i] = -1; /* not a string: clean_name gives None, "unknown" */
                }
                i++;
            } else {
                w->region_map = REGIONS_OTHER;
                if (!skip(s))
                    return 0;
            }
            continue;
        }
        if (record) {
            if (!entries_room(E, i))
                return 0;
            ent_key[i] = k;
            ent_klen[i] = kl;
        } else if (i >= w->n || ent_klen[i] != kl || memcmp(ent_key[i], k, kl) != 0) {
            return 0;
        }
        if (which == 0 && !figure(s, &ent_e[i]))
            return 0;
        if (which == 1 && !figure(s, &ent_c[i]))
            return 0;
        if (which == 2 && !count(s, &ent_r[i]))
            return 0;
        if (which == 3) {
            int e;
            if (!string(s, &ent_tag[i], &ent_tlen[i], &e) || e)
                return 0;
        }
        i++;
    }
    s->depth--;
    if (which == 5 && !*empty && i != w->n)
        w->region_map = REGIONS_OTHER;
    if (which == 5 && *empty)
        w->region_map = REGIONS_NONE;
    if (which >= 4 || *empty)
        return 1;
    if (record)
        w->n = i;
    return i == w->n;
}

static int raw_window(Scan *s, Raw *w) {
    unsigned seen = 0;
    int has_start = 0;
    MEMBERS(s) {
        const char *k, *t;
        Py_ssize_t kl, tl;
        int e;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, "start")) {
            SEEN(0);
            if (!string(s, &t, &tl, &e) || e || !usual_time(t, tl, &w->start))
                return 0;
            has_start = 1;
        } else if (is_key(k, kl, "end")) {
            SEEN(1);
            if (!is_null(s)) {
                if (!string(s, &t, &tl, &e) || e || !usual_time(t, tl, &w->end))
                    return 0;
                w->has_end = 1;
            }
        } else if (is_key(k, kl, "traces")) {
            SEEN(2);
            if (!count(s, &w->traces))
                return 0;
        } else if (is_key(k, kl, "root_spans")) {
            SEEN(3);
            if (!is_null(s)) {
                if (!count(s, &w->root_spans))
                    return 0;
                w->has_root = 1;
            }
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    return has_start;
}

static int raw_co2(Scan *s, Raw *w) {
    unsigned seen = 0;
    MEMBERS(s) {
        const char *k;
        Py_ssize_t kl;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, "operational_gco2")) {
            SEEN(0);
            if (!figure(s, &w->operational))
                return 0;
        } else if (is_key(k, kl, "embodied_gco2")) {
            SEEN(1);
            if (!figure(s, &w->embodied))
                return 0;
        } else if (is_key(k, kl, "database_gco2")) {
            SEEN(2);
            if (!figure(s, &w->database))
                return 0;
        } else if (is_key(k, kl, "messaging_gco2")) {
            SEEN(3);
            if (!figure(s, &w->messaging))
                return 0;
        } else if (is_key(k, kl, "total")) {
            SEEN(4);
            unsigned tseen = 0;
            MEMBERS(s) {
                const char *tk;
                Py_ssize_t tkl;
                if (!key(s, &tk, &tkl))
                    return 0;
                if (is_key(tk, tkl, "mid")) {
                    if (tseen)
                        return 0;
                    tseen = 1;
                    if (!figure(s, &w->mid))
                        return 0;
                } else if (!skip(s)) {
                    return 0;
                }
            }
            s->depth--;
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    return 1;
}

/* A region row the C fold adds (a known region, "resolved", its three figures clean). */
static int raw_row(Scan *s, Raw *w) {
    if (w->rows >= MAX_ROWS)
        return 0;
    unsigned seen = 0;
    Py_ssize_t i = w->rows;
    MEMBERS(s) {
        const char *k, *t;
        Py_ssize_t kl, tl;
        int e;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, "region")) {
            SEEN(0);
            if (!string(s, &t, &tl, &e) || e)
                return 0;
            Entries *E = w->e;
            PyObject *acc = NULL;
            for (int r = 0; r < E->nrc && acc == NULL; r++)
                if (E->rc[r].len == tl && memcmp(E->rc[r].key, t, tl) == 0)
                    acc = E->rc[r].acc;
            if (acc == NULL) {
                PyObject *name = PyUnicode_FromStringAndSize(t, tl);
                if (name == NULL) {
                    PyErr_Clear();
                    return 0;
                }
                acc = PyDict_GetItemWithError(w->regions, name);
                Py_DECREF(name);
                if (acc == NULL || !PyObject_TypeCheck(acc, &RegionSumsType)) {
                    PyErr_Clear();
                    return 0;
                }
                if (E->nrc < 32 && tl < 64) {
                    memcpy(E->rc[E->nrc].key, t, tl);
                    E->rc[E->nrc].len = tl;
                    E->rc[E->nrc++].acc = Py_NewRef(acc);
                }
            }
            w->row_acc[i] = acc;
        } else if (is_key(k, kl, "status")) {
            SEEN(1);
            if (!string(s, &t, &tl, &e) || e || !(tl == 8 && memcmp(t, "resolved", 8) == 0))
                return 0;
        } else if (is_key(k, kl, "io_ops")) {
            SEEN(2);
            if (!count(s, &w->row_io[i]))
                return 0;
        } else if (is_key(k, kl, "energy_kwh")) {
            SEEN(3);
            if (!figure(s, &w->row_e[i]))
                return 0;
        } else if (is_key(k, kl, "co2_gco2")) {
            SEEN(4);
            if (!figure(s, &w->row_c[i]))
                return 0;
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    if (seen != 0x1f)
        return 0;
    w->rows++;
    return 1;
}

static int raw_green_summary(Scan *s, Raw *w) {
    unsigned seen = 0;
    int empty;
    MEMBERS(s) {
        const char *k;
        Py_ssize_t kl;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, "per_service_energy_kwh")) {
            SEEN(0);
            if (!service_map(s, w, 0, &empty) || empty)
                return 0;
        } else if (is_key(k, kl, "per_service_carbon_kgco2eq")) {
            SEEN(1);
            if (!service_map(s, w, 1, &empty) || empty)
                return 0;
        } else if (is_key(k, kl, "per_service_requests")) {
            SEEN(2);
            if (!service_map(s, w, 2, &empty))
                return 0;
            w->has_requests = !empty;
        } else if (is_key(k, kl, "per_service_energy_model")) {
            SEEN(3);
            if (!service_map(s, w, 3, &empty) || empty)
                return 0;
        } else if (is_key(k, kl, "per_service_region")) {
            SEEN(4);
            w->region_map = w->n >= 0 ? REGIONS_POSITIONAL : REGIONS_OTHER;
            if (!service_map(s, w, 5, &empty))
                return 0;
        } else if (is_key(k, kl, "per_service_measured_ratio")) {
            SEEN(5);
            if (!is_null(s) && !service_map(s, w, 4, &empty))
                return 0;
        } else if (is_key(k, kl, "co2")) {
            SEEN(6);
            if (!raw_co2(s, w))
                return 0;
        } else if (is_key(k, kl, "hosts")) {
            SEEN(7);
            if (!eat(s, '[') || !eat(s, ']'))
                return 0;
        } else if (is_key(k, kl, "total_io_ops")) {
            SEEN(8);
            if (!count(s, &w->io_ops))
                return 0;
        } else if (is_key(k, kl, "energy_kwh")) {
            SEEN(9);
            if (!figure(s, &w->kwh))
                return 0;
        } else if (is_key(k, kl, "energy_without_carbon_kwh")) {
            SEEN(10);
            if (!is_null(s)) {
                if (!figure(s, &w->without))
                    return 0;
                w->has_without = 1;
            }
        } else if (is_key(k, kl, "regions")) {
            SEEN(11);
            ws(s);
            w->rows_text = s->p;
            if (!eat(s, '['))
                return 0;
            if (!eat(s, ']')) {
                do { /* each row an object (else the reference calls the line malformed) */
                    ws(s);
                    if (!(s->p < s->end && *s->p == '{'))
                        return 0;
                    Scan again = *s;
                    if (!(w->rows_plain && raw_row(s, w))) {
                        *s = again; /* not plain: the rows go to the reference's fold_regions */
                        w->rows_plain = 0;
                        if (PyErr_Occurred() || !skip(s))
                            return 0;
                    }
                } while (eat(s, ','));
                if (!eat(s, ']'))
                    return 0;
            }
            w->rows_len = s->p - w->rows_text;
        } else if (kl > 12 && memcmp(k, "per_service_", 12) == 0) {
            return 0; /* a per-service map this fold does not know: the long way decides */
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    return (seen & 0xb) == 0xb; /* both maps and the model map (the layout's tags) */
}

/* The methodology: recorded by its bytes; declined when it has a "backfill" key. */
static int raw_methodology(Scan *s, Raw *w) {
    ws(s);
    w->meta = s->p;
    if (s->p < s->end && *s->p == '{') {
        int more = open_object(s);
        w->meta_object = more == 1;
        for (; more != 0; more = next_member(s)) {
            const char *k;
            Py_ssize_t kl;
            int e;
            if (more < 0 || !string(s, &k, &kl, &e) || e || !eat(s, ':') || is_key(k, kl, "backfill") || !skip(s))
                return 0;
        }
        s->depth--;
    } else if (!skip(s)) {
        return 0;
    }
    w->meta_len = s->p - w->meta;
    return 1;
}

static int raw_report(Scan *s, Raw *w) {
    unsigned seen = 0;
    MEMBERS(s) {
        const char *k;
        Py_ssize_t kl;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, "window")) {
            SEEN(0);
            if (!raw_window(s, w))
                return 0;
        } else if (is_key(k, kl, "green_summary")) {
            SEEN(1);
            if (!raw_green_summary(s, w))
                return 0;
        } else if (is_key(k, kl, "methodology")) {
            SEEN(2);
            if (!raw_methodology(s, w))
                return 0;
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    return (seen & 3) == 3;
}

static int raw_line(Scan *s, Raw *w) {
    unsigned seen = 0;
    MEMBERS(s) {
        const char *k, *t;
        Py_ssize_t kl, tl;
        int e;
        if (!key(s, &k, &kl))
            return 0;
        if (is_key(k, kl, BODY_KEY)) {
            SEEN(0);
            if (!raw_report(s, w))
                return 0;
        } else if (is_key(k, kl, "hash")) {
            SEEN(1);
            ws(s);
            if (s->p < s->end && *s->p == '"') {
                if (!string(s, &t, &tl, &e) || e)
                    return 0;
                w->hash = t;
                w->hash_len = tl;
                w->hash_ok = utf8_chars(t, tl) <= 128; /* _line_hash: at most 128 characters */
            } else if (!skip(s)) {
                return 0;
            }
        } else if (!skip(s)) {
            return 0;
        }
    }
    s->depth--;
    ws(s);
    return (seen & 1) && s->p == s->end;
}

/* ---------------------------------------------------------------------- service slots */

/* Where a service class (aggregator.fold.sums.ServiceAcc: a ServiceSums subclass) keeps its
 * Python fields region, models and measured: the offsets of the __slots__ CPython made for
 * them, which the Folder and the merge read and write directly, as those slots' member
 * descriptors do, instead of by an attribute lookup each (an object of another class goes by
 * the attribute). A new service is made by make_acc, as ServiceAcc.__init__ makes one. */
typedef struct { PyTypeObject *type; Py_ssize_t region, models, measured; } AccSlots;

static PyObject *S_REGION_ATTR, *S_MODELS_ATTR, *S_MEASURED_ATTR, *S_SERVICES_ATTR, *S_UNKNOWN_STR, *ZERO_FLOAT;

#define SLOT_AT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int slot_offset(PyTypeObject *t, PyObject *name, Py_ssize_t *off) {
    PyObject *d = _PyType_Lookup(t, name); /* borrowed; what the attribute lookup finds first */
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
        return 0;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset < (Py_ssize_t)sizeof(Sums)
        || m->offset + (Py_ssize_t)sizeof(PyObject *) > t->tp_basicsize)
        return 0;
    *off = m->offset;
    return 1;
}

/* 1 and *o filled when `t` is a ServiceSums subclass keeping region, models and measured in
 * __slots__ with the usual attribute lookup; else 0 (no error set). */
static int acc_slots(PyObject *t, AccSlots *o) {
    PyTypeObject *type = (PyTypeObject *)t;
    if (!PyType_Check(t) || !PyType_IsSubtype(type, &ServiceSumsType) || type->tp_getattro != PyObject_GenericGetAttr
        || type->tp_setattro != PyObject_GenericSetAttr || !slot_offset(type, S_REGION_ATTR, &o->region)
        || !slot_offset(type, S_MODELS_ATTR, &o->models) || !slot_offset(type, S_MEASURED_ATTR, &o->measured))
        return 0;
    o->type = type;
    return 1;
}

/* acc's field (a new reference; NULL with an error): from its slot when acc is of o's class
 * and the slot is set, else by the attribute (which raises for an unset one). */
static inline PyObject *acc_get(const AccSlots *o, PyObject *acc, Py_ssize_t off, PyObject *name) {
    if (Py_IS_TYPE(acc, o->type) && SLOT_AT(acc, off) != NULL)
        return Py_NewRef(SLOT_AT(acc, off));
    return PyObject_GetAttr(acc, name);
}

static inline int acc_set(const AccSlots *o, PyObject *acc, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (Py_IS_TYPE(acc, o->type)) {
        Py_XSETREF(SLOT_AT(acc, off), Py_NewRef(v));
        return 0;
    }
    return PyObject_SetAttr(acc, name, v);
}

/* Leave `obj` to reference counting alone (see new_service): only for objects whose fields
 * cannot refer back to them. */
static inline void untrack(PyObject *obj) {
    if (PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj))
        PyObject_GC_UnTrack(obj);
}

/* A new service of o's class as ServiceAcc(region) makes it: zero sums, `region`, a new empty
 * `models` dict, `measured` 0.0; untracked (see new_service). A new reference, NULL on error. */
static PyObject *make_acc(const AccSlots *o, PyObject *region) {
    PyObject *obj = o->type->tp_alloc(o->type, 0), *models = obj ? PyDict_New() : NULL;
    if (models == NULL) {
        Py_XDECREF(obj);
        return NULL;
    }
    Py_XSETREF(SLOT_AT(obj, o->region), Py_NewRef(region));
    Py_XSETREF(SLOT_AT(obj, o->models), models);
    Py_XSETREF(SLOT_AT(obj, o->measured), Py_NewRef(ZERO_FLOAT));
    untrack(obj);
    return obj;
}

/* Is `t` a cell class: a ServiceSums subclass adding no field, __init__ or __new__ (Cell)? */
static int cell_class(PyObject *t) {
    PyTypeObject *type = (PyTypeObject *)t;
    return PyType_Check(t) && PyType_IsSubtype(type, &ServiceSumsType) && type->tp_basicsize == (Py_ssize_t)sizeof(Sums)
           && type->tp_dictoffset == 0 && type->tp_init == ServiceSumsType.tp_init && type->tp_new == PyType_GenericNew;
}

/* A new cell of the cell class `t` (zero sums), untracked: it holds no reference but its
 * class's, so no cycle can pass through it. */
static PyObject *make_cell(PyObject *t) {
    PyTypeObject *type = (PyTypeObject *)t;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj != NULL)
        untrack(obj);
    return obj;
}

/* ---------------------------------------------------------------------- the Folder */

/* Folder(services, models, regions, service_type, cell_type, enter, max_services, max_models,
 *        state):
 * folds lines straight from their bytes into one state's accumulators (aggregator/fold/fast.py
 * makes one per file: fast.folder). It is handed the state's dicts - services (name ->
 * ServiceAcc), models (tag -> occurrences), regions (name -> RegionSums) -, the classes of a
 * new service (service_type: made as new_service makes it) and of a new cell (cell_type: as
 * new_cell makes it), `enter(start)`, which
 * makes the time bucket holding `start` the current one and returns (lo, hi, bucket), the
 * two caps, and the state itself, whose totals it holds (below); nothing else of the state.
 *
 * take(raw, period_lo, period_hi) folds one line as the reference does a runtime window
 * (aggregator/fold/reference.py: _runtime with
 * _layout / _new_layout, _credit_raw or _credit_mixed, _upgrade_regions), or returns None
 * having changed nothing. Its entries are looked up by their bytes in the Folder's own hash
 * table of the services it has met (name, ServiceAcc, its tag set, its cell in the current
 * bucket), so the service set may change from line to line at no Python cost. The checks come
 * first (phase A: the scan, then every entry's service, tag and region decided); only a line
 * that passes them all changes anything (phase B), in the reference's order:
 *
 * - a service the state does not hold is made (new_service(service_type, region), region from the line's
 *   per_service_region, clean, else "unknown") while the state has room, else its entry is
 *   dropped (dropped_services, dropped_energy/carbon, the bucket's dropped sums: the "(other)"
 *   row) and the state has overflowed; a service whose region is "unknown" takes the line's;
 * - each entry's tag counts once in the tag set (models[tag] += 1; a new tag while the set has
 *   room; "+cal" stripped, calibration noted) and goes into its service's tags;
 * - each kept entry's cell in the window's bucket is found or made, in entry order, and the
 *   entries are added to their service and cell, in order, with the same IEEE doubles;
 * - the region rows are added when every row is plain, else their bytes are returned for the
 *   reference's fold_regions;
 * - the window's totals, as the reference's add_totals, add_window and add_window_counts add
 *   them (fast.py's order: runtime_windows, energy, operational carbon, requests, windows,
 *   first/last start, host energy, the terms no service carries as g / 1000.0, traces and root
 *   spans, the stated energy at 0 g), each to its bucket's sums and to the totals the Folder
 *   *holds*: from the first line it takes, the state's float totals are copied here (each must
 *   be an exact float and each count an exact int, else the line is declined) and added to in
 *   the reference's order, and the counts are summed apart; sync() writes them back (a float as
 *   the running sum reached it, a count as the state's plus the sum, overflowed and
 *   calibration_applied set when a line set them) and holds none until the next take. The
 *   state's held fields must not be read or written between a take and a sync: the engine
 *   syncs before every line it folds the long way and at the end of the file (fast.fold_raw
 *   after every line). Nothing is shared between Folders.
 *
 * Declined (None): not a runtime window the checks pass (see raw_line: host rows, measured
 * ratios, backfill, an unclean figure, ...), outside the period, a name "_unattributed", empty
 * or past MAX_NAME_BYTES, a tag past MAX_TAG_BYTES or "+cal" alone, more new tags than the tag
 * set has room for (declined at the first past its room), a name twice, a region needed but
 * not read (escaped, or the region map not in the entries' order). Returned:
 *
 *   (start, end or None, hash, extra)
 *
 * with extra None, or (methodology bytes or None, rows bytes or None, derive) for Python
 * (fast.finish): the methodology when its bytes are not the ones returned last (noted
 * already), the region rows when not every row is plain (the reference's fold_regions; derive:
 * the line states no energy at 0 g, so what the rows count is added, after a sync). The
 * Folder's table holds only services the state holds (bounded by the service cap). Its tag
 * table holds the tag texts of lines it took: a line's tags go in as phase A meets them and,
 * when the line is declined, come out again (tags_forget), so a declined line - whose tags the
 * reference may never take (a name twice: the reference sees the name's last tag) - leaves
 * none. Each text it keeps is one the tag set holds with or without "+cal", so it holds at
 * most two per tag in the set (bounded by the tag cap); it grows as needed (no fixed size, so
 * no line is declined for its room; up to FOLD_VERSION 16 it kept 256 texts, of declined lines
 * too, and an archive could fill it and have every later line with a new tag declined). */

#define SLOT_NEW (-1)  /* ent_slot: a service to make */
#define SLOT_DROP (-2) /* ent_slot: past the service cap */
#define FOLD_OVERFLOWED 1
#define FOLD_CALIBRATED 2


/* The state's totals a Folder holds (AggregateState's fields: the float sums and extremes, and
 * the counts); the terms' are "<term>_kg" for the terms configure() checked. */
enum { T_ENERGY, T_OPERATIONAL, T_HOST, T_EMBODIED, T_DATABASE, T_MESSAGING, T_DROPPED_E, T_DROPPED_C, T_WITHOUT,
       T_FIRST, T_LAST, N_TOTALS };
static const char *const TOTAL_TEXT[N_TOTALS] = {
    "energy", "operational_kg", "host_energy", "embodied_kg", "database_kg", "messaging_kg", "dropped_energy",
    "dropped_carbon", "energy_without_carbon", "first_start", "last_start"};
enum { C_RUNTIME, C_WINDOWS, C_REQUESTS, C_TRACES, C_ROOT, C_DROPPED, N_COUNTS };
static const char *const COUNT_TEXT[N_COUNTS] = {
    "runtime_windows", "windows", "requests", "traces_counted", "root_spans", "dropped_services"};
static PyObject *TOTAL_ATTR[N_TOTALS], *COUNT_ATTR[N_COUNTS], *S_OVERFLOWED_ATTR, *S_CALIBRATED_ATTR;
static char UNATTRIBUTED_NAME[64] = "_unattributed", CAL_SUFFIX[16] = "+cal"; /* rules.UNATTRIBUTED, schema.tags */
static Py_ssize_t MAX_NAME_BYTES = 256, MAX_TAG_BYTES = 64; /* aggregator.sanitize (schema.constants) */

typedef struct {
    const char *key;    /* the name's bytes: its str's UTF-8 (held by `name`; no copy) */
    Py_ssize_t len;
    uint64_t hash;
    PyObject *name;     /* str */
    PyObject *acc;      /* its ServiceAcc */
    PyObject *models;   /* acc.models */
    PyObject *cell;     /* its cell in the bucket of generation `gen`, or NULL */
    uint64_t gen;
    Py_ssize_t tag;     /* a tag index known to be in acc.models (-1: none) */
    int region_known;   /* acc.region is not "unknown" (it never becomes so again) */
} Slot;

typedef struct {
    char *text;         /* the tag's bytes as written (owned) */
    Py_ssize_t len;
    PyObject *bare;     /* the tag as the tag set holds it ("+cal" stripped) */
    int cal;
    Py_ssize_t count;   /* this line's entries with this tag */
    Py_ssize_t first;   /* this line: the order of first use (-1: unused) */
} Tag;

typedef struct {
    PyObject_HEAD
    PyObject *services, *models, *regions, *service_type, *cell_type, *enter;
    AccSlots acc;       /* where service_type keeps region, models, measured */
    Py_ssize_t max_services, max_models;
    Slot *slots;
    /* the region names met (decoded once per Folder: each new service's region is one) */
    struct { char key[64]; Py_ssize_t len; PyObject *str; } region_str[32];
    int nregion_str;
    Py_ssize_t nslots, slots_cap;
    Py_ssize_t *table;  /* open addressing: slot index + 1 (0: empty) */
    Py_ssize_t table_size;
    Tag *tags;          /* the tag table (see above): tags[0..ntags), room for tags_cap */
    Py_ssize_t ntags, tags_cap;
    PyObject *bucket, *bucket_cells; /* the bucket whose cells the slots hold, its services dict */
    uint64_t gen;
    PyObject *meta;     /* the methodology bytes returned last (bytes or NULL) */
    Entries entries;    /* the line being folded */
    Py_ssize_t *seen;   /* a line's names, for duplicates: entry index + 1 */
    Py_ssize_t seen_size;
    long long folded, declined;
    /* the state's totals while held (from a take to the next sync): the float ones as the
     * state held them plus this Folder's additions since, the counts as what was added */
    PyObject *state;
    int held, held_flags;
    double total[N_TOTALS];
    u128 added[N_COUNTS];
    double cur_lo, cur_hi; /* the bucket take() folds into, [cur_lo, cur_hi) (from enter) */
    PyObject *cur_bucket;  /* NULL: none yet, or forgotten at a sync */
    long long lookups, probes, max_probe; /* name lookups, slots stepped past their homes, the longest walk */
} Folder;

/* The name tables' hash: SipHash-1-3 (J.-P. Aumasson and D. J. Bernstein, "SipHash: a fast
 * short-input PRF", INDOCRYPT 2012; 1 compression and 3 finalisation rounds, the variant
 * CPython hashes str and bytes with since 3.11), keyed by NAME_KEY, 16 bytes of os.urandom
 * drawn once per process at module init. An archive's author, who does not know the key,
 * cannot choose names that share a home slot (up to FOLD_VERSION 14 the hash was an unkeyed
 * FNV-1a, and names chosen against it made every lookup walk them all: bench fold_collide).
 * The key decides only where a name sits in a table, never what is folded: the reports are
 * the same bytes under every key (tests/aggregator/test_fold_name_table.py). */
static uint64_t NAME_KEY[2];

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                 \
    do {                                                                                         \
        v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32);                            \
        v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2;                                                 \
        v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0;                                                 \
        v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32);                            \
    } while (0)

static uint64_t siphash13(const uint64_t key[2], const char *k, Py_ssize_t n) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ULL, v1 = key[1] ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ULL, v3 = key[1] ^ 0x7465646279746573ULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t m = 0;
        for (int b = 7; b >= 0; b--) /* little-endian, whatever the machine */
            m = m << 8 | p[i + b];
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t)n << 56;
    for (int b = (int)(n - i) - 1; b >= 0; b--)
        last |= (uint64_t)p[i + b] << (8 * b);
    v3 ^= last;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
#undef SIPROUND
#undef ROTL64

static inline uint64_t name_hash(const char *k, Py_ssize_t n) { return siphash13(NAME_KEY, k, n); }

/* The probe statistics (Folder.probes, .lookups, .max_probe): slots stepped past a lookup's
 * home slot, in the name table and the line's duplicate check. */
static inline void probed(Folder *f, Py_ssize_t steps) {
    f->lookups++;
    f->probes += steps;
    if (steps > f->max_probe)
        f->max_probe = steps;
}

static Py_ssize_t slot_find(Folder *f, const char *k, Py_ssize_t n, uint64_t h) {
    if (f->table_size == 0) {
        probed(f, 0);
        return -1;
    }
    Py_ssize_t mask = f->table_size - 1, steps = 0;
    for (Py_ssize_t i = (Py_ssize_t)(h & mask);; i = (i + 1) & mask, steps++) {
        Py_ssize_t v = f->table[i];
        if (v == 0) {
            probed(f, steps);
            return -1;
        }
        Slot *sl = &f->slots[v - 1];
        if (sl->hash == h && sl->len == n && memcmp(sl->key, k, n) == 0) {
            probed(f, steps);
            return v - 1;
        }
    }
}

static int table_put(Py_ssize_t *table, Py_ssize_t size, uint64_t h, Py_ssize_t value) {
    Py_ssize_t mask = size - 1;
    for (Py_ssize_t i = (Py_ssize_t)(h & mask);; i = (i + 1) & mask)
        if (table[i] == 0) {
            table[i] = value;
            return 0;
        }
}

/* A new slot for a service the state holds (acc, a new reference is taken): its index, -1 on error. */
static Py_ssize_t slot_add(Folder *f, const char *k, Py_ssize_t n, uint64_t h, PyObject *name, PyObject *acc) {
    if (f->nslots + 1 > f->slots_cap) {
        Py_ssize_t cap = f->slots_cap ? f->slots_cap * 2 : 64;
        Slot *x = PyMem_Realloc(f->slots, cap * sizeof(Slot));
        if (x == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->slots = x;
        f->slots_cap = cap;
    }
    if ((f->nslots + 1) * 2 > f->table_size) {
        Py_ssize_t size = f->table_size ? f->table_size * 2 : 128;
        Py_ssize_t *t = PyMem_Calloc(size, sizeof(Py_ssize_t));
        if (t == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < f->nslots; i++)
            table_put(t, size, f->slots[i].hash, i + 1);
        PyMem_Free(f->table);
        f->table = t;
        f->table_size = size;
    }
    PyObject *models = acc_get(&f->acc, acc, f->acc.models, S_MODELS_ATTR);
    PyObject *region = models ? acc_get(&f->acc, acc, f->acc.region, S_REGION_ATTR) : NULL;
    /* a key is never escaped (raw_line declines those), so the str's UTF-8 - its own bytes for
     * an ASCII name, made once and kept by the str otherwise - is the key's bytes */
    Py_ssize_t utf8_len_ = -1;
    const char *key = region ? PyUnicode_AsUTF8AndSize(name, &utf8_len_) : NULL;
    if (key != NULL && (utf8_len_ != n || memcmp(key, k, n) != 0)) {
        PyErr_SetString(PyExc_SystemError, "Folder: a service's name is not its key's bytes");
        key = NULL;
    }
    if (key == NULL) {
        Py_XDECREF(models);
        Py_XDECREF(region);
        return -1;
    }
    Slot *sl = &f->slots[f->nslots];
    sl->key = key;
    sl->len = n;
    sl->hash = h;
    sl->name = Py_NewRef(name);
    sl->acc = Py_NewRef(acc);
    sl->models = models;
    sl->cell = NULL;
    sl->gen = 0;
    sl->tag = -1;
    sl->region_known = region != S_UNKNOWN_STR && PyUnicode_Check(region) && PyUnicode_Compare(region, S_UNKNOWN_STR) != 0;
    Py_DECREF(region);
    if (PyErr_Occurred()) {
        Py_DECREF(sl->name);
        Py_DECREF(sl->acc);
        Py_DECREF(models);
        return -1;
    }
    table_put(f->table, f->table_size, h, f->nslots + 1);
    return f->nslots++;
}

/* The tag's index in the Folder's tag table (added on first sight: take() removes what a
 * declined line added, tags_forget), -1: decline, -2: error. */
static Py_ssize_t tag_index(Folder *f, const char *t, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < f->ntags; i++)
        if (f->tags[i].len == n && memcmp(f->tags[i].text, t, n) == 0)
            return i;
    size_t cal_len = strlen(CAL_SUFFIX);
    int cal = (size_t)n >= cal_len && memcmp(t + n - cal_len, CAL_SUFFIX, cal_len) == 0;
    if (n > MAX_TAG_BYTES || (cal && (size_t)n == cal_len))
        return -1; /* rejected by the tag set (counted by the reference) */
    if (f->ntags == f->tags_cap) {
        Py_ssize_t cap = f->tags_cap ? f->tags_cap * 2 : 16;
        Tag *x = PyMem_Realloc(f->tags, cap * sizeof(Tag));
        if (x == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        f->tags = x;
        f->tags_cap = cap;
    }
    char *text = PyMem_Malloc(n);
    PyObject *bare = text ? PyUnicode_DecodeUTF8(t, n - (cal ? (Py_ssize_t)cal_len : 0), NULL) : NULL;
    if (bare == NULL) {
        PyMem_Free(text);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -2;
    }
    memcpy(text, t, n);
    Tag *g = &f->tags[f->ntags];
    g->text = text;
    g->len = n;
    g->bare = bare;
    g->cal = cal;
    g->count = 0;
    g->first = -1;
    return f->ntags++;
}

/* Remove the tags added since the table held `keep` (those of a line declined). No slot's tag
 * is one of them: a slot's tag is set in phase B only, of a line taken. */
static void tags_forget(Folder *f, Py_ssize_t keep) {
    while (f->ntags > keep) {
        Tag *g = &f->tags[--f->ntags];
        PyMem_Free(g->text);
        Py_CLEAR(g->bare);
    }
}

/* Is the region text a clean name (non-empty, at most MAX_NAME_BYTES)? */
static inline int clean_region(Py_ssize_t len) { return len > 0 && len <= MAX_NAME_BYTES; }

static void folder_dealloc(Folder *f) {
    for (Py_ssize_t i = 0; i < f->nslots; i++) {
        Slot *sl = &f->slots[i];
        Py_XDECREF(sl->name);
        Py_XDECREF(sl->acc);
        Py_XDECREF(sl->models);
        Py_XDECREF(sl->cell);
    }
    for (Py_ssize_t i = 0; i < f->ntags; i++) {
        PyMem_Free(f->tags[i].text);
        Py_XDECREF(f->tags[i].bare);
    }
    PyMem_Free(f->tags);
    for (int i = 0; i < f->nregion_str; i++)
        Py_XDECREF(f->region_str[i].str);
    PyMem_Free(f->slots);
    PyMem_Free(f->table);
    PyMem_Free(f->seen);
    Py_XDECREF(f->services);
    Py_XDECREF(f->models);
    Py_XDECREF(f->regions);
    Py_XDECREF(f->service_type);
    Py_XDECREF(f->cell_type);
    Py_XDECREF(f->enter);
    Py_XDECREF(f->bucket);
    Py_XDECREF(f->bucket_cells);
    Py_XDECREF(f->meta);
    Py_XDECREF(f->state);
    Py_XDECREF(f->cur_bucket);
    entries_free(&f->entries);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyObject *folder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *services, *models, *regions, *service_type, *cell_type, *enter, *state;
    Py_ssize_t max_services, max_models;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOnnO:Folder", &PyDict_Type, &services, &PyDict_Type, &models, &PyDict_Type,
                          &regions, &service_type, &cell_type, &enter, &max_services, &max_models, &state))
        return NULL;
    AccSlots acc;
    if (!acc_slots(service_type, &acc) || !cell_class(cell_type)) {
        PyErr_SetString(PyExc_TypeError, "Folder: service_type must be a ServiceSums subclass keeping region, models "
                        "and measured in __slots__, cell_type one adding no field, __init__ or __new__");
        return NULL;
    }
    Folder *f = (Folder *)type->tp_alloc(type, 0);
    if (f == NULL)
        return NULL;
    f->acc = acc;
    f->services = Py_NewRef(services);
    f->models = Py_NewRef(models);
    f->regions = Py_NewRef(regions);
    f->service_type = Py_NewRef(service_type);
    f->cell_type = Py_NewRef(cell_type);
    f->enter = Py_NewRef(enter);
    f->max_services = max_services;
    f->max_models = max_models;
    f->state = Py_NewRef(state);
    f->cur_lo = HUGE_VAL;
    f->cur_hi = -HUGE_VAL;
    return (PyObject *)f;
}

/* Phase A for the entries: each one's slot (or SLOT_NEW / SLOT_DROP) and tag decided, nothing
 * of the state changed. 1: the line can be folded (*flags: FOLD_OVERFLOWED when an entry is
 * dropped); 0: decline; -1: error. New names are left in ent_name (new references). */
static int decide(Folder *f, const Raw *w, int *flags) {
    Entries *E = w->e;
    Py_ssize_t n = w->n, room = f->max_services - PyDict_GET_SIZE(f->services), new_tags = 0;
    size_t un_len = strlen(UNATTRIBUTED_NAME);
    for (Py_ssize_t i = 0; i < f->ntags; i++)
        f->tags[i].count = 0, f->tags[i].first = -1;
    if (n * 2 > f->seen_size) {
        Py_ssize_t size = 64;
        while (size < n * 2)
            size *= 2;
        Py_ssize_t *x = PyMem_Realloc(f->seen, size * sizeof(Py_ssize_t));
        if (x == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->seen = x;
        f->seen_size = size;
    }
    memset(f->seen, 0, f->seen_size * sizeof(Py_ssize_t));
    for (Py_ssize_t i = 0; i < n; i++)
        ent_name[i] = NULL;
    Py_ssize_t mask = f->seen_size - 1, first_use = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *k = ent_key[i];
        Py_ssize_t kl = ent_klen[i];
        if (kl == 0 || kl > MAX_NAME_BYTES || ((size_t)kl == un_len && memcmp(k, UNATTRIBUTED_NAME, un_len) == 0))
            return 0; /* an unusable name or _unattributed: the reference decides */
        uint64_t h = ent_hash[i] = name_hash(k, kl);
        for (Py_ssize_t j = (Py_ssize_t)(h & mask), steps = 0;; j = (j + 1) & mask, steps++) { /* a name twice: decline */
            Py_ssize_t v = f->seen[j];
            if (v == 0) {
                f->seen[j] = i + 1;
                probed(f, steps);
                break;
            }
            if (ent_hash[v - 1] == h && ent_klen[v - 1] == kl && memcmp(ent_key[v - 1], k, kl) == 0) {
                probed(f, steps);
                return 0;
            }
        }
        /* the tag: an empty one is no tag (accept_model(None)) */
        ent_tagi[i] = -1;
        if (ent_tlen[i] > 0) {
            Py_ssize_t t = tag_index(f, ent_tag[i], ent_tlen[i]);
            if (t < 0)
                return t == -2 ? -1 : 0;
            Tag *g = &f->tags[t];
            if (g->first < 0) {
                g->first = first_use++;
                PyObject *c = PyDict_GetItemWithError(f->models, g->bare);
                if (c == NULL && PyErr_Occurred())
                    return -1;
                if (c != NULL && !PyLong_CheckExact(c))
                    return 0;
                new_tags += c == NULL;
                if (c == NULL && PyDict_GET_SIZE(f->models) + new_tags > f->max_models)
                    return 0; /* a tag refused at the tag cap: the reference counts it */
            }
            g->count++;
            ent_tagi[i] = t;
        }
        /* the service */
        Py_ssize_t sl = slot_find(f, k, kl, h);
        if (sl < 0) {
            PyObject *name = PyUnicode_DecodeUTF8(k, kl, NULL);
            if (name == NULL)
                return -1;
            PyObject *acc = PyDict_GetItemWithError(f->services, name);
            if (acc == NULL) {
                if (PyErr_Occurred()) {
                    Py_DECREF(name);
                    return -1;
                }
                if (room > 0) {
                    room--;
                    sl = SLOT_NEW;
                } else {
                    sl = SLOT_DROP;
                    *flags |= FOLD_OVERFLOWED;
                }
                ent_name[i] = name; /* kept for phase B */
            } else {
                if (!PyObject_TypeCheck(acc, &ServiceSumsType)) {
                    Py_DECREF(name);
                    return 0;
                }
                sl = slot_add(f, k, kl, h, name, acc);
                Py_DECREF(name);
                if (sl < 0)
                    return -1;
                if (!PyDict_CheckExact(f->slots[sl].models))
                    return 0;
            }
        }
        ent_slot[i] = sl;
        /* the region, where it is needed: a new service's, or one still "unknown" */
        int needed = sl == SLOT_NEW;
        if (sl >= 0 && !f->slots[sl].region_known) {
            PyObject *region = acc_get(&f->acc, f->slots[sl].acc, f->acc.region, S_REGION_ATTR);
            if (region == NULL)
                return -1;
            int known = region != S_UNKNOWN_STR && PyUnicode_Check(region) && PyUnicode_Compare(region, S_UNKNOWN_STR) != 0;
            Py_DECREF(region);
            if (PyErr_Occurred())
                return -1;
            f->slots[sl].region_known = known;
            needed = !known;
        }
        if (needed && (w->region_map == REGIONS_OTHER || (w->region_map == REGIONS_POSITIONAL && ent_rlen[i] == -2)))
            return 0;
    }
    return 1;
}

static void drop_names(Entries *E, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(ent_name[i]);
}

/* The line's region for entry i as the reference reads it: clean_name(region_map.get(name))
 * or "unknown" (a new reference; a region name the Folder met before is the same str). */
static PyObject *entry_region(Folder *f, const Raw *w, Py_ssize_t i) {
    Entries *E = w->e;
    if (!(w->region_map == REGIONS_POSITIONAL && ent_rlen[i] >= 0 && clean_region(ent_rlen[i])))
        return Py_NewRef(S_UNKNOWN_STR);
    const char *k = ent_reg[i];
    Py_ssize_t n = ent_rlen[i];
    for (int j = 0; j < f->nregion_str; j++)
        if (f->region_str[j].len == n && memcmp(f->region_str[j].key, k, n) == 0)
            return Py_NewRef(f->region_str[j].str);
    PyObject *str = PyUnicode_DecodeUTF8(k, n, NULL);
    if (str != NULL && f->nregion_str < 32 && n <= 64) {
        memcpy(f->region_str[f->nregion_str].key, k, n);
        f->region_str[f->nregion_str].len = n;
        f->region_str[f->nregion_str++].str = Py_NewRef(str);
    }
    return str;
}

/* Phase B: the additions, in the reference's order. -1 on error (only). */
static int apply(Folder *f, const Raw *w, PyObject *bucket, int *flags, long long *dropped, double *dropped_e,
                 double *dropped_c, double *app_e, double *app_c, u128 *app_r) {
    Entries *E = w->e;
    Py_ssize_t n = w->n;
    if (bucket != f->bucket) { /* the slots' cells are another bucket's */
        PyObject *cells = PyObject_GetAttr(bucket, S_SERVICES_ATTR);
        if (cells == NULL)
            return -1;
        if (!PyDict_CheckExact(cells)) {
            Py_DECREF(cells);
            PyErr_SetString(PyExc_TypeError, "Folder: a bucket's services must be a dict");
            return -1;
        }
        Py_XSETREF(f->bucket, Py_NewRef(bucket));
        Py_XSETREF(f->bucket_cells, cells);
        f->gen++;
    }
    /* the tag set: each tag's occurrences, new tags in order of first use */
    for (Py_ssize_t order = 0;; order++) {
        Tag *g = NULL;
        for (Py_ssize_t t = 0; t < f->ntags && g == NULL; t++)
            if (f->tags[t].first == order)
                g = &f->tags[t];
        if (g == NULL)
            break;
        PyObject *old = PyDict_GetItemWithError(f->models, g->bare);
        if (old == NULL && PyErr_Occurred())
            return -1;
        PyObject *add = PyLong_FromSsize_t(g->count), *sum = add && old ? PyNumber_Add(old, add) : Py_XNewRef(add);
        int rc = sum ? PyDict_SetItem(f->models, g->bare, sum) : -1;
        Py_XDECREF(add);
        Py_XDECREF(sum);
        if (rc < 0)
            return -1;
        if (g->cal)
            *flags |= FOLD_CALIBRATED;
    }
    /* services: made, their tags, their regions; then their cells; entry order throughout */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t sl = ent_slot[i];
        if (sl == SLOT_DROP)
            continue;
        if (sl == SLOT_NEW) {
            PyObject *region = entry_region(f, w, i);
            PyObject *acc = region ? make_acc(&f->acc, region) : NULL;
            Py_XDECREF(region);
            if (acc == NULL)
                return -1;
            int rc = PyDict_SetItem(f->services, ent_name[i], acc);
            sl = rc < 0 ? -1 : slot_add(f, ent_key[i], ent_klen[i], ent_hash[i], ent_name[i], acc);
            Py_DECREF(acc);
            if (sl < 0)
                return -1;
            ent_slot[i] = sl;
            if (!PyDict_CheckExact(f->slots[sl].models)) {
                PyErr_SetString(PyExc_TypeError, "Folder: a service's models must be a dict");
                return -1;
            }
        }
        Slot *s = &f->slots[sl];
        Py_ssize_t t = ent_tagi[i];
        if (t >= 0 && s->tag != t) {
            if (PyDict_SetDefault(s->models, f->tags[t].bare, Py_None) == NULL)
                return -1;
            s->tag = t;
        }
        if (!s->region_known) { /* first known region wins */
            PyObject *region = entry_region(f, w, i);
            int rc = region ? acc_set(&f->acc, s->acc, f->acc.region, S_REGION_ATTR, region) : -1;
            s->region_known = rc == 0 && region != S_UNKNOWN_STR && PyUnicode_Compare(region, S_UNKNOWN_STR) != 0;
            Py_XDECREF(region);
            if (rc < 0)
                return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t sl = ent_slot[i];
        if (sl < 0)
            continue;
        Slot *s = &f->slots[sl];
        if (s->cell != NULL && s->gen == f->gen)
            continue;
        PyObject *cell = PyDict_GetItemWithError(f->bucket_cells, s->name);
        if (cell != NULL) {
            Py_INCREF(cell);
        } else {
            if (PyErr_Occurred() || (cell = make_cell(f->cell_type)) == NULL)
                return -1;
            if (PyDict_SetItem(f->bucket_cells, s->name, cell) < 0) {
                Py_DECREF(cell);
                return -1;
            }
        }
        if (!PyObject_TypeCheck(cell, &ServiceSumsType)) {
            Py_DECREF(cell);
            PyErr_SetString(PyExc_TypeError, "Folder: a bucket's cell is not a ServiceSums");
            return -1;
        }
        Py_XSETREF(s->cell, cell);
        s->gen = f->gen;
    }
    /* the sums: _credit_raw / _credit_mixed */
    BucketSumsObj *b = (BucketSumsObj *)bucket;
    double ae = 0.0, ac = 0.0;
    u128 ar = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double e = ent_e[i], c = ent_c[i];
        long long r = w->has_requests ? ent_r[i] : 0;
        ae += e;
        ac += c;
        ar += (u128)r;
        Py_ssize_t sl = ent_slot[i];
        if (sl < 0) {
            *dropped += 1;
            *dropped_e += e;
            *dropped_c += c;
            b->dropped_energy += e;
            b->dropped_carbon += c;
            continue;
        }
        Sums *acc = (Sums *)f->slots[sl].acc, *cell = (Sums *)f->slots[sl].cell;
        acc->energy += e;
        acc->carbon += c;
        count_set(&acc->count, count_get(&acc->count) + (u128)r);
        acc->n += 1;
        cell->energy += e;
        cell->carbon += c;
        count_set(&cell->count, count_get(&cell->count) + (u128)r);
    }
    if (w->rows_plain) {
        for (Py_ssize_t i = 0; i < w->rows; i++) {
            Sums *acc = (Sums *)w->row_acc[i];
            acc->n += 1;
            count_set(&acc->count, count_get(&acc->count) + (u128)w->row_io[i]);
            acc->energy += w->row_e[i];
            acc->carbon += w->row_c[i] / 1000.0;
        }
    }
    *app_e = ae;
    *app_c = ac;
    *app_r = ar;
    return 0;
}

/* Hold the state's totals (load the float ones): 1 held, 0 a total is not an exact float or a
 * count not an exact int (the line is declined: the reference folds it), -1 error. */
static int hold(Folder *f) {
    if (f->held)
        return 1;
    for (int i = 0; i < N_TOTALS; i++) {
        PyObject *v = PyObject_GetAttr(f->state, TOTAL_ATTR[i]);
        if (v == NULL)
            return -1;
        int ok = PyFloat_CheckExact(v);
        if (ok)
            f->total[i] = PyFloat_AS_DOUBLE(v);
        Py_DECREF(v);
        if (!ok)
            return 0;
    }
    for (int i = 0; i < N_COUNTS; i++) {
        PyObject *v = PyObject_GetAttr(f->state, COUNT_ATTR[i]);
        if (v == NULL)
            return -1;
        int ok = PyLong_CheckExact(v);
        Py_DECREF(v);
        if (!ok)
            return 0;
        f->added[i] = 0;
    }
    f->held_flags = 0;
    f->held = 1;
    return 1;
}

/* Write the held totals into the state (each float as the running sum reached it, each count
 * as the state's plus what was added) and hold none; also forget take()'s bucket. 0, or -1. */
static int sync_totals(Folder *f) {
    f->cur_lo = HUGE_VAL;
    f->cur_hi = -HUGE_VAL;
    Py_CLEAR(f->cur_bucket);
    if (!f->held)
        return 0;
    f->held = 0;
    for (int i = 0; i < N_TOTALS; i++) {
        PyObject *v = PyFloat_FromDouble(f->total[i]);
        int rc = v ? PyObject_SetAttr(f->state, TOTAL_ATTR[i], v) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    for (int i = 0; i < N_COUNTS; i++) {
        if (f->added[i] == 0)
            continue;
        PyObject *old = PyObject_GetAttr(f->state, COUNT_ATTR[i]), *add = old ? u128_to_py(f->added[i]) : NULL;
        PyObject *sum = add ? PyNumber_Add(old, add) : NULL;
        int rc = sum ? PyObject_SetAttr(f->state, COUNT_ATTR[i], sum) : -1;
        Py_XDECREF(old);
        Py_XDECREF(add);
        Py_XDECREF(sum);
        if (rc < 0)
            return -1;
    }
    if ((f->held_flags & FOLD_OVERFLOWED) && PyObject_SetAttr(f->state, S_OVERFLOWED_ATTR, Py_True) < 0)
        return -1;
    if ((f->held_flags & FOLD_CALIBRATED) && PyObject_SetAttr(f->state, S_CALIBRATED_ATTR, Py_True) < 0)
        return -1;
    return 0;
}

/* The bucket holding `start`: take()'s own, else enter(start)'s (which makes it the state's
 * current one, as the reference's enter_bucket). A borrowed reference, or NULL on error. */
static PyObject *take_bucket(Folder *f, double start) {
    if (f->cur_bucket != NULL && f->cur_lo <= start && start < f->cur_hi)
        return f->cur_bucket;
    PyObject *at = PyFloat_FromDouble(start);
    PyObject *entered = at ? PyObject_CallOneArg(f->enter, at) : NULL;
    Py_XDECREF(at);
    if (entered == NULL)
        return NULL;
    PyObject *bucket = NULL;
    if (!PyTuple_Check(entered) || PyTuple_GET_SIZE(entered) != 3) {
        PyErr_SetString(PyExc_TypeError, "Folder: enter(start) must return (lo, hi, bucket)");
    } else if (!PyObject_TypeCheck(PyTuple_GET_ITEM(entered, 2), &BucketSumsType)) {
        PyErr_SetString(PyExc_TypeError, "Folder: the bucket must be a BucketSums");
    } else {
        double lo = PyFloat_AsDouble(PyTuple_GET_ITEM(entered, 0)), hi = PyFloat_AsDouble(PyTuple_GET_ITEM(entered, 1));
        if (!PyErr_Occurred()) {
            bucket = PyTuple_GET_ITEM(entered, 2);
            Py_XSETREF(f->cur_bucket, Py_NewRef(bucket));
            /* a bucket that does not hold `start` is used for this line only (as the reference
             * would: it enters a bucket for every window its cache does not hold) */
            f->cur_lo = lo <= start && start < hi ? lo : HUGE_VAL;
            f->cur_hi = lo <= start && start < hi ? hi : -HUGE_VAL;
        }
    }
    Py_DECREF(entered);
    return bucket;
}

static PyObject *folder_take(Folder *f, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take(raw, period_lo, period_hi) takes 3 arguments");
        return NULL;
    }
    double plo = PyFloat_AsDouble(args[1]), phi = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Raw w;
    memset(&w, 0, sizeof w);
    w.n = -1;
    w.rows_plain = 1;
    w.regions = f->regions;
    w.e = &f->entries;
    Scan s = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    int ok = raw_line(&s, &w);
    if (PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!ok || w.n <= 0 || !(plo <= w.start && w.start < phi)) {
        PyBuffer_Release(&view);
        f->declined++;
        Py_RETURN_NONE;
    }
    int flags = 0;
    Py_ssize_t tags_before = f->ntags;
    ok = decide(f, &w, &flags);
    if (ok > 0)
        ok = hold(f);
    if (ok <= 0) {
        tags_forget(f, tags_before); /* a declined line leaves no tag in the table */
        drop_names(&f->entries, w.n);
        PyBuffer_Release(&view);
        if (ok < 0)
            return NULL;
        f->declined++;
        Py_RETURN_NONE;
    }
    /* checked and held: from here on the state changes. The window's bucket first. */
    PyObject *bucket = take_bucket(f, w.start);
    if (bucket == NULL) {
        tags_forget(f, tags_before);
        drop_names(&f->entries, w.n);
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_INCREF(bucket); /* the Folder's reference may be replaced while the line is applied */
    long long dropped = 0;
    double app_e, app_c;
    u128 app_r;
    double *t = f->total;
    u128 *a = f->added;
    int rc = apply(f, &w, bucket, &flags, &dropped, &t[T_DROPPED_E], &t[T_DROPPED_C], &app_e, &app_c, &app_r);
    drop_names(&f->entries, w.n);
    if (rc < 0) {
        Py_DECREF(bucket);
        PyBuffer_Release(&view);
        return NULL;
    }
    f->folded++;
    /* the window's totals, as fast.py's reference functions add them, in their order:
     * runtime_windows; add_totals (energy = application + host energy, none here), add_window,
     * add_window_counts - each into the held totals and the bucket's sums */
    BucketSumsObj *b = (BucketSumsObj *)bucket;
    u128 req = app_r ? app_r : (u128)w.traces;
    double energy = app_e + 0.0;
    a[C_RUNTIME] += 1;
    a[C_DROPPED] += (u128)dropped;
    f->held_flags |= flags;
    t[T_ENERGY] += energy;
    t[T_OPERATIONAL] += app_c;
    a[C_REQUESTS] += req;
    b->energy += energy;
    b->operational += app_c;
    count_set(&b->requests, count_get(&b->requests) + req);
    a[C_WINDOWS] += 1;
    b->windows += 1;
    if (w.start < t[T_FIRST])
        t[T_FIRST] = w.start;
    if (w.start > t[T_LAST])
        t[T_LAST] = w.start;
    t[T_HOST] += 0.0;
    b->host_energy += 0.0;
    double kg = w.embodied / 1000.0; /* the terms no service carries (schema.totals.UNATTRIBUTED_TERMS) */
    t[T_EMBODIED] += kg;
    b->embodied += kg;
    kg = w.database / 1000.0;
    t[T_DATABASE] += kg;
    b->database += kg;
    kg = w.messaging / 1000.0;
    t[T_MESSAGING] += kg;
    b->messaging += kg;
    if (w.has_root) {
        a[C_TRACES] += (u128)w.traces;
        a[C_ROOT] += (u128)w.root_spans;
    }
    /* energy at 0 g: the line's figure; else what its rows say: nothing when every row is
     * plain ("resolved"), the reference's fold_regions otherwise (fast.py adds it: `derive`) */
    int derive = 0;
    if (w.has_without) {
        if (w.without != 0.0)
            t[T_WITHOUT] += w.without;
    } else if (!w.rows_plain) {
        derive = 1;
    }
    Py_DECREF(bucket);
    /* what is left to Python: the methodology bytes when they are not the ones returned last
     * (noted already), the rows when not all plain */
    PyObject *extra = NULL;
    int new_meta = w.meta_object && !(f->meta && PyBytes_GET_SIZE(f->meta) == w.meta_len
                                      && memcmp(PyBytes_AS_STRING(f->meta), w.meta, w.meta_len) == 0);
    if (new_meta || !w.rows_plain) {
        PyObject *meta = new_meta ? PyBytes_FromStringAndSize(w.meta, w.meta_len) : Py_NewRef(Py_None);
        if (meta != NULL && new_meta)
            Py_XSETREF(f->meta, Py_NewRef(meta));
        PyObject *rows = meta && !w.rows_plain ? PyBytes_FromStringAndSize(w.rows_text, w.rows_len)
                                               : Py_XNewRef(meta ? Py_None : NULL);
        extra = meta && rows ? PyTuple_Pack(3, meta, rows, derive ? Py_True : Py_False) : NULL;
        Py_XDECREF(meta);
        Py_XDECREF(rows);
        if (extra == NULL) {
            PyBuffer_Release(&view);
            return NULL;
        }
    } else {
        extra = Py_NewRef(Py_None);
    }
    PyObject *hash = w.hash_ok ? PyUnicode_DecodeUTF8(w.hash, w.hash_len, NULL) : Py_NewRef(EMPTY_STR);
    PyBuffer_Release(&view);
    PyObject *start = PyFloat_FromDouble(w.start);
    PyObject *end = w.has_end ? PyFloat_FromDouble(w.end) : Py_NewRef(Py_None);
    PyObject *out = NULL;
    if (hash && start && end && (out = PyTuple_New(4)) != NULL) {
        PyTuple_SET_ITEM(out, 0, start); /* steals */
        PyTuple_SET_ITEM(out, 1, end);
        PyTuple_SET_ITEM(out, 2, hash);
        PyTuple_SET_ITEM(out, 3, extra);
        return out;
    }
    Py_XDECREF(hash);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_DECREF(extra);
    return NULL;
}

static PyObject *folder_sync(Folder *f, PyObject *unused) {
    if (sync_totals(f) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef folder_methods[] = {
    {"take", (PyCFunction)(void (*)(void))folder_take, METH_FASTCALL,
     "take(raw, period_lo, period_hi) -> (start, end, hash, extra) | None\n\n"
     "Fold one line straight from its bytes, its window's totals into the totals the Folder holds\n"
     "(see _fold.c, \"the Folder\"), or None having changed nothing."},
    {"sync", (PyCFunction)folder_sync, METH_NOARGS,
     "sync(): write the totals the Folder holds into the state (before anything else reads or adds to them)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef folder_members[] = {
    {"folded", T_LONGLONG, offsetof(Folder, folded), READONLY, "lines folded from their bytes"},
    {"declined", T_LONGLONG, offsetof(Folder, declined), READONLY, "lines declined (folded the long way)"},
    {"lookups", T_LONGLONG, offsetof(Folder, lookups), READONLY,
     "names looked up in the name table and the line's duplicate check"},
    {"probes", T_LONGLONG, offsetof(Folder, probes), READONLY, "slots those lookups stepped past their home slots"},
    {"max_probe", T_LONGLONG, offsetof(Folder, max_probe), READONLY, "the longest such walk"},
    {"tags", T_PYSSIZET, offsetof(Folder, ntags), READONLY,
     "tag texts in the tag table (each a tag of a line taken: a declined line leaves none)"},
    {NULL},
};

static PyTypeObject FolderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aggregator._fold.Folder",
    .tp_doc = "Folds one state's lines straight from their bytes (see _fold.c, \"the Folder\").",
    .tp_basicsize = sizeof(Folder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = folder_new,
    .tp_dealloc = (destructor)folder_dealloc,
    .tp_methods = folder_methods,
    .tp_members = folder_members,
};

/* configure(body_key, time_shapes, terms, max_figure, max_count, max_name_bytes, max_tag_bytes,
 * cal_suffix, unattributed): the contract's facts, from Python (aggregator/fold/ext.py). Those
 * this file can take as values it takes; those its code is written for - the two window time
 * shapes usual_time reads by position, the four terms of a total raw_co2 reads in that order -
 * must be the ones it was written for, else ValueError (and ext.py refuses the build). */
static int copy_text(PyObject *v, char *out, size_t size, const char *what) {
    Py_ssize_t n;
    const char *t = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
    if (t == NULL || n == 0 || (size_t)n >= size) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "configure: %s must be a non-empty str of under %zu bytes", what, size);
        return -1;
    }
    memcpy(out, t, n);
    out[n] = 0;
    return 0;
}

static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *body, *shapes, *terms, *cal, *unattributed;
    double max_figure;
    long long max_count;
    Py_ssize_t max_name, max_tag;
    if (!PyArg_ParseTuple(args, "OO!O!dLnnOO:configure", &body, &PyTuple_Type, &shapes, &PyTuple_Type, &terms,
                          &max_figure, &max_count, &max_name, &max_tag, &cal, &unattributed))
        return NULL;
    static const char *const want_shapes[] = {"0000-00-00T00:00:00.000000Z", "0000-00-00T00:00:00Z"};
    static const char *const want_terms[] = {"operational", "embodied", "database", "messaging"};
    if (PyTuple_GET_SIZE(shapes) != 2 || PyTuple_GET_SIZE(terms) != 4) {
        PyErr_SetString(PyExc_ValueError, "configure: _fold.c reads two time shapes and four terms of a total");
        return NULL;
    }
    for (int i = 0; i < 2; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(shapes, i))
            || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(shapes, i), want_shapes[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "configure: the window time shape %R is not the %s that usual_time reads",
                         PyTuple_GET_ITEM(shapes, i), want_shapes[i]);
            return NULL;
        }
    for (int i = 0; i < 4; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(terms, i))
            || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(terms, i), want_terms[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "configure: term %d of a total is %R; _fold.c reads %s there "
                         "(add the term to the C fold: raw_co2, Raw, the Folder's deltas)", i,
                         PyTuple_GET_ITEM(terms, i), want_terms[i]);
            return NULL;
        }
    char body_key[sizeof BODY_KEY], cal_suffix[sizeof CAL_SUFFIX], un[sizeof UNATTRIBUTED_NAME];
    if (copy_text(body, body_key, sizeof body_key, "body_key") < 0 || copy_text(cal, cal_suffix, sizeof cal_suffix, "cal_suffix") < 0
        || copy_text(unattributed, un, sizeof un, "unattributed") < 0)
        return NULL;
    PyObject *interned = PyUnicode_InternFromString(body_key);
    if (interned == NULL)
        return NULL;
    Py_XSETREF(N[S_REPORT], interned);
    memcpy(BODY_KEY, body_key, sizeof BODY_KEY);
    memcpy(CAL_SUFFIX, cal_suffix, sizeof CAL_SUFFIX);
    memcpy(UNATTRIBUTED_NAME, un, sizeof UNATTRIBUTED_NAME);
    MAX_FIGURE = max_figure;
    MAX_COUNT = max_count;
    MAX_NAME_BYTES = max_name;
    MAX_TAG_BYTES = max_tag;
    Py_RETURN_NONE;
}

/* The scanner's pieces alone, for tests/aggregator/test_fold_numbers.py: whether a text is one
 * JSON value the skip accepts, and the figure the scan reads from a number token. */
static PyObject *scan_value(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Scan s = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    int ok = skip(&s);
    ws(&s);
    ok = ok && s.p == s.end;
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* name_hash(data, key=None): the name tables' hash of data (bytes-like) under the process's
 * key, or under `key` (16 bytes: k0, k1 little-endian, as the SipHash paper reads a key), for
 * tests/aggregator/test_fold_name_table.py. */
static PyObject *name_hash_py(PyObject *module, PyObject *args) {
    Py_buffer data, key = {0};
    if (!PyArg_ParseTuple(args, "y*|y*:name_hash", &data, &key))
        return NULL;
    uint64_t k[2] = {NAME_KEY[0], NAME_KEY[1]};
    if (key.obj != NULL) {
        if (key.len != 16) {
            PyBuffer_Release(&data);
            PyBuffer_Release(&key);
            PyErr_SetString(PyExc_ValueError, "name_hash: a key is 16 bytes");
            return NULL;
        }
        const unsigned char *b = key.buf;
        k[0] = k[1] = 0;
        for (int i = 7; i >= 0; i--) {
            k[0] = k[0] << 8 | b[i];
            k[1] = k[1] << 8 | b[8 + i];
        }
        PyBuffer_Release(&key);
    }
    uint64_t h = siphash13(k, data.buf, data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *scan_number(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Scan s = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    Num n;
    int ok = number(&s, &n) && s.p == s.end;
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    if (!n.is_float && !n.many && !n.neg)
        return PyLong_FromUnsignedLongLong(n.w); /* up to 19 digits: below 2^64 */
    if (!n.is_float && !n.many && n.w <= (1ULL << 63)) /* down to -2^63, negated in unsigned arithmetic */
        return PyLong_FromLongLong(n.w == (1ULL << 63) ? LLONG_MIN : -(long long)n.w);
    if (!n.is_float)
        Py_RETURN_NONE; /* an int past 19 digits or below -2^63 (orjson reads a float): never a count */
    return PyFloat_FromDouble(num_value(&n));
}

/* merge_services(left, right, models, max_services, make, dropped): the services of a state
 * merged after another's, exactly as aggregator.fold.sums.merge_services_py does (its oracle):
 * `left` and `right` map names to ServiceSums with Python `region`, `models` and `measured`;
 * for each right service in its order, a name `left` lacks is made (`make(region)`) while
 * `left` holds fewer than `max_services`, else its windows, energy and carbon are added to
 * `dropped` = (windows, energy, carbon), returned updated; a kept one takes the right one's
 * sums, its region while its own is "unknown", its measured energy and the tags `models` holds. */
/* The tag merge_one looked up in the tag set last, and whether the set holds it (a file's
 * services share a few tag strs, so one lookup a tag, not one a service; `models` does not
 * change during a merge_services). */
typedef struct { PyObject *tag; int has; } LastTag;

static int merge_one(const AccSlots *o, PyObject *mine, PyObject *acc, PyObject *models, LastTag *last) {
    PyObject *region = acc_get(o, mine, o->region, S_REGION_ATTR);
    if (region == NULL)
        return -1;
    int unknown = region == S_UNKNOWN_STR ? 1
                  : PyUnicode_Check(region) ? PyUnicode_Compare(region, S_UNKNOWN_STR) == 0
                                            : PyObject_RichCompareBool(region, S_UNKNOWN_STR, Py_EQ);
    Py_DECREF(region);
    if (unknown < 0 || PyErr_Occurred())
        return -1;
    if (unknown) {
        PyObject *theirs = acc_get(o, acc, o->region, S_REGION_ATTR);
        int rc = theirs ? acc_set(o, mine, o->region, S_REGION_ATTR, theirs) : -1;
        Py_XDECREF(theirs);
        if (rc < 0)
            return -1;
    }
    PyObject *done = service_add_sums(mine, acc);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    PyObject *a = acc_get(o, mine, o->measured, S_MEASURED_ATTR), *b = a ? acc_get(o, acc, o->measured, S_MEASURED_ATTR) : NULL;
    PyObject *sum = NULL;
    if (b != NULL) /* self.measured += other.measured: for two floats, float_add's new float */
        sum = PyFloat_CheckExact(a) && PyFloat_CheckExact(b) ? PyFloat_FromDouble(PyFloat_AS_DOUBLE(a) + PyFloat_AS_DOUBLE(b))
                                                             : PyNumber_InPlaceAdd(a, b);
    int rc = sum ? acc_set(o, mine, o->measured, S_MEASURED_ATTR, sum) : -1;
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(sum);
    if (rc < 0)
        return -1;
    PyObject *tags = acc_get(o, acc, o->models, S_MODELS_ATTR);
    if (tags == NULL)
        return -1;
    if (!PyDict_Check(tags)) {
        PyErr_SetString(PyExc_TypeError, "merge_services: a service's models is not a dict");
        Py_DECREF(tags);
        return -1;
    }
    rc = 0;
    if (PyDict_GET_SIZE(tags)) {
        PyObject *own = acc_get(o, mine, o->models, S_MODELS_ATTR), *tag, *ignored;
        Py_ssize_t pos = 0;
        if (own == NULL || !PyDict_Check(own)) {
            if (own != NULL)
                PyErr_SetString(PyExc_TypeError, "merge_services: a service's models is not a dict");
            rc = -1;
        }
        while (rc == 0 && PyDict_Next(tags, &pos, &tag, &ignored)) {
            int has;
            if (tag == last->tag) {
                has = last->has;
            } else {
                has = PyDict_Contains(models, tag);
                if (has >= 0 && PyUnicode_CheckExact(tag)) {
                    Py_XSETREF(last->tag, Py_NewRef(tag));
                    last->has = has;
                }
            }
            if (has < 0 || (has && PyDict_SetItem(own, tag, Py_None) < 0))
                rc = -1;
        }
        Py_XDECREF(own);
    }
    Py_DECREF(tags);
    return rc;
}

static PyObject *merge_services(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    AccSlots o;
    if (nargs != 6 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) || !PyDict_Check(args[2])
        || !PyLong_Check(args[3]) || !acc_slots(args[4], &o) || !PyTuple_Check(args[5]) || PyTuple_GET_SIZE(args[5]) != 3) {
        PyErr_SetString(PyExc_TypeError, "merge_services(left: dict, right: dict, models: dict, max_services: int, "
                        "service_type: a ServiceSums subclass keeping region, models and measured in __slots__, "
                        "dropped: (windows, energy, carbon))");
        return NULL;
    }
    PyObject *left = args[0], *right = args[1], *models = args[2];
    Py_ssize_t cap = PyLong_AsSsize_t(args[3]);
    if (cap == -1 && PyErr_Occurred())
        return NULL;
    PyObject *d_windows = Py_NewRef(PyTuple_GET_ITEM(args[5], 0)), *d_energy = Py_NewRef(PyTuple_GET_ITEM(args[5], 1)),
             *d_carbon = Py_NewRef(PyTuple_GET_ITEM(args[5], 2));
    PyObject *name, *acc;
    Py_ssize_t pos = 0;
    int rc = 0;
    LastTag last = {NULL, 0};
    while (rc == 0 && PyDict_Next(right, &pos, &name, &acc)) {
        if (!PyObject_TypeCheck(acc, &ServiceSumsType)) {
            PyErr_SetString(PyExc_TypeError, "merge_services: a service is not a ServiceSums");
            rc = -1;
            break;
        }
        PyObject *mine = PyDict_GetItemWithError(left, name);  /* borrowed */
        if (mine == NULL) {
            if (PyErr_Occurred()) {
                rc = -1;
                break;
            }
            if (PyDict_GET_SIZE(left) >= cap) {  /* dropped with all it carried, in order */
                Sums *a = (Sums *)acc;
                PyObject *w = PyLong_FromLongLong(a->n), *e = PyFloat_FromDouble(a->energy), *c = PyFloat_FromDouble(a->carbon);
                PyObject *w2 = w ? PyNumber_Add(d_windows, w) : NULL, *e2 = e ? PyNumber_Add(d_energy, e) : NULL,
                         *c2 = c ? PyNumber_Add(d_carbon, c) : NULL;
                Py_XDECREF(w); Py_XDECREF(e); Py_XDECREF(c);
                if (w2 == NULL || e2 == NULL || c2 == NULL) {
                    Py_XDECREF(w2); Py_XDECREF(e2); Py_XDECREF(c2);
                    rc = -1;
                    break;
                }
                Py_SETREF(d_windows, w2); Py_SETREF(d_energy, e2); Py_SETREF(d_carbon, c2);
                continue;
            }
            PyObject *region = acc_get(&o, acc, o.region, S_REGION_ATTR);
            PyObject *made = region ? make_acc(&o, region) : NULL;
            Py_XDECREF(region);
            if (made == NULL || PyDict_SetItem(left, name, made) < 0) {
                Py_XDECREF(made);
                rc = -1;
                break;
            }
            Py_DECREF(made);  /* left holds it */
            mine = made;
        }
        Py_INCREF(mine);
        rc = merge_one(&o, mine, acc, models, &last);
        Py_DECREF(mine);
    }
    Py_XDECREF(last.tag);
    PyObject *out = rc == 0 ? PyTuple_Pack(3, d_windows, d_energy, d_carbon) : NULL;
    Py_DECREF(d_windows); Py_DECREF(d_energy); Py_DECREF(d_carbon);
    return out;
}

/* new_service(type, region): a `type` (a subclass of ServiceSums keeping `region`, `models`
 * and `measured` in __slots__: aggregator.fold.sums.ServiceAcc) as `type(region)` makes it by
 * ServiceAcc's __init__ - zero sums, `region`, a new empty `models` dict, `measured` 0.0 -
 * without running Python code (tests/aggregator/test_fold_accel_merge.py holds the two to the
 * same fields); the Folder and merge_services make theirs the same way (make_acc).
 *
 * It is made untracked by the cyclic garbage collector, as CPython leaves a dict or tuple of
 * only atomic values: what it holds (a str region, a dict of str tag -> None, a float) can
 * never refer back to it, so no cycle can pass through it, and the collector need not visit
 * the thousands of services each file's state makes (in small files of ~1,000 changing
 * services about a seventh of the fold went to collections visiting them). It is freed by its
 * reference count as before; gc.is_tracked says False (test_fold_accel_merge.py). */
static PyObject *new_service(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    AccSlots o;
    if (nargs != 2 || !acc_slots(args[0], &o)) {
        PyErr_SetString(PyExc_TypeError, "new_service(type: a ServiceSums subclass keeping region, models and measured "
                        "in __slots__, region)");
        return NULL;
    }
    return make_acc(&o, args[1]);
}

/* new_cell(type): a `type` (a ServiceSums subclass adding no field, __init__ or __new__:
 * aggregator.fold.sums.Cell) as `type()` makes it - zero sums - untracked by the cyclic
 * collector (make_cell); the Folder and merge_cells make theirs so. */
static PyObject *new_cell(PyObject *mod, PyObject *type) {
    (void)mod;
    if (!cell_class(type)) {
        PyErr_SetString(PyExc_TypeError, "new_cell(type: a ServiceSums subclass adding no field, __init__ or __new__)");
        return NULL;
    }
    return make_cell(type);
}

/* merge_cells(bucket, cells, theirs, kept, unattributed, cell_type): a bucket's cells merged
 * after another state's, exactly as aggregator.fold.sums.merge_cells_py does (its oracle): each
 * of `theirs` (name -> cell, in order) whose name `kept` holds or is `unattributed` is added to
 * `cells`' cell of that name (made as new_cell(cell_type) makes it when absent); any other goes
 * to the bucket's dropped energy and carbon. */
static PyObject *merge_cells(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 6 || !PyObject_TypeCheck(args[0], &BucketSumsType) || !PyDict_Check(args[1])
        || !PyDict_Check(args[2]) || !PyDict_Check(args[3]) || !cell_class(args[5])) {
        PyErr_SetString(PyExc_TypeError, "merge_cells(bucket: BucketSums, cells: dict, theirs: dict, kept: dict, "
                        "unattributed: str, cell_type: a ServiceSums subclass adding no field)");
        return NULL;
    }
    BucketSumsObj *bucket = (BucketSumsObj *)args[0];
    PyObject *cells = args[1], *theirs = args[2], *kept = args[3], *unattributed = args[4], *make = args[5];
    PyObject *name, *cell;
    Py_ssize_t pos = 0;
    while (PyDict_Next(theirs, &pos, &name, &cell)) {
        if (!PyObject_TypeCheck(cell, &ServiceSumsType)) {
            PyErr_SetString(PyExc_TypeError, "merge_cells: a cell is not a ServiceSums");
            return NULL;
        }
        int keep = PyDict_Contains(kept, name);
        if (keep == 0)
            keep = PyObject_RichCompareBool(name, unattributed, Py_EQ);
        if (keep < 0)
            return NULL;
        if (!keep) {
            bucket->dropped_energy += ((Sums *)cell)->energy;
            bucket->dropped_carbon += ((Sums *)cell)->carbon;
            continue;
        }
        PyObject *own = PyDict_GetItemWithError(cells, name);  /* borrowed */
        if (own == NULL) {
            if (PyErr_Occurred() || (own = make_cell(make)) == NULL)
                return NULL;
            if (PyDict_SetItem(cells, name, own) < 0) {
                Py_DECREF(own);
                return NULL;
            }
            Py_DECREF(own);  /* cells holds it */
        }
        PyObject *done = service_add_sums(own, cell);
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"window_end", (PyCFunction)window_end, METH_O,
     "window_end(rec) -> float | None\n\n"
     "Epoch seconds of report.window.end, as aggregator.coverage.window_end (which it calls for every\n"
     "form but the two usual ones); rec's report.window was read by window_start first."},
    {"window_start", (PyCFunction)window_start, METH_O,
     "window_start(rec) -> float\n\n"
     "Epoch seconds of report.window.start, as aggregator.read.window_start (which it calls for every\n"
     "form but the two usual ones, and which raises Malformed for a line without a usable start)."},
    {"merge_services", (PyCFunction)(void (*)(void))merge_services, METH_FASTCALL,
     "merge_services(left, right, models, max_services, service_type, dropped): the services of a state merged "
     "after another's (aggregator.fold.sums.merge_services_py is the oracle); returns dropped updated."},
    {"new_service", (PyCFunction)(void (*)(void))new_service, METH_FASTCALL,
     "new_service(type, region): type(region) as aggregator.fold.sums.ServiceAcc makes it, in C."},
    {"new_cell", (PyCFunction)new_cell, METH_O,
     "new_cell(type): type() for a ServiceSums subclass adding no field (aggregator.fold.sums.Cell), in C."},
    {"merge_cells", (PyCFunction)(void (*)(void))merge_cells, METH_FASTCALL,
     "merge_cells(bucket, cells, theirs, kept, unattributed, cell_type): a bucket's cells merged after another "
     "state's (aggregator.fold.sums.merge_cells_py is the oracle)."},
    {"configure", (PyCFunction)configure, METH_VARARGS,
     "configure(body_key, time_shapes, terms, max_figure, max_count, max_name_bytes, max_tag_bytes, cal_suffix,\n"
     "          unattributed)\n\nThe contract's facts (see _fold.c); ValueError when the code is written for others."},
    {"scan_value", (PyCFunction)scan_value, METH_O,
     "scan_value(text) -> bool\n\nWhether text is one JSON value the byte scan skips (orjson must read it too)."},
    {"name_hash", (PyCFunction)name_hash_py, METH_VARARGS,
     "name_hash(data, key=None) -> int\n\nThe Folder's name-table hash (SipHash-1-3) of data under the process's key, or "
     "under key (16 bytes)."},
    {"scan_number", (PyCFunction)scan_number, METH_O,
     "scan_number(text) -> float | int | None\n\nThe number the byte scan reads from a JSON number token (None: declined)."},
    {"fold_plain", (PyCFunction)(void (*)(void))fold_plain, METH_FASTCALL,
     "fold_plain(rec, names, tags, targets, cells, regions) -> tuple | None\n\n"
     "Check a loaded line against a cached layout and add its per-service sums (see _fold.c):\n"
     "the window's deltas if folded, None having changed nothing otherwise."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fold", "The aggregator fold's C accelerator (see _fold.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fold(void) {
    if (PyType_Ready(&ServiceSumsType) < 0 || PyType_Ready(&RegionSumsType) < 0 || PyType_Ready(&BucketSumsType) < 0
        || PyType_Ready(&FolderType) < 0)
        return NULL;
    for (int c = 0x20; c < 0x80; c++)
        PLAIN[c] = c != '"' && c != '\\';
    for (const char *e = "\"\\/bfnrt"; *e; e++)
        ESCAPE[(unsigned char)*e] = 1;
    for (int i = 0; i < N_NAMES; i++)
        if ((N[i] = PyUnicode_InternFromString(NAME_TEXT[i])) == NULL)
            return NULL;
    if ((EMPTY_STR = PyUnicode_FromString("")) == NULL || (ONE = PyLong_FromLong(1)) == NULL
        || (S_REGION_ATTR = PyUnicode_InternFromString("region")) == NULL
        || (S_MODELS_ATTR = PyUnicode_InternFromString("models")) == NULL
        || (S_MEASURED_ATTR = PyUnicode_InternFromString("measured")) == NULL
        || (ZERO_FLOAT = PyFloat_FromDouble(0.0)) == NULL
        || (S_SERVICES_ATTR = PyUnicode_InternFromString("services")) == NULL
        || (S_UNKNOWN_STR = PyUnicode_InternFromString("unknown")) == NULL
        || (S_OVERFLOWED_ATTR = PyUnicode_InternFromString("overflowed")) == NULL
        || (S_CALIBRATED_ATTR = PyUnicode_InternFromString("calibration_applied")) == NULL)
        return NULL;
    for (int i = 0; i < N_TOTALS; i++)
        if ((TOTAL_ATTR[i] = PyUnicode_InternFromString(TOTAL_TEXT[i])) == NULL)
            return NULL;
    for (int i = 0; i < N_COUNTS; i++)
        if ((COUNT_ATTR[i] = PyUnicode_InternFromString(COUNT_TEXT[i])) == NULL)
            return NULL;
    /* the name tables' key: 16 bytes of os.urandom, once per process */
    PyObject *os = PyImport_ImportModule("os"), *key = os ? PyObject_CallMethod(os, "urandom", "i", 16) : NULL;
    Py_XDECREF(os);
    if (key == NULL)
        return NULL;
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "_fold: os.urandom(16) gave no 16 bytes");
        return NULL;
    }
    memcpy(NAME_KEY, PyBytes_AS_STRING(key), sizeof NAME_KEY); /* raw random bits: their byte order is no matter */
    Py_DECREF(key);
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "FOLD_VERSION", FOLD_VERSION) < 0
        || PyModule_AddIntConstant(m, "FOLD_OVERFLOWED", FOLD_OVERFLOWED) < 0
        || PyModule_AddIntConstant(m, "FOLD_CALIBRATED", FOLD_CALIBRATED) < 0
        || PyModule_AddObjectRef(m, "ServiceSums", (PyObject *)&ServiceSumsType) < 0
        || PyModule_AddObjectRef(m, "RegionSums", (PyObject *)&RegionSumsType) < 0
        || PyModule_AddObjectRef(m, "BucketSums", (PyObject *)&BucketSumsType) < 0
        || PyModule_AddObjectRef(m, "Folder", (PyObject *)&FolderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
