package pkv_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pkv.local/pkv"
)

// KV events on the wire (pkv 0.3): an engine with an event publisher binds its endpoint (a '*'
// port resolved), says so in EventPublisherInfo, and publishes its events.
func TestEventPublisher(t *testing.T) {
	p := smallParams(t)
	p.EventPublisher = &pkv.EventPublisherParams{Endpoint: "tcp://127.0.0.1:*", Topic: "go-test", SendHWM: 10}
	e, err := pkv.NewEngine(p)
	if errors.Is(err, pkv.ErrUnsupported) {
		t.Skipf("libpkv was built without the publisher: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	info := must(e.EventPublisherInfo())
	if !strings.HasPrefix(info.Endpoint, "tcp://127.0.0.1:") || strings.HasSuffix(info.Endpoint, "*") ||
		info.ReplayEndpoint != "" {
		t.Fatalf("info %+v", info)
	}
	pub := e.Params().EventPublisher
	if pub == nil || pub.Endpoint != "tcp://127.0.0.1:*" || pub.Topic != "go-test" || pub.SendHWM != 10 {
		t.Fatalf("Params().EventPublisher %+v", pub)
	}
	pub.Topic = "changed" // a copy
	if e.Params().EventPublisher.Topic != "go-test" {
		t.Fatal("Params() shares the engine's publisher parameters")
	}
	runStep(t, e, must(e.Allocate(tokenRange(1, 9), nil))) // 2 blocks sealed: stored events
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info = must(e.EventPublisherInfo())
		if info.EventsPublished >= 1 && info.NextSeq >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing published: %+v", info)
		}
	}
	if info.EventsDropped != 0 {
		t.Fatalf("info %+v", info)
	}

	// with replay; no publisher; an endpoint that cannot be bound
	p.EventPublisher = &pkv.EventPublisherParams{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*"}
	replay := newEngine(t, p)
	if info := must(replay.EventPublisherInfo()); !strings.HasPrefix(info.ReplayEndpoint, "tcp://127.0.0.1:") {
		t.Fatalf("replay info %+v", info)
	}
	_, err = newEngine(t, smallParams(t)).EventPublisherInfo()
	expectStatus(t, err, pkv.ErrState)
	p.EventPublisher = &pkv.EventPublisherParams{Endpoint: "bogus://x"}
	_, err = pkv.NewEngine(p)
	expectStatus(t, err, pkv.ErrEvents)
	p.EventPublisher = &pkv.EventPublisherParams{}
	_, err = pkv.NewEngine(p)
	if err == nil {
		t.Fatal("no endpoint: created")
	}
}

// The wire format (pkv 0.4): vLLM's current maps by default, the arrays of vLLM before 0.26 on
// request, another value refused.
func TestEventFormat(t *testing.T) {
	p := smallParams(t)
	p.EventPublisher = &pkv.EventPublisherParams{Endpoint: "tcp://127.0.0.1:*"}
	if f := newEngine(t, p).Params().EventPublisher.Format; f != pkv.EventFormatMap || f.String() != "EVENT_FORMAT_MAP" {
		t.Fatalf("the default format %v", f)
	}
	p.EventPublisher.Format = pkv.EventFormatArray
	if f := newEngine(t, p).Params().EventPublisher.Format; f != pkv.EventFormatArray {
		t.Fatalf("format %v", f)
	}
	p.EventPublisher.Format = 7
	_, err := pkv.NewEngine(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}
