// EngineParams (its defaults, a config's whole shape, its own LayerWindows), RequestParams, the
// Tier enum and the structs' typed views; Library: versions, the profiler, the block hash.
using System;
using System.Text;

namespace Pkv
{
    public partial struct EngineParams
    {
        /// <summary>Each layer's sliding window (0 = full attention), NumLayers of them; null
        /// (the default): SlidingWindow for every layer. The params own a copy (set and get
        /// copy), passed to pkv for each call that reads it (new Engine copies it).
        /// FromHfConfig sets it for a model whose layers differ (Gemma 2/3, gpt-oss).</summary>
        public uint[] LayerWindows
        {
            get { return layerWindows == null ? null : (uint[])layerWindows.Clone(); }
            set { layerWindows = value == null ? null : (uint[])value.Clone(); }
        }

        internal uint[] WindowsNoCopy { get { return layerWindows; } }

        /// <summary>With Ranks All on CUDA (since 0.10): each rank's CUDA device, TpSize x PpSize
        /// of them (rank = PpRank * TpSize + TpRank; several ranks may share one); null (the
        /// default): every rank on DeviceId. The params own a copy (set and get copy); pkv reads
        /// it at create only, and refuses it on the CPU and with Ranks One or Pool.</summary>
        public int[] RankDeviceIds
        {
            get { return rankDeviceIds == null ? null : (int[])rankDeviceIds.Clone(); }
            set { rankDeviceIds = value == null ? null : (int[])value.Clone(); }
        }

