// The store tier (pkv 0.2): an engine writes its sealed prefix blocks to a store, a second engine
// on the same store gets them back as cached tokens; the host's own IStore (called from pkv's
// threads), a failing one (a miss with its message, never an error) and a file store.
using System;
using System.IO;
using System.Linq;
using Pkv;

static partial class Tests
{
    static readonly int[] StorePrompt = Enumerable.Range(1, 13).ToArray();  // 3 full blocks + 1 token

    static Engine StoreEngine(StoreConfig store)
    {
        var p = Small();
        p.HostNumBlocks = HostBlocks;
        return new Engine(p, store);
    }

    /// <summary>Engine A computes StorePrompt into store and is disposed (its writes done).</summary>
    static void ComputeIntoStore(StoreConfig store)
    {
        using (var a = StoreEngine(store)) RunStep(a, a.Allocate(StorePrompt));
    }

    static void ShareThroughStore(StoreConfig store)
    {
        ComputeIntoStore(store);
        using (var b = StoreEngine(store))
        {
            var s = b.Allocate(StorePrompt);
            Equal(12u, s.NumCachedTokens, "cached tokens");
            var st = b.Stats();
            Equal(12UL, st.StoreHitTokens, "store_hit_tokens");
            Equal(3UL, st.NumStoreLookups, "num_store_lookups");
            Equal(3UL, st.NumStoreHits, "num_store_hits");
            Equal(0UL, st.NumStoreErrors, "num_store_errors");
            Equal("", b.StoreError(), "store error");
            RunStep(b, s);  // the loads, then the last token
            Equal(13u, s.Info().NumComputedTokens, "computed");
            b.Check();
        }
    }

    sealed class FailingStore : IStore
    {
        readonly MapStore inner = new MapStore();
        public byte[] Get(byte[] key) { throw new IOException("the test store is down"); }
        public void Put(byte[] key, byte[] value) { inner.Put(key, value); }
        public int Count { get { return inner.Count; } }
    }

    static void CallbackStore()
    {
        var store = new MapStore();
        ShareThroughStore(StoreConfig.Callback(store));
        Equal(3, store.Count, "values stored");
    }

    static void FailingStoreIsAMiss()
    {
        var store = new FailingStore();
        ComputeIntoStore(StoreConfig.Callback(store));
        Equal(3, store.Count, "values stored");
        using (var b = StoreEngine(StoreConfig.Callback(store)))
        {
            Equal(0u, b.Allocate(StorePrompt).NumCachedTokens, "cached tokens");
            var st = b.Stats();
            Equal(3UL, st.NumStoreErrors, "num_store_errors");
            Equal(0UL, st.NumStoreHits, "num_store_hits");
            string why = b.StoreError();
            Assert(why.Contains("IOException: the test store is down"), "store error: " + why);
            b.Check();
        }
    }

    static void FileStoreAndParams()
    {
        string dir = Path.Combine(Path.GetTempPath(), "pkv-cs-store-" + Guid.NewGuid().ToString("N"));
        try { ShareThroughStore(StoreConfig.File(dir)); }
        finally { if (Directory.Exists(dir)) Directory.Delete(dir, true); }
        var d = new StoreConfig();
        Equal(200u, d.LookupTimeoutMs, "lookup_timeout_ms default");
        Equal(StoreKind.None, d.Kind, "kind default");
        Equal(-10, (int)Status.Store, "Status.Store");
        Equal("ERR_STORE", Native.StatusName(Status.Store), "ERR_STORE");
        Throws(Status.InvalidArgument, () => new Engine(Small(), StoreConfig.Callback(new MapStore())));  // no host tier
        Throws(Status.InvalidArgument, () => StoreEngine(new StoreConfig { Kind = StoreKind.File }));
        using (var e = new Engine(Small())) Equal("", e.StoreError(), "no store");
    }
}
