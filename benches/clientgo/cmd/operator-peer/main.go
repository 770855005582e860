// Command operator-peer is the controller-runtime side of `make bench-operator`: the
// Memcached operator of cmd/memcached-operator written on sigs.k8s.io/controller-runtime
// v0.25.2, as a kubebuilder project would have it, doing the same work per reconcile as ours
// (see reconcile.go), so that both can be measured against the same cluster by the same
// driver (cmd/operator-bench).
//
// The main is kubebuilder's scaffold (cmd/main.go) cut down to what ours offers:
//
//   - flags --kubeconfig (controller-runtime's own, or KUBECONFIG), --metrics-bind-address
//     (default :8080), --health-probe-bind-address (default :8081), --leader-elect,
//     --leader-election-namespace, --namespace (cache and reconcile one namespace only),
//     --memcached-image (or MEMCACHED_IMAGE), and the zap flags (--zap-log-level, ...);
//   - zap logging in development mode, as the scaffold sets it up;
//   - metrics served as plain HTTP, as ours serves them (the scaffold's default HTTPS with
//     authentication and authorization needs k8s.io/apiserver's filters, which ours has no
//     counterpart of); /healthz and /readyz answering healthz.Ping;
//   - the rest config from ctrl.GetConfigOrDie: no client-side rate limit (QPS -1), as
//     controller-runtime ships;
//   - the cache holds Pods labelled app.kubernetes.io/managed-by=memcached-operator only
//     (cache.Options.ByObject), the selector ours caches Pods with, so both caches hold the
//     same objects; managedFields are kept, as controller-runtime ships
//     (--strip-managed-fields sets cache.TransformStripManagedFields, as ours does by
//     default, for comparison).
package main

import (
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// defaultImage is the image of a Memcached that names none, as ours has it.
const defaultImage = "memcached:1.6.26-alpine"

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(addToScheme(scheme))
}

// flags are the command line's settings.
type flags struct {
	metricsAddr, probeAddr  string
	leaderElect             bool
	leaderElectionNamespace string
	namespace, image        string
	stripManagedFields      bool
	readYourWrites          bool
}

// parseFlags reads args (without the program name) into flags and the zap options.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) (flags, zap.Options, error) {
	var f flags
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "where /metrics is served (\"0\" turns it off)")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "where /healthz and /readyz are served (\"0\" turns them off)")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so only one replica reconciles")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "the namespace of the leader election Lease")
	fs.StringVar(&f.namespace, "namespace", "", "watch and reconcile only this namespace (default: every namespace)")
	image := getenv("MEMCACHED_IMAGE")
	if image == "" {
		image = defaultImage
	}
	fs.StringVar(&f.image, "memcached-image", image, "the image for Memcached resources that name none (also MEMCACHED_IMAGE)")
	fs.BoolVar(&f.stripManagedFields, "strip-managed-fields", false, "drop managedFields from cached objects (cache.TransformStripManagedFields), as ours does by default")
	fs.BoolVar(&f.readYourWrites, "read-your-writes", false, "make cache reads wait for the manager's own writes (client.CacheOptions.EnableReadYourWritesConsistency, experimental and off by default in v0.25), as ours does by default")
	opts := zap.Options{Development: true}
	opts.BindFlags(fs)
	err := fs.Parse(args)
	return f, opts, err
}

// cacheOptions is what the manager's cache holds: the memcached Pods only, every other kind
// whole; one namespace if f names one.
func cacheOptions(f flags) cache.Options {
	o := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{managedByKey: managedByValue})},
		},
	}
	if f.namespace != "" {
		o.DefaultNamespaces = map[string]cache.Config{f.namespace: {}}
	}
	if f.stripManagedFields {
		o.DefaultTransform = cache.TransformStripManagedFields()
	}
	return o
}

func main() {
	// --kubeconfig is registered on flag.CommandLine by controller-runtime (pkg/client/config).
	f, opts, err := parseFlags(flag.CommandLine, os.Args[1:], os.Getenv)
	if err != nil {
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "86f835c3.example.com",
		LeaderElectionNamespace: f.leaderElectionNamespace,
		Cache:                   cacheOptions(f),
		Client:                  client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: &f.readYourWrites}},
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}
	r := &memcachedReconciler{
		Client:       mgr.GetClient(),
		recorder:     mgr.GetEventRecorder("memcached-controller"),
		defaultImage: f.image,
	}
	if err := r.setupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "Memcached")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}