        /// <summary>RankDeviceIds as the params hold them, refused (before pkv reads anything)
        /// when they are not one per rank.</summary>
        internal int[] RankDevicesChecked()
        {
            uint ranks = TpSize * Math.Max(PpSize, 1u);
            if (rankDeviceIds != null && rankDeviceIds.Length != ranks)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "EngineParams.RankDeviceIds has {0} entries, TpSize x PpSize is {1}: give one " +
                    "device per rank, or null", rankDeviceIds.Length, ranks));
            return rankDeviceIds;
        }

        /// <summary>The devices n points at (TpSize x PpSize of them), or null.</summary>
        internal static unsafe int[] CopyRankDeviceIds(EngineParamsNative n)
        {
            if (n.RankDeviceIds == IntPtr.Zero) return null;
            var d = new int[n.TpSize * Math.Max(n.PpSize, 1u)];
            for (int r = 0; r < d.Length; r++) d[r] = ((int*)n.RankDeviceIds)[r];
            return d;
        }

        /// <summary>pkv's defaults (pkv_engine_params_init).</summary>
        public static unsafe EngineParams Defaults()
        {
            var n = new EngineParamsNative();
            Native.Check(Native.pkv_engine_params_init(&n, (uint)sizeof(EngineParamsNative)));
            return FromNative(n);
        }

        /// <summary>Defaults with the whole model shape read from a Hugging Face config.json's
        /// text, per-layer windows included (pkv_engine_params_from_hf_config, then
        /// pkv_hf_config_layer_windows): layers of different windows (Gemma 2/3, gpt-oss) are
        /// LayerWindows, one window for every layer (Mistral) is SlidingWindow. An MLA config
        /// (kv_lora_rank and qk_rope_head_dim: DeepSeek V2/V3, Kimi K2) sets KvLayout
        /// KvLayout.Mla, KvLoraRank, QkRopeHeadDim, NumKvHeads 1, HeadDim their sum and the
        /// model's SoftmaxScale.</summary>
        public static unsafe EngineParams FromHfConfig(string json)
        {
            if (json == null) throw new ArgumentNullException("json");
            var n = new EngineParamsNative();
            Native.Check(Native.pkv_engine_params_init(&n, (uint)sizeof(EngineParamsNative)));
            byte[] text = Encoding.UTF8.GetBytes(json);
            fixed (byte* t = text)
                Native.Check(Native.pkv_engine_params_from_hf_config(&n, t, (UIntPtr)text.Length));
            EngineParams p = FromNative(n);
            uint[] windows = Library.HfConfigLayerWindows(json);
            for (int l = 1; l < windows.Length; l++)
                if (windows[l] != windows[0])
                {
                    p.layerWindows = windows;
                    break;
                }
            return p;
        }
    }

    public partial struct RequestParams
    {
        /// <summary>pkv's defaults for a request (pkv_request_params_init).</summary>
        public static unsafe RequestParams Defaults()
        {
            var p = new RequestParams();
            Native.Check(Native.pkv_request_params_init(&p, (uint)sizeof(RequestParams)));
            return p;
        }
    }

    /// <summary>Where a sequence's KV is (SeqInfo.KvTier) or a block is (KvEvent.Medium),
    /// PKV_TIER_*.</summary>
    public enum Tier : uint
    {
        /// <summary>No KV held: waiting, preempted or finished; for an event, every medium
        /// (ALL_CLEARED, OVERFLOW).</summary>
        None = Native.PKV_TIER_NONE,
        /// <summary>In pool blocks.</summary>
        Device = Native.PKV_TIER_DEVICE,
        /// <summary>In host-tier blocks: swapped out (Sequence.SwapOut), or an offloaded cached
        /// block (EngineParams.HostOffload).</summary>
        Host = Native.PKV_TIER_HOST,
        /// <summary>A block fetched from the store tier (a stored event's medium).</summary>
        Store = Native.PKV_TIER_STORE,
    }

    public partial struct SeqInfo
    {
        /// <summary>KvTier.</summary>
        public Tier Tier { get { return KvTier; } }
    }

    public partial struct KvEvent
    {
        /// <summary>Medium: where the block was stored or removed.</summary>
        public Tier Tier { get { return Medium; } }
    }

    public partial struct PoolInfo
    {
        /// <summary>Where the K pool is (an MLA engine's latents), on Device: for a host's own
        /// kernels (strides: LayerStride, BlockStride, TokenStride, HeadStride).</summary>
        public NativeAddress KPool { get { return NativeAddress.Of(KBase); } }
        /// <summary>Where the V pool is; Zero for an MLA engine (no V).</summary>
        public NativeAddress VPool { get { return NativeAddress.Of(VBase); } }
        /// <summary>The host tier's K pool (HostLayerStride); Zero without a host tier.</summary>
        public NativeAddress HostKPool { get { return NativeAddress.Of(HostKBase); } }
        /// <summary>The host tier's V pool; Zero without a host tier or for an MLA engine.</summary>
        public NativeAddress HostVPool { get { return NativeAddress.Of(HostVBase); } }
        /// <summary>The attention kernels this engine runs ("" from a library older than 0.2).</summary>
        public string AttentionKernels { get { return Native.Text(Kernels); } }
    }

    /// <summary>One contiguous piece of KV (pkv_segment, since 0.11; Engine.BlockSegments,
    /// Engine.SeqSegments): Bytes bytes at Address (device memory on a CUDA pool, host memory for
    /// the host tier and a CPU pool); Address Zero and Bytes 0 for a block a window gave
    /// back.</summary>
    public partial struct Segment
    {
        public NativeAddress Address { get { return NativeAddress.Of(Base); } }
        public override string ToString() { return Address + " (" + Bytes + " bytes)"; }
    }

    /// <summary>Library-wide calls: versions, the KV profiler, the canonical block hash.</summary>
    public static unsafe partial class Library
    {
        /// <summary>The loaded libpkv's version (pkv_version: major * 10000 + minor * 100 + patch).</summary>
        public static uint Version { get { return Native.pkv_version(); } }
        public static uint AbiVersion { get { return Native.pkv_abi_version(); } }
        /// <summary>This binding's version: the pkv.h it was generated from (PKV_VERSION_*), as
        /// its assembly version says.</summary>
        public static Version BindingVersion { get { return typeof(Library).Assembly.GetName().Version; } }
        /// <summary>The file the binding loads: libpkv's SONAME ("libpkv.so.1").</summary>
        public static string FileName { get { return Native.Library; } }

        /// <summary>null when libpkv loaded and matches this binding, else what every call throws:
        /// DllNotFoundException (the library was not found; the message says where it was looked
        /// for and what to set) or PkvException (Unsupported: another ABI).</summary>
        public static Exception LoadError { get { return Native.LoadError; } }
        public static string StatusString(Status s) { return Native.Text(Native.pkv_status_string(s)); }

        /// <summary>How many KV blocks fit and why. When the budget is too small it throws a
        /// PkvException (OutOfMemory); ProfileOrShortfall returns the terms either way.</summary>
        public static KvBudget Profile(EngineParams p) { return Profile(p, null); }

        public static Status ProfileOrShortfall(EngineParams p, out KvBudget budget)
        {
            return ProfileOrShortfall(p, null, out budget);
        }

        /// <summary>A model id for StoreConfig.ModelId from a config.json's text
        /// (pkv_hf_config_digest): "config-sha256:" and SHA-256 of the text's UTF-8 bytes. It
        /// tells configs apart, not weights: give two fine-tunes of one base model a weights
        /// digest or "name@revision" instead. The text must be a config FromHfConfig reads
        /// (PkvException InvalidArgument otherwise). The byte[] overload digests a file's bytes
        /// as they are.</summary>
        public static string HfConfigDigest(string json)
        {
            if (json == null) throw new ArgumentNullException("json");
            return HfConfigDigest(Encoding.UTF8.GetBytes(json));
        }

        public static string HfConfigDigest(byte[] json)
        {
            if (json == null) throw new ArgumentNullException("json");
            var digest = new byte[Constants.HfConfigDigestBytes];
            fixed (byte* t = json)
            fixed (byte* o = digest)
                Native.Check(Native.pkv_hf_config_digest(t, (UIntPtr)json.Length, o, (uint)digest.Length));
            int n = Array.IndexOf(digest, (byte)0);
            return Encoding.ASCII.GetString(digest, 0, n < 0 ? digest.Length : n);
        }

        public static ulong BlockHashRoot(ulong seed, byte[] salt)
        {
            ulong h;
            salt = salt ?? new byte[0];
            fixed (byte* s = salt)
                Native.Check(Native.pkv_block_hash_root(seed, s, (uint)salt.Length, &h));
            return h;
        }

        public static ulong BlockHash(ulong seed, ulong parentHash, int[] tokens)
        {
            ulong h;
            fixed (int* t = tokens)
                Native.Check(Native.pkv_block_hash(seed, parentHash, t, (uint)tokens.Length, &h));
            return h;
        }
    }
}
