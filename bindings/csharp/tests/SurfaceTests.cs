// The binding's surface against pkv.h (issue 26, item 9): every PKV_API call of the header is
// wrapped by a public member named here (and called by the binding), or listed as deliberately
// unwrapped with the reason, so a call added to pkv.h fails this test until the binding knows
// it; the public surface holds no IntPtr, pointer or raw uint where pkv.h has an enum; the
// assembly's version is pkv.h's.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text.RegularExpressions;
using Pkv;

static partial class Tests
{
    // C call -> the public member that wraps it ("Type.Member"; ".ctor" for a constructor)
    static readonly Dictionary<string, string> Wrapped = new Dictionary<string, string> {
        { "pkv_version", "Library.Version" }, { "pkv_abi_version", "Library.AbiVersion" },
        { "pkv_status_string", "Library.StatusString" },
        { "pkv_last_error", "PkvException.Detail" },  // the message of every failed call
        { "pkv_store_params_init", "StoreConfig..ctor" },
        { "pkv_event_publisher_params_init", "EventPublisherConfig..ctor" },  // its defaults, at create
        { "pkv_engine_params_init", "EngineParams.Defaults" },
        { "pkv_engine_params_from_hf_config", "EngineParams.FromHfConfig" },
        { "pkv_hf_config_layer_windows", "Library.HfConfigLayerWindows" },
        { "pkv_hf_config_digest", "Library.HfConfigDigest" },
        { "pkv_kv_groups", "Library.KvGroups" }, { "pkv_profile", "Library.Profile" },
        { "pkv_engine_create", "Engine..ctor" }, { "pkv_engine_destroy", "Engine.Dispose" },
        { "pkv_engine_last_error", "PkvException.Detail" },  // the message of a failed engine call
        { "pkv_engine_params_get", "Engine.Params" }, { "pkv_engine_budget", "Engine.Budget" },
        { "pkv_engine_stats", "Engine.Stats" }, { "pkv_engine_store_error", "Engine.StoreError" },
        { "pkv_seq_params_init", "Engine.Allocate" },  // its salt argument
        { "pkv_allocate", "Engine.Allocate" }, { "pkv_allocate_query", "Engine.AllocateQuery" },
        { "pkv_append", "Sequence.Append" }, { "pkv_fork", "Sequence.Fork" }, { "pkv_release", "Sequence.Release" },
        { "pkv_truncate", "Sequence.Truncate" }, { "pkv_preempt", "Sequence.Preempt" },
        { "pkv_resume", "Sequence.Resume" }, { "pkv_swap_out", "Sequence.SwapOut" }, { "pkv_swap_in", "Sequence.SwapIn" },
        { "pkv_seq_info", "Sequence.Info" }, { "pkv_seq_block_table", "Sequence.BlockTable" },
        { "pkv_seq_group_block_table", "Sequence.GroupBlockTable" }, { "pkv_seq_tokens", "Sequence.Tokens" },
        { "pkv_batch_begin", "Engine.BeginBatch" },
        { "pkv_batch_info", "Batch.SlotMapping" },  // and the view's other arrays
        { "pkv_batch_copy", "Batch.Copy" }, { "pkv_batch_end", "Batch.End" }, { "pkv_batch_abort", "Batch.Abort" },
        { "pkv_request_params_init", "RequestParams.Defaults" }, { "pkv_submit", "Engine.Submit" },
        { "pkv_step", "Engine.Step" }, { "pkv_commit", "Batch.Commit" },
        { "pkv_drain_finished", "Engine.DrainFinished" }, { "pkv_drain_kv_events_sized", "Engine.DrainKvEvents" },
        { "pkv_event_publisher_info", "Engine.EventPublisherInfo" },
        { "pkv_reset_prefix_cache", "Engine.ResetPrefixCache" }, { "pkv_attention", "Batch.Attention" },
        { "pkv_pool_info", "Engine.PoolInfo" }, { "pkv_set_kv_scales", "Engine.SetKvScales" },
        { "pkv_engine_set_stream", "Engine.SetStream" },
        { "pkv_block_hash_root", "Library.BlockHashRoot" }, { "pkv_block_hash", "Library.BlockHash" },
        { "pkv_store_open", "StoreAdmin.Open" }, { "pkv_store_close", "StoreAdmin.Close" },
        { "pkv_store_info", "StoreAdmin.Info" }, { "pkv_store_list", "StoreAdmin.List" },
        { "pkv_store_verify", "StoreAdmin.Verify" }, { "pkv_store_clear", "StoreAdmin.Clear" },
        { "pkv_engine_check", "Engine.Check" },
        // 0.5: the cache per layer, extra keys and adapters
        { "pkv_engine_params_from_hf_config_layers", "EngineParams.FromHfConfigLayers" },
        { "pkv_kv_group_info", "Library.KvGroupInfo" }, { "pkv_layer_info", "Engine.LayerInfo" },
        { "pkv_set_attention_sinks", "Engine.SetAttentionSinks" },
        { "pkv_block_hash_root_lora", "Library.BlockHashRootLora" }, { "pkv_block_hash_extra", "Library.BlockHashExtra" },
        // 0.7: sparse attention
        { "pkv_indexer_write", "Batch.IndexerWrite" }, { "pkv_indexer_topk", "Batch.IndexerTopK" },
        { "pkv_sparse_mla_attention", "Batch.SparseMlaAttention" },
        // 0.8: retention
        { "pkv_cache_set_priority", "Engine.CacheSetPriority" }, { "pkv_cache_pin", "Engine.CachePin" },
        { "pkv_cache_unpin", "Engine.CacheUnpin" },
        // 0.9: CUDA graphs
        { "pkv_batch_plan_graph", "Batch.PlanGraph" },
        // 0.10: ranks
        { "pkv_batch_rank", "Batch.Rank" }, { "pkv_rank_pool_info", "Engine.RankPoolInfo" },
        { "pkv_engine_set_rank_stream", "Engine.SetRankStream" },
        { "pkv_batch_export_plan", "Batch.ExportPlan" }, { "pkv_plan_import", "Engine.ImportPlan" },
        // 0.11: block descriptors
        { "pkv_block_segments", "Engine.BlockSegments" },
        { "pkv_seq_segments", "Engine.SeqSegments" },
        { "pkv_layout_fingerprint", "Engine.LayoutFingerprint" },
        // 0.12: KV transfers between engines
        { "pkv_hold", "Engine.Hold" }, { "pkv_hold_end", "Engine.HoldEnd" },
        { "pkv_drain_receiving", "Engine.DrainReceiving" },
        { "pkv_receive_end", "Engine.ReceiveEnd" },
        { "pkv_seq_state_segment", "Engine.SeqStateSegment" },
        // 0.12: the UCX transfer agent
        { "pkv_agent_params_init", "AgentConfig..ctor" }, { "pkv_agent_create", "Agent..ctor" },
        { "pkv_agent_destroy", "Agent.Dispose" }, { "pkv_agent_address", "Agent.Address" },
        { "pkv_agent_connect", "Agent.Connect" }, { "pkv_agent_pull", "Agent.Pull" },
        { "pkv_agent_progress", "Agent.Progress" }, { "pkv_agent_stats_get", "Agent.Stats" },
    };

