// Command clientgo-bench runs queue-bench's workloads (cmd/queue-bench) on client-go's
// workqueue and prints the same JSON lines, so `make bench-queue` can compare the two in one
// run. Progress goes to stderr.
//
// Workloads, named as in queue-bench:
//
//   - cycle/{unique,repeat}/pNwN: N producers Add keys, N workers loop on Get and Done, on a
//     workqueue.NewTyped[int]. Unique keys are each added once (-adds in all); repeating keys
//     are taken modulo -repeat-keys (-repeat-adds in all). Producers call runtime.Gosched
//     every -yield-every adds, as queue-bench's yield to tokio. The clock runs from starting
//     the producers (workers already waiting in Get) to the last worker returning after
//     ShutDown. Reported as adds/s, with the number of items processed.
//   - cycle/unique/1thread: the same with one producer and one worker under GOMAXPROCS(1).
//   - cycle/prio/pNwN: unique keys on controller-runtime's priority queue (priorityqueue.New,
//     unnamed: no metrics, as the workqueue above), odd keys added with priority -100 and even
//     ones with 0 through AddWithOpts. Its ShutDown makes Get return at once, queued items or
//     not, so the workers stop after the last item instead: the one that processes it shuts
//     the queue down, which releases the others.
//   - add_after/insert: AddAfter of -pending distinct int keys with delays of 60 to 120 s on
//     a NewTypedDelayingQueue[int]; the clock stops when Get returns a key added last with a
//     1 ns delay, which is when the waiting loop has taken every item off its channel. Heap
//     bytes per pending item come from runtime.ReadMemStats after a GC, before and after.
//   - add_after/lateness: one worker waits in Get while -lateness-items keys are added with
//     delays in [low, low+span); lateness = time Get returned the key − its deadline.
//
// Delays come from SplitMix64 with the same seed as queue-bench, so both draw the same ones.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// settle is how long workers get to park in Get before the clock starts.
const settle = 10 * time.Millisecond

// barrier is the key added last, with a 1 ns delay, to mark the end of the inserts.
const barrier = -1

type args struct {
	adds           int
	repeatAdds     int
	repeatKeys     int
	pending        int
	latenessItems  int
	latenessLowMs  int
	latenessSpanMs int
	seed           uint64
	yieldEvery     int
	only           string
}

func main() {
	var a args
	flag.IntVar(&a.adds, "adds", 2_000_000, "total adds per unique-keys add → get → done workload, split between the producers")
	flag.IntVar(&a.repeatAdds, "repeat-adds", 10_000_000, "total adds per repeating-keys workload (dedup makes these faster, so they get more)")
	flag.IntVar(&a.repeatKeys, "repeat-keys", 32, "key space of the repeating-keys workloads")
	flag.IntVar(&a.pending, "pending", 1_000_000, "items pending in the add_after insert / bytes-per-item workload")
	flag.IntVar(&a.latenessItems, "lateness-items", 100_000, "items in the firing-lateness workload")
	flag.IntVar(&a.latenessLowMs, "lateness-low-ms", 200, "shortest delay of the firing-lateness workload, in milliseconds")
	flag.IntVar(&a.latenessSpanMs, "lateness-span-ms", 2_000, "spread of the firing-lateness delays, in milliseconds")
	flag.Uint64Var(&a.seed, "seed", 42, "seed of the random delays (queue-bench draws the same delays)")
	flag.IntVar(&a.yieldEvery, "yield-every", 1_000, "producers yield to the scheduler after this many adds (0: never)")
	flag.StringVar(&a.only, "only", "", "run only the workloads whose name contains this text")
	flag.Parse()
	if a.adds < 8 || a.repeatAdds < 8 || a.repeatKeys < 1 || a.pending < 1 || a.latenessItems < 1 {
		fmt.Fprintln(os.Stderr, "clientgo-bench: -adds and -repeat-adds must be at least 8, the other counts at least 1")
		os.Exit(2)
	}
	selected := func(name string) bool { return a.only == "" || strings.Contains(name, a.only) }

	for _, c := range cycleWorkloads(a.adds, a.repeatAdds, a.repeatKeys, a.yieldEvery) {
		if !selected(c.name()) {
			continue
		}
		o := c.run()
		rate := float64(o.adds) / o.elapsed.Seconds()
		fmt.Fprintf(os.Stderr, "%8s %-22s %7.2f M adds/s  (%d processed, %.3f s)\n",
			"client-go", c.name(), rate/1e6, o.processed, o.elapsed.Seconds())
		emit(map[string]any{
			"impl": "client-go", "workload": c.name(), "adds": o.adds, "processed": o.processed,
			"secs": o.elapsed.Seconds(), "adds_per_sec": rate,
		})
	}

	if selected("add_after/insert") {
		elapsed, heapBytes := insert(a.pending, a.seed)
		rate := float64(a.pending) / elapsed.Seconds()
		perItem := float64(heapBytes) / float64(a.pending)
		fmt.Fprintf(os.Stderr, "%8s %-22s %7.2f M inserts/s, %.1f bytes per pending item (%d pending int keys)\n",
			"client-go", "add_after/insert", rate/1e6, perItem, a.pending)
		emit(map[string]any{
			"impl": "client-go", "workload": "add_after/insert", "items": a.pending,
			"secs": elapsed.Seconds(), "inserts_per_sec": rate, "heap_bytes": heapBytes,
			"bytes_per_item": perItem,
		})
	}

	if selected("add_after/lateness") {
		low := time.Duration(a.latenessLowMs) * time.Millisecond
		span := time.Duration(a.latenessSpanMs) * time.Millisecond
		p50, p99, worst := lateness(a.latenessItems, low, span, a.seed)
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		fmt.Fprintf(os.Stderr, "%8s %-22s p50 %.0f µs, p99 %.0f µs, max %.0f µs (%d items)\n",
			"client-go", "add_after/lateness", us(p50), us(p99), us(worst), a.latenessItems)
		emit(map[string]any{
			"impl": "client-go", "workload": "add_after/lateness", "items": a.latenessItems,
			"p50_us": us(p50), "p99_us": us(p99), "max_us": us(worst),
		})
	}
}

