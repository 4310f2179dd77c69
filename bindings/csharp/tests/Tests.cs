// The C# binding's tests: a console runner (no test framework needed), printing
// "N passed, N failed". Usage: mono Tests.exe HASH_VECTORS C_DEMO DEMO_EXE
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Threading;
using Pkv;

static partial class Tests
{
    static string hashVectors, cDemo, demoExe;
    static int passed, failed;

    static void Assert(bool ok, string what) { if (!ok) throw new Exception("assertion failed: " + what); }
    static void Equal<T>(T want, T got, string what)
    {
        if (!EqualityComparer<T>.Default.Equals(want, got))
            throw new Exception(string.Format("{0}: want {1}, got {2}", what, want, got));
    }

    static PkvException Throws(Status s, Action a)
    {
        try { a(); }
        catch (PkvException e)
        {
            Equal(s, e.Status, "status");
            Equal(Native.StatusName(s), e.StatusName, "status name");
            Assert(e.Detail.Length > 0 && e.Message.Contains(e.Detail), "message for " + s);
            return e;
        }
        throw new Exception("no PkvException " + s);
    }

    static void Throws<E>(Action a) where E : Exception
    {
        try { a(); }
        catch (E) { return; }
        throw new Exception("no " + typeof(E).Name);
    }

    static EngineParams Small()
    {
        var p = EngineParams.Defaults();
        p.NumLayers = 2; p.NumQHeads = 4; p.NumKvHeads = 2; p.HeadDim = 16;
        p.DType = DType.F32; p.BlockSize = 4; p.NumBlocks = 16;
        p.Device = Device.Cpu; p.NumThreads = 1;
        return p;
    }

    static void RunStep(Engine e, params Sequence[] seqs)
    {
        using (var b = e.BeginBatch(seqs))
        {
            var q = new float[b.NumTokens * 64];
            var kv = new float[b.NumTokens * 32];
            for (uint layer = 0; layer < 2; layer++) b.Attention(layer, q, kv, kv, new float[q.Length]);
            b.End();
        }
    }

    static void HashVectors()
    {
        int cases = 0;
        foreach (string raw in File.ReadAllLines(hashVectors))
        {
            string line = raw.Trim();
            if (line.Length == 0 || line.StartsWith("#")) continue;
            string[] sides = line.Split(new[] { "->" }, StringSplitOptions.None);
            string[] left = sides[0].Split(new[] { ' ' }, StringSplitOptions.RemoveEmptyEntries);
            ulong[] want = sides[1].Split(new[] { ' ' }, StringSplitOptions.RemoveEmptyEntries)
                .Select(x => ulong.Parse(x.Substring(2), NumberStyles.HexNumber)).ToArray();
            ulong seed = ulong.Parse(left[0]);
            byte[] salt = left[1] == "-" ? null : Enumerable.Range(0, left[1].Length / 2)
                .Select(i => Convert.ToByte(left[1].Substring(2 * i, 2), 16)).ToArray();
            ulong h = Library.BlockHashRoot(seed, salt);
            Equal(want[0], h, "root of " + line);
            string[] blocks = left[2].Split(';');
            for (int b = 0; b < blocks.Length; b++)
            {
                h = Library.BlockHash(seed, h, blocks[b].Split(',').Select(int.Parse).ToArray());
                Equal(want[b + 1], h, "block " + b + " of " + line);
            }
            cases++;
        }
        Assert(cases >= 5, "vectors read");
    }

    static void StatusNames()
    {
        foreach (Status s in Enum.GetValues(typeof(Status)))
        {
            var e = new PkvException(s, "detail");
            Equal(s, e.Status, "status");
            Assert(e.StatusName.StartsWith(s == Status.Ok ? "OK" : "ERR_"), "name of " + s);
            Assert(Library.StatusString(s).Length > 0, "string of " + s);
        }
        Equal("ERR_NO_SPACE", Native.StatusName(Status.NoSpace), "name");
        Equal("unknown status", Library.StatusString((Status)(-1000)), "unknown status string");
        Equal(Native.PKV_ERR_NO_SPACE, (int)Status.NoSpace, "enum value");
    }

