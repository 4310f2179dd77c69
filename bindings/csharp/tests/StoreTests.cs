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
            if (store.ModelId == null)  // the shape alone keys the blocks: the engine says what that risks
                Assert(b.StoreError().Contains("model_id"), "no model id: " + b.StoreError());
            else
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

    // Issue 26, item 12 as this binding exposes it: StoreConfig.ModelId keeps two models of one
    // KV shape apart in a shared store; Library.HfConfigDigest gives an id from config.json.
    static void ModelIdKeepsModelsApart()
    {
        string dir = Path.Combine(Path.GetTempPath(), "pkv-cs-model-" + Guid.NewGuid().ToString("N"));
        try
        {
            ComputeIntoStore(new StoreConfig { Kind = StoreKind.File, Path = dir, ModelId = "org/base@1" });
            using (var other = StoreEngine(new StoreConfig { Kind = StoreKind.File, Path = dir, ModelId = "org/tuned@1" }))
                Equal(0u, other.Allocate(StorePrompt).NumCachedTokens, "another model's KV is never a hit");
            using (var same = StoreEngine(new StoreConfig { Kind = StoreKind.File, Path = dir, ModelId = "org/base@1" }))
                Equal(12u, same.Allocate(StorePrompt).NumCachedTokens, "the same model's is");
        }
        finally { if (Directory.Exists(dir)) Directory.Delete(dir, true); }
        byte[] gemma = File.ReadAllBytes(Path.Combine(Path.GetDirectoryName(Path.GetDirectoryName(Path.GetDirectoryName(
            Path.GetFullPath(hashVectors)))), Path.Combine(Path.Combine("tools", "configs"), "gemma-2-9b.json")));
        string id = Library.HfConfigDigest(gemma);
        string hex;
        using (var sha = System.Security.Cryptography.SHA256.Create())
            hex = string.Concat(sha.ComputeHash(gemma).Select(x => x.ToString("x2")));
        Equal("config-sha256:" + hex, id, "the config's digest");
        Equal(id, Library.HfConfigDigest(Config("gemma-2-9b.json")), "the text gives the same");
        Assert(id != Library.HfConfigDigest(Config("gemma-3-27b.json")), "other configs, other ids");
        Throws(Status.InvalidArgument, () => Library.HfConfigDigest("{"));
    }

    static void FileStoreAndParams()
    {
        string dir = Path.Combine(Path.GetTempPath(), "pkv-cs-store-" + Guid.NewGuid().ToString("N"));
        try
        {
            ShareThroughStore(StoreConfig.File(dir));
            var named = StoreConfig.File(Path.Combine(dir, "named"));
            named.ModelId = "org/model@1";
            ShareThroughStore(named);
        }
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
