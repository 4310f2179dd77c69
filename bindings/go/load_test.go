package pkv_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// Loading: the package loads libpkv.so.1 as it initializes; a program that cannot find it gets
// LoadError (and the same error from every call), saying where it looked and what to set.
func TestLoaded(t *testing.T) {
	if err := pkv.LoadError(); err != nil {
		t.Fatal(err)
	}
	if pkv.LibraryName != "libpkv.so.1" || !strings.Contains(pkv.LibraryPath(), "libpkv.so") {
		t.Fatalf("loaded %q as %q", pkv.LibraryName, pkv.LibraryPath())
	}
}

// TestLoadError runs this test binary again with the library out of reach: PKV_LIBRARY naming a
// missing file, then no PKV_LIBRARY and an LD_LIBRARY_PATH without it.
func TestLoadError(t *testing.T) {
	if want := os.Getenv("PKV_TEST_LOAD_ERROR"); want != "" {
		loadErrorChild(t, strings.Split(want, "|"))
		return
	}
	empty := t.TempDir()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"PKV_LIBRARY=" + empty + "/libpkv.so.1"}, "PKV_LIBRARY=" + empty + "/libpkv.so.1|set PKV_LIBRARY"},
		{[]string{"PKV_LIBRARY=", "LD_LIBRARY_PATH=" + empty}, "cannot load libpkv.so.1|LD_LIBRARY_PATH (=" + empty + ")|Set LD_LIBRARY_PATH to the directory that holds libpkv.so.1|pkg-config --variable=libdir pkv"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadError$", "-test.v")
		cmd.Env = append(append(os.Environ(), c.env...), "PKV_TEST_LOAD_ERROR="+c.want)
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "SKIP") {
			t.Logf("%v: %s", c.env, out)
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.env, err, out)
		}
	}
}

func loadErrorChild(t *testing.T, want []string) {
	err := pkv.LoadError()
	if err == nil && os.Getenv("PKV_LIBRARY") == "" {
		t.Skip("libpkv.so.1 is installed where the loader finds it (the ld.so cache)")
	}
	if err == nil || !errors.Is(err, pkv.ErrUnsupported) {
		t.Fatalf("LoadError %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%q lacks %q", err, w)
		}
	}
	if _, e := pkv.DefaultParams(); e != err {
		t.Fatalf("DefaultParams: %v", e)
	}
	if _, e := pkv.NewEngine(pkv.EngineParams{}); e != err {
		t.Fatalf("NewEngine: %v", e)
	}
	// a call with no Go check: the C side refuses it with the same text
	if _, e := pkv.BlockHash(0, 0, []int32{1}); !errors.Is(e, pkv.ErrUnsupported) || !strings.Contains(e.Error(), want[0]) {
		t.Fatalf("BlockHash: %v", e)
	}
	if pkv.Version() != 0 || pkv.LibraryPath() != "" {
		t.Fatalf("version %d, path %q", pkv.Version(), pkv.LibraryPath())
	}
}
