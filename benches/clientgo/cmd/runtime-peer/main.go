// Command runtime-peer is the controller-runtime side of `make bench-runtime`: a manager with
// one no-op controller over the ConfigMaps of one namespace, timed from the start of main until
// every ConfigMap has been reconciled once, then the process's resident memory. It prints one
// JSON line on stdout, with the same fields as cmd/runtime-bench (ours); progress goes to
// stderr.
//
// The manager is built as a controller-runtime user builds one, with its defaults except:
// metrics and health probes off, no leader election, the cache limited to -namespace. Its
// defaults that matter here:
//
//   - the rest config comes from ctrl.GetConfig (-kubeconfig, KUBECONFIG, ...), which sets
//     QPS -1: no client-side rate limit (controller-runtime relies on the server's priority
//     and fairness). A no-op reconciler reading the cache makes no requests anyway: the run is
//     one discovery request (for the REST mapper) and one WatchList.
//   - built-in kinds are listed and watched as protobuf;
//   - managedFields are kept in the cache (no DefaultTransform); -strip sets
//     cache.TransformStripManagedFields, as ours does by default;
//   - one worker, controller-runtime's priority queue (on by default; -classic-queue uses
//     client-go's rate-limiting queue instead, for diagnosis).
//
// The reconciler reads the object from the manager's client, which reads the cache (a deep
// copy, as every real reconciler gets), and counts distinct keys. When the count reaches
// -expect, the clock stops and a line {"event":"reconciled"} goes to stdout at once (the
// harness times the run from spawning the process to it); -settle later VmRSS and VmHWM are
// read from /proc/self/status as the kernel reports them: no forced GC, as on our side no
// allocator trimming.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// started is read as the first thing main does; package initialisation (client-go's and
// controller-runtime's scheme registration) has run by then. The harness also measures from
// spawning the process.
var started time.Time

func main() {
	started = time.Now()
	// -kubeconfig is controller-runtime's own flag (pkg/client/config), read by ctrl.GetConfig.
	namespace := flag.String("namespace", "bench-informer", "the namespace whose ConfigMaps are reconciled")
	expect := flag.Int("expect", 0, "ConfigMaps in the namespace; the clock stops when this many distinct keys were reconciled (0: as many as the cache holds once synced)")
	settle := flag.Duration("settle", 200*time.Millisecond, "wait after the last reconcile before reading the resident memory (runtime-bench waits as long)")
	timeout := flag.Duration("timeout", 120*time.Second, "give up if not every ConfigMap was reconciled by then")
	strip := flag.Bool("strip", false, "strip managedFields in the cache (cache.TransformStripManagedFields), as ours does by default")
	classicQueue := flag.Bool("classic-queue", false, "use client-go's rate-limiting workqueue instead of controller-runtime's default priority queue (for diagnosis; the harness does not)")
	readYourWrites := flag.Bool("read-your-writes", false, "make the manager's client wait for its own writes in cache reads (client.CacheOptions.EnableReadYourWritesConsistency, experimental and off by default in v0.25)")
	flag.Parse()

	out, err := run(options{
		namespace: *namespace, expect: *expect,
		settle: *settle, timeout: *timeout, strip: *strip, classicQueue: *classicQueue,
		readYourWrites: *readYourWrites,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "runtime-peer:", err)
		os.Exit(1)
	}
	impl := "controller-runtime"
	if *strip {
		impl += "/strip"
	}
	if *readYourWrites {
		impl += "/ryw"
	}
	fmt.Fprintf(os.Stderr, "%s: %d reconciled in %.1f ms (manager built at %.1f ms, cache synced at %.1f ms), rss %.1f MiB, peak %.1f MiB\n",
		impl, out.reconciled, ms(out.elapsed), ms(out.built), ms(out.synced), mib(out.rss), mib(out.hwm))
	line, _ := json.Marshal(map[string]any{
		"impl": impl, "workload": "runtime/configmaps", "objects": out.reconciled,
		"secs": out.elapsed.Seconds(), "built_secs": out.built.Seconds(), "synced_secs": out.synced.Seconds(),
		"rss_bytes": out.rss, "hwm_bytes": out.hwm, "goroutines": runtime.NumGoroutine(),
	})
	fmt.Println(string(line))
}

type options struct {
	namespace           string
	expect              int
	settle, timeout     time.Duration
	strip, classicQueue bool
	readYourWrites      bool
}

