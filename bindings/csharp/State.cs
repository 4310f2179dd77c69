// Recurrent state (pkv 0.6, DESIGN.md §13): a LayerKind.State layer keeps a fixed-size state per
// sequence (Gated DeltaNet, KDA, Mamba) instead of K and V, in up to MaxStateParts parts (a conv
// state, an SSM / delta-rule state). pkv owns the memory (PoolInfo.StatePool, one slot per running
// sequence: Batch.StateSlots()) and says where each part is (LayerInfo.StateParts); the host runs
// the recurrence.
using System;

namespace Pkv
{
    /// <summary>One part of a state layer's state: a dense array of Shape (outermost first) of
    /// DType (F32, F16 or BF16). default(StatePart) is an absent part.</summary>
    public struct StatePart
    {
        readonly uint[] shape;

        /// <summary>A part of 1 to Constants.MaxStateDims dimensions, each at least 1; pkv checks
        /// its limits. PkvException InvalidArgument for a shape no part can hold.</summary>
        public StatePart(DType dtype, params uint[] shape)
        {
            if (shape == null) throw new ArgumentNullException("shape");
            if (shape.Length == 0 || shape.Length > Constants.MaxStateDims || Array.IndexOf(shape, 0u) >= 0)
                throw new PkvException(Status.InvalidArgument, string.Format(
                    "StatePart: shape [{0}]: give 1 to {1} dimensions, each >= 1 (default(StatePart) is an " +
                    "absent part)", string.Join(", ", shape), Constants.MaxStateDims));
            DType = dtype;
            this.shape = (uint[])shape.Clone();
        }

        public DType DType { get; private set; }
        /// <summary>The dimensions (a copy); empty for an absent part.</summary>
        public uint[] Shape { get { return shape == null ? new uint[0] : (uint[])shape.Clone(); } }
        public bool IsPresent { get { return shape != null; } }

        /// <summary>Part `part` of pkv.h's arrays: its shape ends at the first 0.</summary>
        internal static unsafe StatePart Of(uint* dtype, uint* shape, int part)
        {
            uint* dims = shape + part * Constants.MaxStateDims;
            int n = 0;
            while (n < Constants.MaxStateDims && dims[n] != 0) n++;
            if (n == 0) return new StatePart { DType = (DType)dtype[part] };
            var got = new uint[n];
            for (int i = 0; i < n; i++) got[i] = dims[i];
            return new StatePart((DType)dtype[part], got);
        }
    }

    /// <summary>Where one part of a state layer's state is in a slot: Bytes bytes at
    /// PoolInfo.StatePool + slot * StateSlotBytes + Offset (0 Bytes: no such part).</summary>
    public struct StatePartInfo
    {
        public StatePart Part;
        public ulong Offset;
        public ulong Bytes;
    }

    public partial struct LayerSpec
    {
        /// <summary>A recurrent layer, this rank's state: part 0 the conv state (Qwen3-Next:
        /// conv_dim x (conv_kernel - 1)), part 1 the SSM / delta-rule state (v_heads x k_dim x
        /// v_dim); default(StatePart) leaves a part out.</summary>
        public static LayerSpec State(StatePart conv, StatePart ssm = default(StatePart))
        {
            return new LayerSpec { Kind = LayerKind.State, StateParts = new[] { conv, ssm } };
        }

        /// <summary>A state layer's parts (up to Constants.MaxStateParts; null or fewer: the rest
        /// absent). Set and get copy. PkvException InvalidArgument for more parts.</summary>
        public StatePart[] StateParts
        {
            get { return stateParts == null ? null : (StatePart[])stateParts.Clone(); }
            set
            {
                if (value != null && value.Length > Constants.MaxStateParts)
                    throw new PkvException(Status.InvalidArgument, string.Format(
                        "LayerSpec.StateParts: {0} parts given, a state has at most {1} (a conv state, an SSM " +
                        "state)", value.Length, Constants.MaxStateParts));
                stateParts = value == null ? null : (StatePart[])value.Clone();
            }
        }

        /// <summary>ToNative with the state parts.</summary>
        internal unsafe LayerSpecNative ToNativeWithState()
        {
            LayerSpecNative n = ToNative();
            for (int i = 0; stateParts != null && i < stateParts.Length; i++)
            {
                n.StateDType[i] = (uint)stateParts[i].DType;
                uint[] dims = stateParts[i].Shape;
                for (int k = 0; k < dims.Length; k++) n.StateShape[i * Constants.MaxStateDims + k] = dims[k];
            }
            return n;
        }

        /// <summary>FromNative with the state parts (a spec without any: StateParts null).</summary>
        internal static unsafe LayerSpec FromNativeWithState(LayerSpecNative n)
        {
            LayerSpec s = FromNative(n);
            var parts = new StatePart[Constants.MaxStateParts];
            bool any = false;
            for (int i = 0; i < parts.Length; i++)
            {
                parts[i] = StatePart.Of(n.StateDType, n.StateShape, i);
                any |= parts[i].IsPresent;
            }
            if (any) s.stateParts = parts;
            return s;
        }
    }

    public unsafe partial struct LayerInfo
    {
        /// <summary>A state layer's Constants.MaxStateParts parts and where each is in a slot;
        /// every other layer's are absent with 0 bytes.</summary>
        public StatePartInfo[] StateParts
        {
            get
            {
                var out_ = new StatePartInfo[Constants.MaxStateParts];
                fixed (uint* dtype = StateDType)
                fixed (uint* shape = StateShape)
                fixed (ulong* offset = StateOffset)
                fixed (ulong* bytes = StateBytes)
                {
                    for (int i = 0; i < out_.Length; i++)
                        out_[i] = new StatePartInfo { Part = StatePart.Of(dtype, shape, i), Offset = offset[i],
                                                      Bytes = bytes[i] };
                }
                return out_;
            }
        }
    }

    public partial struct PoolInfo
    {
        /// <summary>Where the state slots are (pkv 0.6): NumStateSlots of StateSlotBytes, slot s
        /// at StatePool + s * StateSlotBytes; Zero without state layers.</summary>
        public NativeAddress StatePool { get { return NativeAddress.Of(StateBase); } }
        /// <summary>With state layers and a host tier (pkv 0.6): NumHostStateSlots host slots of
        /// StateSlotBytes (pinned on CUDA). Slots 0 .. MaxNumSeqs-1 hold swapped-out sequences'
        /// states, the rest checkpoints offloaded from the device (CopyKind.StateOut / StateIn);
        /// Zero otherwise.</summary>
        public NativeAddress HostStatePool { get { return NativeAddress.Of(HostStateBase); } }
    }

    public sealed unsafe partial class Batch
    {
        /// <summary>Each sequence's state slot (pkv 0.6), which the step reads and updates in
        /// place (PoolInfo.StatePool); empty without state layers. A copy of kind CopyKind.State
        /// moves slot CopySrc()[i] into slot CopyDst()[i] (a fork's state) before the step reads
        /// any state.</summary>
        public int[] StateSlots()
        {
            return Ints(view.StateSlots, view.StateSlots == IntPtr.Zero ? 0 : view.NumSeqs);
        }
    }
}
