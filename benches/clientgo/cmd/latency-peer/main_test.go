package main

import (
	"testing"
	"time"
)

func TestSeqOfReadsOnlyThisRunsStamps(t *testing.T) {
	for _, c := range []struct {
		stamp, run string
		seq        uint64
		ok         bool
	}{
		{"r1-cr.42", "r1-cr", 42, true},
		{"r0-cr.42", "r1-cr", 0, false},
		{"r1-cr.42", "r1", 0, false},
		{"r1-cr.x", "r1-cr", 0, false},
		{"", "r1-cr", 0, false},
	} {
		seq, ok := seqOf(c.stamp, c.run)
		if seq != c.seq || ok != c.ok {
			t.Errorf("seqOf(%q, %q) = %d, %v; want %d, %v", c.stamp, c.run, seq, ok, c.seq, c.ok)
		}
	}
}

func TestRecorderCountsEachKeyOnceAndSaysWhenDrained(t *testing.T) {
	r := newRecorder("r")
	r.started("ns/a", "", time.Now())
	r.setWant(2)
	r.started("ns/a", "", time.Now())
	select {
	case <-r.drained:
		t.Fatal("drained after one key of two")
	default:
	}
	r.started("ns/b", "", time.Now())
	select {
	case <-r.drained:
	default:
		t.Fatal("not drained after two keys of two")
	}
	if n := len(r.drainedLine()["first_start_secs"].(map[string]float64)); n != 2 {
		t.Fatalf("drained line has %d keys, want 2", n)
	}
}
