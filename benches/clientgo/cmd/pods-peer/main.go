// Command pods-peer is the client-go side of `make bench-pods`: one informer over the Pods
// of a namespace (100,000 of them, seeded by `informer-bench pods-seed`), driven step by step
// over stdin and stdout by benches/bench-pods.py, which samples this process's memory from
// outside. It speaks the same protocol as `informer-bench pods-run`; each step prints one
// JSON line with a "phase":
//
//  1. ready: the client is connected (one small LIST went through); the script reads the
//     baseline and sends a line on stdin.
//  2. synced: a fresh SharedIndexInformer for Pods from a SharedInformerFactory scoped to the
//     namespace, default settings (WatchList, no resync), with a transform that drops
//     metadata.managedFields, has synced; with the sync time, the objects cached and the
//     heap then in use (HeapAlloc after a runtime.GC, minus the same at ready).
//  3. settled: -settle later, the informer still running; the script reads the settled
//     memory and sends a line on stdin.
//  4. heap: HeapAlloc after a runtime.GC minus the same at ready.
//
// The client's rate limit is lifted (QPS -1), as it is on our side.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the kubeconfig to use")
	namespace := flag.String("namespace", "pods-100k", "the namespace holding the Pods")
	settle := flag.Duration("settle", 5*time.Second, "wait after the sync before the settled figures")
	timeout := flag.Duration("timeout", 10*time.Minute, "how long the informer may take to sync")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(fmt.Errorf("loading the kubeconfig: %w", err))
	}
	config.QPS = -1
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	probe, err := client.CoreV1().Pods(*namespace).List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil {
		fail(err)
	}
	if len(probe.Items) == 0 {
		fail(fmt.Errorf("namespace %s holds no Pods: run `informer-bench pods-seed` first", *namespace))
	}
	probe = nil
	stdin := bufio.NewReader(os.Stdin)
	before := heapAlloc()
	say(map[string]any{"phase": "ready"})
	waitForGo(stdin)

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(*namespace))
	informer := factory.Core().V1().Pods().Informer()
	if err := informer.SetTransform(stripManagedFields); err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	factory.Start(ctx.Done())
	select {
	case <-informer.HasSyncedChecker().Done():
	case <-time.After(*timeout):
		fail(fmt.Errorf("the informer did not sync within %s", *timeout))
	}
	elapsed := time.Since(start)
	store := informer.GetStore()
	say(map[string]any{
		"phase": "synced", "secs": elapsed.Seconds(), "objects": len(store.ListKeys()),
		"heap_bytes": int64(heapAlloc()) - int64(before),
	})
	time.Sleep(*settle)
	say(map[string]any{"phase": "settled", "objects": len(store.ListKeys())})
	waitForGo(stdin)
	say(map[string]any{
		"phase": "heap", "objects": len(store.ListKeys()),
		"heap_bytes": int64(heapAlloc()) - int64(before),
	})
	runtime.KeepAlive(informer)
	cancel()
	factory.Shutdown()
}

// stripManagedFields is the informer's transform.
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

// waitForGo waits for a line on stdin: the script's go-ahead.
func waitForGo(stdin *bufio.Reader) {
	if _, err := stdin.ReadString('\n'); err != nil {
		fail(fmt.Errorf("stdin closed before the go-ahead: %w", err))
	}
}

func say(line map[string]any) {
	out, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pods-peer:", err)
	os.Exit(1)
}
