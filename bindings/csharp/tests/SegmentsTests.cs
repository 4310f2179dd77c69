// Block descriptors (since 0.11): Engine.BlockSegments, Engine.SeqSegments and
// Engine.LayoutFingerprint, what a transport moves blocks by: a prompt computed on one engine is
// moved into another of the same layout (other block counts) by copying segment i to segment i.
using System;
using System.Linq;
using Pkv;

static partial class Tests
{
    const int SegLayers = 2, SegQHeads = 4, SegKvHeads = 2, SegDim = 8, SegBlockSize = 4;

    static EngineParams SegParams(uint numBlocks, DType dtype)
    {
        var p = EngineParams.Defaults();
        p.NumLayers = SegLayers; p.NumQHeads = SegQHeads; p.NumKvHeads = SegKvHeads;
        p.HeadDim = SegDim; p.DType = dtype; p.BlockSize = SegBlockSize; p.NumBlocks = numBlocks;
        p.Device = Device.Cpu; p.NumThreads = 1;
        return p;
    }

    // One batch of seq's tokens: K of token t, layer l, value i is 100t + 10l + 0.001i, V its
    // negative.
    static void SegCompute(Engine e, Sequence seq)
    {
        using (Batch b = e.BeginBatch(new[] { seq }))
        {
            int n = (int)b.NumTokens, row = SegKvHeads * SegDim;
            float[] q = Enumerable.Range(0, n * SegQHeads * SegDim).Select(i => 0.01f * i)
                .ToArray();
            var output = new float[q.Length];
            for (int layer = 0; layer < SegLayers; layer++)
            {
                float[] k = Enumerable.Range(0, n * row)
                    .Select(i => 100f * (i / row) + 10f * layer + 0.001f * (i % row)).ToArray();
                float[] v = k.Select(x => -x).ToArray();
                b.Attention((uint)layer, q, k, v, output);
            }
            b.End();
        }
    }

    static unsafe byte[] SegRead(Segment s)
    {
        var a = new byte[s.Bytes];
        fixed (byte* p = a)
            Buffer.MemoryCopy((void*)(long)s.Address.Value, p, a.Length, (long)s.Bytes);
        return a;
    }

    static void LayoutFingerprints()
    {
        using (var a = new Engine(SegParams(16, DType.F32)))
        using (var b = new Engine(SegParams(24, DType.F32)))
        using (var c = new Engine(SegParams(16, DType.Bf16)))
        {
            byte[] fa = a.LayoutFingerprint(0);
            Equal(32, fa.Length, "fingerprint bytes");
            Assert(fa.Any(x => x != 0), "a zero fingerprint");
            Assert(fa.SequenceEqual(b.LayoutFingerprint(0)), "other block counts, one layout");
            Assert(!fa.SequenceEqual(c.LayoutFingerprint(0)), "bf16 and f32 share a fingerprint");
            Throws(Status.InvalidArgument, () => a.LayoutFingerprint(1));
        }
    }

    static unsafe void SeqSegmentsMoveAPrompt()
    {
        using (var a = new Engine(SegParams(16, DType.F32)))
        using (var b = new Engine(SegParams(24, DType.F32)))
        {
            int[] prompt = Enumerable.Range(100, 8).ToArray();  // 2 blocks
            Sequence sa = a.Allocate(prompt);
            SegCompute(a, sa);
            b.Allocate(new[] { 900, 901, 902, 903 });  // b's blocks of the prompt at other ids
            Sequence sb = b.Allocate(prompt);
            Segment[] src = a.SeqSegments(0, sa, 0, 2), dst = b.SeqSegments(0, sb, 0, 2);
            Equal(2 * SegLayers * 2, src.Length, "a's segments");
            Equal(src.Length, dst.Length, "b's segments");
            const ulong blockBytes = SegBlockSize * SegKvHeads * SegDim * 4;
            for (int i = 0; i < src.Length; i++)
            {
                Equal(blockBytes, src[i].Bytes, "a's segment " + i);
                Equal(src[i].Bytes, dst[i].Bytes, "b's segment " + i);
            }
            // layer 0's K of token 1, value 2, as SegCompute wrote it
            float k12 = BitConverter.ToSingle(SegRead(src[0]), (SegKvHeads * SegDim + 2) * 4);
            Assert(Math.Abs(k12 - 100.002f) < 1e-4, "K[1][2] = " + k12);
            Assert(!SegRead(src[0]).SequenceEqual(SegRead(dst[0])), "b holds a's bytes already");
            for (int i = 0; i < src.Length; i++)
            {
                void* from = (void*)(long)src[i].Address.Value;
                void* to = (void*)(long)dst[i].Address.Value;
                Buffer.MemoryCopy(from, to, (long)dst[i].Bytes, (long)src[i].Bytes);
            }
            Segment[] moved = b.SeqSegments(0, sb, 0, 2);
            for (int i = 0; i < src.Length; i++)
            {
                Equal(dst[i].Address, moved[i].Address, "b's segment " + i + " stays");
                Assert(SegRead(moved[i]).SequenceEqual(SegRead(src[i])), "b's segment " + i +
                       " holds a's bytes");
            }
            // block 1 alone is the second half of the list
            Segment[] mid = a.SeqSegments(0, sa, 1, 1);
            Equal(SegLayers * 2, mid.Length, "block 1's segments");
            Equal(src[SegLayers * 2].Address, mid[0].Address, "block 1's first segment");
            a.Check();
            b.Check();
        }
    }

