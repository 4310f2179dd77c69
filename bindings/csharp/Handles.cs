// SafeHandles for pkv's opaque handles, the ABI check, and the error plumbing of the raw layer
// (all internal: the public surface has no IntPtr), NativeAddress, PkvException.
using System;
using System.Runtime.InteropServices;

// The tests reach the raw layer (Native, the handles) to check it against pkv.h.
[assembly: System.Runtime.CompilerServices.InternalsVisibleTo("Tests")]

namespace Pkv
{
    /// <summary>A pkv_engine*; released with pkv_engine_destroy, then its store's memory and
    /// delegates (which pkv calls until destroy returns) are let go.</summary>
    internal sealed class EngineHandle : SafeHandle
    {
        internal StoreBridge Store;
        public EngineHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        protected override bool ReleaseHandle()
        {
            Native.pkv_engine_destroy(handle);  // waits for the store's queued writes
            if (Store != null) Store.Free();
            Store = null;
            return true;
        }
    }

    /// <summary>A pkv_store* (the store administration calls, pkv_store_open); released with
    /// pkv_store_close.</summary>
    internal sealed class StoreHandle : SafeHandle
    {
        public StoreHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        protected override bool ReleaseHandle()
        {
            Native.pkv_store_close(handle);
            return true;
        }
    }

    /// <summary>A pkv_batch*; released with pkv_batch_abort unless ended. While open it holds a
    /// reference on its engine's handle, so the engine is never destroyed under it (not even by
    /// finalizers running in any order).</summary>
    internal sealed class BatchHandle : SafeHandle
    {
        EngineHandle engine;
        bool freedByPkv;
        public BatchHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }

        internal void HoldEngine(EngineHandle e)
        {
            bool added = false;
            e.DangerousAddRef(ref added);
            engine = e;
        }

        /// <summary>pkv freed the batch (a successful pkv_batch_end or pkv_commit): from now on
        /// the handle releases nothing but its engine reference.</summary>
        internal void Detach()
        {
            freedByPkv = true;  // the handle stays valid so ReleaseHandle still drops the engine
        }

        protected override bool ReleaseHandle()
        {
            if (!freedByPkv) Native.pkv_batch_abort(handle);
            if (engine != null) engine.DangerousRelease();
            engine = null;
            return true;
        }
    }

    /// <summary>A pkv_agent*; released with pkv_agent_destroy. It holds a reference on its
    /// engine's handle (HoldEngine), so the engine is never destroyed under it (not even by
    /// finalizers running in any order).</summary>
    internal sealed class AgentHandle : SafeHandle
    {
        EngineHandle engine;
        public AgentHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }

        internal void HoldEngine(EngineHandle e)
        {
            bool added = false;
            e.DangerousAddRef(ref added);
            engine = e;
        }

        protected override bool ReleaseHandle()
        {
            Native.pkv_agent_destroy(handle);
            if (engine != null) engine.DangerousRelease();
            engine = null;
            return true;
        }
    }

    internal static unsafe partial class Native
    {
        static readonly string loadError;     // why libpkv cannot be used, or null
        static readonly Exception loadCause;  // the runtime's exception, for the inner one
        static readonly bool abiMismatch;

        // Runs before the first call: loads libpkv.so.1 (Library) by calling it, and checks that
        // its ABI major is ours. A failure is kept and thrown by every call (Loaded).
        static Native()
        {
            try
            {
                uint abi = pkv_abi_version_native();
                if (abi != PKV_ABI_VERSION)
                {
                    abiMismatch = true;
                    loadError = string.Format("{0} has ABI {1}, this binding needs {2}", Library, abi,
                                              PKV_ABI_VERSION);
                }
            }
            catch (DllNotFoundException e)
            {
                string path = Environment.GetEnvironmentVariable("LD_LIBRARY_PATH");
                loadError = string.Format(  // e.Message (mono's) says no more: it is the inner exception
                    "pkv: cannot load {0}: the runtime looked for it beside the application, in " +
                    "LD_LIBRARY_PATH ({1}), the ld.so cache and /lib, /usr/lib. Set LD_LIBRARY_PATH to " +
                    "the directory that holds {0} (where pkv was installed: pkg-config " +
                    "--variable=libdir pkv)", Library, string.IsNullOrEmpty(path) ? "unset" : "=" + path);
                loadCause = e;
            }
        }

        /// <summary>Library.LoadError.</summary>
        public static Exception LoadError
        {
            get
            {
                if (loadError == null) return null;
                if (abiMismatch) return new PkvException(Status.Unsupported, loadError);
                return new DllNotFoundException(loadError, loadCause);
            }
        }

        /// <summary>Throws LoadError, if any: the first thing every call does.</summary>
        static void Loaded()
        {
            if (loadError != null) throw LoadError;
        }

        internal static string Text(IntPtr s)
        {
            return s == IntPtr.Zero ? "" : Marshal.PtrToStringAnsi(s);
        }

        /// <summary>Throws for a failed call that has no engine (message: pkv_last_error()).</summary>
        internal static void Check(Status s)
        {
            if (s != Status.Ok) throw new PkvException(s, Text(pkv_last_error()));
        }
    }

    /// <summary>An address in native memory that .NET does not own: a pool's base (PoolInfo),
    /// a buffer of the host's own for Batch.Attention on a CUDA engine, a CUDA stream. It is a
    /// number only: nothing in .NET reads or writes through it.</summary>
    public struct NativeAddress : IEquatable<NativeAddress>
    {
        readonly ulong value;
        public NativeAddress(ulong address) { value = address; }
        public static readonly NativeAddress Zero = new NativeAddress(0);
        public ulong Value { get { return value; } }
        public bool IsZero { get { return value == 0; } }
        internal IntPtr Pointer { get { return (IntPtr)(long)value; } }
        internal static NativeAddress Of(IntPtr p) { return new NativeAddress((ulong)(long)p); }
        public bool Equals(NativeAddress o) { return value == o.value; }
        public override bool Equals(object o) { return o is NativeAddress && Equals((NativeAddress)o); }
        public override int GetHashCode() { return value.GetHashCode(); }
        public static bool operator ==(NativeAddress a, NativeAddress b) { return a.value == b.value; }
        public static bool operator !=(NativeAddress a, NativeAddress b) { return a.value != b.value; }
        public override string ToString() { return "0x" + value.ToString("x"); }
    }

    /// <summary>A pkv call failed: Status says how, Message is pkv's message about it.</summary>
    public class PkvException : Exception
    {
        public Status Status { get; private set; }
        /// <summary>The C name without PKV_, e.g. "ERR_NO_SPACE".</summary>
        public string StatusName { get { return NameOf(Status); } }
        public string Detail { get; private set; }

        public PkvException(Status status, string detail)
            : base(NameOf(status) + (string.IsNullOrEmpty(detail) ? "" : ": " + detail))
        {
            Status = status;
            Detail = detail ?? "";
        }

        public static string NameOf(Status s) { return Native.StatusName(s); }
    }
}
