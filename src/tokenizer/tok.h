/*
 * tok.h - tokenizers: SentencePiece-style (SPM, byte fallback) and
 * byte-level BPE with the gpt2, llama3 (llama-bpe), qwen2, deepseek-coder and
 * "default" pre-tokenizers, loaded from a GGUF's tokenizer.ggml.* keys; and
 * chat templates.
 *
 * DESIGN: tok_load_gguf copies what it needs out of the GGUF (so the vocab
 * outlives the gguf_ctx) into a hash table text -> id, a table of each
 * token's piece, and for BPE a hash table "left right" -> merge rank.
 * Encoding:
 *
 *   text --special-token pass--> [plain | special id | plain ...]
 *     plain, SPM: spaces -> U+2581 (plus one in front when the model asks
 *                 and the fragment starts the text or follows a special
 *                 token) -> merge by score -> <0xNN> byte fallback
 *     plain, BPE: code points (bad UTF-8 -> U+FFFD) -> pre-tokenizer words
 *                 -> GPT-2 byte alphabet -> merge by rank
 *   + BOS/EOS when add_special and the model says so.
 *
 * The special-token pass tries the special tokens longest first; control
 * and unknown tokens only with parse_special, user-defined ones always.  The
 * loader follows the reference engine's text-based fix-ups, since they
 * change results: tokens spelled like end-of-turn markers (<|im_end|>,
 * <|endoftext|>, </s>, ...) become control and end-of-generation tokens,
 * FIM markers become control tokens, and Phi-3 vocabularies (by general.name)
 * eat the white space after their special tokens.  Output equals the
 * reference engine's (llama_tokenize / llama_token_to_piece /
 * llama_detokenize) for every vector and reference file in ../shared; the
 * Unicode tables are Unicode 15.1, as the reference's.
 *
 * Not supported (PK_EUNSUPPORTED at load): tokenizer models other than
 * "llama" (SPM) and "gpt2" (BPE) - no WordPiece, Unigram, RWKV - and other
 * pre-tokenizers (falcon, starcoder, command-r, deepseek-llm, ...).
 *
 * Threads: a tok_vocab is immutable after load; any thread may use it.
 * Encoding allocates its scratch memory per call.
 */
#ifndef TOK_H
#define TOK_H

#include "../common/pk.h"
#include "../gguf/gguf.h"

typedef struct tok_vocab tok_vocab;

typedef enum tok_kind { TOK_SPM = 1, TOK_BPE = 2 } tok_kind;

/* Loads the vocabulary (works on vocab-only GGUFs); g may be closed after.
 * On failure *out is NULL and err (may be NULL) gets a one-line reason:
 * PK_EUNSUPPORTED for unknown tokenizer models or pre-tokenizers, PK_EFORMAT
 * for missing or mistyped keys (tokens, BPE merges, scores, token types) or
 * two tokens with the same text, PK_ENOMEM, PK_EINVAL for NULL g/out.
 * Special ids (bos, eos, ...) outside the vocabulary are ignored. */
pk_status tok_load_gguf(const gguf_ctx *g, tok_vocab **out, char *err, size_t err_len);
void tok_free(tok_vocab *v);                     /* NULL is a no-op */

tok_kind tok_get_kind(const tok_vocab *v);
int32_t tok_n_vocab(const tok_vocab *v);
int32_t tok_bos(const tok_vocab *v);             /* -1 when none */
int32_t tok_eos(const tok_vocab *v);
bool tok_add_bos(const tok_vocab *v);            /* as the model says */
bool tok_add_eos(const tok_vocab *v);
/* End of generation: EOS, EOT/EOM (by key or text), FIM pad/repo/file-sep,
 * and tokens spelled <|im_end|>, <|eot_id|>, <|end_of_text|>, <|endoftext|>,
 * </s>, ... (the reference's list).  False for ids out of range. */
bool tok_is_eog(const tok_vocab *v, int32_t id);
/* Control tokens (type 3, or promoted by the text rules above): hidden by
 * tok_piece unless `special`, matched in text only with parse_special. */
bool tok_is_control(const tok_vocab *v, int32_t id);
/* Id of an exact token text, -1 when absent. */
int32_t tok_find(const tok_vocab *v, const char *text, size_t len);
/* (Added.) The stored text of a token (not NUL-terminated; SPM spaces are
 * U+2581, BPE bytes in the byte-level alphabet), or NULL with *len = 0 for an
 * id out of range.  Points into the vocabulary. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);
/* The most input bytes one token of tok_encode's output can stand for (the
 * longest stored token text: an SPM U+2581 is 3 bytes for 1 space, a BPE
 * byte character 1-2 bytes for 1 byte), so a text of len bytes gives at
 * least len / this tokens: a bound a server checks before tokenizing.  0
 * when there is none: an SPM vocabulary with neither a byte token nor
 * <unk> for some byte drops that byte.  O(n_vocab); call it once. */
size_t tok_max_token_bytes(const tok_vocab *v);

