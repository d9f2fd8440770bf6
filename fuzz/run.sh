#!/bin/sh
# fuzz/run.sh [SECONDS] - fuzzes, with libFuzzer for SECONDS each (default
# 60): the GGUF reader; the server (JSON validation, chat rendering,
# tool-call parsing, and every route of a real in-process server on
# stories260K, the route picked by the input's first byte); the grammar
# engine (GBNF, JSON Schema, masks); the Jinja interpreter (template
# sources); the saved-KV file reader (src/save);
# KV cache and pool tree operation sequences against naive models; the
# tokenizers over every vocabulary in ../shared/models.  Each target is
# built in build-fuzz/ with clang's fuzzer, ASan and UBSan; corpora are
# seeded from the tests' shapes and the real files in ../shared when
# present.  Exits non-zero when libFuzzer finds a crash, a leak or a hang
# (the input is saved in build-fuzz/).  FUZZ_ONLY=name runs one target.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
out=build-fuzz
cc=${FUZZ_CC:-clang}
src="src/gguf/gguf.c src/gguf/gguf_write.c src/common/pk.c"
flags="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -g"
san="-O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
only=${FUZZ_ONLY:-}
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
# fuzz TARGET CORPUS MAX_LEN [more libFuzzer flags]
fuzz() {
    t=$1; c=$2; len=$3; shift 3
    "$out/$t" "$out/$c" -max_total_time="$secs" -max_len="$len" -timeout=30 -rss_limit_mb=4096 \
        -artifact_prefix="$out/" -print_final_stats=1 "$@"
}
mkdir -p "$out"

