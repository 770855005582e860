// Command informer-peer runs informer-bench's workloads (cmd/informer-bench) on client-go and
// prints the same JSON lines on stdout, so `make bench-informer` can compare the two against
// the same cluster in one run. Progress goes to stderr.
//
// Workloads, named as in informer-bench, all in one namespace seeded by
// `informer-bench seed`:
//
//   - list/configmaps: a paged LIST of the namespace's ConfigMaps through the typed clientset
//     (limit -page-size, following continue tokens, no resourceVersion), each page decoded
//     into corev1.ConfigMapList and dropped. A LIST with a limit and no resourceVersion "0"
//     is never turned into a WatchList by client-go, so this is a classic paged LIST.
//   - informer/{configmaps,pods}[/strip]: a fresh SharedIndexInformer from a
//     SharedInformerFactory scoped to the namespace, default settings (no resync; WatchList
//     by default in client-go v0.37: the WatchListClient feature is on since v0.35), timed from
//     factory.Start to the informer's HasSyncedChecker being done. With /strip, SetTransform
//     clears metadata.managedFields before objects are cached. After the sync, and -settle
//     later, bytes per object = (HeapAlloc after a runtime.GC, informer running) − (HeapAlloc
//     after a runtime.GC before the factory was made), divided by the objects cached. The
//     informer is then stopped and the factory shut down before the next workload.
//
// The client's rate limit is lifted (QPS -1), as it is on our side: a paged LIST is 20-odd
// requests, and client-go's default 5 QPS would measure its token bucket.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type args struct {
	kubeconfig string
	namespace  string
	pageSize   int64
	settle     time.Duration
	warmup     int
	timeout    time.Duration
	only       string
	json       bool
}

type workload struct {
	kind  string // configmaps or pods
	list  bool   // a paged LIST rather than an informer
	strip bool   // strip managedFields with a transform
}

func (w workload) name() string {
	switch {
	case w.list:
		return "list/" + w.kind
	case w.strip:
		return "informer/" + w.kind + "/strip"
	default:
		return "informer/" + w.kind
	}
}

// workloads are informer-bench's, in the same order.
var workloads = []workload{
	{kind: "configmaps", list: true},
	{kind: "configmaps"},
	{kind: "configmaps", strip: true},
	{kind: "pods"},
	{kind: "pods", strip: true},
}