    // C call -> why the binding leaves it out
    static readonly Dictionary<string, string> Unwrapped = new Dictionary<string, string> {
        { "pkv_drain_kv_events", "Engine.DrainKvEvents uses pkv_drain_kv_events_sized at the binding's " +
                                 "sizeof(KvEvent), so a libpkv with longer events still fills it right" },
    };

    static string[] HeaderCalls()
    {
        string root = Path.GetDirectoryName(Path.GetDirectoryName(Path.GetDirectoryName(Path.GetFullPath(hashVectors))));
        string h = File.ReadAllText(Path.Combine(Path.Combine(Path.Combine(root, "include"), "pkv"), "pkv.h"));
        return Regex.Matches(h, @"PKV_API\s+[^;(]*?\b(pkv_\w+)\s*\(").Cast<Match>()
                    .Select(m => m.Groups[1].Value).ToArray();
    }

    // The pkv_* methods of Native that the binding's own code calls (call instructions in the
    // IL of every method of the assembly but Native's own wrappers).
    static HashSet<string> NativeCallsUsed()
    {
        Assembly asm = typeof(Engine).Assembly;
        Type native = asm.GetType("Pkv.Native");
        var used = new HashSet<string>();
        const BindingFlags all = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance |
                                 BindingFlags.Static | BindingFlags.DeclaredOnly;
        foreach (Type t in asm.GetTypes().Where(t => t != native))
            foreach (MethodBase m in t.GetMethods(all).Cast<MethodBase>().Concat(t.GetConstructors(all)))
            {
                MethodBody body = m.GetMethodBody();
                byte[] il = body == null ? null : body.GetILAsByteArray();
                for (int i = 0; il != null && i + 4 < il.Length; i++)
                {
                    if (il[i] != 0x28) continue;  // call <method token>
                    int token = BitConverter.ToInt32(il, i + 1);
                    try
                    {
                        MethodBase callee = t.Module.ResolveMethod(token);
                        if (callee.DeclaringType == native && callee.Name.StartsWith("pkv_")) used.Add(callee.Name);
                    }
                    catch (ArgumentException) { }  // 0x28 was an operand byte, not an opcode
                }
            }
        return used;
    }

