/*
 * srv_reason.h - thinking in a chat answer: where <think>...</think> (or
 * Gemma 4's thought channel) ends and the answer begins, for the whole
 * text and for a stream cut anywhere.
 *
 * DESIGN
 *   One pure function over the text generated so far.  A model thinks when
 *   its answer opens with "<think>" (after white space), or when the prompt
 *   already opened it (Qwen3 / DeepSeek-R1 templates end the generation
 *   prompt with "<think>\n": the answer starts inside).  The thinking runs
 *   to the first "</think>"; the answer is what follows, its leading white
 *   space dropped.  An answer that never closes its thinking (cut by the
 *   token limit) is all thinking.  Text that does not open with <think> is
 *   all answer: a "<think>" later in it is the model talking about tags.
 *
 *   Streaming: with `final` false, the split holds back what the next
 *   bytes could still change: a partial "<think>" at the start, a partial
 *   "</think>" at the end of the thinking, white space after "</think>".
 *   So sending the parts' new bytes at every step and the rest at the end
 *   gives exactly the whole-text split, wherever the tokens cut the tags
 *   (tests/test_srv_reason.c cuts at every byte).
 *
 *   Formats (srv_reasoning, llama-server's names): none leaves everything
 *   in the answer; auto and deepseek split; deepseek-legacy splits and also
 *   keeps the whole text, tags included, as the answer.
 *
 *   Tags (srv_think_tags, picked from the chat template): <think>...</think>,
 *   or Gemma 4's thought channel, which its template writes as
 *   "<|channel>thought\n" + thinking + "\n<channel|>": those two new lines
 *   are not thinking, so a turn sent back renders as the model wrote it
 *   (a stream holds back a new line that may be the one before the close).
 *   Gemma 4 may also end an answer with an empty thought block (llama.cpp
 *   drops it too): a trailing "<|channel>thought<channel|>" with only white
 *   space inside and after it is not part of the answer, and a stream holds
 *   back what could still become one.
 *
 * Threads: any; nothing is shared.
 */
#ifndef SRV_REASON_H
#define SRV_REASON_H

#include <stddef.h>

#include "srv.h"

typedef enum srv_think_tags {
    SRV_THINK_TAGS = 0,         /* <think>...</think> (DeepSeek-R1, Qwen3, ...) */
    SRV_THINK_CHANNEL,          /* Gemma 4: <|channel>thought ... <channel|> */
} srv_think_tags;

typedef struct srv_reason_split {
    size_t reason_off, reason_len;     /* the thinking, tags excluded */
    size_t content_off, content_len;   /* the answer */
    bool thinking;                     /* the text so far is inside an unclosed <think> */
} srv_reason_split;

/* Splits text[0..len) under format f with tags t.  started_inside: the
 * prompt opened the thinking.  final: nothing more will come (else only
 * what cannot change is in the parts).  The parts are offsets into text. */
srv_reason_split srv_reason_split_text(srv_reasoning f, srv_think_tags t, const char *text, size_t len,
                                       bool started_inside, bool final);

/* Whether a rendered chat prompt leaves the answer inside <think> (it
 * ends with "<think>" and optional white space). */
bool srv_reason_prompt_opens(const char *prompt, size_t len);

#endif
