/*
 * gram.h - GBNF grammars and JSON Schemas that constrain sampling.
 *
 * PURPOSE: a request may say what its output must look like (a GBNF grammar,
 * a JSON Schema, "any JSON object"); this module turns that into a token
 * mask per step, so what the sampler draws always extends a valid prefix.
 * Pure: no threads, no I/O, no model; the engine owns one matcher per slot.
 *
 * DESIGN
 *   text --gram_parse--> gram_grammar (immutable, shared by reference)
 *   JSON Schema --gram_schema_to_gbnf--> GBNF text --gram_parse--> ...
 *   JSON Schema --gram_schema_rules--> rules in JSON or Gemma 4's syntax,
 *                                      embedded in a larger grammar
 *
 *   A grammar is compiled to flat code: each rule is a list of alternatives,
 *   each alternative a run of items (a character class or a rule reference)
 *   ended by END.  Repetitions become helper rules (x* is R ::= x R | "",
 *   x{m,n} m copies then nested optionals), groups become anonymous rules.
 *   Left recursion is refused at compile time (it has no finite closure);
 *   x* over an x that may match nothing repeats x without the empty string
 *   instead (same language), so ("a"*)* is not left recursion.
 *
 *   Matching is a pushdown automaton run on sets of stacks.  A stack is a
 *   persistent list of code positions (the top is the next item to match,
 *   the rest are return points), interned so that a stack is one int and a
 *   set of stacks is one int too.  A call whose return point is END is a tail
 *   call and pushes nothing, so x* and right-recursive loops keep a constant
 *   depth and revisit the same stack sets.  A matcher state is (stack set,
 *   partial UTF-8 code point); its byte transitions are computed once and
 *   kept (a lazily built DFA over bytes), and so is its token mask.
 *
 *   A token mask walks the vocabulary in byte order (gram_vocab sorts the
 *   tokens and keeps each one's common prefix with the previous one, an
 *   implicit byte trie): each token costs only its bytes past that prefix,
 *   and a dead prefix skips every token under it.  End-of-generation tokens
 *   are allowed exactly when the grammar may end here.
 *
 * INVARIANTS: a stack's top is always a character class once closed (calls
 * and ENDs are expanded); the empty stack (-1) means "may end here"; a
 * state with no stacks is dead and has no transitions.
 */
#ifndef GRAM_H
#define GRAM_H

#include "../common/pk.h"

/* ---- grammars ---- */

typedef struct gram_grammar gram_grammar;

/* Where and why a grammar or schema was refused: byte offset (from 0),
 * line and column (from 1) in the GBNF text, and a message naming what was
 * wrong.  pos is -1 for errors that have no place (a schema keyword). */
typedef struct gram_error {
    int64_t pos;
    int32_t line, col;
    char msg[200];
} gram_error;

/* Compiles GBNF text (len bytes, need not be NUL-terminated) with start
 * rule `root` (NULL: "root").  llama.cpp's dialect: `name ::= ...`, "|",
 * grouping, `? * + {m} {m,} {m,n}`, "literals" and [classes] with ranges,
 * negation [^...], escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH,
 * `.` (any character), `#` comments, UTF-8 in literals and classes.
 * PK_EFORMAT with *err filled (syntax, undefined or unused-root rule, left
 * recursion, repetition bound over 10000); PK_ENOMEM.  *out is owned by the
 * caller (gram_free). */
pk_status gram_parse(const char *src, size_t len, const char *root, gram_grammar **out,
                     gram_error *err);

/* One more reference (thread-safe); gram_free drops one, the last frees.
 * NULL is a no-op for both. */
gram_grammar *gram_ref(gram_grammar *g);
void gram_free(gram_grammar *g);

/* Whether two grammars compiled to the same code (same language, same
 * matcher tables): a finished request's matcher can serve the next. */
bool gram_equal(const gram_grammar *a, const gram_grammar *b);

/* Rules after compilation (including helpers), for tests and logs. */
int32_t gram_n_rules(const gram_grammar *g);

/* ---- JSON Schema ---- */

/* Writes a GBNF grammar (rule "root") for the JSON values that a schema
 * (JSON text, len bytes) accepts.  Supported: type (string, number,
 * integer, boolean, null, object, array, or a list of them), properties,
 * required, additionalProperties (false, true or a schema), items,
 * prefixItems, minItems, maxItems, enum, const, anyOf, oneOf, allOf of
 * objects, $ref to #/$defs/... or #/definitions/..., minLength, maxLength,
 * pattern (a subset: literals, classes, . ? * + {m,n}, groups, |, ^ $),
 * format date, time, date-time, uuid, minimum/maximum/exclusive* for
 * integers (as digit-count bounds when not expressible exactly they are
 * refused), and the annotations title, description, default, examples,
 * $schema, $id, $comment, strict, readOnly, writeOnly, deprecated.  An
 * empty schema or `true` is any JSON value.  Whitespace between tokens is
 * at most one space or newline run of 20 bytes (so a model cannot loop on
 * blanks).  Properties come in the schema's order; required ones always,
 * optional ones may be left out.
 * Returns PK_OK with *out (malloc'd, NUL-terminated, the caller frees);
 * PK_EUNSUPPORTED with err->msg naming the keyword and its JSON path;
 * PK_EFORMAT for text that is not JSON or a schema that is malformed;
 * PK_ENOMEM. */
pk_status gram_schema_to_gbnf(const char *schema, size_t len, char **out, gram_error *err);