func emit(line map[string]any) {
	out, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}

// === cycle ===

// cycle is one add → get → done workload; see the package docs.
type cycle struct {
	prio       bool
	repeat     bool
	repeatKeys int
	n          int // producers, and as many workers
	adds       int
	oneThread  bool
	yieldEvery int
}

type cycleOutcome struct {
	adds, processed int
	elapsed         time.Duration
}

func cycleWorkloads(adds, repeatAdds, repeatKeys, yieldEvery int) []cycle {
	var out []cycle
	for _, repeat := range []bool{false, true} {
		total := adds
		if repeat {
			total = repeatAdds
		}
		for _, n := range []int{1, 2, 4, 8} {
			out = append(out, cycle{repeat: repeat, repeatKeys: repeatKeys, n: n, adds: total, yieldEvery: yieldEvery})
		}
	}
	out = append(out, cycle{n: 1, adds: adds, oneThread: true, yieldEvery: yieldEvery})
	for _, n := range []int{1, 2} {
		out = append(out, cycle{prio: true, n: n, adds: adds, yieldEvery: yieldEvery})
	}
	return out
}

func (c cycle) name() string {
	keys := "unique"
	if c.repeat {
		keys = "repeat"
	}
	if c.prio {
		keys = "prio"
	}
	if c.oneThread {
		return "cycle/" + keys + "/1thread"
	}
	return fmt.Sprintf("cycle/%s/p%dw%d", keys, c.n, c.n)
}

