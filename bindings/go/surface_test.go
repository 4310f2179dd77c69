package pkv_test

// The binding's surface against pkv.h's (issue 26 item 9): every PKV_API function of
// include/pkv/pkv.h is wrapped by the exported Go function or method named in wrapped (which
// must exist and whose package must call the C function), used inside the binding as internal
// says, or left out for the reason unwrapped gives. A function pkv.h gains fails the test until
// it is put in one of them; so does an entry pkv.h no longer has.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// wrapped: the C function -> the Go function ("Name") or method ("Type.Name") that wraps it.
var wrapped = map[string]string{
	"pkv_version":                             "Version",
	"pkv_abi_version":                         "ABI",
	"pkv_status_string":                       "Status.Description",
	"pkv_engine_params_init":                  "DefaultParams",
	"pkv_engine_params_from_hf_config":        "ParamsFromHFConfig",
	"pkv_hf_config_layer_windows":             "HFConfigLayerWindows",
	"pkv_hf_config_digest":                    "HFConfigDigest",
	"pkv_kv_groups":                           "KVGroupsOf",
	"pkv_profile":                             "Profile",
	"pkv_engine_create":                       "NewEngine",
	"pkv_engine_destroy":                      "Engine.Close",
	"pkv_engine_params_get":                   "Engine.Params",
	"pkv_engine_budget":                       "Engine.Budget",
	"pkv_engine_stats":                        "Engine.Stats",
	"pkv_engine_store_error":                  "Engine.StoreError",
	"pkv_allocate":                            "Engine.Allocate",
	"pkv_allocate_query":                      "Engine.AllocateQuery",
	"pkv_append":                              "Sequence.Append",
	"pkv_fork":                                "Sequence.Fork",
	"pkv_release":                             "Sequence.Release",
	"pkv_truncate":                            "Sequence.Truncate",
	"pkv_preempt":                             "Sequence.Preempt",
	"pkv_resume":                              "Sequence.Resume",
	"pkv_swap_out":                            "Sequence.SwapOut",
	"pkv_swap_in":                             "Sequence.SwapIn",
	"pkv_seq_info":                            "Sequence.Info",
	"pkv_seq_block_table":                     "Sequence.BlockTable",
	"pkv_seq_group_block_table":               "Sequence.GroupBlockTable",
	"pkv_seq_tokens":                          "Sequence.Tokens",
	"pkv_batch_begin":                         "Engine.BeginBatch",
	"pkv_batch_info":                          "Batch.View",
	"pkv_batch_copy":                          "Batch.Copy",
	"pkv_batch_end":                           "Batch.End",
	"pkv_batch_abort":                         "Batch.Abort",
	"pkv_request_params_init":                 "DefaultRequestParams",
	"pkv_submit":                              "Engine.Submit",
	"pkv_step":                                "Engine.Step",
	"pkv_commit":                              "Batch.Commit",
	"pkv_drain_finished":                      "Engine.DrainFinished",
	"pkv_drain_kv_events_sized":               "Engine.DrainKVEvents",
	"pkv_event_publisher_info":                "Engine.EventPublisherInfo",
	"pkv_reset_prefix_cache":                  "Engine.ResetPrefixCache",
	"pkv_attention":                           "Batch.AttentionRaw",
	"pkv_pool_info":                           "Engine.PoolInfo",
	"pkv_set_kv_scales":                       "Engine.SetKVScales",
	"pkv_engine_set_stream":                   "Engine.SetStream",
	"pkv_block_hash_root":                     "BlockHashRoot",
	"pkv_block_hash":                          "BlockHash",
	"pkv_store_open":                          "OpenStore",
	"pkv_store_close":                         "StoreAdmin.Close",
	"pkv_store_info":                          "StoreAdmin.Info",
	"pkv_store_list":                          "StoreAdmin.List",
	"pkv_store_verify":                        "StoreAdmin.Verify",
	"pkv_store_clear":                         "StoreAdmin.Clear",
	"pkv_engine_check":                        "Engine.Check",
	"pkv_engine_params_from_hf_config_layers": "ParamsFromHFConfigLayers",
	"pkv_kv_group_info":                       "KVGroupInfoOf",
	"pkv_layer_info":                          "Engine.LayerInfo",
	"pkv_set_attention_sinks":                 "Engine.SetAttentionSinks",
	"pkv_block_hash_root_lora":                "BlockHashRootLoRA",
	"pkv_block_hash_extra":                    "BlockHashExtra",
	"pkv_indexer_write":                       "Batch.IndexerWriteRaw",
	"pkv_indexer_topk":                        "Batch.IndexerTopKRaw",
	"pkv_sparse_mla_attention":                "Batch.SparseMLAAttentionRaw",
	"pkv_cache_set_priority":                  "Engine.CacheSetPriority",
	"pkv_cache_pin":                           "Engine.CachePin",
	"pkv_cache_unpin":                         "Engine.CacheUnpin",
	"pkv_batch_plan_graph":                    "Batch.PlanGraph",
	"pkv_batch_rank":                          "Batch.Rank",
	"pkv_rank_pool_info":                      "Engine.RankPoolInfo",
	"pkv_engine_set_rank_stream":              "Engine.SetRankStream",
	"pkv_batch_export_plan":                   "Batch.ExportPlan",
	"pkv_plan_import":                         "Engine.ImportPlan",
	"pkv_block_segments":                      "Engine.BlockSegments",
	"pkv_seq_segments":                        "Engine.SeqSegments",
	"pkv_layout_fingerprint":                  "Engine.LayoutFingerprint",
	"pkv_hold":                                "Engine.Hold",
	"pkv_hold_end":                            "Engine.HoldEnd",
	"pkv_drain_receiving":                     "Engine.DrainReceiving",
	"pkv_receive_end":                         "Engine.ReceiveEnd",
	"pkv_seq_state_segment":                   "Engine.SeqStateSegment",
	"pkv_agent_params_init":                   "DefaultAgentParams",
	"pkv_agent_create":                        "Engine.NewAgent",
	"pkv_agent_destroy":                       "Agent.Close",
	"pkv_agent_address":                       "Agent.Address",
	"pkv_agent_connect":                       "Agent.Connect",
	"pkv_agent_pull":                          "Agent.Pull",
	"pkv_agent_progress":                      "Agent.Progress",
	"pkv_agent_stats_get":                     "Agent.Stats",
}

