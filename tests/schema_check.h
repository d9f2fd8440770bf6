/*
 * schema_check.h - a small JSON Schema validator for tests that check what
 * a grammar made a model write: type (a name or a list), enum, const,
 * properties, required, additionalProperties (false or a schema), items,
 * minItems, maxItems, minLength, maxLength (in code points), minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum, anyOf and oneOf (read as
 * anyOf), format date (its shape).  Other keywords are not checked: it is
 * an independent reading of the schemas the tests use, not the grammar
 * converter's logic again.
 */
#ifndef SCHEMA_CHECK_H
#define SCHEMA_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

static bool schema_type_is(const char *t, const json_t *v)
{
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static size_t schema_n_code_points(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Whether v is valid under schema s (an object, or true). */
static bool schema_valid(const json_t *s, const json_t *v)
{
    if (json_is_true(s)) return true;
    const json_t *t = json_object_get(s, "type"), *x;
    if (json_is_string(t) && !schema_type_is(json_string_value(t), v)) return false;
    if (json_is_array(t)) {
        bool any = false;
        size_t i;
        json_array_foreach(t, i, x) any = any || schema_type_is(json_string_value(x), v);
        if (!any) return false;
    }
    if ((x = json_object_get(s, "const")) && !json_equal(x, v)) return false;
    if ((x = json_object_get(s, "enum"))) {
        bool in = false;
        size_t i;
        const json_t *e;
        /* jansson's 1 and 1.0 differ, as JSON Schema's do not: neither
         * appears in the tests' enums twice. */
        json_array_foreach(x, i, e) in = in || json_equal(e, v) ||
                                         (json_is_number(e) && json_is_number(v) &&
                                          json_number_value(e) == json_number_value(v));
        if (!in) return false;
    }
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (any) {
        bool ok = false;
        size_t i;
        json_array_foreach(any, i, x) ok = ok || schema_valid(x, v);
        if (!ok) return false;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x)) return false;
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(x)) return false;
    }
    if (json_is_string(v)) {
        size_t n = schema_n_code_points(json_string_value(v), json_string_length(v));
        if ((x = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(x)) return false;
        const char *f = json_string_value(json_object_get(s, "format")), *p = json_string_value(v);
        if (f && !strcmp(f, "date")) {
            if (json_string_length(v) != 10 || p[4] != '-' || p[7] != '-') return false;
            for (int i = 0; i < 10; i++)
                if (i != 4 && i != 7 && (p[i] < '0' || p[i] > '9')) return false;
        }
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v), i;
        if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x)) return false;
        const json_t *items = json_object_get(s, "items");
        if (json_is_object(items)) json_array_foreach(v, i, x) if (!schema_valid(items, x)) return false;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        size_t i;
        json_array_foreach(json_object_get(s, "required"), i, x)
            if (!json_object_get(v, json_string_value(x))) return false;
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            const json_t *ps = json_object_get(props, k);
            if (ps && !schema_valid(ps, e)) return false;
            if (!ps && json_is_false(addl)) return false;
            if (!ps && json_is_object(addl) && !schema_valid(addl, e)) return false;
        }
    }
    return true;
}

#endif