func (c cycle) run() cycleOutcome {
	if c.prio {
		return c.runPrio()
	}
	if c.oneThread {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	q := workqueue.NewTyped[int]()
	per := c.adds / c.n
	processed := make([]int, c.n)
	var workers sync.WaitGroup
	for w := 0; w < c.n; w++ {
		workers.Add(1)
		go func(w int) {
			defer workers.Done()
			n := 0
			for {
				key, shutdown := q.Get()
				if shutdown {
					break
				}
				q.Done(key)
				n++
			}
			processed[w] = n
		}(w)
	}
	time.Sleep(settle)

	start := time.Now()
	var producers sync.WaitGroup
	for p := 0; p < c.n; p++ {
		producers.Add(1)
		go func(p int) {
			defer producers.Done()
			for i := p * per; i < (p+1)*per; i++ {
				key := i
				if c.repeat {
					key = i % c.repeatKeys
				}
				q.Add(key)
				if c.yieldEvery != 0 && (i-p*per+1)%c.yieldEvery == 0 {
					runtime.Gosched()
				}
			}
		}(p)
	}
	producers.Wait()
	q.ShutDown()
	workers.Wait()
	elapsed := time.Since(start)

	total := 0
	for _, n := range processed {
		total += n
	}
	return cycleOutcome{adds: per * c.n, processed: total, elapsed: elapsed}
}

// runPrio is run on controller-runtime's priority queue; see the package docs.
func (c cycle) runPrio() cycleOutcome {
	q := priorityqueue.New[int]("")
	per := c.adds / c.n
	total := int64(per * c.n)
	var done atomic.Int64
	processed := make([]int, c.n)
	var workers sync.WaitGroup
	for w := 0; w < c.n; w++ {
		workers.Add(1)
		go func(w int) {
			defer workers.Done()
			n := 0
			for {
				key, _, shutdown := q.GetWithPriority()
				if shutdown {
					break
				}
				q.Done(key)
				n++
				if done.Add(1) == total {
					q.ShutDown()
				}
			}
			processed[w] = n
		}(w)
	}
	time.Sleep(settle)

	low, live := -100, 0
	start := time.Now()
	for p := 0; p < c.n; p++ {
		go func(p int) {
			for i := p * per; i < (p+1)*per; i++ {
				priority := &live
				if i%2 == 1 {
					priority = &low
				}
				q.AddWithOpts(priorityqueue.AddOpts{Priority: priority}, i)
				if c.yieldEvery != 0 && (i-p*per+1)%c.yieldEvery == 0 {
					runtime.Gosched()
				}
			}
		}(p)
	}
	workers.Wait()
	elapsed := time.Since(start)

	sum := 0
	for _, n := range processed {
		sum += n
	}
	return cycleOutcome{adds: per * c.n, processed: sum, elapsed: elapsed}
}

// === add_after ===

// splitMix64 is queue-bench's SplitMix64, so both draw the same delays from one seed.
type splitMix64 struct{ state uint64 }

func (r *splitMix64) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *splitMix64) delays(count int, low, span time.Duration) []time.Duration {
	out := make([]time.Duration, count)
	s := uint64(span)
	if s == 0 {
		s = 1
	}
	for i := range out {
		out[i] = low + time.Duration(r.next()%s)
	}
	return out
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// insert adds `items` keys with far delays and returns the time until the waiting loop has
// taken them all, and the heap bytes the queue holds with every item pending.
func insert(items int, seed uint64) (time.Duration, int64) {
	rng := splitMix64{seed}
	delays := rng.delays(items, 60*time.Second, 60*time.Second)
	before := liveHeap()
	q := workqueue.NewTypedDelayingQueue[int]()
	start := time.Now()
	for key, d := range delays {
		q.AddAfter(key, d)
	}
	q.AddAfter(barrier, time.Nanosecond)
	key, _ := q.Get()
	elapsed := time.Since(start)
	if key != barrier {
		panic(fmt.Sprintf("got key %d before the barrier", key))
	}
	q.Done(key)
	heapBytes := int64(liveHeap()) - int64(before)
	runtime.KeepAlive(delays)
	q.ShutDown()
	return elapsed, heapBytes
}

type received struct {
	key int
	at  time.Time
}

// lateness returns the p50, p99 and max of (time Get returned a key − its deadline).
func lateness(items int, low, span time.Duration, seed uint64) (time.Duration, time.Duration, time.Duration) {
	rng := splitMix64{seed}
	delays := rng.delays(items, low, span)
	q := workqueue.NewTypedDelayingQueue[int]()
	got := make([]received, 0, items)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < items {
			key, shutdown := q.Get()
			if shutdown {
				panic("queue shut down")
			}
			got = append(got, received{key, time.Now()})
			q.Done(key)
		}
	}()
	time.Sleep(settle)
	deadlines := make([]time.Time, items)
	for key, d := range delays {
		deadlines[key] = time.Now().Add(d)
		q.AddAfter(key, d)
	}
	<-done
	q.ShutDown()

	late := make([]time.Duration, len(got))
	for i, r := range got {
		late[i] = max(r.at.Sub(deadlines[r.key]), 0)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	return percentile(late, 50), percentile(late, 99), late[len(late)-1]
}

// percentile is the nearest-rank percentile of sorted samples, as in queue-bench.
func percentile(sorted []time.Duration, pct int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := max((pct*len(sorted)+99)/100, 1)
	return sorted[rank-1]
}
