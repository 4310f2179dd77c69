// Extra keys and a LoRA adapter in block identity (pkv 0.5): the same placeholder tokens with
// another item's key never hit, with the same key they do; another adapter never hits; events
// carry LoraId and NumExtraKeys, hashed as BlockHashExtra says; bad keys are refused.
using System;
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
