package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestParseStatusReadsRSSAndPeakInBytes(t *testing.T) {
	status := "Name:\truntime-peer\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t3\n"
	rss, hwm, err := parseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 10<<20 || hwm != 20<<20 {
		t.Fatalf("rss %d, hwm %d", rss, hwm)
	}
}

func TestParseStatusWithoutRSSIsAnError(t *testing.T) {
	if _, _, err := parseStatus(strings.NewReader("Name:\tx\n")); err == nil {
		t.Fatal("no error")
	}
}

func TestCounterIsDoneOnceItHasSeenEnoughDistinctKeys(t *testing.T) {
	c := newCounter()
	c.add(client.ObjectKey{Namespace: "ns", Name: "a"})
	c.setWant(2)
	c.add(client.ObjectKey{Namespace: "ns", Name: "a"})
	select {
	case <-c.done:
		t.Fatal("done after one distinct key")
	default:
	}
	c.add(client.ObjectKey{Namespace: "ns", Name: "b"})
	select {
	case <-c.done:
	default:
		t.Fatal("not done after two distinct keys")
	}
	c.add(client.ObjectKey{Namespace: "ns", Name: "c"}) // closing twice would panic
	if c.len() != 3 {
		t.Fatalf("len %d", c.len())
	}
}