    static void SurfaceMatchesHeader()
    {
        string[] calls = HeaderCalls();
        Assert(calls.Length >= 60, "pkv.h's calls read: " + calls.Length);
        string[] unknown = calls.Where(c => !Wrapped.ContainsKey(c) && !Unwrapped.ContainsKey(c)).ToArray();
        Assert(unknown.Length == 0, "pkv.h calls the C# binding does not know (wrap them, or list them in " +
               "SurfaceTests.cs's Unwrapped with the reason): " + string.Join(", ", unknown));
        string[] stale = Wrapped.Keys.Concat(Unwrapped.Keys).Where(c => !calls.Contains(c)).ToArray();
        Assert(stale.Length == 0, "listed but not in pkv.h: " + string.Join(", ", stale));
        Assembly asm = typeof(Engine).Assembly;
        Type native = asm.GetType("Pkv.Native");
        HashSet<string> used = NativeCallsUsed();
        foreach (var w in Wrapped)
        {
            Assert(native.GetMethod(w.Key, BindingFlags.Public | BindingFlags.Static) != null, "Native." + w.Key);
            Assert(used.Contains(w.Key), w.Key + " is generated but the binding never calls it");
            int dot = w.Value.IndexOf('.');
            Type type = asm.GetType("Pkv." + w.Value.Substring(0, dot));
            Assert(type != null && type.IsPublic, "public type of " + w.Value);
            MemberInfo[] members = type.GetMember(w.Value.Substring(dot + 1),
                                                  BindingFlags.Public | BindingFlags.Instance | BindingFlags.Static);
            Assert(members.Length > 0, w.Key + ": no public " + w.Value);
        }
    }

    static IEnumerable<Type> Signature(MemberInfo m)
    {
        var f = m as FieldInfo;
        if (f != null) return new[] { f.FieldType };
        var p = m as PropertyInfo;
        if (p != null) return new[] { p.PropertyType };
        var mb = m as MethodBase;
        if (mb == null) return new Type[0];
        IEnumerable<Type> ps = mb.GetParameters().Select(x => x.ParameterType);
        var mi = mb as MethodInfo;
        return mi == null ? ps : ps.Concat(new[] { mi.ReturnType });
    }

