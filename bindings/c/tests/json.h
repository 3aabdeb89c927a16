/*
 * A small JSON reader for the golden vector file (testdata/signal/v1-2lanes.json):
 * an object of scalars plus a "fields" array of flat objects. It parses any
 * JSON (objects, arrays, strings with escapes, numbers, true/false/null)
 * into a tree, so key order and whitespace do not matter; no external
 * library.
 */
#ifndef ELFEN_TEST_JSON_H
#define ELFEN_TEST_JSON_H

#include <stdlib.h>
#include <string.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jkind;

typedef struct jval {
    jkind kind;
    char *str;           /* J_STR: the string; J_NUM: the literal */
    int boolean;         /* J_BOOL */
    struct jval **items; /* J_ARR / J_OBJ: values */
    char **keys;         /* J_OBJ: keys */
    size_t n;
} jval;

typedef struct {
    const char *p;
    const char *err;
} jparser;

static void j_ws(jparser *j) {
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t') j->p++;
}

static jval *j_new(jkind k) {
    jval *v = (jval *)calloc(1, sizeof *v);
    if (v) v->kind = k;
    return v;
}

static void j_push(jval *v, char *key, jval *item) {
    v->items = (jval **)realloc(v->items, (v->n + 1) * sizeof *v->items);
    if (v->kind == J_OBJ) v->keys = (char **)realloc(v->keys, (v->n + 1) * sizeof *v->keys);
    v->items[v->n] = item;
    if (v->kind == J_OBJ) v->keys[v->n] = key;
    v->n++;
}

static char *j_string(jparser *j) {
    if (*j->p != '"') {
        j->err = "expected a string";
        return NULL;
    }
    j->p++;
    size_t cap = 16, n = 0;
    char *s = (char *)malloc(cap);
    while (*j->p && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            char e = *j->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': /* keep ASCII, replace the rest: the vectors are ASCII */
                c = '?';
                for (int i = 0; i < 4 && *j->p; i++) j->p++;
                break;
            case '"': case '\\': case '/': c = e; break;
            default: j->err = "bad escape"; free(s); return NULL;
            }
        }
        if (n + 2 > cap) s = (char *)realloc(s, cap *= 2);
        s[n++] = c;
    }
    if (*j->p != '"') {
        j->err = "unterminated string";
        free(s);
        return NULL;
    }
    j->p++;
    s[n] = 0;
    return s;
}

static jval *j_value(jparser *j);

static jval *j_container(jparser *j, int obj) {
    jval *v = j_new(obj ? J_OBJ : J_ARR);
    j->p++;
    j_ws(j);
    if (*j->p == (obj ? '}' : ']')) {
        j->p++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        j_ws(j);
        if (obj) {
            if (!(key = j_string(j))) return NULL;
            j_ws(j);
            if (*j->p++ != ':') {
                j->err = "expected ':'";
                return NULL;
            }
        }
        jval *item = j_value(j);
        if (!item) return NULL;
        j_push(v, key, item);
        j_ws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == (obj ? '}' : ']')) {
            j->p++;
            return v;
        }
        j->err = obj ? "expected ',' or '}'" : "expected ',' or ']'";
        return NULL;
    }
}

static jval *j_value(jparser *j) {
    j_ws(j);
    char c = *j->p;
    if (c == '{' || c == '[') return j_container(j, c == '{');
    if (c == '"') {
        jval *v = j_new(J_STR);
        if (!(v->str = j_string(j))) return NULL;
        return v;
    }
    if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "false", 5)) {
        jval *v = j_new(J_BOOL);
        v->boolean = c == 't';
        j->p += v->boolean ? 4 : 5;
        return v;
    }
    if (!strncmp(j->p, "null", 4)) {
        j->p += 4;
        return j_new(J_NULL);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = j->p;
        while (*j->p && strchr("+-0123456789.eE", *j->p)) j->p++;
        jval *v = j_new(J_NUM);
        v->str = strndup(s, (size_t)(j->p - s));
        return v;
    }
    j->err = "unexpected character";
    return NULL;
}

/* Parses `text`; NULL (with *err set) on a syntax error. */
static jval *j_parse(const char *text, const char **err) {
    jparser j = {text, NULL};
    jval *v = j_value(&j);
    j_ws(&j);
    if (v && *j.p) {
        j.err = "trailing characters";
        v = NULL;
    }
    if (!v && err) *err = j.err ? j.err : "parse error";
    return v;
}

/* The member `key` of object `o`, or NULL. */
static jval *j_get(const jval *o, const char *key) {
    if (!o || o->kind != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return o->items[i];
    return NULL;
}

/* A member that is a string (or a number's literal), or NULL. */
static const char *j_text(const jval *o, const char *key) {
    jval *v = j_get(o, key);
    return v && (v->kind == J_STR || v->kind == J_NUM) ? v->str : NULL;
}

/* Parses a decimal unsigned 64-bit integer exactly; 0 on success. */
static int j_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static void j_free(jval *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        j_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

#endif
