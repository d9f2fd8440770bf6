/*
 * cli.h - the sub-commands of the polykv binary and the small helpers they
 * share (argument parsing).  Each cli_*.c holds one sub-command.
 */
#ifndef CLI_H
#define CLI_H

#include "../common/pk.h"

int cli_run(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_gen_model(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_template(int argc, char **argv);

/* cli_serve_llama.c: the llama-server flags of `polykv serve`.  Reads
 * argv[*i] (and its value, advancing *i) into sp: 1 taken, 0 not one of
 * them, -1 refused or bad (the message printed). */
struct srv_params;
int cli_serve_llama_flag(int argc, char **argv, int *i, struct srv_params *sp);
void cli_serve_llama_usage(void);
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
/* Default thread count: the CPUs this process may run on. */
int cli_default_threads(void);

#endif
