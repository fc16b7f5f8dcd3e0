/* _fold.c -- the aggregator's hot loop: one plain runtime window line folded into the state.
 *
 * Why C: after orjson.loads, the Python fold of a plain line (aggregator/fold_fast.py,
 * PlainRuntime.fold_plain) was about half of the aggregator's time: a few dozen type and
 * range checks and four float/int additions per service, each a bytecode round trip. This
 * does the same work on the loaded dict, with the per-service and per-region running sums
 * kept in C structs (ServiceSums, RegionSums: the bases of accumulators.ServiceAcc and
 * RegionAcc, whose fields Python code reads and writes as before).
 *
 * Contract (the same as fold_plain's, which stays the reference and the fallback when this
 * module is not built): it first *checks* - the line's layout (service names and tags) is the
 * previous window's cached one, every window-level figure is one the sanitiser would pass
 * unchanged, no host rows - and returns None having changed nothing if anything differs; the
 * caller then takes the general path. Once it has checked, it makes exactly the additions of
 * fold_plain + finish_window, in the same order, with the same IEEE doubles (no fast-math), so
 * the report is byte-identical. Per-service leaves that need the sanitiser, region rows that
 * are not plain, a new methodology block, and a proxy-split service not yet known are handed
 * to the same Python code the general path uses. A backfilled line (methodology.backfill ==
 * "true", written by `carbonspan backfill`) is declined whole: the general path folds it and
 * keeps the report's backfill term (aggregator/fold_backfill.py), which this module does not. A v1.0 line (no runtime maps) is folded as
 * fold_proxy (aggregator/fold_proxy.py) folds it, with the same checks first.
 * tests/aggregator/test_fold_fast.py folds hostile archives through this, through the Python
 * fast path and through the general path, and asserts byte-identical reports.
 *
 * Time buckets (aggregate.series, aggregator/series.py): whatever a window adds to the totals it
 * adds to its bucket (BucketSums) too, and each service entry to the service's cell in that
 * bucket (a ServiceSums); the bucket is the state's cached one (_bcache) when the window starts
 * inside it, else state._enter_bucket(start) picks it - only once the line has been checked.
 *
 * Counts (requests, I/O ops) are exact: they are summed as unsigned 128-bit integers (each
 * accepted count is at most 2**53, so no sum a real or hostile archive can reach overflows)
 * and converted to Python ints on access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>

/* aggregator.fold_fast.FOLD_VERSION: bumped with every change of the fold's rules, so that
 * a stale build is refused instead of silently folding by old rules. */
#define FOLD_VERSION 7
#define MAX_FIGURE 1e15              /* aggregator.sanitize.MAX_FIGURE */
#define MAX_COUNT 9007199254740992LL /* aggregator.sanitize.MAX_COUNT = 2**53 */

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

static PyObject *sums_count_get(PyObject *self, void *closure) {
    return u128_to_py(count_get(&((Sums *)self)->count));
}

static int sums_count_set(PyObject *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a running count cannot be deleted");
        return -1;
    }
    u128 v;
    if (py_to_u128(value, &v, (const char *)closure) < 0)
        return -1;
    count_set(&((Sums *)self)->count, v);
    return 0;
}