/* The syntax a schema's values are written in.  JSON is JSON with blanks
 * as above.  GEMMA4 is what Gemma 4's chat template prints for a call's
 * arguments (its format_argument): no blanks; strings between <|"|> marks,
 * unescaped (any text but the mark; with minLength / maxLength, a pattern
 * or a format, no '<' at all); keys bare, or between the marks when the
 * call's reader could not read them bare (a ':', '}' or control byte, a
 * leading blank or mark), in the order of jinja2's dictsort (ASCII case
 * folded, ties in the schema's order: the order the template prints);
 * true, false and None; numbers as Python prints them: integers, and
 * floats as repr() writes them (no trailing zeros, exponents only outside
 * [1e-4, 1e16), "1e-05") with at most 7 digits before the point and 8
 * significant ones after it (15 digits read back as written), so what is
 * written is what the template would print for the value read back.  The
 * keys of an object without properties come in the model's order (a
 * grammar cannot sort free keys). */
typedef enum gram_syntax {
    GRAM_SYNTAX_JSON = 0,
    GRAM_SYNTAX_GEMMA4,
} gram_syntax;

/* The same schema as rules to embed in a larger grammar: "<prefix>root"
 * and rules named <prefix>sN..., values written in syntax syn, without
 * the shared rules of that syntax (JSON's ws, value, string, number,
 * integer, ..., GEMMA4's g4-..., both's f-date, ...) that they use: append
 * gram_syntax_rules(syn) once (one syntax per grammar: both have the f-
 * rules).  prefix: letters, digits, '-' (may be "").  Errors as
 * gram_schema_to_gbnf, and PK_EUNSUPPORTED for what syn cannot write (a
 * GEMMA4 string holding its mark, a '<' in a GEMMA4 pattern). */
pk_status gram_schema_rules(const char *schema, size_t len, const char *prefix, gram_syntax syn, char **out,
                            gram_error *err);
const char *gram_syntax_rules(gram_syntax syn);  /* static text */

/* Appends s[0..n) to b as a GBNF string literal (quotes and backslashes
 * escaped, control bytes as \xHH, UTF-8 as it is). */
struct pk_buf;
void gram_put_literal(struct pk_buf *b, const char *s, size_t n);

/* The grammar for "any JSON object" (response_format json_object): static. */
const char *gram_json_object_gbnf(void);

/* ---- vocabulary ---- */

typedef struct gram_vocab gram_vocab;

/* Builds the sorted byte view of a vocabulary: token i's bytes are
 * bytes[off[i] .. off[i+1]) (off has n_vocab + 1 entries); tokens with no
 * bytes are never allowed; is_eog[i] marks end-of-generation tokens
 * (allowed only where the grammar may end).  Copies what it keeps.
 * PK_EINVAL for n_vocab <= 0; PK_ENOMEM.  Immutable after: any thread may
 * use it. */
pk_status gram_vocab_new(int32_t n_vocab, const char *bytes, const int64_t *off,
                         const bool *is_eog, gram_vocab **out);
void gram_vocab_free(gram_vocab *v);             /* NULL is a no-op */

/* ---- matching ---- */

typedef struct gram_matcher gram_matcher;

/* A matcher at the grammar's start.  Holds references to g (counted) and v
 * (the caller keeps v alive).  PK_ENOMEM.  One owner thread at a time. */
pk_status gram_matcher_new(gram_grammar *g, const gram_vocab *v, gram_matcher **out);
void gram_matcher_free(gram_matcher *m);         /* NULL is a no-op */
/* Back to the grammar's start, keeping every state, transition and mask
 * built so far (a later request on an equal grammar starts warm).  False
 * when the matcher ran out of memory and cannot be reused (free it). */
bool gram_matcher_reset(gram_matcher *m);
/* The grammar it runs (its reference). */
const gram_grammar *gram_matcher_grammar(const gram_matcher *m);

/* The tokens allowed now: a bitset of n_vocab bits (bit i of word i/64),
 * owned by the matcher, valid until the next call on it.  NULL on memory
 * exhaustion (PK_ENOMEM: the caller stops the request).  Cached per state:
 * a repeated state costs a lookup. */
const uint64_t *gram_matcher_mask(gram_matcher *m);

/* Advances over one token.  PK_EINVAL when the grammar does not allow it
 * (the state is then unchanged); PK_ENOMEM.  An end-of-generation token is
 * allowed only where the grammar may end, and leaves the state as it is. */
pk_status gram_matcher_accept(gram_matcher *m, int32_t token);

/* Where the matcher is: its states are interned, so a number; setting it
 * back undoes the accepts since (speculation checks its guesses ahead). */
int32_t gram_matcher_state(const gram_matcher *m);
void gram_matcher_set_state(gram_matcher *m, int32_t state);

/* Advances over raw bytes (for tests and prompts); same errors. */
pk_status gram_matcher_accept_bytes(gram_matcher *m, const char *s, size_t n);

/* The grammar may end here (the input so far is a complete sentence). */
bool gram_matcher_can_end(const gram_matcher *m);
/* ... and nothing may follow: generation is over. */
bool gram_matcher_done(const gram_matcher *m);

/* Counters for measurements: masks computed vs. served from the cache,
 * states and stacks built so far. */
typedef struct gram_stats {
    int64_t n_mask_built, n_mask_cached, n_states, n_stacks;
} gram_stats;
gram_stats gram_matcher_stats(const gram_matcher *m);

/* Whole-string check from the start (tests): true when s is a sentence. */
bool gram_accepts(gram_grammar *g, const char *s, size_t n);

#endif
