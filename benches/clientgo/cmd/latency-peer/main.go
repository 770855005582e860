// Command latency-peer is the controller-runtime side of `make bench-latency`: a manager with
// one controller over the ConfigMaps of one namespace, restarted over them while live edits
// arrive, reporting every reconcile-start the benchmark needs. It prints the same JSON lines
// on stdout as `latency-bench controller` (cmd/latency-bench, ours); progress and errors go to
// stderr. It runs until its stdin closes.
//
// The manager is built as a controller-runtime user builds one, with its defaults except:
// metrics and health probes off, no leader election, the cache limited to -namespace. The
// controller is ctrl.NewControllerManagedBy(mgr).For(&ConfigMap{}).Complete(r): one worker,
// controller-runtime's priority queue (the default since v0.23: events of the initial list
// and of resyncs enter at priority -100, live changes at 0; -classic-queue uses client-go's
// rate-limiting queue instead, for diagnosis; the harness does not).
//
// The reconcile, as on our side: it takes the time on entry (the reconcile-start), reads the
// object through the manager's client (the cache), reports a stamp of this run, then does one
// GET of the object from the API server (mgr.GetAPIReader: no cache), the fixed work per
// reconcile. ctrl.GetConfig sets QPS -1: no client-side rate limit.
//
// Lines:
//
//	{"event":"synced","impl":"controller-runtime","objects":N,"secs":S,"unix_ns":T}
//	{"event":"live","key":"ns/name","seq":Q,"unix_ns":T}   per reconcile of an object
//	                                                        stamped <run>.<Q> by the driver
//	{"event":"drained","secs":S,"unix_ns":T,"first_start_secs":{"ns/name":S,...}}   every cached key
//	                    reconciled once; each key's first reconcile-start from the start of main
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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

// stamp is the annotation each live edit carries: <run>.<seq>.
const stamp = "bench-latency/seq"

// started is read as the first thing main does; package initialisation has run by then.
var started time.Time

func main() {
	started = time.Now()
	// -kubeconfig is controller-runtime's own flag (pkg/client/config), read by ctrl.GetConfig.
	namespace := flag.String("namespace", "bench-latency", "the namespace whose ConfigMaps are reconciled")
	run := flag.String("run", "run", "this run's name: only stamps <run>.<seq> are reported")
	timeout := flag.Duration("timeout", 600*time.Second, "give up if the cache has not synced and every key been reconciled once by then")
	classicQueue := flag.Bool("classic-queue", false, "use client-go's rate-limiting workqueue instead of controller-runtime's default priority queue (for diagnosis; the harness does not)")
	flag.Parse()
	if *run == "" {
		fmt.Fprintln(os.Stderr, "latency-peer: -run must not be empty")
		os.Exit(2)
	}
	if err := runController(*namespace, *run, *timeout, *classicQueue); err != nil {
		fmt.Fprintln(os.Stderr, "latency-peer:", err)
		os.Exit(1)
	}
}

// printLine writes one JSON line to stdout.
func printLine(v any) {
	line, _ := json.Marshal(v)
	fmt.Println(string(line))
}

// recorder records each key's first reconcile-start and closes drained once it has seen want
// keys; it prints a live line for each reconcile of an object stamped by this run.
type recorder struct {
	run     string
	mu      sync.Mutex
	first   map[string]time.Duration
	want    int
	drained chan struct{}
}

func newRecorder(run string) *recorder {
	return &recorder{run: run, first: make(map[string]time.Duration), drained: make(chan struct{})}
}

// started records a reconcile of key that began at `at`, its object carrying stamp value s
// ("" if none).
func (r *recorder) started(key, s string, at time.Time) {
	since := at.Sub(started)
	if seq, ok := seqOf(s, r.run); ok {
		printLine(map[string]any{"event": "live", "key": key, "seq": seq, "unix_ns": at.UnixNano()})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.first[key]; !ok {
		r.first[key] = since
		r.check()
	}
}

// setWant sets the number of keys to wait for; drained closes at once if reached already.
func (r *recorder) setWant(want int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = want
	r.check()
}

// check closes drained once want (set, non-zero) keys have been seen. Call with mu held.
func (r *recorder) check() {
	if r.want > 0 && len(r.first) >= r.want {
		select {
		case <-r.drained:
		default:
			close(r.drained)
		}
	}
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.first)
}

// drainedLine is the drained line: every key's first reconcile-start, in seconds from main.
func (r *recorder) drainedLine() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := make(map[string]float64, len(r.first))
	for k, d := range r.first {
		first[k] = d.Seconds()
	}
	now := time.Now()
	return map[string]any{"event": "drained", "secs": now.Sub(started).Seconds(), "unix_ns": now.UnixNano(), "first_start_secs": first}
}

// seqOf is the sequence number of a stamp <run>.<seq> if it is run's.
func seqOf(s, run string) (uint64, bool) {
	rest, ok := strings.CutPrefix(s, run+".")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil
}

// reconciler takes the start time, reads the object from the cache, reports, then GETs the
// object from the API server.
type reconciler struct {
	client   client.Client
	api      client.Reader
	recorder *recorder
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	at := time.Now()
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.recorder.started(req.NamespacedName.String(), cm.Annotations[stamp], at)
	var fresh corev1.ConfigMap
	if err := r.api.Get(ctx, req.NamespacedName, &fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

func runController(namespace, run string, timeout time.Duration, classicQueue bool) error {
	log.SetLogger(logr.Discard())
	config, err := ctrl.GetConfig() // -kubeconfig, KUBECONFIG, in-cluster, ~/.kube/config
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
	})
	if err != nil {
		return fmt.Errorf("building the manager: %w", err)
	}
	rec := newRecorder(run)
	builder := ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{})
	if classicQueue {
		builder = builder.WithOptions(controller.Options{UsePriorityQueue: new(false)})
	}
	if err := builder.Complete(&reconciler{client: mgr.GetClient(), api: mgr.GetAPIReader(), recorder: rec}); err != nil {
		return fmt.Errorf("building the controller: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()

	deadline := time.After(timeout)
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	// The controller's source makes the ConfigMap informer once the cache has started;
	// GetInformer returns that same informer (made here if it comes first) once it has synced.
	informer, err := mgr.GetCache().GetInformer(syncCtx, &corev1.ConfigMap{})
	if err != nil || !informer.HasSynced() {
		return fmt.Errorf("the cache did not sync within %s: %v", timeout, err)
	}
	// Counted from the cache without deep copies (the objects are only counted).
	var cached corev1.ConfigMapList
	if err := mgr.GetCache().List(ctx, &cached, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("counting the cached ConfigMaps: %w", err)
	}
	want := len(cached.Items)
	if want == 0 {
		return fmt.Errorf("namespace %s holds no ConfigMaps: seed it first", namespace)
	}
	now := time.Now()
	printLine(map[string]any{"event": "synced", "impl": "controller-runtime", "objects": want,
		"secs": now.Sub(started).Seconds(), "unix_ns": now.UnixNano()})
	rec.setWant(want)
	select {
	case <-rec.drained:
	case err := <-stopped:
		return fmt.Errorf("the manager stopped: %v", err)
	case <-stdinClosed:
		return fmt.Errorf("stdin closed before the initial list drained")
	case <-deadline:
		return fmt.Errorf("%d of %d ConfigMaps reconciled within %s", rec.len(), want, timeout)
	}
	printLine(rec.drainedLine())

	select {
	case <-stdinClosed:
	case err := <-stopped:
		return fmt.Errorf("the manager stopped on its own: %v", err)
	}
	cancel()
	return <-stopped
}