type outcome struct {
	reconciled             int
	elapsed, built, synced time.Duration
	rss, hwm               uint64
}

// counter counts distinct keys and closes done when it has seen want of them.
type counter struct {
	mu   sync.Mutex
	seen map[client.ObjectKey]struct{}
	want int
	done chan struct{}
}

func newCounter() *counter {
	return &counter{seen: make(map[client.ObjectKey]struct{}), done: make(chan struct{})}
}

// setWant sets the count to reach; done closes at once if it is reached already.
func (c *counter) setWant(want int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = want
	c.check()
}

func (c *counter) add(key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[key] = struct{}{}
	c.check()
}

// check closes done once want (set, non-zero) keys have been seen. Call with mu held.
func (c *counter) check() {
	if c.want > 0 && len(c.seen) >= c.want {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
}

func (c *counter) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// reconciler is the no-op reconciler: one read from the cache, one count.
type reconciler struct {
	client  client.Client
	counter *counter
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.counter.add(req.NamespacedName)
	return ctrl.Result{}, nil
}

func run(o options) (outcome, error) {
	log.SetLogger(logr.Discard())
	config, err := ctrl.GetConfig() // -kubeconfig, KUBECONFIG, in-cluster, ~/.kube/config
	if err != nil {
		return outcome{}, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cacheOptions := cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}}
	if o.strip {
		cacheOptions.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Cache:                  cacheOptions,
		Client:                 client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: &o.readYourWrites}},
	})
	if err != nil {
		return outcome{}, fmt.Errorf("building the manager: %w", err)
	}
	built := time.Since(started)
	counter := newCounter()
	builder := ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{})
	if o.classicQueue {
		builder = builder.WithOptions(controller.Options{UsePriorityQueue: new(false)})
	}
	if err := builder.Complete(&reconciler{client: mgr.GetClient(), counter: counter}); err != nil {
		return outcome{}, fmt.Errorf("building the controller: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()

	deadline := time.After(o.timeout)
	syncCtx, syncCancel := context.WithTimeout(ctx, o.timeout)
	defer syncCancel()
	// The controller's source makes the ConfigMap informer once the cache has started;
	// GetInformer returns that same informer (made here if it comes first) once it has synced.
	informer, err := mgr.GetCache().GetInformer(syncCtx, &corev1.ConfigMap{})
	if err != nil || !informer.HasSynced() {
		return outcome{}, fmt.Errorf("the cache did not sync within %s: %v", o.timeout, err)
	}
	synced := time.Since(started)
	want := o.expect
	if want == 0 {
		want, err = cachedCount(ctx, mgr.GetCache())
		if err != nil {
			return outcome{}, err
		}
	}
	counter.setWant(want)
	select {
	case <-counter.done:
	case err := <-stopped:
		return outcome{}, fmt.Errorf("the manager stopped: %v", err)
	case <-deadline:
		return outcome{}, fmt.Errorf("%d of %d ConfigMaps reconciled within %s", counter.len(), want, o.timeout)
	}
	elapsed := time.Since(started)
	// Told at once, so the harness can time the run from spawning the process.
	fmt.Println(`{"event":"reconciled"}`)

	time.Sleep(o.settle)
	rss, hwm, err := residentMemory()
	if err != nil {
		return outcome{}, err
	}
	reconciled := counter.len()
	cancel()
	<-stopped
	return outcome{reconciled: reconciled, elapsed: elapsed, built: built, synced: synced, rss: rss, hwm: hwm}, nil
}

// cachedCount is how many ConfigMaps the synced cache holds. Used without -expect only: a
// List from the cache deep-copies every object.
func cachedCount(ctx context.Context, c cache.Cache) (int, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list); err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// residentMemory reads VmRSS and VmHWM (peak) from /proc/self/status, in bytes.
func residentMemory() (rss, hwm uint64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseStatus(f)
}

// parseStatus reads VmRSS and VmHWM from the text of /proc/<pid>/status.
func parseStatus(r io.Reader) (rss, hwm uint64, err error) {
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		field, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok || (field != "VmRSS" && field != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parsing %s: %w", field, err)
		}
		if field == "VmRSS" {
			rss = kb * 1024
		} else {
			hwm = kb * 1024
		}
	}
	if err := scanner.Err(); err != nil {
		return 0, 0, err
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/self/status")
	}
	return rss, hwm, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