    static void StatusesFromCalls()
    {
        using (var e = new Engine(Small()))
        {
            Throws(Status.InvalidArgument, () => e.Allocate(new int[0]));
            var p = Small(); p.NumKvHeads = 3;
            Throws(Status.InvalidArgument, () => new Engine(p));
            Throws(Status.InvalidArgument, () => EngineParams.FromHfConfig("{"));
            Throws(Status.NoSpace, () => e.Allocate(new int[4 * 17]));
            Throws(Status.NotFound, () => e.Sequence(12345).Release());
            var seq = e.Allocate(new[] { 1, 2, 3, 4, 5 });
            Throws(Status.State, () => seq.Fork());
            using (var b = e.BeginBatch(new[] { seq }))
                Throws(Status.State, () => seq.Append(6));
        }
        var hd = Small(); hd.HeadDim = 12;
        using (var e = new Engine(hd))
        using (var b = e.BeginBatch(new[] { e.Allocate(new[] { 1, 2, 3 }) }))
        {
            var buf = new float[3 * 4 * 12];
            Throws(Status.Unsupported, () => b.Attention(0, buf, buf, buf, new float[buf.Length]));
        }
        var oom = Small(); oom.NumBlocks = 0; oom.KvCacheBytes = 100; oom.MaxModelLen = 4096;
        KvBudget budget;
        Equal(Status.OutOfMemory, Library.ProfileOrShortfall(oom, out budget), "profile");
        Assert(budget.ShortfallBytes > 0, "shortfall");
        Throws(Status.OutOfMemory, () => Library.Profile(oom));
        Throws(Status.OutOfMemory, () => new Engine(oom));
        var cuda = Small(); cuda.Device = Device.Cuda;
        try { new Engine(cuda).Dispose(); }
        catch (PkvException e) { Equal(Status.NoDevice, e.Status, "CUDA engine"); }
        var hf = EngineParams.FromHfConfig("{\"num_hidden_layers\": 3, \"num_attention_heads\": 8, " +
            "\"hidden_size\": 256, \"torch_dtype\": \"float16\", \"max_position_embeddings\": 1024}");
        Equal(32u, hf.HeadDim, "head_dim"); Equal(8u, hf.NumKvHeads, "kv heads");
    }

    static void DisposedRefused()
    {
        var e = new Engine(Small());
        var seq = e.Allocate(new[] { 1, 2, 3 });
        var batch = e.BeginBatch(new[] { seq });
        e.Dispose();
        e.Dispose();  // idempotent
        Assert(e.IsDisposed && !batch.IsOpen, "disposed");
        Throws<ObjectDisposedException>(() => e.Stats());
        Throws<ObjectDisposedException>(() => e.Allocate(new[] { 1 }));
        Throws<ObjectDisposedException>(() => seq.Release());
        Throws<ObjectDisposedException>(() => batch.End());
        Throws<ObjectDisposedException>(() => batch.Positions());
        batch.Abort();  // idempotent
        EngineHandle raw;  // the raw layer: a disposed SafeHandle is refused by the marshaller
        var rp = Small().ToNative();
        unsafe { Equal(Status.Ok, Native.pkv_engine_create(&rp, out raw), "create"); }
        raw.Dispose();
        Throws<ObjectDisposedException>(() => Native.pkv_engine_check(raw));
        using (var e2 = new Engine(Small()))
        {
            var b = e2.BeginBatch(new[] { e2.Allocate(new[] { 1, 2 }) });
            b.End();
            Throws<ObjectDisposedException>(() => b.End());
            Throws<ObjectDisposedException>(() => b.Attention(0, NativeAddress.Zero, NativeAddress.Zero, NativeAddress.Zero, NativeAddress.Zero));
        }
    }