func main() {
	var a args
	flag.StringVar(&a.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the kubeconfig to use")
	flag.StringVar(&a.namespace, "namespace", "bench-informer", "the namespace holding the seeded objects")
	flag.Int64Var(&a.pageSize, "page-size", 500, "items per page of the paged LIST")
	flag.DurationVar(&a.settle, "settle", 200*time.Millisecond, "wait after a sync before reading the heap (informer-bench waits as long)")
	flag.IntVar(&a.warmup, "warmup", 1, "untimed paged LISTs before measuring, to open the connection and warm both ends")
	flag.DurationVar(&a.timeout, "timeout", 120*time.Second, "how long an informer may take to sync before the run fails")
	flag.StringVar(&a.only, "only", "", "run only the workloads whose name contains this text")
	flag.BoolVar(&a.json, "json", false, "ask the server for JSON, as informer-bench does, instead of client-go's default protobuf")
	flag.Parse()
	if a.pageSize < 1 {
		fail(fmt.Errorf("-page-size must be at least 1"))
	}

	config, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		fail(fmt.Errorf("loading the kubeconfig: %w", err))
	}
	config.QPS = -1 // no client-side rate limit; see the package docs
	impl := "client-go"
	if a.json {
		// With a content type set, the typed clients no longer default to protobuf.
		config.ContentType = "application/json"
		config.AcceptContentTypes = "application/json"
		impl = "client-go/json"
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()

	for i := 0; i < a.warmup; i++ {
		if _, _, _, err := pagedList(ctx, client, a.namespace, a.pageSize); err != nil {
			fail(fmt.Errorf("warm-up LIST: %w", err))
		}
	}
	probe, err := client.CoreV1().ConfigMaps(a.namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		fail(err)
	}
	if len(probe.Items) == 0 {
		fail(fmt.Errorf("namespace %s holds no ConfigMaps: run `informer-bench seed` first", a.namespace))
	}

	for _, w := range workloads {
		if a.only != "" && !strings.Contains(w.name(), a.only) {
			continue
		}
		if w.list {
			pages, items, elapsed, err := pagedList(ctx, client, a.namespace, a.pageSize)
			if err != nil {
				fail(fmt.Errorf("workload %s: %w", w.name(), err))
			}
			fmt.Fprintf(os.Stderr, "%9s %-26s %8.1f ms  (%d items, %d pages of %d)\n",
				"client-go", w.name(), ms(elapsed), items, pages, a.pageSize)
			emit(map[string]any{
				"impl": impl, "workload": w.name(), "objects": items, "pages": pages,
				"secs": elapsed.Seconds(),
			})
			continue
		}
		o, err := informerSync(client, a, w)
		if err != nil {
			fail(fmt.Errorf("workload %s: %w", w.name(), err))
		}
		perObject := float64(o.heapBytes) / float64(max(o.objects, 1))
		fmt.Fprintf(os.Stderr, "%9s %-26s %8.1f ms  %8.0f bytes/object  (%d objects)\n",
			"client-go", w.name(), ms(o.elapsed), perObject, o.objects)
		emit(map[string]any{
			"impl": impl, "workload": w.name(), "objects": o.objects,
			"secs": o.elapsed.Seconds(), "heap_bytes": o.heapBytes, "bytes_per_object": perObject,
		})
	}
}

// pagedList lists the namespace's ConfigMaps page by page, decoding each page and dropping
// it before the next.
func pagedList(ctx context.Context, client kubernetes.Interface, namespace string, pageSize int64) (pages, items int, elapsed time.Duration, err error) {
	start := time.Now()
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		page, err := client.CoreV1().ConfigMaps(namespace).List(ctx, opts)
		if err != nil {
			return 0, 0, 0, err
		}
		pages++
		items += len(page.Items)
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	return pages, items, time.Since(start), nil
}

type syncOutcome struct {
	objects   int
	elapsed   time.Duration
	heapBytes int64
}

// informerSync times a fresh informer to synced and reads the heap it holds; see the
// package docs.
func informerSync(client kubernetes.Interface, a args, w workload) (syncOutcome, error) {
	before := heapAlloc()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(a.namespace))
	var informer cache.SharedIndexInformer
	switch w.kind {
	case "configmaps":
		informer = factory.Core().V1().ConfigMaps().Informer()
	case "pods":
		informer = factory.Core().V1().Pods().Informer()
	default:
		return syncOutcome{}, fmt.Errorf("unknown kind %q", w.kind)
	}
	if w.strip {
		if err := informer.SetTransform(stripManagedFields); err != nil {
			return syncOutcome{}, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()

	start := time.Now()
	factory.Start(ctx.Done())
	select {
	case <-informer.HasSyncedChecker().Done():
	case <-time.After(a.timeout):
		return syncOutcome{}, fmt.Errorf("the informer did not sync within %s", a.timeout)
	}
	elapsed := time.Since(start)

	time.Sleep(a.settle)
	after := heapAlloc()
	objects := len(informer.GetStore().ListKeys())
	runtime.KeepAlive(informer)
	runtime.KeepAlive(factory)
	return syncOutcome{objects: objects, elapsed: elapsed, heapBytes: int64(after) - int64(before)}, nil
}

// stripManagedFields is the transform of the /strip workloads.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// heapAlloc is the heap in use, after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func emit(line map[string]any) {
	out, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "informer-peer:", err)
	os.Exit(1)
}
