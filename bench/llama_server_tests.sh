#!/bin/sh
# bench/llama_server_tests.sh - run llama.cpp's server test suite
# (tools/server/tests, pytest) offline against one server binary.
#
#   bench/llama_server_tests.sh LLAMA_CPP_TREE SERVER_BIN [pytest args...]
#   SERVER_SUBCOMMAND=serve bench/llama_server_tests.sh LLAMA_CPP_TREE build/polykv ...
#
# The suite starts its servers with --hf-repo/--hf-file, which download; here
# nothing can be downloaded.  This script makes a wrapper that replaces the
# stories260K repo with ../shared/models/stories260K.gguf and passes every
# other argument through, points LLAMA_SERVER_BIN_PATH at it, and loads
# bench/llama_tests_offline.py, which skips the tests of any other preset
# (their models are not here) and the suite's download-everything step.
#
# Env: POLYKV_SHARED (default ../shared), VENV (default /work/peers/srvtests-venv,
# made from the suite's requirements.txt when missing).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 LLAMA_CPP_TREE SERVER_BIN [pytest args...]" >&2; exit 2; }
tree=$(cd "$1" && pwd); bin=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2
here=$(cd "$(dirname "$0")" && pwd)
shared=$(cd "${POLYKV_SHARED:-$here/../../shared}" && pwd)
model="$shared/models/stories260K.gguf"
[ -f "$model" ] || { echo "$0: $model is absent" >&2; exit 2; }
sub=${SERVER_SUBCOMMAND:-}
venv=${VENV:-/work/peers/srvtests-venv}
if [ ! -x "$venv/bin/pytest" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$tree/tools/server/tests/requirements.txt"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/server" <<WRAP
#!/bin/sh
# Rewrites --hf-repo [--hf-file] of the stories260K presets to -m $model.
n=\$#; i=0; repo=""
while [ \$i -lt \$n ]; do
    a=\$1; shift; i=\$((i + 1))
    case "\$a" in
    --hf-repo) repo=\$1; shift; i=\$((i + 1)); continue ;;
    --hf-file) shift; i=\$((i + 1)); continue ;;
    esac
    set -- "\$@" "\$a"
done
case "\$repo" in
"") exec "$bin" $sub "\$@" ;;
ggml-org/test-model-stories260K|ggml-org/models) exec "$bin" $sub -m "$model" "\$@" ;;
*) echo "llama_server_tests: model \$repo is not available offline" >&2; exit 3 ;;
esac
WRAP
chmod +x "$work/server"
cd "$tree/tools/server/tests"
LLAMA_SERVER_BIN_PATH="$work/server" PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
    "$venv/bin/pytest" -p llama_tests_offline -p no:cacheprovider "$@"