    static void NoSpaceChangesNothing()
    {
        using (var e = new Engine(Small()))
        {
            var seq = e.Allocate(Enumerable.Range(0, 40).ToArray());
            RunStep(e, seq);
            Stats before = e.Stats();
            int[] table = seq.BlockTable();
            Throws(Status.NoSpace, () => e.Allocate(Enumerable.Range(100, 28).ToArray()));
            Throws(Status.NoSpace, () => seq.Append(new int[30]));
            Assert(before.Equals(e.Stats()), "stats unchanged");
            Assert(table.SequenceEqual(seq.BlockTable()), "block table unchanged");
            Equal(40u, seq.Info().NumTokens, "tokens");
            e.Check();
        }
    }

    static void Truncate()
    {
        using (var e = new Engine(Small()))
        {
            var seq = e.Allocate(Enumerable.Range(1, 14).ToArray());
            RunStep(e, seq);
            seq.Truncate(6);
            var info = seq.Info();
            Equal(6u, info.NumTokens, "tokens");
            Equal(6u, info.NumComputedTokens, "computed");
            Equal(2u, info.NumBlocks, "blocks");
            Throws(Status.InvalidArgument, () => seq.Truncate(0));
            Throws(Status.InvalidArgument, () => seq.Truncate(7));
            seq.Release();
            e.Check();
        }
    }

    static void SequencesAndBatches()
    {
        using (var e = new Engine(Small()))
        {
            int[] prompt = Enumerable.Range(1, 9).ToArray();
            uint cached;
            Equal(3u, e.AllocateQuery(prompt, out cached), "query blocks");
            var seq = e.Allocate(prompt);
            Assert(seq.Tokens().SequenceEqual(prompt), "tokens");
            using (var b = e.BeginBatch(new[] { seq }))
            {
                Assert(b.QueryStart().SequenceEqual(new[] { 0, 9 }), "query_start");
                Assert(b.Positions().SequenceEqual(Enumerable.Range(0, 9)), "positions");
                Assert(b.BlockIndices().SequenceEqual(seq.BlockTable()), "block indices");
                Equal(seq.Id, b.SeqIds()[0], "seq id");
            }  // no End: aborted
            Equal(0u, seq.Info().NumComputedTokens, "aborted");
            RunStep(e, seq);
            var child = seq.Fork();
            seq.Preempt();
            Equal(8u, seq.Resume(), "resume cached");
            var salted = e.Allocate(prompt, new byte[] { 1, 2 });
            Equal(0u, salted.NumCachedTokens, "salted");
            Equal(2u, salted.Info().CacheSaltLen, "salt len");
            foreach (var s in new[] { seq, child, salted }) s.Release();
            Equal(0ul, e.Stats().NumSeqs, "no seqs");
            Equal(Device.Cpu, e.PoolInfo().Device, "pool device");
            e.SetStream(NativeAddress.Zero);
            e.Check();
        }
    }

    static void StructSizes()
    {
        for (int i = 0; i < Native.StructTypes.Length; i++)
            Equal(Native.StructSizes[i], Marshal.SizeOf(Native.StructTypes[i]), Native.StructTypes[i].Name);
    }

    static void Threads()
    {
        var errors = new List<Exception>();
        using (var e = new Engine(Small()))
        {
            var threads = Enumerable.Range(0, 4).Select(t => new Thread(() =>
            {
                try
                {
                    for (int i = 0; i < 200; i++)
                    {
                        Sequence s;
                        try { s = e.Allocate(new[] { t, i, 1, 2, 3 }); }
                        catch (PkvException x) { if (x.Status != Status.NoSpace) throw; continue; }
                        s.Append(4);
                        try { e.Sequence(1000000000).Release(); }
                        catch (PkvException x) { Assert(x.Detail.Contains("sequence"), x.Detail); }
                        s.Release();
                    }
                }
                catch (Exception x) { lock (errors) errors.Add(x); }
            })).ToList();
            threads.ForEach(th => th.Start());
            threads.ForEach(th => th.Join());
            e.Check();
            Equal(0ul, e.Stats().NumSeqs, "no seqs left");
        }
        if (errors.Count > 0) throw errors[0];
    }

