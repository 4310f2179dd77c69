// The demo job of bindings/DEMO.md in C#; prints what examples/demo.c prints.
// Usage: mono Demo.exe [seed]   (default 42)
using System;
using System.Globalization;
using System.Numerics;
using Pkv;

static class Demo
{
    const int Layers = 2, QHeads = 4, KvHeads = 2, HeadDim = 16, SystemLen = 32, Requests = 3,
              DecodeSteps = 4;
    static ulong state;

    static ulong NextU64()  // splitmix64
    {
        ulong z = unchecked(state += 0x9e3779b97f4a7c15UL);
        z = unchecked((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL);
        z = unchecked((z ^ (z >> 27)) * 0x94d049bb133111ebUL);
        return z ^ (z >> 31);
    }

    static int NextToken() { return (int)(NextU64() % 1000); }

    static float[] Values(long n)
    {
        var a = new float[n];
        for (long i = 0; i < n; i++) a[i] = (float)(NextU64() >> 40) / 16777216.0f - 0.5f;
        return a;
    }

    // One step over seqs: random q/k/v, pkv_attention on every layer; the sum of the outputs.
    static double Step(Engine e, params Sequence[] seqs)
    {
        double sum = 0;
        using (var b = e.BeginBatch(seqs))
        {
            long n = b.NumTokens;
            var output = new float[n * QHeads * HeadDim];
            for (uint layer = 0; layer < Layers; layer++)
            {
                float[] q = Values(n * QHeads * HeadDim), k = Values(n * KvHeads * HeadDim),
                        v = Values(n * KvHeads * HeadDim);
                b.Attention(layer, q, k, v, output);
                foreach (float x in output) sum += x;
            }
            b.End();
        }
        return sum;
    }

    static int Main(string[] args)
    {
        try
        {
            return Run(args);
        }
        catch (Exception e) when (e is PkvException || e is DllNotFoundException)
        {
            Console.Error.WriteLine(e.Message);
            return 1;
        }
    }

    static int Run(string[] args)
    {
        state = args.Length > 0 ? ulong.Parse(args[0], CultureInfo.InvariantCulture) : 42;
        var p = EngineParams.Defaults();  // loading libpkv checks pkv_abi_version() first
        p.NumLayers = Layers; p.NumQHeads = QHeads; p.NumKvHeads = KvHeads; p.HeadDim = HeadDim;
        p.DType = DType.F32; p.BlockSize = 16; p.NumBlocks = 64;
        p.Device = Device.Cpu; p.NumThreads = 1;
        using (var e = new Engine(p))
        {
            Console.Write("pkv {0} abi {1}\n", Library.Version, Library.AbiVersion);
            var system = new int[SystemLen];
            for (int i = 0; i < SystemLen; i++) system[i] = NextToken();
            var seqs = new Sequence[Requests + 1];
            double checksum = 0;
            Console.Write("cached tokens:");
            for (int r = 0; r < Requests; r++)
            {
                var tokens = new int[SystemLen + 5 + (int)(NextU64() % 10)];
                Array.Copy(system, tokens, SystemLen);
                for (int i = SystemLen; i < tokens.Length; i++) tokens[i] = NextToken();
                seqs[r] = e.Allocate(tokens);
                Console.Write(" {0}", seqs[r].NumCachedTokens);
                checksum += Step(e, seqs[r]);  // prefill
            }
            Console.Write("\n");
            var running = new Sequence[Requests];
            Array.Copy(seqs, running, Requests);
            for (int s = 0; s < DecodeSteps; s++)
            {
                foreach (var seq in running) seq.Append(NextToken());
                checksum += Step(e, running);
            }
            seqs[Requests] = seqs[0].Fork();
            seqs[Requests].Append(NextToken());
            checksum += Step(e, seqs[Requests]);

            Stats st = e.Stats();
            Console.Write("prefix: {0} of {1} tokens cached\n", st.PrefixHitTokens, st.PrefixQueryTokens);
            Console.Write("blocks used: {0} of {1}, copy-on-write copies: {2}\n", st.NumUsedBlocks,
                          st.NumBlocks, st.NumCowCopies);
            Console.Write("attention checksum: {0}\n", FormatG6(checksum));
            foreach (var seq in seqs) seq.Release();
            st = e.Stats();
            Console.Write("after release: {0} blocks free, {1} of them cached\n", st.NumFreeBlocks,
                          st.NumCachedBlocks);
        }
        return 0;
    }

    // C's printf("%.6g"), exactly: the double's exact value rounded half-to-even to 6
    // significant digits, trailing zeros dropped, exponent form when the exponent is below -4 or
    // at least 6. (.NET's own "G6" rounds a 15-digit approximation and writes "E+01".)
    static string FormatG6(double x)
    {
        if (double.IsNaN(x)) return "nan";
        if (double.IsInfinity(x)) return x > 0 ? "inf" : "-inf";
        string sign = x < 0 || (x == 0 && 1 / x < 0) ? "-" : "";
        if (x == 0) return sign + "0";
        long bits = BitConverter.DoubleToInt64Bits(Math.Abs(x));
        int exp2 = (int)(bits >> 52);
        BigInteger num = bits & 0xFFFFFFFFFFFFFL, den = 1;
        if (exp2 == 0) exp2 = 1; else num += BigInteger.One << 52;
        if (exp2 > 1075) num <<= exp2 - 1075; else den <<= 1075 - exp2;  // |x| = num / den
        int e = (int)Math.Floor(Math.Log10(Math.Abs(x)));
        while (CompareToPow10(num, den, e + 1) >= 0) e++;  // Log10 may be off by one
        while (CompareToPow10(num, den, e) < 0) e--;
        BigInteger n = num * BigInteger.Pow(10, Math.Max(0, 5 - e)), d = den * BigInteger.Pow(10, Math.Max(0, e - 5));
        BigInteger rem;
        BigInteger q = BigInteger.DivRem(n, d, out rem);
        int half = (rem * 2).CompareTo(d);
        if (half > 0 || (half == 0 && !q.IsEven)) q += 1;
        if (q == 1000000) { q = 100000; e++; }
        string digits = q.ToString(CultureInfo.InvariantCulture);  // 6 digits
        if (e < -4 || e >= 6)
        {
            string mant = (digits[0] + "." + digits.Substring(1)).TrimEnd('0').TrimEnd('.');
            return string.Format(CultureInfo.InvariantCulture, "{0}{1}e{2}{3:00}", sign, mant,
                                 e < 0 ? "-" : "+", Math.Abs(e));
        }
        string text = e >= 0 ? digits.Substring(0, e + 1) + "." + digits.Substring(e + 1)
                             : "0." + new string('0', -e - 1) + digits;
        return sign + (text.Contains(".") ? text.TrimEnd('0').TrimEnd('.') : text);
    }

    static int CompareToPow10(BigInteger num, BigInteger den, int k)  // num/den vs 10^k
    {
        return k >= 0 ? num.CompareTo(den * BigInteger.Pow(10, k))
                      : (num * BigInteger.Pow(10, -k)).CompareTo(den);
    }
}