if want fuzz_gguf; then
    mkdir -p "$out/corpus_gguf"
    $cc $flags $san $src fuzz/fuzz_gguf.c -o "$out/fuzz_gguf"
    $cc $flags -O1 $src fuzz/seed_gguf.c -o "$out/seed_gguf"
    "$out/seed_gguf" "$out/corpus_gguf"
    for f in ../shared/models/stories260K.gguf ../shared/models/vocab/*.gguf; do
        if [ -f "$f" ]; then cp "$f" "$out/corpus_gguf/"; fi
    done
    fuzz fuzz_gguf corpus_gguf 2097152
fi

# The server: its own files with the sanitizers, the rest of the library
# from a plain build.  Seeds: a chat with tools, tool calls, and one body
# per route (the first byte picks the route: fuzz_server.c's table).
if want fuzz_server; then
    make -s all
    mkdir -p "$out/corpus_server"
    printf '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}' \
        > "$out/corpus_server/chat.json"
    printf '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>' > "$out/corpus_server/call.txt"
    printf '<|tool_call>call:f{a:<|"|>x, y<|"|>,b:[1,-2.5e3,{c:null}],d:true}<tool_call|>' > "$out/corpus_server/g4call.txt"
    printf '<|channel|>analysis<|message|>a<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"x": 1}<|call|>' \
        > "$out/corpus_server/harmony.txt"
    printf '\002{"prompt":"Once upon","max_tokens":4}' > "$out/corpus_server/r02"
    printf '\003{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}' > "$out/corpus_server/r03"
    printf '\004{"prompt":"Once","n_predict":3,"stream":true,"n_probs":2}' > "$out/corpus_server/r04"
    printf '\005{"content":"hello","add_special":true}' > "$out/corpus_server/r05"
    printf '\006{"tokens":[1,2,3]}' > "$out/corpus_server/r06"
    printf '\014{"prompt":"Once upon a time"}' > "$out/corpus_server/r12"
    printf '\016{"tokens":[1,2,3,4,5],"branch_pos":2}' > "$out/corpus_server/r14"
    printf '\025{"target_tps_per_session":5,"mode":"enforced"}' > "$out/corpus_server/r21"
    printf '\032{"filename":"a.bin"}' > "$out/corpus_server/r26"
    printf '\033{"filename":"a.bin"}' > "$out/corpus_server/r27"
    printf '\040{"input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"max_output_tokens":3,"stream":true}' > "$out/corpus_server/r32"
    printf '\041{"instructions":"x","input":"hi"}' > "$out/corpus_server/r33"
    printf '\042{"instances":[{"@requestFormat":"chatCompletions","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}],"max_tokens":2}]}' > "$out/corpus_server/r34"
    printf '\043{"max_tokens":3,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"stream":true}' \
        > "$out/corpus_server/r35"
    printf '\044{"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"disabled"}}' > "$out/corpus_server/r36"
    $cc $flags $san fuzz/fuzz_server.c src/server/*.c src/tokenizer/tmpl_tools.c src/tokenizer/tmpl.c \
        src/common/utf8.c build/libpolykv.a -ljansson -lmicrohttpd -lxxhash -lcurl -lzmq -lmsgpackc -lm -pthread -o "$out/fuzz_server"
    fuzz fuzz_server corpus_server 4096
fi

# The grammar engine: GBNF and JSON Schemas, then text and masks over them.
if want fuzz_grammar; then
    mkdir -p "$out/corpus_grammar"
    printf '\000root ::= "a" [b-d]* ("x" | item){1,3}\nitem ::= [^a]\000abx' > "$out/corpus_grammar/gbnf.txt"
    printf '\001{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":70}},"required":["a"]}\000{"a":5}' \
        > "$out/corpus_grammar/schema.txt"
    $cc $flags $san fuzz/fuzz_grammar.c src/grammar/*.c src/common/pk.c src/common/buf.c -ljansson -lm \
        -o "$out/fuzz_grammar"
    fuzz fuzz_grammar corpus_grammar 4096
fi

# The saved-KV file reader; the binary writes its own seeds (both kinds).
if want fuzz_save; then
    mkdir -p "$out/corpus_save"
    $cc $flags $san fuzz/fuzz_save.c src/save/sav.c src/common/pk.c -lxxhash -o "$out/fuzz_save"
    POLYKV_FUZZ_SEED_DIR="$out/corpus_save" fuzz fuzz_save corpus_save 4096
fi

# KV cache and pool tree operation sequences against naive models.
if want fuzz_seq; then
    mkdir -p "$out/corpus_seq"
    printf '\000\000\002\003\001\004\002\001\003\006\005\004\001\002\003\007' > "$out/corpus_seq/kv"
    printf '\001\000\000\012\001\000\002\001\002\003\000\001\002\002\001\000\001' > "$out/corpus_seq/pool"
    $cc $flags $san fuzz/fuzz_seq.c src/kv/kv.c src/pool/pool.c src/common/pk.c src/common/huge.c -lxxhash -lm \
        -o "$out/fuzz_seq"
    fuzz fuzz_seq corpus_seq 1024
fi

# The tokenizers: the reference's own test inputs as seeds (one per vocabulary).
if want fuzz_tok && [ ! -d ../shared/models/vocab ]; then
    echo "fuzz_tok: ../shared/models/vocab absent: the tokenizers are not fuzzed here"
elif want fuzz_tok; then
    mkdir -p "$out/corpus_tok"
    for f in ../shared/models/vocab/*.inp; do
        if [ -f "$f" ]; then head -c 400 "$f" > "$out/corpus_tok/$(basename "$f")"; fi
    done
    printf '\045<|im_start|>user\nhi<|im_end|>' > "$out/corpus_tok/special"
    $cc $flags $san fuzz/fuzz_tok.c src/tokenizer/tok*.c src/gguf/gguf.c src/common/pk.c src/common/buf.c \
        src/common/utf8.c -lxxhash -lm -o "$out/fuzz_tok"
    fuzz fuzz_tok corpus_tok 1024
fi

if want fuzz_jinja; then
    # The Jinja interpreter: template sources, compiled and rendered with one
    # conversation (seeds: a few statements of each kind).
    mkdir -p "$out/corpus_jinja"
    printf '{%%- for m in messages %%}{%% if loop.first %%}{{ bos_token }}{%% endif %%}<{{ m.role }}>{{ m.content | tojson(indent=2) }}{%% endfor %%}' \
        > "$out/corpus_jinja/loop.jinja"
    printf '{%% set ns = namespace(x=0) %%}{%% macro f(a, b=2) %%}{{ a ~ b }}{%% endmacro %%}{{ f(1) }}{{ tools | map(attribute="function.name") | join(",") }}{{ "abc"[::-1] }}' \
        > "$out/corpus_jinja/macro.jinja"
    $cc $flags $san fuzz/fuzz_jinja.c src/jinja/*.c src/common/pk.c src/common/buf.c -ljansson -lm -o "$out/fuzz_jinja"
    fuzz fuzz_jinja corpus_jinja 4096
fi
