// The cache described per layer (pkv 0.5, DESIGN.md §12): EngineParams.LayerSpecs (an array the
// params own, pinned for each call that reads it; pkv copies it at create), a config's specs,
// each KV group's bytes (pkv_kv_group_info), each layer of an engine's pool (pkv_layer_info),
// attention sinks, and the per-layer shapes Batch.Attention checks.
using System;
using System.Collections.Generic;

namespace Pkv
{
    public partial struct LayerSpec
    {
        /// <summary>A layer attending to its last window keys, its own included.</summary>
        public static LayerSpec Sliding(uint window)
        {
            return new LayerSpec { Attention = AttentionKind.Sliding, Window = window };
        }

        /// <summary>A layer attending to the keys of its own chunk-token chunk (Llama 4).</summary>
        public static LayerSpec Chunked(uint chunk)
        {
            return new LayerSpec { Attention = AttentionKind.Chunked, Window = chunk };
        }

        /// <summary>A layer with no cache of its own, reading sourceLayer's K and V (Gemma 3n /
        /// 4); its Attention and Window must be its source's.</summary>
        public static LayerSpec Shared(uint sourceLayer, AttentionKind attention = AttentionKind.Full, uint window = 0)
        {
            return new LayerSpec { Kind = LayerKind.Shared, SourceLayer = sourceLayer, Attention = attention, Window = window };
        }
    }

    public partial struct EngineParams
    {
        /// <summary>Each layer's spec (pkv_layer_spec), NumLayers of them; null (the default):
        /// every layer as the flat fields say. A field left 0 takes the flat field (NumKvHeads,
        /// HeadDim, SoftmaxScale). With it, SlidingWindow must be 0 and LayerWindows null. The
        /// params own a copy (set and get copy), passed to pkv for each call that reads
        /// them.</summary>
        public LayerSpec[] LayerSpecs
        {
            get { return layerSpecs == null ? null : (LayerSpec[])layerSpecs.Clone(); }
            set { layerSpecs = value == null ? null : (LayerSpec[])value.Clone(); }
        }

        /// <summary>Defaults with the model shape and each layer's spec read from a Hugging Face
        /// config.json's text (pkv_engine_params_from_hf_config_layers), for models whose layers
        /// differ: gpt-oss (sinks), Gemma 2 (soft-capping), Gemma 3n / 4 (heads per layer, K = V,
        /// shared layers), Llama 4 (chunks). LayerSpecs is null when the flat fields describe
        /// every layer.</summary>
        public static unsafe EngineParams FromHfConfigLayers(string json)
        {
            if (json == null) throw new ArgumentNullException("json");
            var n = new EngineParamsNative();
            Native.Check(Native.pkv_engine_params_init(&n, (uint)sizeof(EngineParamsNative)));
            byte[] text = System.Text.Encoding.UTF8.GetBytes(json);
            uint count, size = (uint)sizeof(LayerSpecNative);
            fixed (byte* t = text)
            {
                Native.Check(Native.pkv_engine_params_from_hf_config_layers(&n, t, (UIntPtr)text.Length, null, size, 0,
                                                                            &count));
                var specs = new LayerSpecNative[count];
                fixed (LayerSpecNative* s = specs)
                {
                    Native.Check(Native.pkv_engine_params_from_hf_config_layers(&n, t, (UIntPtr)text.Length, s, size,
                                                                                count, &count));
                    EngineParams p = FromNative(n);
                    p.layerSpecs = Library.CopyLayerSpecs(n);  // n points into specs, pinned here
                    return p;
                }
            }
        }

        internal LayerSpec[] SpecsNoCopy { get { return layerSpecs; } }
    }

    public partial struct LayerInfo
    {
        /// <summary>Where block 0 of the layer's K is in the pool (a host's own kernels).</summary>
        public NativeAddress KPool { get { return NativeAddress.Of(KBase); } }
        /// <summary>Where block 0 of its V is (KPool's when IsKEqV).</summary>
        public NativeAddress VPool { get { return NativeAddress.Of(VBase); } }
        /// <summary>The host tier's K of the layer; Zero without a host tier.</summary>
        public NativeAddress HostKPool { get { return NativeAddress.Of(HostKBase); } }
        public NativeAddress HostVPool { get { return NativeAddress.Of(HostVBase); } }
        /// <summary>V is K (KEqV 1; also an MLA layer's: V is the latent's first VHeadDim values).</summary>
        public bool IsKEqV { get { return KEqV != 0; } }
        /// <summary>The layer has attention sinks (Engine.SetAttentionSinks).</summary>
        public bool HasSinks { get { return Sinks != 0; } }
    }