static PyMemberDef service_members[] = {
    {"energy", T_DOUBLE, offsetof(Sums, energy), 0, "energy (kWh) credited so far"},
    {"carbon", T_DOUBLE, offsetof(Sums, carbon), 0, "operational carbon (kg CO2e) credited so far"},
    {"windows", T_LONGLONG, offsetof(Sums, n), 0, "windows that credited this service"},
    {NULL},
};
static PyGetSetDef service_getset[] = {
    {"requests", sums_count_get, sums_count_set, "requests credited so far (exact int)", "requests"},
    {NULL},
};
static PyMemberDef region_members[] = {
    {"energy", T_DOUBLE, offsetof(Sums, energy), 0, "energy (kWh) of this grid region's rows"},
    {"carbon", T_DOUBLE, offsetof(Sums, carbon), 0, "carbon (kg CO2e) of this grid region's rows"},
    {"rows", T_LONGLONG, offsetof(Sums, n), 0, "region rows folded"},
    {NULL},
};
static PyGetSetDef region_getset[] = {
    {"io_ops", sums_count_get, sums_count_set, "I/O operations of the rows (exact int)", "io_ops"},
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

/* The window-level sums of one time bucket (accumulators.Bucket is its Python subclass). */
typedef struct {
    PyObject_HEAD
    double energy, host_energy;                         /* kWh */
    double operational, embodied, database, messaging;  /* kg CO2e */
    double dropped_energy, dropped_carbon;              /* entries past the service cap */
    Count requests;
    long long windows;
} BucketSumsObj;

static PyObject *bucket_requests_get(PyObject *self, void *closure) {
    return u128_to_py(count_get(&((BucketSumsObj *)self)->requests));
}

static int bucket_requests_set(PyObject *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a running count cannot be deleted");
        return -1;
    }
    u128 v;
    if (py_to_u128(value, &v, "requests") < 0)
        return -1;
    count_set(&((BucketSumsObj *)self)->requests, v);
    return 0;
}

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
    {"requests", bucket_requests_get, bucket_requests_set, "requests (exact int)", NULL},
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
    S_HASH, S_REGION, S_IO_OPS, S_CO2_GCO2, S_START, S_PER_ENDPOINT, S_SERVICE, S_ENERGY_MODEL,
    S_MODEL, S_UNKNOWN, S_ROOT_SPANS, S_WITHOUT_CARBON, S_STATUS, S_END, S_MEASURED_MAP, S_BACKFILL,
    /* attributes of the state and its layout */
    A_LAST_LAYOUT, A_LAST_KEY, A_TARGETS, A_TAG_COUNTS, A_REJECTED, A_UNKNOWN, A_SIMPLE,
    A_RUNTIME_WINDOWS, A_MODELS, A_REJECTED_MODELS, A_TALLY, A_ENERGY,
    A_OPERATIONAL_KG, A_REQUESTS, A_WINDOWS, A_FIRST_START, A_LAST_START, A_HOST_ENERGY,
    A_EMBODIED_KG, A_DATABASE_KG, A_MESSAGING_KG, A_REGIONS_METHOD, A_NOTE_METHODOLOGY,
    A_LAST_META, A_CLEAN_FLOAT, A_CLEAN_COUNT, A_FALLBACK_WINDOWS, A_SERVICES, A_CREDIT,
    A_TRACES_COUNTED, A_ROOT_SPANS, A_WITHOUT_CARBON, A_BCACHE, A_ENTER_BUCKET, A_LAYOUT_CELLS,
    A_CELLS, A_CELLS_FOR, A_CELL, N_NAMES
};
static const char *const NAME_TEXT[N_NAMES] = {
    "report", "green_summary", "per_service_energy_kwh", "per_service_carbon_kgco2eq",
    "per_service_requests", "per_service_region", "per_service_energy_model", "co2", "total",
    "hosts", "window", "traces", "total_io_ops", "energy_kwh", "operational_gco2",
    "embodied_gco2", "database_gco2", "messaging_gco2", "mid", "regions", "methodology", "hash",
    "region", "io_ops", "co2_gco2", "start", "per_endpoint_io_ops", "service", "energy_model",
    "model", "unknown", "root_spans", "energy_without_carbon_kwh", "status", "end",
    "per_service_measured_ratio", "backfill",
    "_last_layout", "_last_key", "targets", "tag_counts", "rejected", "unknown", "simple",
    "runtime_windows", "models", "rejected_models", "tally", "energy",
    "operational_kg", "requests", "windows", "first_start", "last_start", "host_energy",
    "embodied_kg", "database_kg", "messaging_kg", "_regions", "_note_methodology", "_last_meta",
    "clean_float", "clean_count", "fallback_windows", "services", "_credit",
    "traces_counted", "root_spans", "energy_without_carbon", "_bcache", "_enter_bucket", "_layout_cells",
    "cells", "cells_for", "cell",
};
static PyObject *N[N_NAMES];
static PyObject *EMPTY_STR, *ZERO, *ONE;
static PyObject *sanitize_module; /* aggregator.sanitize, imported on first need */

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

/* A leaf that needs the sanitiser: aggregator.sanitize.clean_float / clean_count(value, tally),
 * exactly as the Python fast path and the general path call them (they count it). */
static PyObject *sanitise(int which, PyObject *value, PyObject *state) {
    if (sanitize_module == NULL && (sanitize_module = PyImport_ImportModule("aggregator.sanitize")) == NULL)
        return NULL;
    PyObject *fn = PyObject_GetAttr(sanitize_module, N[which]);
    PyObject *tally = fn ? PyObject_GetAttr(state, N[A_TALLY]) : NULL;
    PyObject *out = tally ? PyObject_CallFunctionObjArgs(fn, value ? value : Py_None, tally, NULL) : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(tally);
    return out;
}

