// Attention variants (pkv 0.2, DESIGN.md §12): fp8 KV and its scales, sliding windows and KV
// groups, a config's per-layer windows, and the group arrays of a batch.
//
// Per-layer windows are EngineParams.LayerWindows, an array the params own, or an argument of
// the calls that read them (new Engine(p, layerWindows), Library.Profile, Library.KvGroups);
// either way pinned for the call only (pkv copies them at create).
using System;

namespace Pkv
{
    /// <summary>How the layers are grouped for the pool (pkv_kv_groups): groups of GroupLayers
    /// layers of one window each, full-attention groups first.</summary>
    public sealed class KvGroups
    {
        /// <summary>Layers a block holds (K and V): NumLayers with one group.</summary>
        public uint GroupLayers;
        /// <summary>[groups]: each group's window, 0 = full attention.</summary>
        public uint[] GroupWindow;
        /// <summary>[NumLayers]: each layer's group.</summary>
        public uint[] LayerGroup;
        /// <summary>[NumLayers]: each layer's place in its group's blocks (its index in the
        /// pool's layer dimension, PoolInfo).</summary>
        public uint[] LayerSlot;
        public int NumGroups { get { return GroupWindow.Length; } }
    }

    public static unsafe partial class Library
    {
        /// <summary>The windows of a call: p.LayerWindows or the argument, refused (before pkv
        /// reads anything) when both are given or they are not one per layer.</summary>
        internal static uint[] Windows(EngineParams p, uint[] layerWindows)
        {
            uint[] own = p.WindowsNoCopy;
            if (own != null && layerWindows != null)
                throw new PkvException(Status.InvalidArgument,
                    "the windows are given twice: set EngineParams.LayerWindows or pass layerWindows, not both");
            uint[] w = own ?? layerWindows;
            if (w != null && w.Length != p.NumLayers)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "{0} has {1} entries, NumLayers is {2}: give one window per layer (0 = full attention)",
                    own != null ? "EngineParams.LayerWindows" : "layerWindows", w.Length, p.NumLayers));
            return w;
        }

        /// <summary>The windows n points at (NumLayers of them), or null.</summary>
        internal static uint[] CopyLayerWindows(EngineParamsNative n)
        {
            if (n.LayerWindows == IntPtr.Zero) return null;
            var w = new uint[n.NumLayers];
            for (int l = 0; l < w.Length; l++) w[l] = ((uint*)n.LayerWindows)[l];
            return w;
        }

        /// <summary>Each layer's sliding window (0 = full attention) of a Hugging Face
        /// config.json's text (pkv_hf_config_layer_windows: layer_types, sliding_window_pattern,
        /// Gemma 2's alternation, use_sliding_window with max_window_layers, or one window for
        /// every layer). EngineParams.FromHfConfig reads them too (LayerWindows when they differ,
        /// SlidingWindow when they do not).</summary>
        public static uint[] HfConfigLayerWindows(string json)
        {
            byte[] text = System.Text.Encoding.UTF8.GetBytes(json);
            uint n;
            fixed (byte* t = text)
            {
                Native.Check(Native.pkv_hf_config_layer_windows(t, (UIntPtr)text.Length, null, 0, &n));
                var w = new uint[n];
                fixed (uint* o = w)
                    Native.Check(Native.pkv_hf_config_layer_windows(t, (UIntPtr)text.Length, o, n, &n));
                return w;
            }
        }

        /// <summary>How the layers of p (with p.LayerWindows or layerWindows, else
        /// p.SlidingWindow for all) are grouped (pkv_kv_groups); p is validated as by new
        /// Engine.</summary>
        public static KvGroups KvGroups(EngineParams p, uint[] layerWindows = null)
        {
            uint[] windows = Windows(p, layerWindows);
            LayerSpecNative[] specs = NativeSpecs(p);
            var g = new KvGroups();
            EngineParamsNative raw = p.ToNative();
            fixed (uint* w = windows)
            fixed (LayerSpecNative* s = specs)
            {
                raw.LayerWindows = (IntPtr)w;
                SetSpecs(ref raw, s);
                uint n, layers;
                Native.Check(Native.pkv_kv_groups(&raw, null, null, null, 0, &n, &layers));
                g.GroupWindow = new uint[n];
                g.LayerGroup = new uint[p.NumLayers];
                g.LayerSlot = new uint[p.NumLayers];
                fixed (uint* gw = g.GroupWindow)
                fixed (uint* lg = g.LayerGroup)
                fixed (uint* ls = g.LayerSlot)
                    Native.Check(Native.pkv_kv_groups(&raw, lg, ls, gw, n, &n, &layers));
                g.GroupLayers = layers;
            }
            return g;
        }

        /// <summary>Profile with per-layer windows (see KvGroups; p.LayerWindows needs no
        /// argument).</summary>
        public static KvBudget Profile(EngineParams p, uint[] layerWindows)
        {
            KvBudget b;
            Native.Check(ProfileOrShortfall(p, layerWindows, out b));
            return b;
        }

        /// <summary>ProfileOrShortfall with per-layer windows (see KvGroups); windows that are
        /// not one per layer, or given twice, throw PkvException InvalidArgument.</summary>
        public static Status ProfileOrShortfall(EngineParams p, uint[] layerWindows, out KvBudget budget)
        {
            uint[] windows = Windows(p, layerWindows);
            LayerSpecNative[] specs = NativeSpecs(p);
            int[] devices = p.RankDevicesChecked();
            var b = new KvBudget { StructSize = (uint)sizeof(KvBudget) };
            EngineParamsNative raw = p.ToNative();
            Status status;
            fixed (uint* w = windows)
            fixed (LayerSpecNative* s = specs)
            fixed (int* d = devices)
            {
                raw.LayerWindows = (IntPtr)w;
                raw.RankDeviceIds = (IntPtr)d;
                SetSpecs(ref raw, s);
                status = Native.pkv_profile(&raw, &b);
            }
            budget = b;
            return status;
        }
    }

    public sealed unsafe partial class Engine
    {
        /// <summary>The engine's per-layer windows (a copy: Params.LayerWindows), null when it
        /// has none (Params.SlidingWindow applies to every layer).</summary>
        public uint[] LayerWindows { get { return Params.LayerWindows; } }

        /// <summary>How the engine's layers are grouped (Library.KvGroups of its parameters).</summary>
        public KvGroups KvGroups() { return Library.KvGroups(Params); }

        /// <summary>fp8 KV (KvDType DType.Fp8E4m3 / Fp8E5m2): layer's K and V scales, one per
        /// kv head of this rank each (finite, > 0; 1.0 until set), before the first sequence
        /// (pkv_set_kv_scales). An MLA engine's kScales is the latent's one scale and vScales may
        /// be null (passed as NULL: there is no V); other engines need both. With LayerSpecs, one
        /// per kv head of the layer (LayerInfo), a K = V layer's vScales may be null, and a Shared
        /// layer's are its source's (refused). PkvException State once a sequence was made;
        /// InvalidArgument for a cache that is not fp8.</summary>
        public void SetKvScales(uint layer, float[] kScales, float[] vScales = null)
        {
            uint heads = Params.SpecsNoCopy == null ? Budget().KvHeadsPerRank : LayerInfo(layer).KvHeads;
            if (kScales == null || kScales.Length != heads || (vScales != null && vScales.Length != heads))
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "SetKvScales: {0} k and {1} v scales, layer {3} has {2} kv heads per rank",
                    kScales == null ? 0 : kScales.Length, vScales == null ? 0 : vScales.Length, heads, layer));
            lock (gate)
                fixed (float* k = kScales)
                fixed (float* v = vScales)  // null: NULL, which pkv refuses but for MLA and K = V
                    Call(Native.pkv_set_kv_scales(Handle, layer, k, v));
        }
    }

    public sealed unsafe partial class Sequence
    {
        /// <summary>The block table in KV group `group` (pkv_seq_group_block_table): -1 where a
        /// windowed group gave back a block no later token's window reaches. Group 0's is
        /// BlockTable().</summary>
        public int[] GroupBlockTable(uint group)
        {
            lock (Engine.Gate)
            {
                uint n;
                Engine.Call(Native.pkv_seq_group_block_table(Engine.Handle, Id, group, null, 0, &n));
                var a = new int[n];
                fixed (int* p = a)
                    Engine.Call(Native.pkv_seq_group_block_table(Engine.Handle, Id, group, p, n, &n));
                return a;
            }
        }
    }

    public sealed unsafe partial class Batch
    {
        /// <summary>The step's KV groups (1 without windows; 0 from a library older than 0.2).</summary>
        public uint NumKvGroups { get { return view.NumKvGroups; } }

        /// <summary>Every group's slot mapping, [NumKvGroups][NumTokens] (group 0's is
        /// SlotMapping()); layer l uses its group's (Engine.KvGroups).</summary>
        public long[] GroupSlotMapping()
        {
            lock (engine.Gate)
            {
                Touch();
                var a = new long[(long)view.NumKvGroups * view.NumTokens];
                if (a.Length > 0) System.Runtime.InteropServices.Marshal.Copy(view.GroupSlotMapping, a, 0, a.Length);
                return a;
            }
        }

        /// <summary>Every group's padded tables, [NumKvGroups][NumSeqs][MaxBlocksPerSeq]; a
        /// windowed group's hold -1 for blocks it gave back.</summary>
        public int[] GroupBlockTables()
        {
            return Ints(view.GroupBlockTables, (long)view.NumKvGroups * view.NumSeqs * view.MaxBlocksPerSeq);
        }
    }
}