    static void Scheduler()
    {
        var p = Small(); p.NumBlocks = 32; p.EnableKvEvents = true;
        using (var e = new Engine(p))
        {
            var rp = RequestParams.Defaults(); rp.MaxNewTokens = 3;
            var a = e.Submit(Enumerable.Range(1, 10).ToArray(), rp);
            rp.MaxNewTokens = 5; rp.StopToken = 9;
            var b = e.Submit(Enumerable.Range(20, 6).ToArray(), rp, new byte[] { 1 });
            var finished = new List<ulong>();
            int steps = 0;
            for (Batch batch; (batch = e.Step()) != null; )
            {
                steps++;
                var q = new float[batch.NumTokens * 64]; var kv = new float[batch.NumTokens * 32];
                for (uint layer = 0; layer < 2; layer++) batch.Attention(layer, q, kv, kv, new float[q.Length]);
                batch.Commit(Enumerable.Repeat(steps == 3 ? 9 : 5, (int)batch.NumSeqs).ToArray());
                Throws<ObjectDisposedException>(() => batch.Commit(new[] { 1 }));
                finished.AddRange(e.DrainFinished());
            }
            Assert(finished.OrderBy(x => x).SequenceEqual(new[] { a.Id, b.Id }.OrderBy(x => x)), "finished");
            Equal(FinishReason.Length, a.Info().FinishReason, "a finished by length");
            Equal(FinishReason.StopToken, b.Info().FinishReason, "b finished by stop token");
            KvEvent[] events = e.DrainKvEvents();
            Assert(events.Length > 0 && events[0].Type == KvEventType.BlockStored, "stored events");
            foreach (ulong id in finished) e.Sequence(id).Release();
            e.ResetPrefixCache();
            Equal(0ul, e.Stats().NumCachedBlocks, "cache reset");
            e.Check();
        }
    }

    // The events come through pkv_drain_kv_events_sized at sizeof(KvEvent): every field filled,
    // seq numbers counting up from 1, the hashes the canonical chain (pkv_block_hash), the
    // medium the pool.
    static void KvEvents()
    {
        var p = Small(); p.EnableKvEvents = true;
        using (var e = new Engine(p))
        {
            var seq = e.Allocate(Enumerable.Range(0, 9).ToArray());
            RunStep(e, seq);
            ulong root = Library.BlockHashRoot(0, null);
            ulong h0 = Library.BlockHash(0, root, new[] { 0, 1, 2, 3 });
            ulong h1 = Library.BlockHash(0, h0, new[] { 4, 5, 6, 7 });
            KvEvent[] events = e.DrainKvEvents();
            Equal(2, events.Length, "stored events");
            ulong[] parents = { root, h0 }, hashes = { h0, h1 };
            for (int i = 0; i < 2; i++)
            {
                var want = new KvEvent { Type = KvEventType.BlockStored, NumTokens = 4,
                    SeqNo = (ulong)(i + 1), BlockHash = hashes[i], ParentHash = parents[i],
                    Medium = Tier.Device };
                Equal(want, events[i], "event " + i);
            }
            seq.Release();
            e.ResetPrefixCache();
            KvEvent[] later = e.DrainKvEvents();
            Assert(later.Length > 0, "events after the reset");
            for (int i = 0; i < later.Length; i++) Equal((ulong)(3 + i), later[i].SeqNo, "seq_no, reset");
            Equal(0, e.DrainKvEvents().Length, "nothing left");
        }
    }

