// Retention of cached prefixes (since 0.8.0): the eviction priority a sequence's blocks keep when
// released (Engine.Allocate's retention; a request's RequestParams.CachePriority and
// CacheRetentionMs), a prefix's priority set by the host (Engine.CacheSetPriority), and pins
// (Engine.CachePin), which hold a prefix's blocks until unpinned.
using System;

namespace Pkv
{
    /// <summary>How long a prefix's blocks stay cached: Priority (Constants.CachePriorityMin ..
    /// Constants.CachePriorityMax) orders eviction, the lowest first and least recently released
    /// first within one; RetentionMs 0 keeps it for good, else it decays to normal (0) that long
    /// after the block's release. default(Retention) is normal: plain LRU.</summary>
    public struct Retention : IEquatable<Retention>
    {
        public int Priority;
        public uint RetentionMs;

        public Retention(int priority, uint retentionMs = 0) { Priority = priority; RetentionMs = retentionMs; }

        public bool Equals(Retention other) { return Priority == other.Priority && RetentionMs == other.RetentionMs; }
        public override bool Equals(object o) { return o is Retention && Equals((Retention)o); }
        public override int GetHashCode() { return Priority * 31 + (int)RetentionMs; }
    }

    /// <summary>A pin of a cached prefix (Engine.CachePin): its blocks are never evicted until it
    /// is unpinned. Dispose unpins it, like Unpin(): a no-op once unpinned (by this object) or its
    /// engine was disposed, so <c>using (var pin = engine.CachePin(prompt)) { ... }</c> never
    /// unpins twice. Unpin() always asks pkv: a second one is PkvException NotFound.</summary>
    public sealed class PrefixPin : IDisposable
    {
        bool unpinned;

        public Engine Engine { get; private set; }
        /// <summary>The pin's id (never 0, never reused; Engine.CacheUnpin takes it).</summary>
        public ulong Id { get; private set; }
        /// <summary>The tokens pinned (0 when nothing of the prefix was cached).</summary>
        public uint NumTokens { get; private set; }

        internal PrefixPin(Engine e, ulong id, uint numTokens) { Engine = e; Id = id; NumTokens = numTokens; }

        /// <summary>Drops the pin (pkv_cache_unpin): its blocks are cached again, with the priority
        /// they had. PkvException NotFound: unpinned already; State: a batch is open.</summary>
        public void Unpin()
        {
            lock (Engine.Gate)
            {
                Engine.CacheUnpin(Id);
                unpinned = true;
            }
        }

        /// <summary>Unpins unless unpinned already (see the class).</summary>
        public void Dispose()
        {
            lock (Engine.Gate)
            {
                if (unpinned || Engine.IsDisposed) return;
                Engine.CacheUnpin(Id);
                unpinned = true;
            }
        }
    }

    public sealed unsafe partial class Engine
    {
        /// <summary>Gives the pool blocks the prefix cache holds of the prefix tokens (its full
        /// blocks, under salt, extraKeys and loraId as Allocate takes them, in every KV group)
        /// retention (pkv_cache_set_priority): cached blocks move in eviction order at once, blocks
        /// in use keep it for their release. Returns how many blocks took it. PkvException
        /// InvalidArgument (a priority out of range), State (a batch is open): nothing
        /// changed.</summary>
        public uint CacheSetPriority(int[] tokens, Retention retention, byte[] salt = null, ExtraKey[] extraKeys = null,
                                     ulong loraId = 0)
        {
            uint blocks;
            using (var keys = new PinnedKeys(extraKeys))
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SeqParamsOf(s, salt, keys, loraId);
                    Call(Native.pkv_cache_set_priority(Handle, t, (uint)tokens.Length, sp.StructSize == 0 ? null : &sp,
                                                       retention.Priority, retention.RetentionMs, &blocks));
                }
            return blocks;
        }

        /// <summary>Pins the leading cached blocks of the prefix tokens (under salt, extraKeys and
        /// loraId) that the pool holds (pkv_cache_pin): never evicted, not free, until the
        /// PrefixPin is unpinned or disposed. All pins together hold at most
        /// Constants.MaxPinnedPercent of the pool: past it, PkvException NoSpace (the message
        /// gives the numbers; nothing changed). State: a batch is open.</summary>
        public PrefixPin CachePin(int[] tokens, byte[] salt = null, ExtraKey[] extraKeys = null, ulong loraId = 0)
        {
            ulong id;
            uint pinned;
            using (var keys = new PinnedKeys(extraKeys))
            lock (gate)
                fixed (int* t = tokens)
                fixed (byte* s = salt)
                {
                    SeqParams sp = SeqParamsOf(s, salt, keys, loraId);
                    Call(Native.pkv_cache_pin(Handle, t, (uint)tokens.Length, sp.StructSize == 0 ? null : &sp,
                                              &id, &pinned));
                }
            return new PrefixPin(this, id, pinned);
        }

        /// <summary>Drops a pin by its id (pkv_cache_unpin). PkvException NotFound: no such pin
        /// (never given, or unpinned already); State: a batch is open.</summary>
        public void CacheUnpin(ulong pinId)
        {
            lock (gate) Call(Native.pkv_cache_unpin(Handle, pinId));
        }
    }
}
