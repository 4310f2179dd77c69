// Loading, the enums, sequences as IDisposable and the event publisher (pkv 0.3).
using System;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using Pkv;

static partial class Tests
{
    static void Loaded()
    {
        Assert(Library.LoadError == null, "LoadError: " + Library.LoadError);
        Equal("libpkv.so.1", Library.FileName, "the library's name is its SONAME");
        Equal(DType.Bf16, EngineParams.Defaults().DType, "default dtype");
        Equal(Device.Auto, EngineParams.Defaults().Device, "default device");
        Equal((int)DType.Fp8E5m2, Native.PKV_DTYPE_FP8_E5M2, "enum value");
        Equal((int)Device.Cuda, Native.PKV_DEVICE_CUDA, "enum value");
    }

    // The demo run with libpkv out of reach: one exception, saying what was looked for and what
    // to set.
    static void LoadErrorNamesWhatToSet()
    {
        string empty = Path.Combine(Path.GetTempPath(), "pkv-cs-noload-" + Process.GetCurrentProcess().Id);
        Directory.CreateDirectory(empty);
        var psi = new ProcessStartInfo("mono", "\"" + demoExe + "\" 42")
        {
            UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true,
        };
        psi.EnvironmentVariables["LD_LIBRARY_PATH"] = empty;
        using (var p = Process.Start(psi))
        {
            string stdout = p.StandardOutput.ReadToEnd(), stderr = p.StandardError.ReadToEnd();
            p.WaitForExit();
            if (p.ExitCode == 0 && stdout.StartsWith("pkv "))
            {
                Console.WriteLine("     (libpkv.so.1 is installed where the loader finds it: not checked)");
                return;
            }
            Equal(1, p.ExitCode, "exit code");
            foreach (string want in new[] { "cannot load libpkv.so.1", "LD_LIBRARY_PATH (=" + empty + ")",
                                            "Set LD_LIBRARY_PATH to the directory that holds libpkv.so.1",
                                            "pkg-config --variable=libdir pkv" })
                Assert(stderr.Contains(want), "stderr lacks \"" + want + "\": " + stderr);
        }
        Directory.Delete(empty);
    }

    static void SequenceDisposes()
    {
        using (var e = new Engine(Small()))
        {
            using (var seq = e.Allocate(new[] { 1, 2, 3, 4, 5 }))
            {
                RunStep(e, seq);
                Equal(1ul, e.Stats().NumSeqs, "one sequence");
            }
            Equal(0ul, e.Stats().NumSeqs, "released by Dispose");
            var a = e.Allocate(new[] { 1, 2, 3 });
            a.Release();
            a.Dispose();  // released already: a no-op
            var b = e.Allocate(new[] { 1, 2, 3 });
            e.Sequence(b.Id).Release();
            b.Dispose();  // its id is gone: a no-op
            var c = e.Allocate(new[] { 1, 2, 3 });
            using (var batch = e.BeginBatch(new[] { c }))
                Throws(Status.State, () => c.Dispose());  // in an open batch: refused, as Release
            c.Dispose();
            Equal(0ul, e.Stats().NumSeqs, "none left");
            var d = e.Allocate(new[] { 1, 2, 3 });
            e.Dispose();
            d.Dispose();  // the engine is gone: a no-op
        }
    }

    static void EventPublisher()
    {
        var p = Small();
        Engine e;
        try
        {
            e = new Engine(p, eventPublisher: new EventPublisherConfig("tcp://127.0.0.1:*") { Topic = "cs-test", SendHwm = 10 });
        }
        catch (PkvException x) when (x.Status == Status.Unsupported)
        {
            Console.WriteLine("     (libpkv was built without the publisher: " + x.Detail + ")");
            return;
        }
        using (e)
        {
            PublisherInfo info = e.EventPublisherInfo();
            Assert(info.Endpoint.StartsWith("tcp://127.0.0.1:") && !info.Endpoint.EndsWith("*"), "endpoint " + info);
            Equal("", info.ReplayEndpoint, "no replay");
            using (var seq = e.Allocate(Enumerable.Range(1, 9).ToArray())) RunStep(e, seq);
            for (int i = 0; i < 500 && e.EventPublisherInfo().EventsPublished == 0; i++) Thread.Sleep(10);
            info = e.EventPublisherInfo();
            Assert(info.EventsPublished >= 1 && info.NextSeq >= 1 && info.EventsDropped == 0, "published " + info);
        }
        using (var r = new Engine(p, null, null, new EventPublisherConfig
               { Endpoint = "tcp://127.0.0.1:*", ReplayEndpoint = "tcp://127.0.0.1:*" }))
            Assert(r.EventPublisherInfo().ReplayEndpoint.StartsWith("tcp://127.0.0.1:"), "replay endpoint");
        using (var array = new Engine(p, eventPublisher: new EventPublisherConfig("tcp://127.0.0.1:*")
                                                         { Format = EventFormat.Array }))
            Assert(array.EventPublisherInfo().Endpoint.StartsWith("tcp://"), "the array format");
        Assert(Throws(Status.InvalidArgument, () => new Engine(p, eventPublisher: new EventPublisherConfig(
                   "tcp://127.0.0.1:*") { Format = (EventFormat)7 })).Detail.Contains("format"), "format passed to pkv");
        Equal(EventFormat.Map, new EventPublisherConfig().Format, "default format");
        using (var none = new Engine(p))
            Throws(Status.State, () => none.EventPublisherInfo());
        Throws(Status.Events, () => new Engine(p, eventPublisher: new EventPublisherConfig("bogus://x")));
    }
}