    static string Run(string exe, string args, bool viaThisAssembly)
    {
        if (viaThisAssembly)  // the C# demo, in this process, its console captured
        {
            var output = new StringWriter();
            TextWriter old = Console.Out;
            Console.SetOut(output);
            try { Assembly.LoadFrom(exe).EntryPoint.Invoke(null, new object[] { new[] { args } }); }
            finally { Console.SetOut(old); }
            return output.ToString();
        }
        var psi = new ProcessStartInfo(exe, args) { UseShellExecute = false, RedirectStandardOutput = true };
        using (var p = Process.Start(psi))
        {
            string text = p.StandardOutput.ReadToEnd();
            p.WaitForExit();
            Equal(0, p.ExitCode, exe + " exit code");
            return text;
        }
    }

    static void DemoOutput()
    {
        foreach (string seed in new[] { "42", "7", "1", "2", "3" })
        {
            string want = Run(cDemo, seed, false);
            Assert(want.StartsWith("pkv "), "C demo output");
            Equal(want, Run(demoExe, seed, true), "demo output, seed " + seed);
        }
    }

    static int Main(string[] args)
    {
        hashVectors = args[0]; cDemo = args[1]; demoExe = args[2];
        var tests = new Dictionary<string, Action> {
            { "hash_vectors", HashVectors }, { "status_names", StatusNames },
            { "statuses_from_calls", StatusesFromCalls }, { "disposed_refused", DisposedRefused },
            { "no_space_changes_nothing", NoSpaceChangesNothing },
            { "sequences_and_batches", SequencesAndBatches }, { "truncate", Truncate }, { "struct_sizes", StructSizes },
            { "threads", Threads }, { "scheduler", Scheduler }, { "kv_events", KvEvents },
            { "host_tier", HostTier }, { "swap_out_and_in", SwapOutAndIn },
            { "swap_without_host_tier", SwapWithoutHostTier }, { "preemption_by_swapping", PreemptionBySwapping }, { "limits_and_kinds", LimitsAndKinds },
            { "offload_and_load_back", OffloadAndLoadBack }, { "host_offload_off", HostOffloadOff },
            { "callback_store", CallbackStore }, { "failing_store_is_a_miss", FailingStoreIsAMiss },
            { "file_store_and_params", FileStoreAndParams },
            { "config_windows_and_groups", ConfigWindowsAndGroups }, { "layer_windows_checked", LayerWindowsChecked },
            { "one_window_engine", OneWindowEngine }, { "fp8_engine_and_scales", Fp8EngineAndScales },
            { "kv_event_group", KvEventGroup },
            { "mla_params", MlaParams }, { "mla_attention_without_v", MlaAttentionWithoutV },
            { "mla_scales_without_v", MlaScalesWithoutV }, { "mla_deepseek_v3_config", MlaDeepSeekV3Config },
            { "loaded", Loaded }, { "load_error_names_what_to_set", LoadErrorNamesWhatToSet },
            { "sequence_disposes", SequenceDisposes }, { "event_publisher", EventPublisher },
            { "scheduler_batch_end_keeps_it", SchedulerBatchEndKeepsIt },
            { "dropped_batch_is_aborted", DroppedBatchIsAborted },
            { "attention_checks_dtype_and_length", AttentionChecksDtypeAndLength },
            { "sample_rows_of_steps", SampleRowsOfSteps }, { "hf_config_one_call", HfConfigOneCall },
            { "store_admin_of_file_store", StoreAdminOfFileStore },
            { "surface_matches_header", SurfaceMatchesHeader }, { "public_surface_is_safe", PublicSurfaceIsSafe },
            { "version_from_header", VersionFromHeader }, { "model_id_keeps_models_apart", ModelIdKeepsModelsApart },
            { "layer_specs_owned_and_checked", LayerSpecsOwnedAndChecked }, { "kv_group_bytes", KvGroupBytes },
            { "engine_layers_and_sinks", EngineLayersAndSinks },
            { "attention_on_heterogeneous_layers", AttentionOnHeterogeneousLayers },
            { "chunked_and_sliding_layers_mask", ChunkedAndSlidingLayersMask }, { "fp8_scales_per_layer", Fp8ScalesPerLayer },
            { "config_layer_specs", ConfigLayerSpecs }, { "extra_keys_decide_hits", ExtraKeysDecideHits },
            { "extra_key_events_and_hashes", ExtraKeyEventsAndHashes }, { "extra_hash_vectors", ExtraHashVectors }, { "bad_extra_keys_refused", BadExtraKeysRefused },
            { "state_spec_round_trips", StateSpecRoundTrips }, { "state_budget_by_hand", StateBudgetByHand },
            { "bad_state_specs_refused", BadStateSpecsRefused }, { "engine_state_slots", EngineStateSlots },
            { "state_checkpoint_restores_a_shared_prefix", StateCheckpointRestoresASharedPrefix },
            { "state_checkpoint_policies", StateCheckpointPolicies },
            { "state_checkpoints_evict_the_least_recently_used", StateCheckpointsEvictTheLeastRecentlyUsed },
            { "host_state_slots_in_budget_and_pool", HostStateSlotsInBudgetAndPool },
            { "swap_moves_the_working_state_through_a_host_slot", SwapMovesTheWorkingStateThroughAHostSlot },
            { "a_checkpoint_is_offloaded_then_restored", ACheckpointIsOffloadedThenRestored },
            { "sparse_layer_info", SparseLayerInfo }, { "sparse_topk_and_attention", SparseTopKAndAttention },
            { "sparse_refusals", SparseRefusals },
            { "retention_keeps_system_prompts", RetentionKeepsSystemPrompts },
            { "retention_evictions_by_priority", RetentionEvictionsByPriority },
            { "retention_refusals", RetentionRefusals }, { "retention_of_a_request", RetentionOfARequest },
            { "cache_pin", CachePinHoldsAPrefix }, { "cache_pin_cap", CachePinCap },
            { "retention_decays", RetentionDecays },
            { "plan_graph_on_a_cpu_engine_keeps_the_batch", PlanGraphOnACpuEngineKeepsTheBatch },
            { "plan_graph_on_a_step_batch_then_commit", PlanGraphOnAStepBatchThenCommit },
            { "step_counters_on_a_cpu_engine", StepCountersOnACpuEngine },
            { "ranks_all_runs_each_ranks_heads", RanksAllRunsEachRanksHeads },
            { "rank_streams", RankStreams }, { "rank_device_ids", RankDeviceIds },
            { "plan_exported_runs_on_a_pool_engine_once", PlanExportedRunsOnAPoolEngineOnce },
            { "layout_fingerprints", LayoutFingerprints },
            { "seq_segments_move_a_prompt", SeqSegmentsMoveAPrompt },
            { "block_segments_where_pool_info_says", BlockSegmentsWherePoolInfoSays },
            { "segments_refusals", SegmentsRefusals },
            { "page_layout_one_segment_a_block", PageLayoutOneSegmentABlock },
            { "hold_a_sequence", HoldASequence }, { "hold_times_out", HoldTimesOut },
            { "hold_on_finish_of_a_request", HoldOnFinishOfARequest },
            { "remote_fill_between_two_engines", RemoteFillBetweenTwoEngines },
            { "failed_fill_computes_itself", FailedFillComputesItself },
            { "state_moves_with_its_sequence", StateMovesWithItsSequence },
            { "transfer_refusals", TransferRefusals },
            { "agent_pull_between_two_engines", AgentPullBetweenTwoEngines },
            { "agent_fingerprint_mismatch", AgentFingerprintMismatch },
            { "agent_pull_not_held", AgentPullNotHeld }, { "agent_refusals", AgentRefusals },
            { "demo_output", DemoOutput },
        };
        foreach (var t in tests)
        {
            try { t.Value(); passed++; Console.WriteLine("ok   " + t.Key); }
            catch (Exception e) { failed++; Console.WriteLine("FAIL " + t.Key + ": " + e); }
        }
        Console.WriteLine("{0} passed, {1} failed", passed, failed);
        return failed == 0 ? 0 : 1;
    }
}
