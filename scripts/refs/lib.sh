# lib.sh - what the reference scripts share (sourced, from the repository
# root, after setting PEER, OUT and DATA): the llama.cpp build's checks, a
# probe built against it, and the commands file every run is logged to.
#
#   refs_begin NAME   checks $PEER/build, makes $OUT and $DATA, starts
#                     $DATA/commands.txt with llama.cpp's commit (NAME: the
#                     script, for the first line; under scripts/refs/ unless
#                     NAME is a path)
#   refs_start NAME   refs_begin, then builds $OUT/probe
#   say CMD...        logs CMD ($OUT, $BIN, $PEER and, when set, $VENV written
#                     as such) to $log and runs it
#   refs_sha FILE     logs "# sha256 HASH  DIR/NAME" to $log ($OUT and $PEER
#                     written as such)
#   refs_convert HF BASE TYPE...
#                     llama.cpp's convert_hf_to_gguf.py (run by $PY) of the
#                     checkpoint directory HF to $OUT/BASE-TYPE.gguf for each
#                     TYPE (F32, BF16, Q8_0), through say; its output to
#                     $OUT/convert-BASE-TYPE.log
BIN=$PEER/build/bin

refs_start() {
    refs_begin "$1"
    g++ -std=c++17 -O2 -I"$PEER/include" -I"$PEER/ggml/include" scripts/refs/probe.cpp -L"$BIN" \
        -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$OUT/probe"
}

refs_begin() {
    [ -d "$PEER/build" ] || { echo "$1: no llama.cpp build at $PEER/build" >&2; exit 2; }
    mkdir -p "$OUT" "$DATA"
    export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log=$DATA/commands.txt
    {
        case $1 in */*) by=$1 ;; *) by=scripts/refs/$1 ;; esac
        echo "# Written by $by; llama.cpp: $(git -C "$PEER" rev-parse HEAD 2>/dev/null || echo unknown)"
        echo "# (the node-llama-cpp@3.22.1 bundle, release v0.5.0: see ../shared/reference/README.md)"
        echo "# \$OUT = $OUT; \$PEER = $PEER"
    } > "$log"
}

say() { echo "$*" | sed "s|$OUT|\$OUT|g; s|$BIN|\$BIN|g; s|$PEER|\$PEER|g${VENV:+; s|$VENV|\$VENV|g}" >> "$log"; "$@"; }

refs_sha() {
    (cd "$(dirname "$1")" && sha256sum "$(basename "$1")") |
        sed "s|^\([0-9a-f]*\)  |# sha256 \1  $(dirname "$1" | sed "s|$OUT|\$OUT|; s|$PEER|\$PEER|")/|" >> "$log"
}

refs_convert() {
    _hf=$1 _base=$2
    shift 2
    for _t in "$@"; do
        say "$PY" "$PEER/convert_hf_to_gguf.py" "$_hf" --outtype "$(echo "$_t" | tr 'A-Z' 'a-z')" \
            --outfile "$OUT/$_base-$_t.gguf" > "$OUT/convert-$_base-$_t.log" 2>&1
    done
}
