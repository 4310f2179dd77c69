package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The Go demo prints exactly what the C demo (PKV_DEMO, else build/examples/demo) prints.
func TestDemoOutputEqualsC(t *testing.T) {
	demo := os.Getenv("PKV_DEMO")
	if demo == "" {
		demo = filepath.Join("..", "..", "..", "..", "build", "examples", "demo")
	}
	for _, seed := range []uint64{42, 7, 1, 2, 3} {
		want, err := exec.Command(demo, itoa(seed)).Output()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := run(seed, &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(want, []byte("pkv ")) || got.String() != string(want) {
			t.Fatalf("seed %d:\n--- C\n%s--- Go\n%s", seed, want, got.String())
		}
	}
}

func itoa(u uint64) string { return strconv.FormatUint(u, 10) }
