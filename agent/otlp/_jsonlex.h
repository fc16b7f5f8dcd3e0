/* _jsonlex.h -- the JSON lexer of _jsonwalk.c: strict RFC 8259 JSON in strict UTF-8, as orjson reads it.
 *
 * Every function returns 0 (or 1/0 where it says) on what it read and -1 on anything else; -1
 * never says why, since the walker then gives the whole request to the Python decoder, whose
 * orjson error says it. Accepting must imply that orjson accepts: so a lone surrogate escape, a
 * BOM, a control character in a string, an integer beyond int64/uint64 (a float for orjson) and a
 * float that could overflow (an error for orjson) are all -1.
 */
#ifndef CARBONSPAN_JSONLEX_H
#define CARBONSPAN_JSONLEX_H

#include "_batch.h"


#define MAX_DEPTH 100 /* orjson's limit is 1024; OTLP needs ~12 */

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

/* The first byte at or after p that is not PLAIN (a quote, a backslash, a control character or
 * a byte >= 0x80), or end. Eight bytes at a time where the byte order allows (a string's bytes
 * are most of an OTLP/JSON body): a byte is flagged when it is zero after XOR with '"' or '\\',
 * below 0x20, or has its top bit set; a subtraction's borrow only ever flags bytes above a
 * flagged one, so the lowest flag is exact. Never reads at or past end. */
static inline const uint8_t *plain_run(const uint8_t *p, const uint8_t *end) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t v, q, b, hit;
        memcpy(&v, p, 8);
        q = v ^ (ones * '"');
        b = v ^ (ones * '\\');
        hit = (((q - ones) & ~q) | ((b - ones) & ~b) | (v - ones * 0x20) | v) & high;
        if (hit) return p + (__builtin_ctzll(hit) >> 3);
        p += 8;
    }
#endif
    while (p < end && PLAIN[*p]) p++;
    return p;
}

/* The rest of a string from p, past a byte that is not PLAIN (UTF-8, an escape, the end or a
 * control character): out of line, so that string() stays small enough to inline. */
static int __attribute__((noinline)) string_rest(J *j, const uint8_t *start, const uint8_t *p, Str *out) {
    const uint8_t *end = j->end;
    for (;;) {
        p = plain_run(p, end);
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

/* A string at p (after whitespace); out points into the input, or into the arena if escaped.
 * The common case (plain ASCII to the closing quote) inline, the rest in string_rest. */
static inline int string(J *j, Str *out) {
    ws(j);
    if (!at(j, '"')) return -1;
    const uint8_t *start = ++j->p, *p = plain_run(start, j->end);
    if (p < j->end && *p == '"') {
        out->p = start;
        out->n = p - start;
        j->p = p + 1;
        return 0;
    }
    return string_rest(j, start, p, out);
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
    if (s.n - i <= 19) { /* 19 digits never pass 2**64: no overflow check per digit */
        uint64_t mag = 0;
        for (; i < s.n; i++) {
            unsigned d = (unsigned)s.p[i] - '0';
            if (d > 9) return -1;
            mag = mag * 10 + d;
        }
        n->mag = mag;
        return 0;
    }
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

/* Fill PLAIN; called once when the module loads. */
static void lex_init(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
}

#endif
