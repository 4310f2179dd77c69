// Sequence: a sequence id on an Engine, its calls (pkv_append ... pkv_swap_in, pkv_seq_*).
using System;

namespace Pkv
{
    /// <summary>A sequence of an Engine. Dispose releases it (pkv_release), like Release(): a
    /// no-op once it was released (by this object), its id is gone, or its engine was disposed:
    /// <c>using (var seq = engine.Allocate(prompt)) { ... }</c>.</summary>
    public sealed unsafe partial class Sequence : IDisposable
    {
        bool released;

        public Engine Engine { get; private set; }
        public ulong Id { get; private set; }
        /// <summary>Tokens the prefix cache served at the last admission (allocate or resume).</summary>
        public uint NumCachedTokens { get; private set; }

        internal Sequence(Engine e, ulong id, uint cached) { Engine = e; Id = id; NumCachedTokens = cached; }

        /// <summary>Reserves slots for more tokens (pkv_append). PkvException NoSpace: nothing changed.</summary>
        public void Append(params int[] tokens)
        {
            lock (Engine.Gate)
                fixed (int* t = tokens)
                    Engine.Call(Native.pkv_append(Engine.Handle, Id, t, (uint)tokens.Length));
        }

        public Sequence Fork()
        {
            ulong child;
            lock (Engine.Gate) Engine.Call(Native.pkv_fork(Engine.Handle, Id, &child));
            return new Sequence(Engine, child, NumCachedTokens);
        }

        /// <summary>Ends the sequence (pkv_release): its blocks go back, sealed ones stay cached.
        /// PkvException State while it is in the open batch, held or receiving (since 0.12:
        /// Engine.HoldEnd, Engine.ReceiveEnd first).</summary>
        public void Release()
        {
            lock (Engine.Gate)
            {
                Engine.Call(Native.pkv_release(Engine.Handle, Id));
                released = true;
            }
        }

        /// <summary>Releases the sequence unless it is gone already (see the class).</summary>
        public void Dispose()
        {
            lock (Engine.Gate)
            {
                if (released || Engine.IsDisposed) return;
                Status s = Native.pkv_release(Engine.Handle, Id);
                if (s != Status.NotFound) Engine.Call(s);
                released = true;
            }
        }
        public void Preempt() { lock (Engine.Gate) Engine.Call(Native.pkv_preempt(Engine.Handle, Id)); }

        /// <summary>Keeps the first <paramref name="numTokens"/> tokens, 1..length (pkv_truncate):
        /// rollback of rejected speculative tokens.</summary>
        public void Truncate(uint numTokens)
        {
            lock (Engine.Gate) Engine.Call(Native.pkv_truncate(Engine.Handle, Id, numTokens));
        }

        public uint Resume()
        {
            uint cached;
            lock (Engine.Gate) Engine.Call(Native.pkv_resume(Engine.Handle, Id, &cached));
            return NumCachedTokens = cached;
        }

        /// <summary>Moves the sequence's KV to the host tier (pkv_swap_out), keeping its tokens and
        /// computed count; the next batch lists the copies (CopyKind.SwapOut; with state layers
        /// one CopyKind.StateOut of its working state slot to a host state slot). PkvException
        /// Unsupported: no host tier; NoSpace: too few host blocks or no free host state slot,
        /// nothing changed; State: not running.</summary>
        public void SwapOut() { lock (Engine.Gate) Engine.Call(Native.pkv_swap_out(Engine.Handle, Id)); }

        /// <summary>Brings a swapped-out sequence's KV back into pool blocks (pkv_swap_in), all or
        /// nothing; the next batch lists the copies (CopyKind.SwapIn; with state layers one
        /// CopyKind.StateIn into its new working slot). State: not swapped out; NoSpace: too few
        /// free blocks or no free working state slot, nothing changed.</summary>
        public void SwapIn() { lock (Engine.Gate) Engine.Call(Native.pkv_swap_in(Engine.Handle, Id)); }

        public SeqInfo Info()
        {
            var i = new SeqInfoNative { StructSize = (uint)sizeof(SeqInfoNative) };
            lock (Engine.Gate) Engine.Call(Native.pkv_seq_info(Engine.Handle, Id, &i));
            return SeqInfo.FromNative(i);
        }

        public int[] BlockTable() { return Engine.IntArray(Id, true); }
        public int[] Tokens() { return Engine.IntArray(Id, false); }
        public override string ToString() { return "Sequence " + Id; }
    }
}
