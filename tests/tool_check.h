/*
 * tool_check.h - the checks test_tools.c and test_tools_families.c share:
 * a model output parsed with a tool-call format (which must succeed), and
 * one parsed call compared by name and arguments.
 */
#ifndef TOOL_CHECK_H
#define TOOL_CHECK_H

#include <string.h>

#include "../src/server/srv_tools.h"
#include "test.h"

static srv_tool_msg parse(srv_tool_fmt f, const char *text)
{
    srv_tool_msg m;
    CHECK_EQ_INT(srv_tools_parse(f, NULL, text, strlen(text), &m), PK_OK);
    return m;
}

static void check_call(const srv_tool_msg *m, int i, const char *name, const char *args)
{
    if (i >= m->n_calls) {
        CHECK(i < m->n_calls);
        return;
    }
    CHECK_STR(m->calls[i].name, name);
    CHECK_STR(m->calls[i].arguments, args);
}

#endif