/* Text -> ids.  add_special adds BOS/EOS where the model says to;
 * parse_special turns special-token texts into their ids.  Writes at most
 * n_max ids; *n_out gets the count needed.  PK_EFULL when n_max is too
 * small (out then holds the first n_max).  Any bytes are accepted (text need
 * not be valid UTF-8 or NUL-free).  PK_EINVAL for NULL arguments,
 * n_max < 0 or a text over 1 GiB; PK_ENOMEM. */
pk_status tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, int32_t n_max, int32_t *n_out);

/* The bytes of one token (byte tokens become their byte, SPM's U+2581 a
 * space, BPE's byte-level characters their bytes).  Control and unknown
 * tokens give their text only when `special`; unused/undefined tokens give
 * nothing.  Returns the byte count written to buf (at most cap; 0 for an id
 * out of range), or -(needed) when cap is too small.  Not NUL-terminated;
 * the bytes of one token may be part of a UTF-8 character. */
int32_t tok_piece(const tok_vocab *v, int32_t id, char *buf, int32_t cap, bool special);

/* (Added.) Ids -> text exactly as the reference's llama_detokenize:
 * remove_special drops a leading BOS / trailing EOS the model adds;
 * unparse_special renders control tokens; SPM drops the first piece's
 * leading space (unless a BOS was removed); BPE vocabularies that ask for it
 * (gpt2, llama3) get clean_up_tokenization_spaces.  Returns the byte count
 * (not NUL-terminated), or -(n) when cap is too small, n being enough. */
int32_t tok_decode(const tok_vocab *v, const int32_t *ids, int32_t n_ids, char *buf, int32_t cap,
                   bool remove_special, bool unparse_special);

/* Length of the longest prefix of buf[0..n) that does not end inside an
 * incomplete UTF-8 sequence: stream only that much, keep the rest. */
size_t tok_utf8_complete(const char *buf, size_t n);

/* The model's chat template source (tokenizer.chat_template) or NULL. */
const char *tok_chat_template(const tok_vocab *v);

/*
 * Chat templates.  A full Jinja engine is not the goal: the known templates
 * are recognized from their source and rendered by code, producing exactly
 * the reference engine's llama_chat_apply_template text for the same kind
 * (no leading BOS: tokenizing with add_special adds it).  Roles: system,
 * user, assistant; ChatML also tool.  Detection: "<|im_start|>" -> ChatML
 * (not Phi-4/SmolVLM); "[INST]" -> LLAMA2_SYS with "<<SYS>>", else LLAMA2
 * (Mistral v3/v7 layouts -> UNKNOWN); "<|start_header_id|>" +
 * "<|end_header_id|>" -> LLAMA3; "<|START_OF_TURN_TOKEN|>" + "<|USER_TOKEN|>"
 * -> COMMAND_R.
 */
typedef enum tmpl_kind {
    TMPL_UNKNOWN = 0,
    TMPL_CHATML,     /* Qwen: <|im_start|>role\n...<|im_end|>\n */
    TMPL_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    TMPL_LLAMA2,     /* Llama 2 / Mistral: [INST] ... [/INST] */
    TMPL_LLAMA2_SYS, /* (Added.) Llama-2-chat proper: <<SYS>> block, trimmed contents */
    TMPL_COMMAND_R,  /* Cohere Command-R: <|START_OF_TURN_TOKEN|><|ROLE_TOKEN|>...<|END_OF_TURN_TOKEN|> */
} tmpl_kind;

typedef struct tmpl_msg { const char *role; const char *content; } tmpl_msg;

tmpl_kind tmpl_detect(const char *template_src);   /* TMPL_UNKNOWN when not recognized or NULL */
tmpl_kind tmpl_from_name(const char *name);        /* "chatml", "llama3", "llama2", "mistral", "llama2-sys",
                                                      "command-r"; UNKNOWN otherwise */
const char *tmpl_name(tmpl_kind k);
/* Renders msgs into a prompt text; with add_assistant the text ends with the
 * opening of the assistant's turn.  Writes a NUL-terminated string; *n_out
 * gets its length (on PK_EFULL: the length needed, without the NUL; out then
 * holds a truncated, NUL-terminated prefix when cap > 0).  PK_EINVAL for an
 * unknown kind or role, NULL role/content, or n_msgs < 0. */
pk_status tmpl_apply(tmpl_kind k, const tmpl_msg *msgs, int n_msgs, bool add_assistant,
                     char *out, size_t cap, size_t *n_out);

/* (Added.) The system message a ChatML template inserts when the
 * conversation does not start with one (Qwen 1.5/2: "You are a helpful
 * assistant", Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a
 * helpful assistant."; Qwen3 and plain ChatML: none).  Writes it
 * NUL-terminated into out (truncated to cap - 1) and returns its full length,
 * 0 when the template has none. */
size_t tmpl_default_system(const char *template_src, char *out, size_t cap);

/* (Added.) What a server wants: detect the kind from the model's template
 * source and render, inserting the template's default system message where
 * its Jinja would.  PK_EUNSUPPORTED when the template is not recognized;
 * otherwise as tmpl_apply (on PK_EFULL *n_out is the length needed). */
pk_status tmpl_render(const char *template_src, const tmpl_msg *msgs, int n_msgs, bool add_assistant,
                      char *out, size_t cap, size_t *n_out);

#endif