    // No IntPtr, UIntPtr or pointer in any public member; no public uint field named like one of
    // pkv.h's enums or flag sets (kind, mode, type, state, ...): those are enums.
    static void PublicSurfaceIsSafe()
    {
        var bad = new List<string>();
        var enumNames = new Regex("(Kind|Mode|Type|State|Source|Reason|Tier|Medium|Flags)$");
        foreach (Type t in typeof(Engine).Assembly.GetExportedTypes())
            foreach (MemberInfo m in t.GetMembers(BindingFlags.Public | BindingFlags.Instance | BindingFlags.Static |
                                                  BindingFlags.DeclaredOnly))
            {
                foreach (Type s in Signature(m))
                {
                    Type e = s.IsByRef || s.IsArray ? s.GetElementType() : s;
                    if (e == typeof(IntPtr) || e == typeof(UIntPtr) || e.IsPointer)
                        bad.Add(t.Name + "." + m.Name + ": " + s.Name);
                }
                var f = m as FieldInfo;
                if (f != null && f.FieldType == typeof(uint) && enumNames.IsMatch(f.Name))
                    bad.Add(t.Name + "." + f.Name + ": uint, not an enum");
            }
        Assert(bad.Count == 0, "unsafe public members: " + string.Join("; ", bad));
        Assert(typeof(DebugFlags).IsDefined(typeof(FlagsAttribute), false) &&
               typeof(StoreListFlags).IsDefined(typeof(FlagsAttribute), false), "flag sets are [Flags]");
        Assert(!typeof(Engine).Assembly.GetType("Pkv.Native").IsPublic, "the raw layer is internal");
        foreach (string f in new[] { "EngineParams.EnablePrefixCaching", "EngineParams.EnableKvEvents",
                                     "EngineParams.HostOffload", "SeqInfo.IsPreempted", "SeqInfo.InBatch", "SeqInfo.IsRequest" })
        {
            string[] tf = f.Split('.');
            Equal(typeof(bool), typeof(Engine).Assembly.GetType("Pkv." + tf[0]).GetField(tf[1]).FieldType, f);
        }
    }

    static void VersionFromHeader()
    {
        Version v = Library.BindingVersion;
        Equal(new Version(Constants.VersionMajor, Constants.VersionMinor, Constants.VersionPatch, 0), v,
              "assembly version");
        string root = Path.GetDirectoryName(Path.GetDirectoryName(Path.GetDirectoryName(Path.GetFullPath(hashVectors))));
        string h = File.ReadAllText(Path.Combine(Path.Combine(Path.Combine(root, "include"), "pkv"), "pkv.h"));
        foreach (string part in new[] { "MAJOR", "MINOR", "PATCH" })
        {
            Match m = Regex.Match(h, @"#define PKV_VERSION_" + part + @"\s+(\d+)");
            Assert(m.Success, "PKV_VERSION_" + part + " in pkv.h");
            int want = int.Parse(m.Groups[1].Value);
            Equal(want, part == "MAJOR" ? v.Major : part == "MINOR" ? v.Minor : v.Build, "version " + part);
        }
        Equal((uint)(v.Major * 10000 + v.Minor * 100 + v.Build), Library.Version, "the library's pkv_version");
        var info = (AssemblyInformationalVersionAttribute)Attribute.GetCustomAttribute(
            typeof(Engine).Assembly, typeof(AssemblyInformationalVersionAttribute));
        Equal(string.Format("{0}.{1}.{2}", v.Major, v.Minor, v.Build), info.InformationalVersion, "informational");
        string props = File.ReadAllText(Path.Combine(Path.Combine(Path.Combine(root, "bindings"), "csharp"),
                                                     "Version.g.props"));
        Assert(props.Contains("<Version>" + info.InformationalVersion + "</Version>"), "the package's version: " + props);
    }
}
