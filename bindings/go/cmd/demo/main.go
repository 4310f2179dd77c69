// Command demo does the demo job of bindings/DEMO.md in Go; it prints what examples/demo.c
// prints. Usage: demo [seed]   (default 42)
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"pkv.local/pkv"
)

const (
	layers, qHeads, kvHeads, headDim = 2, 4, 2, 16
	systemLen, requests, decodeSteps = 32, 3, 4
)

type splitMix64 uint64

func (s *splitMix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *splitMix64) token() int32 { return int32(s.next() % 1000) }

func (s *splitMix64) values(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(s.next()>>40)/16777216.0 - 0.5
	}
	return v
}

// step runs one step over seqs: random q/k/v, pkv_attention on every layer; the outputs' sum.
func step(e *pkv.Engine, rng *splitMix64, seqs ...*pkv.Sequence) (float64, error) {
	b, err := e.BeginBatch(seqs, nil)
	if err != nil {
		return 0, err
	}
	defer b.Abort()
	n, sum := b.NumTokens(), 0.0
	out := make([]float32, n*qHeads*headDim)
	for layer := 0; layer < layers; layer++ {
		q, k, v := rng.values(n*qHeads*headDim), rng.values(n*kvHeads*headDim), rng.values(n*kvHeads*headDim)
		if err := b.Attention(layer, q, k, v, out); err != nil {
			return 0, err
		}
		for _, x := range out {
			sum += float64(x)
		}
	}
	return sum, b.End()
}

func run(seed uint64, w io.Writer) error {
	rng := splitMix64(seed)
	p, err := pkv.DefaultParams() // the package checked pkv_abi_version() as it loaded
	if err != nil {
		return err
	}
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = layers, qHeads, kvHeads, headDim
	p.DType, p.BlockSize, p.NumBlocks, p.Device, p.NumThreads = pkv.DTypeF32, 16, 64, pkv.DeviceCPU, 1
	e, err := pkv.NewEngine(p)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(w, "pkv %d abi %d\n", pkv.Version(), pkv.ABI())

	system := make([]int32, systemLen)
	for i := range system {
		system[i] = rng.token()
	}
	var seqs []*pkv.Sequence
	checksum := 0.0
	fmt.Fprint(w, "cached tokens:")
	for r := 0; r < requests; r++ {
		tokens := append([]int32{}, system...)
		for n := systemLen + 5 + int(rng.next()%10); len(tokens) < n; {
			tokens = append(tokens, rng.token())
		}
		seq, err := e.Allocate(tokens, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, " %d", seq.NumCachedTokens)
		seqs = append(seqs, seq)
		sum, err := step(e, &rng, seq) // prefill
		if err != nil {
			return err
		}
		checksum += sum
	}
	fmt.Fprint(w, "\n")
	for s := 0; s < decodeSteps; s++ {
		for _, seq := range seqs {
			if err := seq.Append(rng.token()); err != nil {
				return err
			}
		}
		sum, err := step(e, &rng, seqs...)
		if err != nil {
			return err
		}
		checksum += sum
	}
	child, err := seqs[0].Fork()
	if err != nil {
		return err
	}
	if err := child.Append(rng.token()); err != nil {
		return err
	}
	sum, err := step(e, &rng, child)
	if err != nil {
		return err
	}
	checksum += sum
	seqs = append(seqs, child)

	st, err := e.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "prefix: %d of %d tokens cached\n", st.PrefixHitTokens, st.PrefixQueryTokens)
	fmt.Fprintf(w, "blocks used: %d of %d, copy-on-write copies: %d\n", st.NumUsedBlocks, st.NumBlocks, st.NumCOWCopies)
	fmt.Fprintf(w, "attention checksum: %.6g\n", checksum)
	for _, seq := range seqs {
		if err := seq.Release(); err != nil {
			return err
		}
	}
	if st, err = e.Stats(); err != nil {
		return err
	}
	fmt.Fprintf(w, "after release: %d blocks free, %d of them cached\n", st.NumFreeBlocks, st.NumCachedBlocks)
	return nil
}

func main() {
	seed := uint64(42)
	if len(os.Args) > 1 {
		var err error
		if seed, err = strconv.ParseUint(os.Args[1], 10, 64); err != nil {
			fmt.Fprintln(os.Stderr, "usage: demo [seed]")
			os.Exit(2)
		}
	}
	if err := run(seed, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
