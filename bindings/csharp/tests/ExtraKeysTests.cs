// Extra keys and a LoRA adapter in block identity (pkv 0.5): the same placeholder tokens with
// another item's key never hit, with the same key they do; another adapter never hits; events
// carry LoraId and NumExtraKeys, hashed as BlockHashExtra says; bad keys are refused.
using System;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text;
using Pkv;

static partial class Tests
{
    // 8 image placeholders, then text: 3 blocks of 4 sealed, 1 token left
    static readonly int[] ImagePrompt = { 7, 7, 7, 7, 7, 7, 7, 7, 1, 2, 3, 4, 5 };

    static ExtraKey Image(string name) { return new ExtraKey(0, 8, Encoding.ASCII.GetBytes("sha256-of-" + name)); }

    static Sequence Computed(Engine e, int[] tokens, ExtraKey[] keys, ulong loraId)
    {
        Sequence s = e.Allocate(tokens, null, keys, loraId);
        using (var b = e.BeginBatch(new[] { s }))
        {
            b.Copy();
            b.End();
        }
        return s;
    }

    static void ExtraKeysDecideHits()
    {
        using (var e = new Engine(Small()))
        {
            Computed(e, ImagePrompt, new[] { Image("a") }, 0);
            uint cached;
            e.AllocateQuery(ImagePrompt, out cached, null, new[] { Image("b") });
            Equal(0u, cached, "another image never hits");
            e.AllocateQuery(ImagePrompt, out cached);
            Equal(0u, cached, "no key: another prompt");
            using (Sequence same = e.Allocate(ImagePrompt, null, new[] { Image("a") }))
                Equal(12u, same.NumCachedTokens, "the same image hits, and the text after it");
            e.AllocateQuery(ImagePrompt, out cached, null, new[] { Image("a") }, 5);
            Equal(0u, cached, "another adapter never hits");
            Computed(e, ImagePrompt, new[] { Image("a") }, 5).Release();
            e.AllocateQuery(ImagePrompt, out cached, null, new[] { Image("a") }, 5);
            Equal(12u, cached, "the same adapter hits");
            var rp = RequestParams.Defaults();
            rp.MaxNewTokens = 1;
            rp.LoraId = 5;
            e.Submit(ImagePrompt, rp, null, new[] { Image("a") });
            using (Batch b = e.Step())
            {
                Equal(1u, b.NumTokens, "a request's prompt hits the same way");
                b.Commit(new[] { 0 });
            }
            e.Check();
        }
    }

    static void ExtraKeyEventsAndHashes()
    {
        EngineParams p = Small();
        p.EnableKvEvents = true;
        using (var e = new Engine(p))
        {
            ExtraKey[] keys = { Image("a") };
            Computed(e, ImagePrompt, keys, 3);
            KvEvent[] events = e.DrainKvEvents();
            Equal("1 1 0", string.Join(" ", events.Select(ev => ev.NumExtraKeys)), "keys per block");
            Assert(events.All(ev => ev.LoraId == 3), "the adapter");
            ulong parent = Library.BlockHashRootLora(0, null, 3);
            Assert(parent != Library.BlockHashRoot(0, null), "an adapter changes the root");
            for (int i = 0; i < 3; i++)
            {
                ulong h = Library.BlockHashExtra(0, parent, ImagePrompt.Skip(4 * i).Take(4).ToArray(), (uint)(4 * i), keys);
                Equal(h, events[i].BlockHash, "block " + i);
                parent = h;
            }
        }
        int[] tokens = { 1, 2, 3, 4 };
        ulong root = Library.BlockHashRoot(0, null);
        Equal(root, Library.BlockHashRootLora(0, null, 0), "lora 0: the old root");
        Equal(Library.BlockHash(0, root, tokens), Library.BlockHashExtra(0, root, tokens, 0, null), "no key: the old hash");
        Equal(Library.BlockHash(0, root, tokens),
              Library.BlockHashExtra(0, root, tokens, 0, new[] { new ExtraKey(4, 6, new byte[] { 1 }) }),
              "a key past the block is skipped");
    }

    static byte[] Hex(string s)
    {
        return Enumerable.Range(0, s.Length / 2).Select(i => Convert.ToByte(s.Substring(2 * i, 2), 16)).ToArray();
    }

    // tests/data/hash_vectors_extra.txt (beside hash_vectors.txt): seed salt lora_id keys blocks -> root hashes
    static void ExtraHashVectors()
    {
        int cases = 0;
        foreach (string raw in File.ReadAllLines(Path.Combine(Path.GetDirectoryName(Path.GetFullPath(hashVectors)),
                                                              "hash_vectors_extra.txt")))
        {
            string line = raw.Trim();
            if (line.Length == 0 || line.StartsWith("#")) continue;
            string[] sides = line.Split(new[] { "->" }, StringSplitOptions.None);
            string[] left = sides[0].Split(new[] { ' ' }, StringSplitOptions.RemoveEmptyEntries);
            ulong[] want = sides[1].Split(new[] { ' ' }, StringSplitOptions.RemoveEmptyEntries)
                .Select(x => ulong.Parse(x.Substring(2), NumberStyles.HexNumber)).ToArray();
            ulong seed = ulong.Parse(left[0]), lora = ulong.Parse(left[2]);
            byte[] salt = left[1] == "-" ? null : Hex(left[1]);
            ExtraKey[] keys = left[3] == "-" ? null : left[3].Split(',').Select(item => item.Split(':'))
                .Select(f => new ExtraKey(uint.Parse(f[0]), uint.Parse(f[1]), Hex(f[2]))).ToArray();
            ulong h = Library.BlockHashRootLora(seed, salt, lora);
            Equal(want[0], h, "root of case " + cases);
            uint first = 0;
            string[] blocks = left[4].Split(';');
            for (int b = 0; b < blocks.Length; b++)
            {
                int[] tokens = blocks[b].Split(',').Select(int.Parse).ToArray();
                h = Library.BlockHashExtra(seed, h, tokens, first, keys);  // every key: those apart add nothing
                Equal(want[b + 1], h, "case " + cases + " block " + b);
                first += (uint)tokens.Length;
            }
            cases++;
        }
        Assert(cases >= 5, "cases read: " + cases);
    }

    static void BadExtraKeysRefused()
    {
        using (var e = new Engine(Small()))
        {
            var unsorted = new[] { new ExtraKey(4, 8, new byte[] { 1 }), new ExtraKey(0, 4, new byte[] { 2 }) };
            Assert(Throws(Status.InvalidArgument, () => e.Allocate(ImagePrompt, null, unsorted)).Detail.Contains("1"),
                   "names the key");
            Throws(Status.InvalidArgument, () => e.Allocate(ImagePrompt, null, new[] { new ExtraKey(0, 99, new byte[] { 1 }) }));
            Throws(Status.InvalidArgument, () => e.Allocate(ImagePrompt, null, new[] { new ExtraKey(0, 4, new byte[0]) }));
            Assert(Throws(Status.InvalidArgument, () => e.Allocate(ImagePrompt, null, new ExtraKey[] { null }))
                       .Detail.Contains("extra key 0 is null"), "a null key");
            Stats s = e.Stats();
            Equal(0ul, s.NumSeqs + s.NumUsedBlocks, "nothing admitted");
        }
    }
}