    // With BlockLayout.Page a block is one segment: the page holds what the default layout keeps
    // in 2 x layers segments, layer after layer, K then V.
    static void PageLayoutOneSegmentABlock()
    {
        EngineParams pp = SegParams(16, DType.F32);
        pp.BlockLayout = BlockLayout.Page;
        using (var a = new Engine(SegParams(16, DType.F32)))
        using (var b = new Engine(pp))
        {
            Equal(BlockLayout.Page, b.Params.BlockLayout, "the block layout");
            Assert(!a.LayoutFingerprint(0).SequenceEqual(b.LayoutFingerprint(0)),
                   "the page layout shares the layers layout's fingerprint");
            int[] prompt = Enumerable.Range(100, 8).ToArray();
            Sequence sa = a.Allocate(prompt), sb = b.Allocate(prompt);
            SegCompute(a, sa);
            SegCompute(b, sb);
            Segment[] layers = a.SeqSegments(0, sa, 0, 2), pages = b.SeqSegments(0, sb, 0, 2);
            Equal(2, pages.Length, "pages of 2 blocks");
            const int per = SegLayers * 2;
            for (int i = 0; i < pages.Length; i++)
            {
                byte[] want = layers.Skip(i * per).Take(per).SelectMany(s => SegRead(s)).ToArray();
                Assert(SegRead(pages[i]).SequenceEqual(want), "page " + i + " holds its layers");
            }
        }
    }

    static void BlockSegmentsWherePoolInfoSays()
    {
        using (var e = new Engine(SegParams(16, DType.F32)))
        {
            PoolInfo info = e.PoolInfo();
            ulong k = info.KPool.Value, v = info.VPool.Value, block = info.BlockStride * 4;  // f32
            Segment[] s = e.BlockSegments(0, Tier.Device, new[] { 1, 3 });
            Equal(2 * SegLayers * 2, s.Length, "segments of blocks 1 and 3");
            Equal(k + block, s[0].Address.Value, "block 1, layer 0, K");
            Equal(block, s[0].Bytes, "a segment's bytes");
            Equal(v + block, s[1].Address.Value, "block 1, layer 0, V");
            Equal(k + info.LayerStride * 4 + block, s[2].Address.Value, "block 1, layer 1, K");
            Equal(k + 3 * block, s[4].Address.Value, "block 3, layer 0, K");
            Equal(0, e.BlockSegments(0, Tier.Device, new int[0]).Length, "no blocks");
        }
    }

    static void SegmentsRefusals()
    {
        using (var e = new Engine(SegParams(16, DType.F32)))
        {
            PkvException x = Throws(Status.InvalidArgument,
                                    () => e.BlockSegments(0, Tier.Host, new[] { 1 }));
            Assert(x.Detail.Contains("no host tier"), "pkv's message: " + x.Detail);
            Throws(Status.InvalidArgument, () => e.BlockSegments(0, Tier.Device, new[] { 16 }));
            Throws<ArgumentNullException>(() => e.BlockSegments(0, Tier.Device, null));
            Sequence seq = e.Allocate(Enumerable.Range(0, 8).ToArray());
            Throws(Status.InvalidArgument, () => e.SeqSegments(0, seq, 1, 2));  // past its 2 blocks
            seq.Preempt();
            Throws(Status.State, () => e.SeqSegments(0, seq, 0, 1));
            seq.Release();
            Throws(Status.NotFound, () => e.SeqSegments(0, seq, 0, 1));
        }
    }
}