// internal: C functions the binding calls on the user's behalf, with where their effect shows.
var internal = map[string]string{
	"pkv_last_error":                  "the message of every *Error of a call without an engine",
	"pkv_engine_last_error":           "the message of every *Error of an engine's calls",
	"pkv_store_params_init":           "StoreConfig's zero fields keep pkv's defaults",
	"pkv_event_publisher_params_init": "EventPublisherParams' zero fields keep pkv's defaults",
	"pkv_seq_params_init":             "Allocate's and AllocateQuery's salt argument",
}

// unwrapped: C functions the binding leaves out, and why.
var unwrapped = map[string]string{
	"pkv_drain_kv_events": "DrainKVEvents calls pkv_drain_kv_events_sized with this binding's " +
		"KVEvent size, so an older or newer libpkv writes what both know (pkv.h's macro does " +
		"the same for C)",
}

// headerFunctions are the PKV_API functions of pkv.h, in order, and its version macros.
func headerFunctions(t *testing.T) ([]string, string) {
	text, err := os.ReadFile(filepath.Join("..", "..", "include", "pkv", "pkv.h"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`PKV_API\s+[\w\s\*]*?\b(pkv_\w+)\s*\(`).FindAllSubmatch(text, -1) {
		names = append(names, string(m[1]))
	}
	version := []string{}
	for _, part := range []string{"MAJOR", "MINOR", "PATCH"} {
		m := regexp.MustCompile(`#define PKV_VERSION_` + part + ` (\d+)`).FindSubmatch(text)
		if m == nil {
			t.Fatalf("pkv.h has no PKV_VERSION_%s", part)
		}
		version = append(version, string(m[1]))
	}
	return names, strings.Join(version, ".")
}

// packageSurface is the package's exported functions and methods ("Name", "Type.Name") and the
// C functions its non-test code calls.
func packageSurface(t *testing.T) (map[string]bool, map[string]bool) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	exported, called := map[string]bool{}, map[string]bool{}
	for _, f := range pkgs["pkv"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.IsExported() {
					exported[receiverName(n)+n.Name.Name] = true
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "C" {
					called[n.Sel.Name] = true
				}
			}
			return true
		})
	}
	return exported, called
}

func receiverName(fn *ast.FuncDecl) string {
	if fn.Recv == nil {
		return ""
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	return fmt.Sprint(t) + "."
}

func TestSurfaceMatchesTheHeader(t *testing.T) {
	names, version := headerFunctions(t)
	if len(names) < 60 {
		t.Fatalf("read only %d functions from pkv.h", len(names))
	}
	exported, called := packageSurface(t)
	inHeader := map[string]bool{}
	for _, c := range names {
		inHeader[c] = true
		goName, isWrapped := wrapped[c]
		_, isInternal := internal[c]
		_, isUnwrapped := unwrapped[c]
		switch {
		case isWrapped && !exported[goName]:
			t.Errorf("%s: wrapped by %s, which the package does not export", c, goName)
		case (isWrapped || isInternal) && !called[c]:
			t.Errorf("%s: listed as used, but the package never calls C.%s", c, c)
		case !isWrapped && !isInternal && !isUnwrapped:
			t.Errorf("%s (pkv.h) is unknown to the Go binding: wrap it and name the wrapper in "+
				"surface_test.go's wrapped, or say why not in internal or unwrapped", c)
		}
	}
	for _, list := range []map[string]string{wrapped, internal, unwrapped} {
		for c := range list {
			if !inHeader[c] {
				t.Errorf("%s is listed in surface_test.go but pkv.h has no such function", c)
			}
		}
	}
	if pkv.BindingVersion != version {
		t.Errorf("BindingVersion %s, pkv.h says %s: run bindings/gen/gen.py", pkv.BindingVersion, version)
	}
	loaded := fmt.Sprintf("%d.%d.%d", pkv.Version()/10000, pkv.Version()/100%100, pkv.Version()%100)
	if loaded != version {
		t.Errorf("the loaded libpkv is %s, this tree's pkv.h %s", loaded, version)
	}
}
