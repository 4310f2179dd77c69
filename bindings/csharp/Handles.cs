// SafeHandles for pkv's opaque handles, the ABI check, and the error plumbing of the raw layer.
using System;
using System.Runtime.InteropServices;

namespace Pkv
{
    /// <summary>A pkv_engine*; released with pkv_engine_destroy, then its store's memory and
    /// delegates (which pkv calls until destroy returns) are let go.</summary>
    public sealed class EngineHandle : SafeHandle
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
    public sealed class StoreHandle : SafeHandle
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
    public sealed class BatchHandle : SafeHandle
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

        /// <summary>Gives the pointer to a call that frees it (pkv_batch_end, a successful
        /// pkv_commit): after this the handle releases nothing but its engine reference.</summary>
        internal IntPtr Detach()
        {
            freedByPkv = true;  // the handle stays valid so ReleaseHandle still drops the engine
            return handle;
        }

        protected override bool ReleaseHandle()
        {
            if (!freedByPkv) Native.pkv_batch_abort(handle);
            if (engine != null) engine.DangerousRelease();
            engine = null;
            return true;
        }
    }

    public static unsafe partial class Native
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

        /// <summary>null when libpkv loaded and matches this binding, else what every call throws:
        /// DllNotFoundException (the library was not found; the message says where it was looked
        /// for and what to set) or PkvException (Unsupported: another ABI).</summary>
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
