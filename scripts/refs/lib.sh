# lib.sh - what the reference scripts share (sourced, from the repository
# root, after setting PEER, OUT and DATA): the llama.cpp build's checks, a
# probe built against it, and the commands file every run is logged to.
#
#   refs_begin NAME   checks $PEER/build, makes $OUT and $DATA, starts
#                     $DATA/commands.txt with llama.cpp's commit (NAME: the
#                     script, for the first line)
#   refs_start NAME   refs_begin, then builds $OUT/probe
#   say CMD...        logs CMD ($OUT, $BIN, $PEER written as such) to $log and runs it
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
        echo "# Written by scripts/refs/$1; llama.cpp: $(git -C "$PEER" rev-parse HEAD 2>/dev/null || echo unknown)"
        echo "# (the node-llama-cpp@3.22.1 bundle, release v0.5.0: see ../shared/reference/README.md)"
        echo "# \$OUT = $OUT; \$PEER = $PEER"
    } > "$log"
}

say() { echo "$*" | sed "s|$OUT|\$OUT|g; s|$BIN|\$BIN|g; s|$PEER|\$PEER|g" >> "$log"; "$@"; }
