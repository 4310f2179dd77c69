// Store administration (issue 26, item 9): StoreAdmin over a FILE store an engine filled: its
// info, a listing page by page, verify (and removing a damaged value), clear, read-only, close.
using System;
using System.IO;
using System.Linq;
using Pkv;

static partial class Tests
{
    static void StoreAdminOfFileStore()
    {
        string dir = Path.Combine(Path.GetTempPath(), "pkv-cs-admin-" + Guid.NewGuid().ToString("N"));
        try
        {
            ComputeIntoStore(StoreConfig.File(dir));  // 3 full blocks of StorePrompt
            using (var admin = StoreAdmin.Open(StoreConfig.File(dir)))
            {
                StoreInfo info = admin.Info();
                Equal(StoreKind.File, info.Kind, "kind");
                Equal(3UL, info.NumBlocks, "blocks");
                StoreBlockInfo[] blocks = admin.List(pageSize: 1).ToArray();  // a page per block
                Equal(3, blocks.Length, "listed");
                Assert(blocks.All(b => b.State == StoreValueState.Good && b.NumTokens == 4 && b.Problem == ""),
                       "good blocks: " + string.Join("; ", blocks.Select(b => b.ToString())));
                Equal(info.TotalBytes, (ulong)blocks.Sum(b => (long)b.ValueBytes), "total bytes");
                Equal(3, blocks.Select(b => StoreAdminHex(b.Key)).Distinct().Count(), "distinct keys");
                Equal(2, blocks.Count(b => blocks.Any(o => o.Key.SequenceEqual(b.Parent))), "a chain of parents");
                Assert(admin.List(StoreListFlags.KeysOnly).All(b => b.State == StoreValueState.Unread && b.NumTokens == 0),
                       "keys only");
                StoreVerifyReport ok = admin.Verify();
                Assert(ok.NumBlocks == 3 && ok.NumGood == 3 && ok.NumBad == 0 && ok.FirstBadKey == null, "verify " + ok);

                string damaged = BlockFile(dir, blocks[1].Key);
                File.WriteAllBytes(damaged, new byte[] { 1, 2, 3 });
                StoreVerifyReport bad = admin.Verify(false);
                Assert(bad.NumGood == 2 && bad.NumBad == 1 && bad.NumRemoved == 0, "one bad: " + bad);
                Assert(bad.FirstBadKey.SequenceEqual(blocks[1].Key) && bad.FirstBadProblem.Length > 0,
                       "the bad one and why: " + bad.FirstBadProblem);
                StoreBlockInfo listedBad = admin.List().Single(b => b.State == StoreValueState.Bad);
                Equal(bad.FirstBadProblem, listedBad.Problem, "listing says the same");
                Equal(1UL, admin.Verify(true).NumRemoved, "removed");
                Assert(!File.Exists(damaged), "file gone");
                Equal(2UL, admin.Info().NumBlocks, "two left");

                using (var ro = StoreAdmin.Open(new StoreConfig { Kind = StoreKind.File, Path = dir,
                                                                WriteMode = StoreWriteMode.ReadOnly }))
                {
                    Throws(Status.State, () => ro.Clear());
                    Throws(Status.State, () => ro.Verify(true));
                    Equal(2UL, ro.Verify().NumGood, "read-only verify");
                }
                Equal(2UL, admin.Clear(), "cleared");
                Equal(0UL, admin.Info().NumBlocks, "empty");
                Equal(0, admin.List().Count(), "nothing listed");
                Throws(Status.InvalidArgument, () => admin.List(pageSize: 0));
                admin.Close();
                Throws<ObjectDisposedException>(() => admin.Info());
            }  // Dispose after Close: a no-op
            Throws(Status.Store, () => StoreAdmin.Open(StoreConfig.File(Path.Combine(dir, "missing"))));
            Throws(Status.Unsupported, () => StoreAdmin.Open(StoreConfig.Callback(new MapStore())));
            Throws<ArgumentNullException>(() => StoreAdmin.Open(null));
        }
        finally { if (Directory.Exists(dir)) Directory.Delete(dir, true); }
    }

    static string StoreAdminHex(byte[] key) { return string.Concat(key.Select(b => b.ToString("x2"))); }

    // A FILE store keeps a block as <path>/<hh>/<64 hex>.blk (pkv.h, pkv_store_info)
    static string BlockFile(string dir, byte[] key)
    {
        string hex = StoreAdminHex(key);
        string path = Path.Combine(Path.Combine(dir, hex.Substring(0, 2)), hex + ".blk");
        Assert(File.Exists(path), "block file " + path);
        return path;
    }
}