static int leaf_float(PyObject *v, PyObject *state, double *out) {
    if (clean_figure(v, out))
        return 0;
    PyObject *clean = sanitise(A_CLEAN_FLOAT, v, state);
    if (clean == NULL)
        return -1;
    *out = PyFloat_AsDouble(clean);
    Py_DECREF(clean);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int leaf_count(PyObject *v, PyObject *state, long long *out) {
    if (clean_int(v, out))
        return 0;
    PyObject *clean = sanitise(A_CLEAN_COUNT, v, state);
    if (clean == NULL)
        return -1;
    *out = PyLong_AsLongLong(clean);
    Py_DECREF(clean);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* state.<attr> = state.<attr> + delta, for a float attribute (Python float addition). */
static int add_float(PyObject *state, int attr, double delta) {
    PyObject *old = PyObject_GetAttr(state, N[attr]);
    if (old == NULL)
        return -1;
    double d = PyFloat_AsDouble(old);
    Py_DECREF(old);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    PyObject *sum = PyFloat_FromDouble(d + delta);
    if (sum == NULL)
        return -1;
    int rc = PyObject_SetAttr(state, N[attr], sum);
    Py_DECREF(sum);
    return rc;
}

/* state.<attr> = state.<attr> + delta, for an int attribute (exact). */
static int add_obj(PyObject *state, int attr, PyObject *delta) {
    PyObject *old = PyObject_GetAttr(state, N[attr]);
    if (old == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(old, delta);
    Py_DECREF(old);
    if (sum == NULL)
        return -1;
    int rc = PyObject_SetAttr(state, N[attr], sum);
    Py_DECREF(sum);
    return rc;
}

static int add_one(PyObject *state, int attr) { return add_obj(state, attr, ONE); }

/* The truth of layout.<attr>; -1 on error. */
static int layout_flag(PyObject *layout, int attr) {
    PyObject *v = PyObject_GetAttr(layout, N[attr]);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* ---------------------------------------------------------------------- region rows */

/* An exact str equal to "resolved" (a region row whose energy has carbon). */
static inline int is_resolved(PyObject *v) {
    return v && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 8
           && PyUnicode_CompareWithASCIIString(v, "resolved") == 0;
}

/* Fold a window's region rows: in C when every row is plain (a known region, status
 * "resolved", all four fields present and clean), else by state._regions(rows), the general
 * path's code. *without: the energy of rows not resolved (what _regions returns; 0 in C). */
static int fold_regions(PyObject *state, PyObject *rows, double *without) {
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *regions = PyObject_GetAttr(state, N[S_REGIONS]); /* state.regions */
    if (regions == NULL)
        return -1;
    int plain = PyDict_CheckExact(regions);
    for (Py_ssize_t i = 0; plain && i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *name, *acc;
        double e;
        long long io;
        plain = PyDict_CheckExact(row) && (name = get(row, S_REGION)) != NULL && PyUnicode_CheckExact(name)
                && (acc = PyDict_GetItemWithError(regions, name)) != NULL
                && PyObject_TypeCheck(acc, &RegionSumsType) && is_resolved(get(row, S_STATUS))
                && get(row, S_IO_OPS) && clean_int(get(row, S_IO_OPS), &io)
                && get(row, S_ENERGY_KWH) && clean_figure(get(row, S_ENERGY_KWH), &e)
                && get(row, S_CO2_GCO2) && clean_figure(get(row, S_CO2_GCO2), &e);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(regions);
        return -1;
    }
    *without = 0.0;
    if (!plain) {
        Py_DECREF(regions);
        PyObject *r = PyObject_CallMethodOneArg(state, N[A_REGIONS_METHOD], rows);
        if (r == NULL)
            return -1;
        *without = PyFloat_AsDouble(r);
        Py_DECREF(r);
        return (*without == -1.0 && PyErr_Occurred()) ? -1 : 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        Sums *acc = (Sums *)PyDict_GetItemWithError(regions, get(row, S_REGION));
        long long io = 0;
        double energy = 0.0, co2 = 0.0; /* set: every row was checked plain above */
        clean_int(get(row, S_IO_OPS), &io);
        clean_figure(get(row, S_ENERGY_KWH), &energy);
        clean_figure(get(row, S_CO2_GCO2), &co2);
        acc->n += 1;
        count_set(&acc->count, count_get(&acc->count) + (u128)io);
        acc->energy += energy;
        acc->carbon += co2 / 1000.0;
    }
    Py_DECREF(regions);
    return 0;
}

/* ---------------------------------------------------------------------- window figures */

/* A line's window-level figures (fold_fast.clean_figures), each one the sanitiser passes. */
typedef struct {
    PyObject *total;               /* green_summary.co2.total, borrowed, may be NULL */
    PyObject *traces;              /* window.traces, borrowed, NULL when absent (0) */
    PyObject *rows, *meta, *hash;  /* region rows, methodology, line hash: borrowed, may be NULL */
    PyObject *root_spans;          /* window.root_spans, borrowed, NULL when absent or null */
    int has_without;               /* green_summary.energy_without_carbon_kwh present (not null) */
    double without;
    long long io_ops, traces_n;    /* traces_n: window.traces (0 when absent) */
    double kwh, operational, mid, embodied, database, messaging;
} Figures;

/* 1: every window-level figure is clean and there are no host rows (f filled); 0: decline. */
static int check_figures(PyObject *rec, PyObject *report, PyObject *gs, Figures *f) {
    PyObject *co2 = get(gs, S_CO2), *hosts = get(gs, S_HOSTS), *window = get(report, S_WINDOW);
    if (PyErr_Occurred())
        return -1;
    f->total = NULL;
    if ((co2 && !PyDict_CheckExact(co2)) || window == NULL || !PyDict_CheckExact(window))
        return 0;
    if (co2 && (f->total = get(co2, S_TOTAL)) != NULL && !PyDict_CheckExact(f->total))
        return 0;
    if (hosts && !(PyList_CheckExact(hosts) && PyList_GET_SIZE(hosts) == 0))
        return 0;
    f->traces = get(window, S_TRACES);
    if (!(clean_int(f->traces, &f->traces_n) && clean_int(get(gs, S_TOTAL_IO_OPS), &f->io_ops)
          && clean_figure(get(gs, S_ENERGY_KWH), &f->kwh)
          && clean_figure(co2 ? get(co2, S_OPERATIONAL) : NULL, &f->operational)
          && clean_figure(co2 ? get(co2, S_EMBODIED) : NULL, &f->embodied)
          && clean_figure(co2 ? get(co2, S_DATABASE) : NULL, &f->database)
          && clean_figure(co2 ? get(co2, S_MESSAGING) : NULL, &f->messaging)
          && clean_figure(f->total ? get(f->total, S_MID) : NULL, &f->mid)))
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
    PyObject *without = get(gs, S_WITHOUT_CARBON);
    f->root_spans = get(window, S_ROOT_SPANS);
    if (f->root_spans == Py_None)
        f->root_spans = NULL;
    f->has_without = without != NULL && without != Py_None;
    if ((f->root_spans && !clean_int(f->root_spans, &root)) || (f->has_without && !clean_figure(without, &f->without)))
        return PyErr_Occurred() ? -1 : 0;
    f->meta = get(report, S_METHODOLOGY);
    f->hash = get(rec, S_HASH);
    if (PyErr_Occurred())
        return -1;
    /* a backfilled line (methodology.backfill == "true", fold_backfill.is_backfill): declined,
     * so the general path folds it and keeps the backfill term; the C fold keeps no such term */
    PyObject *backfill = f->meta && PyDict_CheckExact(f->meta) ? get(f->meta, S_BACKFILL) : NULL;
    if (backfill && PyUnicode_CheckExact(backfill) && PyUnicode_GET_LENGTH(backfill) == 4
        && PyUnicode_CompareWithASCIIString(backfill, "true") == 0)
        return 0;
    return PyErr_Occurred() ? -1 : 1;
}

/* fold_fast.finish_window: the additions both fast paths end a window with, in
 * process_window's order; returns the line's hash ("" when unusable). */
static PyObject *finish_window(PyObject *state, double start, PyObject *start_obj, Figures *f,
                               BucketSumsObj *b) {
    if (add_one(state, A_WINDOWS) < 0)
        return NULL;
    b->windows += 1;
    for (int which = A_FIRST_START; which <= A_LAST_START; which++) {
        PyObject *edge = PyObject_GetAttr(state, N[which]);
        if (edge == NULL)
            return NULL;
        double d = PyFloat_AsDouble(edge);
        Py_DECREF(edge);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        if ((which == A_FIRST_START ? start < d : start > d) && PyObject_SetAttr(state, N[which], start_obj) < 0)
            return NULL;
    }
    if (add_float(state, A_HOST_ENERGY, 0.0) < 0 || add_float(state, A_EMBODIED_KG, f->embodied / 1000.0) < 0
        || add_float(state, A_DATABASE_KG, f->database / 1000.0) < 0
        || add_float(state, A_MESSAGING_KG, f->messaging / 1000.0) < 0)
        return NULL;
    b->host_energy += 0.0;
    b->embodied += f->embodied / 1000.0;
    b->database += f->database / 1000.0;
    b->messaging += f->messaging / 1000.0;
    double derived = 0.0;
    if (f->rows && PyList_GET_SIZE(f->rows) && fold_regions(state, f->rows, &derived) < 0)
        return NULL;
    /* state.add_window_counts(traces, root_spans, stated, derived) */
    if (f->root_spans && (add_obj(state, A_TRACES_COUNTED, f->traces ? f->traces : ZERO) < 0
                          || add_obj(state, A_ROOT_SPANS, f->root_spans) < 0))
        return NULL;
    double without = f->has_without ? f->without : derived;
    if (without != 0.0 && add_float(state, A_WITHOUT_CARBON, without) < 0)
        return NULL;
    if (f->meta && PyDict_CheckExact(f->meta) && PyDict_GET_SIZE(f->meta)) {
        PyObject *last = PyObject_GetAttr(state, N[A_LAST_META]);
        if (last == NULL)
            return NULL;
        int same = f->meta == last ? 1 : PyObject_RichCompareBool(f->meta, last, Py_EQ);
        Py_DECREF(last);
        if (same < 0) /* e.g. RecursionError on a deeply nested block: _note_methodology */
            PyErr_Clear(); /* compares again and does what the general path does with it */
        if (same != 1) {
            PyObject *r = PyObject_CallMethodOneArg(state, N[A_NOTE_METHODOLOGY], f->meta);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
    }
    if (f->hash && PyUnicode_CheckExact(f->hash) && PyUnicode_GET_LENGTH(f->hash) <= 128)
        return Py_NewRef(f->hash);
    return Py_NewRef(EMPTY_STR);
}

/* ---------------------------------------------------------------------- time buckets */

/* The bucket of a window starting at `start` (a new reference): the cached one, state._bcache
 * = (lo, hi, bucket), when lo <= start < hi, else state._enter_bucket(start). Called only
 * once the line has been checked (it may create the bucket). */
static BucketSumsObj *enter_bucket(PyObject *state, double start, PyObject *start_obj) {
    PyObject *cache = PyObject_GetAttr(state, N[A_BCACHE]), *b = NULL;
    if (cache == NULL)
        return NULL;
    if (PyTuple_CheckExact(cache) && PyTuple_GET_SIZE(cache) == 3) {
        PyObject *lo = PyTuple_GET_ITEM(cache, 0), *hi = PyTuple_GET_ITEM(cache, 1), *cached = PyTuple_GET_ITEM(cache, 2);
        if (PyFloat_CheckExact(lo) && PyFloat_CheckExact(hi) && PyFloat_AS_DOUBLE(lo) <= start
            && start < PyFloat_AS_DOUBLE(hi) && PyObject_TypeCheck(cached, &BucketSumsType))
            b = Py_NewRef(cached);
    }
    Py_DECREF(cache);
    if (b == NULL) {
        b = PyObject_CallMethodOneArg(state, N[A_ENTER_BUCKET], start_obj);
        if (b == NULL)
            return NULL;
        if (!PyObject_TypeCheck(b, &BucketSumsType)) {
            Py_DECREF(b);
            PyErr_SetString(PyExc_TypeError, "AggregateState._enter_bucket returned a non-Bucket");
            return NULL;
        }
    }
    return (BucketSumsObj *)b;
}

/* The layout's targets' cells in bucket `b` (a new reference to a list of n ServiceSums):
 * layout.cells when layout.cells_for is b, else state._layout_cells(layout). */
static PyObject *layout_cells(PyObject *state, PyObject *layout, BucketSumsObj *b, Py_ssize_t n) {
    PyObject *cells_for = PyObject_GetAttr(layout, N[A_CELLS_FOR]);
    if (cells_for == NULL)
        return NULL;
    PyObject *cells = cells_for == (PyObject *)b ? PyObject_GetAttr(layout, N[A_CELLS])
                                                 : PyObject_CallMethodOneArg(state, N[A_LAYOUT_CELLS], layout);
    Py_DECREF(cells_for);
    if (cells == NULL)
        return NULL;
    int ok = PyList_CheckExact(cells) && PyList_GET_SIZE(cells) == n;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok = PyObject_TypeCheck(PyList_GET_ITEM(cells, i), &ServiceSumsType);
    if (!ok) {
        Py_DECREF(cells);
        PyErr_SetString(PyExc_TypeError, "layout.cells is not one ServiceSums per target");
        return NULL;
    }
    return cells;
}

/* ---------------------------------------------------------------------- fold_plain */

typedef struct {
    PyObject *energy, *carbon, *requests; /* borrowed from the line (requests NULL when empty) */
    PyObject *layout, *key, *targets;     /* owned: state._last_layout, ._last_key, layout.targets */
} Plain;

/* A per_service_measured_ratio map with nothing to add: absent, null, or a dict whose values
 * are all an exact 0 (float or int). Any other map is folded by the general path, which adds
 * each service's measured energy (energy x ratio) and sanitises the ratios (FOLD_VERSION 5). */
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

/* 1: a plain runtime line of the previous window's layout (p filled); 0: decline; -1: error. */
static int check_plain(PyObject *state, PyObject *gs, Plain *p) {
    PyObject *carbon = get(gs, S_CARBON_MAP), *requests = get(gs, S_REQUESTS_MAP);
    PyObject *regmap = get(gs, S_REGION_MAP), *models = get(gs, S_MODEL_MAP);
    PyObject *measured = get(gs, S_MEASURED_MAP);
    if (PyErr_Occurred())
        return -1;
    if (!no_measured(measured))
        return 0;
    if (!PyDict_CheckExact(p->energy) || PyDict_GET_SIZE(p->energy) == 0 || carbon == NULL
        || !PyDict_CheckExact(carbon) || (requests && !PyDict_CheckExact(requests))
        || (regmap && !PyDict_CheckExact(regmap)) || (models && !PyDict_CheckExact(models)))
        return 0;
    /* the previous window's layout, and its key (names, tags, host names) */
    PyObject *layout = p->layout = PyObject_GetAttr(state, N[A_LAST_LAYOUT]);
    if (layout == NULL)
        return -1;
    if (layout == Py_None)
        return 0;
    int simple = layout_flag(layout, A_SIMPLE), unknown = layout_flag(layout, A_UNKNOWN);
    if (simple < 0 || unknown < 0)
        return -1;
    if (!simple || unknown)
        return 0;
    PyObject *key = p->key = PyObject_GetAttr(state, N[A_LAST_KEY]);
    if (key == NULL)
        return -1;
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 3)
        return 0;
    PyObject *names = PyTuple_GET_ITEM(key, 0), *tags = PyTuple_GET_ITEM(key, 1);
    int hosts = PyObject_IsTrue(PyTuple_GET_ITEM(key, 2));
    if (hosts != 0 || !PyTuple_CheckExact(names) || !PyTuple_CheckExact(tags))
        return hosts < 0 ? -1 : 0;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(tags) != n || !same_keys(p->energy, names) || !same_keys(carbon, names)
        || (requests && PyDict_GET_SIZE(requests) && !same_keys(requests, names)))
        return 0;
    /* the tags: the model map's values when it lists the names in order, else map.get(name) */
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
    } else {
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
    }
    PyObject *targets = p->targets = PyObject_GetAttr(layout, N[A_TARGETS]);
    if (targets == NULL)
        return -1;
    if (!PyList_CheckExact(targets) || PyList_GET_SIZE(targets) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyObject_TypeCheck(PyList_GET_ITEM(targets, i), &ServiceSumsType))
            return 0;
    p->carbon = carbon;
    p->requests = requests && PyDict_GET_SIZE(requests) ? requests : NULL;
    return 1;
}

/* The additions of fold_plain + _credit_raw, in their order (and into bucket b). */
static int apply_plain(PyObject *state, Plain *p, Figures *f, BucketSumsObj *b) {
    if (add_one(state, A_RUNTIME_WINDOWS) < 0)
        return -1;
    PyObject *tag_counts = PyObject_GetAttr(p->layout, N[A_TAG_COUNTS]);
    PyObject *models = tag_counts ? PyObject_GetAttr(state, N[A_MODELS]) : NULL;
    if (models == NULL) {
        Py_XDECREF(tag_counts);
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *tag, *count;
    int rc = 0;
    while (rc == 0 && PyDict_Next(tag_counts, &pos, &tag, &count)) {
        PyObject *old = PyObject_GetItem(models, tag); /* KeyError, as models[tag] += count */
        PyObject *sum = old ? PyNumber_Add(old, count) : NULL;
        rc = sum ? PyObject_SetItem(models, tag, sum) : -1;
        Py_XDECREF(old);
        Py_XDECREF(sum);
    }
    Py_DECREF(tag_counts);
    Py_DECREF(models);
    PyObject *rejected = rc == 0 ? PyObject_GetAttr(p->layout, N[A_REJECTED]) : NULL;
    if (rejected == NULL)
        return -1;
    rc = add_obj(state, A_REJECTED_MODELS, rejected);
    Py_DECREF(rejected);
    if (rc < 0)
        return -1;
    /* _credit_raw: every entry a known service; leaves sanitised inline */
    double app_energy = 0.0, app_carbon = 0.0;
    u128 app_requests = 0;
    Py_ssize_t pe = 0, pc = 0, pr = 0, n = PyList_GET_SIZE(p->targets);
    PyObject *k, *e_v, *c_v, *r_v;
    PyObject *cells = layout_cells(state, p->layout, b, n);
    if (cells == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Sums *acc = (Sums *)PyList_GET_ITEM(p->targets, i), *cell = (Sums *)PyList_GET_ITEM(cells, i);
        double e, c;
        long long r = 0;
        if (!PyDict_Next(p->energy, &pe, &k, &e_v) || !PyDict_Next(p->carbon, &pc, &k, &c_v))
            break; /* sizes were checked; unreachable */
        if (leaf_float(e_v, state, &e) < 0 || leaf_float(c_v, state, &c) < 0) {
            Py_DECREF(cells);
            return -1;
        }
        if (p->requests) {
            if (!PyDict_Next(p->requests, &pr, &k, &r_v))
                break;
            if (leaf_count(r_v, state, &r) < 0) {
                Py_DECREF(cells);
                return -1;
            }
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
    Py_DECREF(cells);
    if (add_float(state, A_ENERGY, app_energy + 0.0) < 0 || add_float(state, A_OPERATIONAL_KG, app_carbon) < 0)
        return -1;
    b->energy += app_energy + 0.0;
    b->operational += app_carbon;
    /* requests: the entries' sum, or window.get("traces", 0) when that is 0 */
    u128 window_requests = app_requests ? app_requests : (u128)f->traces_n;
    count_set(&b->requests, count_get(&b->requests) + window_requests);
    if (app_requests) {
        PyObject *req = u128_to_py(app_requests);
        rc = req ? add_obj(state, A_REQUESTS, req) : -1;
        Py_XDECREF(req);
        return rc;
    }
    return add_obj(state, A_REQUESTS, f->traces ? f->traces : ZERO); /* window.get("traces", 0) */
}

/* ---------------------------------------------------------------------- fold_proxy */

static double energy_per_io_op = -1.0; /* schema.constants.ENERGY_PER_IO_OP_KWH, read once */

static int load_energy_per_io_op(void) {
    if (energy_per_io_op >= 0.0)
        return 0;
    PyObject *constants = PyImport_ImportModule("schema.constants");
    PyObject *value = constants ? PyObject_GetAttrString(constants, "ENERGY_PER_IO_OP_KWH") : NULL;
    double v = value ? PyFloat_AsDouble(value) : -1.0;
    Py_XDECREF(constants);
    Py_XDECREF(value);
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    energy_per_io_op = v;
    return 0;
}

/* A string tag or NULL (fold_proxy._tag: a non-empty str). */
static inline PyObject *tag_of(PyObject *v) {
    return v && PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) ? v : NULL;
}

/* fold_proxy's check of a v1.0 line's I/O rows: 1 with `split` (a new dict, service -> I/O
 * ops, in row order) and its total when every row is plain and there is something to split
 * by; 0: decline (nothing changed); -1: error. */
static int check_proxy(PyObject *report, PyObject **split_out, unsigned long long *io_total_out) {
    PyObject *endpoints = get(report, S_PER_ENDPOINT);
    if (endpoints == NULL)
        return PyErr_Occurred() ? -1 : 0; /* nothing to split by: the general path (strict may fail) */
    if (!PyList_CheckExact(endpoints))
        return 0;
    PyObject *split = PyDict_New();
    if (split == NULL)
        return -1;
    unsigned long long io_total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(endpoints); i++) {
        PyObject *row = PyList_GET_ITEM(endpoints, i), *service;
        long long ops;
        if (!PyDict_CheckExact(row) || (service = get(row, S_SERVICE)) == NULL || !PyUnicode_CheckExact(service)
            || !clean_int(get(row, S_IO_OPS), &ops) || PyErr_Occurred()) {
            Py_DECREF(split);
            return PyErr_Occurred() ? -1 : 0;
        }
        PyObject *old = PyDict_GetItemWithError(split, service);
        long long before = 0;
        if (old == NULL && PyErr_Occurred()) {
            Py_DECREF(split);
            return -1;
        }
        if (old)
            before = PyLong_AsLongLong(old);
        PyObject *sum = PyLong_FromLongLong(before + ops); /* each <= 2**53: no overflow for 1,000 rows */
        if (sum == NULL || PyDict_SetItem(split, service, sum) < 0) {
            Py_XDECREF(sum);
            Py_DECREF(split);
            return -1;
        }
        Py_DECREF(sum);
        io_total += (unsigned long long)ops;
        /* past 2**53 a count is no longer exact as a double: leave such a line to Python */
        if (io_total > (unsigned long long)MAX_COUNT) {
            Py_DECREF(split);
            return 0;
        }
    }
    if (io_total == 0) { /* nothing to split by: _unattributed, or an error under strict */
        Py_DECREF(split);
        return 0;
    }
    *split_out = split;
    *io_total_out = io_total;
    return 1;
}

/* The additions of fold_proxy + _split_proxy, in their order. */
static int apply_proxy(PyObject *state, PyObject *gs, Figures *f, PyObject *split, unsigned long long io_total,
                       BucketSumsObj *b) {
    if (load_energy_per_io_op() < 0 || add_one(state, A_FALLBACK_WINDOWS) < 0)
        return -1;
    PyObject *model = tag_of(get(gs, S_ENERGY_MODEL));
    if (model == NULL && f->total)
        model = tag_of(get(f->total, S_MODEL));
    if (PyErr_Occurred())
        return -1;
    double app_energy;
    if (f->kwh > 0.0) {
        double x = f->kwh - 0.0;
        app_energy = x > 0.0 ? x : 0.0; /* max(0.0, kwh - host energy); no host rows here */
    } else {
        /* (total_io_ops or io_total) * ENERGY_PER_IO_OP_KWH: both counts <= 2**53, exact */
        app_energy = (double)(f->io_ops ? (unsigned long long)f->io_ops : io_total) * energy_per_io_op;
    }
    double app_g = f->operational;
    if (app_g == 0.0) {
        double x = f->mid - f->embodied - f->database - f->messaging;
        app_g = x > 0.0 ? x : 0.0;
    }
    double app_kg = app_g / 1000.0;
    int rc = (add_float(state, A_ENERGY, app_energy + 0.0) < 0 || add_float(state, A_OPERATIONAL_KG, app_kg) < 0
              || add_obj(state, A_REQUESTS, f->traces ? f->traces : ZERO) < 0) ? -1 : 0;
    if (rc < 0)
        return -1;
    b->energy += app_energy + 0.0;
    b->operational += app_kg;
    count_set(&b->requests, count_get(&b->requests) + (u128)f->traces_n);
    PyObject *cells = PyObject_GetAttr((PyObject *)b, N[A_SERVICES]); /* the bucket's cells: name -> cell */
    if (cells == NULL)
        return -1;
    if (!PyDict_CheckExact(cells)) {
        Py_DECREF(cells);
        PyErr_SetString(PyExc_TypeError, "Bucket.services is not a dict");
        return -1;
    }
    /* _split_proxy: each service its share of I/O ops; the first entry and any service not yet
     * known go through state._credit (the tag set's answer, the caps), the rest are added here */
    PyObject *services = PyObject_GetAttr(state, N[A_SERVICES]);
    PyObject *models = services ? PyObject_GetAttr(state, N[A_MODELS]) : NULL;
    if (models == NULL) {
        Py_XDECREF(services);
        Py_DECREF(cells);
        return -1;
    }
    PyObject *tag = NULL; /* owned; NULL = unset, Py_None = rejected or no model */
    Py_ssize_t pos = 0;
    PyObject *name, *ops;
    while (rc == 0 && PyDict_Next(split, &pos, &name, &ops)) {
        double share = (double)PyLong_AsLongLong(ops) / (double)io_total; /* ops / io_total, both exact */
        PyObject *acc = PyDict_GetItemWithError(services, name);
        if (acc == NULL && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        if (acc == NULL || tag == NULL) {
            PyObject *e = PyFloat_FromDouble(app_energy * share), *c = PyFloat_FromDouble(app_kg * share);
            PyObject *answer = e && c ? PyObject_CallMethodObjArgs(state, N[A_CREDIT], name, N[S_UNKNOWN], e, c,
                                                                   ZERO, model ? model : Py_None, NULL)
                                      : NULL;
            Py_XDECREF(e); Py_XDECREF(c);
            if (answer == NULL)
                rc = -1;
            else if (tag == NULL)
                tag = answer;
            else
                Py_DECREF(answer);
            continue;
        }
        if (!PyObject_TypeCheck(acc, &ServiceSumsType)) {
            PyErr_SetString(PyExc_TypeError, "AggregateState.services holds a non-ServiceAcc");
            rc = -1;
            break;
        }
        Sums *s = (Sums *)acc;
        s->energy += app_energy * share;
        s->carbon += app_kg * share;
        s->n += 1;
        PyObject *cell = PyDict_GetItemWithError(cells, name); /* borrowed */
        if (cell == NULL && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        PyObject *made = cell ? NULL : PyObject_CallMethodOneArg((PyObject *)b, N[A_CELL], name); /* bucket.cell(name) */
        if (cell == NULL && made == NULL) {
            rc = -1;
            break;
        }
        if (!PyObject_TypeCheck(cell ? cell : made, &ServiceSumsType)) {
            Py_XDECREF(made);
            PyErr_SetString(PyExc_TypeError, "a bucket cell is not a ServiceSums");
            rc = -1;
            break;
        }
        Sums *sc = (Sums *)(cell ? cell : made);
        sc->energy += app_energy * share;
        sc->carbon += app_kg * share;
        Py_XDECREF(made); /* the bucket's dict holds it */
        if (tag != Py_None) {
            PyObject *old = PyObject_GetItem(models, tag);
            PyObject *sum = old ? PyNumber_Add(old, ONE) : NULL;
            PyObject *tags = sum ? PyObject_GetAttr(acc, N[A_MODELS]) : NULL;
            rc = tags && PyObject_SetItem(models, tag, sum) == 0 && PyObject_SetItem(tags, tag, Py_None) == 0 ? 0 : -1;
            Py_XDECREF(old); Py_XDECREF(sum); Py_XDECREF(tags);
        } else if (model) {
            rc = add_one(state, A_REJECTED_MODELS);
        }
    }
    Py_XDECREF(tag);
    Py_DECREF(services);
    Py_DECREF(models);
    Py_DECREF(cells);
    return rc;
}

/* ---------------------------------------------------------------------- the entry point */

static PyObject *fold_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fold_plain(state, rec, start) takes 3 arguments");
        return NULL;
    }
    PyObject *state = args[0], *rec = args[1];
    double start = PyFloat_AsDouble(args[2]);
    if (start == -1.0 && PyErr_Occurred())
        return NULL;
    if (!PyDict_CheckExact(rec))
        Py_RETURN_NONE;
    PyObject *report = get(rec, S_REPORT);
    if (report == NULL || !PyDict_CheckExact(report))
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    PyObject *gs = get(report, S_GREEN_SUMMARY);
    if (gs == NULL || !PyDict_CheckExact(gs))
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Figures f;
    PyObject *energy = get(gs, S_ENERGY_MAP);
    if (energy == NULL) {
        if (PyErr_Occurred())
            return NULL;
        int has_carbon = PyDict_Contains(gs, N[S_CARBON_MAP]);
        if (has_carbon != 0)
            return has_carbon < 0 ? NULL : Py_NewRef(Py_None);
        /* a v1.0 line (no runtime maps): the proxy path */
        PyObject *split = NULL;
        unsigned long long io_total = 0;
        int ok = check_figures(rec, report, gs, &f);
        if (ok == 1)
            ok = check_proxy(report, &split, &io_total);
        if (ok <= 0)
            return ok < 0 ? NULL : Py_NewRef(Py_None);
        BucketSumsObj *b = enter_bucket(state, start, args[2]);
        ok = b ? apply_proxy(state, gs, &f, split, io_total, b) : -1;
        Py_DECREF(split);
        PyObject *out = ok < 0 ? NULL : finish_window(state, start, args[2], &f, b);
        Py_XDECREF(b);
        return out;
    }
    Plain p = {.energy = energy};
    int ok = check_plain(state, gs, &p);
    if (ok == 1)
        ok = check_figures(rec, report, gs, &f);
    PyObject *out = NULL;
    if (ok == 0)
        out = Py_NewRef(Py_None);
    else if (ok == 1) {
        BucketSumsObj *b = enter_bucket(state, start, args[2]);
        if (b && apply_plain(state, &p, &f, b) == 0)
            out = finish_window(state, start, args[2], &f, b);
        Py_XDECREF(b);
    }
    Py_XDECREF(p.layout);
    Py_XDECREF(p.key);
    Py_XDECREF(p.targets);
    return out;
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
static int usual_start(PyObject *text, double *out) {
    Py_ssize_t len = PyUnicode_IS_COMPACT_ASCII(text) ? PyUnicode_GET_LENGTH(text) : 0;
    if (len != 20 && len != 27)
        return 0;
    const char *s = (const char *)PyUnicode_DATA(text);
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

static PyMethodDef methods[] = {
    {"window_end", (PyCFunction)window_end, METH_O,
     "window_end(rec) -> float | None\n\n"
     "Epoch seconds of report.window.end, as aggregator.coverage.window_end (which it calls for every\n"
     "form but the two usual ones); rec's report.window was read by window_start first."},
    {"window_start", (PyCFunction)window_start, METH_O,
     "window_start(rec) -> float\n\n"
     "Epoch seconds of report.window.start, as aggregator.read.window_start (which it calls for every\n"
     "form but YYYY-MM-DDTHH:MM:SSZ, and which raises Malformed for a line without a usable start)."},
    {"fold_plain", (PyCFunction)(void (*)(void))fold_plain, METH_FASTCALL,
     "fold_plain(state, rec, start) -> str | None\n\n"
     "Fold a loaded plain runtime line into the AggregateState `state` (see PlainRuntime.fold_plain):\n"
     "its hash ('' when unusable) if folded, None having changed nothing otherwise."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fold", "The aggregator's per-window fold in C (see _fold.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fold(void) {
    if (PyType_Ready(&ServiceSumsType) < 0 || PyType_Ready(&RegionSumsType) < 0 || PyType_Ready(&BucketSumsType) < 0)
        return NULL;
    for (int i = 0; i < N_NAMES; i++)
        if ((N[i] = PyUnicode_InternFromString(NAME_TEXT[i])) == NULL)
            return NULL;
    if ((EMPTY_STR = PyUnicode_FromString("")) == NULL || (ZERO = PyLong_FromLong(0)) == NULL
        || (ONE = PyLong_FromLong(1)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "FOLD_VERSION", FOLD_VERSION) < 0
        || PyModule_AddObjectRef(m, "ServiceSums", (PyObject *)&ServiceSumsType) < 0
        || PyModule_AddObjectRef(m, "RegionSums", (PyObject *)&RegionSumsType) < 0
        || PyModule_AddObjectRef(m, "BucketSums", (PyObject *)&BucketSumsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