    public static unsafe partial class Library
    {
        /// <summary>The C specs of p.LayerSpecs, or null; refused (before pkv reads anything)
        /// when they are not one per layer.</summary>
        internal static LayerSpecNative[] NativeSpecs(EngineParams p)
        {
            LayerSpec[] specs = p.SpecsNoCopy;
            if (specs == null) return null;
            if (specs.Length != p.NumLayers)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "EngineParams.LayerSpecs has {0} entries, NumLayers is {1}: give one spec per layer",
                    specs.Length, p.NumLayers));
            var n = new LayerSpecNative[specs.Length];
            for (int l = 0; l < n.Length; l++) n[l] = specs[l].ToNativeWithState();
            return n;
        }

        /// <summary>n.LayerSpecs and LayerSpecSize for specs pinned at s (null: none).</summary>
        internal static void SetSpecs(ref EngineParamsNative n, LayerSpecNative* s)
        {
            n.LayerSpecs = (IntPtr)s;
            n.LayerSpecSize = s == null ? 0 : (uint)sizeof(LayerSpecNative);
        }

        /// <summary>The specs n points at (NumLayers of them, LayerSpecSize bytes apart), or null.</summary>
        internal static LayerSpec[] CopyLayerSpecs(EngineParamsNative n)
        {
            if (n.LayerSpecs == IntPtr.Zero) return null;
            long stride = n.LayerSpecSize == 0 ? (uint)sizeof(LayerSpecNative) : n.LayerSpecSize;
            var specs = new LayerSpec[n.NumLayers];
            for (int l = 0; l < specs.Length; l++)
                specs[l] = LayerSpec.FromNativeWithState(Spec(n.LayerSpecs, l, stride));
            return specs;
        }

        /// <summary>Spec l of specs `stride` bytes apart: a library's specs may be larger than this
        /// binding's (its fields only) or smaller (an older library's: the rest zero).</summary>
        static LayerSpecNative Spec(IntPtr specs, int l, long stride)
        {
            var s = new LayerSpecNative();
            long size = Math.Min(stride, sizeof(LayerSpecNative));
            Buffer.MemoryCopy((byte*)specs + l * stride, &s, sizeof(LayerSpecNative), size);
            return s;
        }

        /// <summary>KV group `group` (below KvGroups(p).NumGroups) of p and its bytes
        /// (pkv_kv_group_info): its layers' Attention and Window, NumLayers, BytesPerToken (their
        /// K and V of one token, this rank) and PaddingBytesPerBlock (what its blocks leave
        /// unused).</summary>
        public static KvGroupInfo KvGroupInfo(EngineParams p, uint group)
        {
            uint[] windows = Windows(p, null);
            LayerSpecNative[] specs = NativeSpecs(p);
            var info = new KvGroupInfo { StructSize = (uint)sizeof(KvGroupInfo) };
            EngineParamsNative raw = p.ToNative();
            fixed (uint* w = windows)
            fixed (LayerSpecNative* s = specs)
            {
                raw.LayerWindows = (IntPtr)w;
                SetSpecs(ref raw, s);
                Native.Check(Native.pkv_kv_group_info(&raw, group, &info));
            }
            return info;
        }
    }

    // Each layer's shape as Batch.Attention checks it: elements per new token of q, k, v and
    // output, k or v 0 where the layer takes null (SHARED: both; K = V and MLA: v).
    internal struct LayerShape
    {
        public uint Q, K, V, Out;
        public LayerKind Kind;
        public bool KEqV;
    }

    public sealed unsafe partial class Engine
    {
        readonly Dictionary<uint, LayerShape> shapes = new Dictionary<uint, LayerShape>();

        /// <summary>Layer `layer` of the pool (pkv_layer_info): its spec resolved (SoftmaxScale
        /// the one Attention uses), its KV group, the layer whose cache it reads, and where its K
        /// and V are (KPool, VPool; strides in elements of the pool's dtype).</summary>
        public LayerInfo LayerInfo(uint layer)
        {
            var info = new LayerInfo { StructSize = (uint)sizeof(LayerInfo) };
            lock (gate) Call(Native.pkv_layer_info(Handle, layer, &info));
            return info;
        }

        /// <summary>One KV group of the engine and its bytes (Library.KvGroupInfo of its
        /// parameters).</summary>
        public KvGroupInfo KvGroupInfo(uint group) { return Library.KvGroupInfo(Params, group); }

        /// <summary>The sink logits of a layer whose spec has Sinks (gpt-oss): one finite value
        /// per q head of this rank, before the first sequence (pkv_set_attention_sinks).
        /// Attention on such a layer throws State until they are set; PkvException State once a
        /// sequence was made, InvalidArgument for a layer without sinks or another count.</summary>
        public void SetAttentionSinks(uint layer, float[] sinks)
        {
            if (sinks == null) throw new ArgumentNullException("sinks");
            lock (gate)
                fixed (float* s = sinks)
                    Call(Native.pkv_set_attention_sinks(Handle, layer, s, (uint)sinks.Length));
        }

        /// <summary>The shape Attention checks for layer: the engine's one shape, or with
        /// LayerSpecs the layer's own (LayerInfo, asked once per layer).</summary>
        internal LayerShape Shape(uint layer)
        {
            if (Params.SpecsNoCopy == null)
                return new LayerShape { Q = QPerToken, K = KvPerToken, V = IsMla ? 0 : KvPerToken,
                                        Out = OutPerToken, Kind = IsMla ? LayerKind.Mla : LayerKind.Attention };
            lock (gate)
            {
                LayerShape s;
                if (shapes.TryGetValue(layer, out s)) return s;
                LayerInfo i = LayerInfo(layer);
                bool shared = i.Kind == LayerKind.Shared;
                uint qHeads = QPerToken / Params.HeadDim;  // the engine's HeadDim is its q heads' flat width
                s = new LayerShape { Q = qHeads * i.HeadDim,
                                     K = shared ? 0 : i.KvHeads * i.HeadDim,
                                     V = shared || i.IsKEqV ? 0 : i.KvHeads * i.VHeadDim,
                                     Out = qHeads * i.VHeadDim, Kind = i.Kind, KEqV = i.IsKEqV };
                shapes[layer] = s;
                return s;
            }
        }
    }
}
