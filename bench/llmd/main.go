// llmd-scorer: llm-d's own KV-cache indexer (github.com/llm-d/llm-d-kv-cache)
// fed by polykv replicas' KV events through its own ZMQ subscribers and
// vLLM adapter, asked over HTTP which replica holds the longest prefix of a
// token list.  Built beside polykv by bench/llmd/build.sh; driven by
// bench/llmd_route.mjs (docs/kv-events.md).
//
//	llmd-scorer -listen 127.0.0.1:18600 -model M -pod replica-0=tcp://127.0.0.1:18510 -pod ...
//	POST /score {"tokens": [...]} -> {"scores": {"replica-0": 3, ...}}
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"
)

type pods []string

func (p *pods) String() string     { return strings.Join(*p, ",") }
func (p *pods) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	listen := flag.String("listen", "127.0.0.1:18600", "where to answer /score")
	model := flag.String("model", "", "the model name in the replicas' topics (kv@<pod>@<model>)")
	blockSize := flag.Int("block-size", 16, "tokens per block (polykv's --kv-block-size)")
	var ps pods
	flag.Var(&ps, "pod", "NAME=ENDPOINT of a replica's KV events (repeat)")
	flag.Parse()
	if *model == "" || len(ps) == 0 {
		fmt.Fprintln(os.Stderr, "usage: llmd-scorer -model M -pod NAME=tcp://HOST:PORT ...")
		os.Exit(2)
	}
	ctx := context.Background()
	tp, err := kvblock.NewChunkedTokenDatabase(&kvblock.TokenProcessorConfig{BlockSizeTokens: *blockSize})
	must(err)
	cfg, err := kvcache.NewDefaultConfig()
	must(err)
	ix, err := kvcache.NewKVCacheIndexer(ctx, cfg, tp)
	must(err)
	go ix.Run(ctx)
	ad, err := engineadapter.NewAdapter(engineadapter.EngineTypeVLLM)
	must(err)
	pool := kvevents.NewPool(&kvevents.Config{TopicFilter: "kv@", Concurrency: 1, EngineType: "vllm"},
		ix.KVBlockIndex(), tp, ad)
	pool.Start(ctx)
	subs := kvevents.NewSubscriberManager(pool)
	for _, p := range ps {
		name, ep, ok := strings.Cut(p, "=")
		if !ok {
			log.Fatalf("-pod %s: want NAME=ENDPOINT", p)
		}
		// remote: dial the replica's bound PUB socket, as llm-d does for vLLM pods
		must(subs.EnsureSubscriber(ctx, name, ep, "kv@", true))
	}
	http.HandleFunc("/score", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		scores, err := ix.ScoreTokens(r.Context(), body.Tokens, *model, nil, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if scores == nil {
			scores = map[string]float64{}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"scores": scores})
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	log.Printf("llmd-scorer: %d replicas, model %q, blocks of %d; listening on %s", len(ps), *model, *blockSize, *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
