/*
 * cli.h - the sub-commands of the polykv binary and the small helpers they
 * share (argument parsing).  Each cli_*.c holds one sub-command.
 */
#ifndef CLI_H
#define CLI_H

#include "../common/pk.h"
#include "../tensor/tq.h"

int cli_run(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_gen_model(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_template(int argc, char **argv);
int cli_pull(int argc, char **argv);

/* cli_hub.c: a model by name (src/hub) on the command line.  cli_hub_env
 * starts h from hub_default_opts and the environment (LLAMA_ARG_HF_REPO,
 * LLAMA_ARG_HF_FILE, HF_TOKEN, LLAMA_ARG_OFFLINE); cli_hub_flag reads
 * argv[*i] (and its value, advancing *i) into h: 1 taken, 0 not one of
 * its flags, -1 bad (the message printed); h keeps pointers into argv and
 * the environment.  cli_hub_check: -1 (said why, as `polykv cmd`) when
 * the flags do not go together.  cli_hub_resolve finds or downloads h's
 * model and sets *path (malloc'ed) to it: 0, or -1 with the reason on
 * stderr. */
struct hub_opts;
void cli_hub_env(struct hub_opts *h);
int cli_hub_flag(int argc, char **argv, int *i, struct hub_opts *h);
bool cli_hub_takes_value(const char *a);
int cli_hub_check(const struct hub_opts *h, const char *cmd);
int cli_hub_resolve(const struct hub_opts *h, char **path);
void cli_hub_usage(void);

/* cli_serve_llama.c: the llama-server flags of `polykv serve`.  Reads
 * argv[*i] (and its value, advancing *i) into sp: 1 taken, 0 not one of
 * them, -1 refused or bad (the message printed). */
struct srv_params;
int cli_serve_llama_flag(int argc, char **argv, int *i, struct srv_params *sp);
void cli_serve_llama_usage(void);
/* Whether a, one of those flags, takes a value. */
bool cli_serve_llama_takes_value(const char *a);

/* cli_router.c: `polykv serve` without -m, router mode (src/router).
 * Serves with sp (its router field set here) until SIGINT / SIGTERM, which
 * the caller has blocked.  Children run `serve` with child_args. */
typedef struct cli_router_opts {
    const char *models_dir;     /* NULL: none */
    const char *models_preset;  /* an INI file of models and flags, NULL none */
    int models_max;             /* 0: no cap */
    bool autoload;
    const char **child_args;
    int n_child_args;
} cli_router_opts;
int cli_router(struct srv_params *sp, const cli_router_opts *ro);
/* cli_serve.c: whether serve's flag a takes a value; whether argv (argv[0]
 * "serve", then flags) is a command line serve accepts (the reason on
 * stderr when not). */
bool cli_serve_takes_value(const char *a);
bool cli_serve_check(int argc, char **argv);
/* With an API key and no --public-probes, says on stderr that /health and
 * /metrics need the key too and how to open them: llama-server leaves
 * /health open, and a Kubernetes probe sends no key, so a deployment moved
 * over from it would fail its probes with nothing in the log to say why. */
void cli_serve_note_probes(const struct srv_params *sp);
/* Vertex AI's environment (llama-server's GCP compatibility): with
 * AIP_MODE=PREDICTION, sp gets the predict route (AIP_PREDICT_ROUTE,
 * /predict), a health route (AIP_HEALTH_ROUTE) and the port AIP_HTTP_PORT
 * (8080), which wins over --port.  Returns 1 when set, 0 when AIP_MODE is
 * not PREDICTION, -1 for a bad port (reported on stderr). */
int cli_serve_gcp_env(struct srv_params *sp);

/* Value of option argv[*i] (advancing *i), or NULL with a message on stderr
 * when it is missing. */
const char *cli_arg(int argc, char **argv, int *i);
/* Parses an integer / float option value; false (with a message) when bad. */
bool cli_int(const char *opt, const char *s, long lo, long hi, long *out);
bool cli_float(const char *opt, const char *s, double *out);
/* A byte count: digits, optionally followed by one of K, M, G, T (either
 * case: 2^10 ... 2^40); false (with a message) when bad or past 2^64. */
bool cli_bytes(const char *opt, const char *s, uint64_t *out);
/* A K/V cache type by llama-server's name (f32, f16, bf16, q8_0, q4_0,
 * q4_1, q5_0, q5_1, iq4_nl); false (with a message naming opt) when not. */
bool cli_kv_type(const char *opt, const char *s, tq_type *out);
/* Whether model m's cache can hold K type k and V type v; false with the
 * reason on stderr (model_kv_types_refusal). */
struct model;
bool cli_kv_types_ok(const struct model *m, tq_type k, tq_type v);
/* Default thread count: the CPUs this process may run on. */
int cli_default_threads(void);

#endif
