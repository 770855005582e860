package main

import (
	"testing"
	"time"
)

// The same reference values as queue-bench's rng tests: both programs draw the same delays.
func TestSplitMix64MatchesTheReferenceSequence(t *testing.T) {
	r := splitMix64{0}
	if got := r.next(); got != 0xe220a8397b1dcdaf {
		t.Fatalf("first output %#x", got)
	}
	if got := r.next(); got != 0x6e789e6aa1b965f4 {
		t.Fatalf("second output %#x", got)
	}
	if got := (&splitMix64{1}).next(); got != 0x910a2dec89025cc1 {
		t.Fatalf("seed 1 %#x", got)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var samples []time.Duration
	for i := 1; i <= 100; i++ {
		samples = append(samples, time.Duration(i)*time.Microsecond)
	}
	if got := percentile(samples, 50); got != 50*time.Microsecond {
		t.Fatalf("p50 %v", got)
	}
	if got := percentile(samples, 99); got != 99*time.Microsecond {
		t.Fatalf("p99 %v", got)
	}
	if got := percentile(samples[:1], 99); got != time.Microsecond {
		t.Fatalf("p99 of one %v", got)
	}
}

func TestPrioritisedCycleProcessesEveryKey(t *testing.T) {
	o := cycle{prio: true, n: 2, adds: 10_000}.run()
	if o.adds != 10_000 || o.processed != 10_000 {
		t.Fatalf("%+v", o)
	}
}

func TestCycleProcessesEveryUniqueKey(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		o := cycle{n: n, adds: 10_000}.run()
		if o.adds != 10_000 || o.processed != 10_000 {
			t.Fatalf("n=%d: %+v", n, o)
		}
	}
}
