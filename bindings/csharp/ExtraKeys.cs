// Extra keys and a LoRA adapter in block identity (pkv 0.5): ExtraKey (pkv_extra_key, its bytes
// owned here and pinned for each call), the canonical hashes that mix them in.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Pkv
{
    /// <summary>Bytes that tell apart prompts whose tokens are equal, over the prompt's tokens
    /// [StartToken, EndToken): a multimodal item's content hash over its placeholder tokens. It
    /// joins the identity of every block it touches: a cached block hits only under equal tokens,
    /// equal extra keys and an equal LoRA adapter. A prompt's keys are sorted by StartToken and do
    /// not overlap; Key is 1 .. Constants.MaxExtraKeyBytes bytes (pkv refuses others, naming the
    /// index and the rule).</summary>
    public sealed class ExtraKey
    {
        public uint StartToken, EndToken;
        public byte[] Key;

        public ExtraKey(uint startToken, uint endToken, byte[] key)
        {
            StartToken = startToken;
            EndToken = endToken;
            Key = key;
        }
    }

    /// <summary>ExtraKeys as pkv reads them: the C array and every key's bytes pinned until
    /// disposed. Empty (Keys null, Count 0) for null or none.</summary>
    internal sealed unsafe class PinnedKeys : IDisposable
    {
        readonly List<GCHandle> pins = new List<GCHandle>();
        public readonly ExtraKeyNative* Keys;
        public readonly uint Count;
        public static readonly uint Size = (uint)sizeof(ExtraKeyNative);

        public PinnedKeys(ExtraKey[] keys)
        {
            if (keys == null || keys.Length == 0) return;
            var n = new ExtraKeyNative[keys.Length];
            try
            {
                for (int i = 0; i < keys.Length; i++)
                {
                    if (keys[i] == null || keys[i].Key == null)
                        throw new PkvException(Status.InvalidArgument, string.Format(
                            "extra key {0} is null{1}: give each an ExtraKey with its bytes", i,
                            keys[i] == null ? "" : " (its Key)"));
                    GCHandle key = GCHandle.Alloc(keys[i].Key, GCHandleType.Pinned);
                    pins.Add(key);
                    n[i] = new ExtraKeyNative { StartToken = keys[i].StartToken, EndToken = keys[i].EndToken,
                                                Key = key.AddrOfPinnedObject(), KeyLen = (uint)keys[i].Key.Length };
                }
                GCHandle all = GCHandle.Alloc(n, GCHandleType.Pinned);
                pins.Add(all);
                Keys = (ExtraKeyNative*)all.AddrOfPinnedObject();
                Count = (uint)n.Length;
            }
            catch
            {
                Dispose();
                throw;
            }
        }

        public void Dispose()
        {
            foreach (GCHandle h in pins) h.Free();
            pins.Clear();
        }
    }

    public static unsafe partial class Library
    {
        /// <summary>The root of a prompt computed with LoRA adapter loraId (0 = none:
        /// BlockHashRoot's).</summary>
        public static ulong BlockHashRootLora(ulong seed, byte[] salt, ulong loraId)
        {
            ulong h;
            salt = salt ?? new byte[0];
            fixed (byte* s = salt)
                Native.Check(Native.pkv_block_hash_root_lora(seed, s, (uint)salt.Length, loraId, &h));
            return h;
        }

        /// <summary>The hash of one block whose tokens are the prompt's [firstToken, firstToken +
        /// tokens.Length), with the prompt's extra keys (all may be given: those not touching the
        /// block are skipped). Without a key touching it, BlockHash's.</summary>
        public static ulong BlockHashExtra(ulong seed, ulong parentHash, int[] tokens, uint firstToken,
                                           ExtraKey[] keys)
        {
            if (tokens == null) throw new ArgumentNullException("tokens");
            ulong h;
            using (var k = new PinnedKeys(keys))
            fixed (int* t = tokens)
                Native.Check(Native.pkv_block_hash_extra(seed, parentHash, t, (uint)tokens.Length, firstToken, k.Keys,
                                                         k.Count, PinnedKeys.Size, &h));
            return h;
        }
    }
}
