// The cluster: start every component in order and wait for each to be healthy, report it,
// and stop it.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

const (
	// serviceCIDR holds the ClusterIPs of Services; serviceIP is the first, the
	// apiserver's own `kubernetes` Service.
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	// podCIDR is where kwok takes the fake Pod IPs from. Nothing ever connects to them.
	podCIDR = "10.244.0.1/16"
	// kwokAnnotation marks the Nodes kwok manages.
	kwokAnnotation = "kwok.x-k8s.io/node"
	// unlimitedQPS and unlimitedBurst are the client-side rate limits of the controller
	// manager and the scheduler: high enough never to bind (kwok's own client has none).
	unlimitedQPS   = "5000"
	unlimitedBurst = "10000"
)

// controllers is what kube-controller-manager runs: enough for Deployments to roll out,
// garbage collection by owner references, namespace deletion and service accounts. The
// node lifecycle controller lifts the not-ready taint every new Node starts with once kwok
// reports the Node Ready.
var controllers = []string{
	"node-lifecycle-controller",
	"deployment-controller",
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
}

func runUp(args []string) error {
	nodes := 2
	dir, err := dirFlags("up", args, func(fs *flag.FlagSet) {
		fs.IntVar(&nodes, "nodes", 2, "number of kwok nodes")
	})
	if err != nil {
		return err
	}
	if st, err := loadState(dir); err == nil {
		if err := healthy(st); err == nil {
			fmt.Println("testenv: a cluster is already running; not starting another")
			report(st, dir)
			return nil
		} else {
			fmt.Printf("testenv: the recorded cluster is not healthy (%v); stopping what is left of it\n", err)
			if err := stopAll(st.Procs); err != nil {
				return err
			}
			_ = os.Remove(statePath(dir))
		}
	}
	return up(dir, nodes)
}

func up(dir string, nodes int) (err error) {
	begin := time.Now()
	bin := filepath.Join(dir, "bin")
	exe := map[string]string{}
	for _, name := range []string{"testenv", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		path := filepath.Join(bin, name)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("missing binary %s (build it with `make testenv`): %w", path, err)
		}
		exe[name] = path
	}

	// Every start is a fresh cluster: new keys, empty etcd.
	for _, sub := range []string{"pki", "etcd", "certs", "logs"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	p := pki{dir: filepath.Join(dir, "pki")}
	if err := generatePKI(p); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	ports, err := freePorts(6)
	if err != nil {
		return fmt.Errorf("finding free ports on 127.0.0.1: %w", err)
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	st := &state{
		APIServer:  fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		Etcd:       fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		Started:    begin,
	}
	defer func() {
		if err != nil {
			fmt.Println("testenv: start failed; stopping what was started")
			if stopErr := stopAll(st.Procs); stopErr != nil {
				fmt.Println("testenv:", stopErr)
			}
			_ = os.Remove(statePath(dir))
		}
	}()
	launch := func(name, binary string, args []string, endpoint string) (proc, error) {
		fmt.Printf("testenv: starting %-24s %s\n", name, endpoint)
		pr, err := start(name, binary, args, logs)
		if err != nil {
			return pr, err
		}
		pr.Endpoint = endpoint
		st.Procs = append(st.Procs, pr)
		return pr, st.save(dir)
	}

	// etcd
	pr, err := launch("etcd", exe["testenv"], []string{"etcd",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--client-port", strconv.Itoa(etcdPort),
		"--peer-port", strconv.Itoa(peerPort),
	}, st.Etcd)
	if err != nil {
		return err
	}
	if err := waitServing(pr, st, dir, time.Minute); err != nil {
		return err
	}

	// kube-apiserver
	pr, err = launch("kube-apiserver", exe["kube-apiserver"], []string{
		"--etcd-servers=" + st.Etcd,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + p.servingCert(),
		"--tls-private-key-file=" + p.servingKey(),
		"--client-ca-file=" + p.caCert(),
		"--token-auth-file=" + p.tokens(),
		// The front proxy's CA lets aggregated API servers, the controller manager and the
		// scheduler authenticate requests forwarded by this apiserver.
		"--requestheader-client-ca-file=" + p.frontProxyCA(),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.frontProxyCert(),
		"--proxy-client-key-file=" + p.frontProxyKey(),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub(),
		"--service-account-signing-key-file=" + p.saKey(),
		"--service-cluster-ip-range=" + serviceCIDR,
		// The endpoint reconciler refuses a loopback advertise address.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		// PodTemplates skip the watch cache and are read straight from etcd, so tests can
		// see etcd's own 410 Gone after `testenv compact`; every other resource is cached,
		// as in any cluster.
		"--watch-cache-sizes=podtemplates#0",
		// Server-side sharded list and watch (KEP-5866, alpha in 1.36): the runtime's
		// sharded controllers ask for their slice with a shardSelector.
		"--feature-gates=ShardedListAndWatch=true",
	}, st.APIServer)
	if err != nil {
		return err
	}
	if err := waitServing(pr, st, dir, 3*time.Minute); err != nil {
		return err
	}
	if err := writeKubeconfig(st.Kubeconfig, st.APIServer, p); err != nil {
		return fmt.Errorf("writing %s: %w", st.Kubeconfig, err)
	}

	// kube-controller-manager, kube-scheduler, kwok: all three talk to the apiserver only.
	kcm, err := launch("kube-controller-manager", exe["kube-controller-manager"], []string{
		"--kubeconfig=" + st.Kubeconfig,
		"--authentication-kubeconfig=" + st.Kubeconfig,
		"--authorization-kubeconfig=" + st.Kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--cert-dir=" + filepath.Join(dir, "certs", "kube-controller-manager"),
		"--service-account-private-key-file=" + p.saKey(),
		"--root-ca-file=" + p.caCert(),
		// No client-side rate limit to speak of (kwokctl's --disable-qps-limits uses the
		// same figures): at the default 20 QPS, or even 100, the controller manager, not
		// the operator under test, would set the pace of every bulk benchmark.
		"--kube-api-qps=" + unlimitedQPS,
		"--kube-api-burst=" + unlimitedBurst,
		// Ten times the default workers for the two controllers every operator test waits
		// on, as large clusters run them: with 5 each, rolling out a thousand Deployments
		// takes over a minute on this machine whoever created them.
		"--concurrent-deployment-syncs=50",
		"--concurrent-replicaset-syncs=50",
	}, fmt.Sprintf("https://127.0.0.1:%d", kcmPort))
	if err != nil {
		return err
	}
	sched, err := launch("kube-scheduler", exe["kube-scheduler"], []string{
		"--kubeconfig=" + st.Kubeconfig,
		"--authentication-kubeconfig=" + st.Kubeconfig,
		"--authorization-kubeconfig=" + st.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(dir, "certs", "kube-scheduler"),
		// As for the controller manager: binding a thousand Pods must not wait on the
		// scheduler's default 50 QPS.
		"--kube-api-qps=" + unlimitedQPS,
		"--kube-api-burst=" + unlimitedBurst,
	}, fmt.Sprintf("https://127.0.0.1:%d", schedPort))
	if err != nil {
		return err
	}
	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := writeKwokStages(stages); err != nil {
		return err
	}
	kwok, err := launch("kwok", exe["kwok"], []string{
		"--kubeconfig=" + st.Kubeconfig,
		"--config=" + stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=" + podCIDR,
		"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
		"--node-port=" + strconv.Itoa(kwokPort),
	}, fmt.Sprintf("http://127.0.0.1:%d", kwokPort))
	if err != nil {
		return err
	}
	for _, pr := range []proc{kcm, sched, kwok} {
		if err := waitServing(pr, st, dir, 2*time.Minute); err != nil {
			return err
		}
	}

	cs, version, err := clientset(st.Kubeconfig)
	if err != nil {
		return err
	}
	st.Version = version
	if err := st.save(dir); err != nil {
		return err
	}
	if err := createNodes(cs, nodes); err != nil {
		return err
	}
	watched := []proc{kwok, kcm}
	if err := waitUntil("nodes Ready and schedulable", watched, 2*time.Minute, func() error { return nodesReady(cs, nodes) }); err != nil {
		return err
	}
	// Pods are admitted only once their namespace's default ServiceAccount exists.
	if err := waitUntil("the default ServiceAccount", watched, 2*time.Minute, func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}

	fmt.Printf("testenv: cluster ready in %.1fs\n", time.Since(begin).Seconds())
	report(st, dir)
	return nil
}

func runStatus(args []string) error {
	dir, err := dirFlags("status", args, nil)
	if err != nil {
		return err
	}
	st, err := loadState(dir)
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s (start one with `make cluster`)", dir)
	}
	if err := healthy(st); err != nil {
		return fmt.Errorf("the recorded cluster is not healthy: %w", err)
	}
	report(st, dir)
	return nil
}

func runDown(args []string) error {
	dir, err := dirFlags("down", args, nil)
	if err != nil {
		return err
	}
	st, err := loadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("testenv: no cluster recorded; nothing to stop")
		return nil
	}
	if err != nil {
		return err
	}
	if err := stopAll(st.Procs); err != nil {
		return err
	}
	if err := os.Remove(statePath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if left := leftovers(dir); len(left) > 0 {
		return fmt.Errorf("processes using %s still run, not started by the recorded cluster; stop them yourself:\n  %s",
			dir, strings.Join(left, "\n  "))
	}
	fmt.Println("testenv: cluster stopped; no process using", dir, "is left")
	return nil
}

// runRestart stops each named component by its recorded pid and starts it again with the
// same arguments, in the order given, waiting for each to serve before the next: the same
// ports, certificates and etcd, so clients keep their kubeconfig and resume their watches,
// as they must through a control-plane upgrade.
func runRestart(args []string) error {
	var fs *flag.FlagSet
	dir, err := dirFlags("restart", args, func(f *flag.FlagSet) { fs = f })
	if err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("name the components to restart, e.g. kube-apiserver")
	}
	st, err := loadState(dir)
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s (start one with `make cluster`)", dir)
	}
	for _, name := range fs.Args() {
		if err := restart(st, dir, name); err != nil {
			return err
		}
	}
	return nil
}

// restart stops component name, starts it again as it was started, records its new pid and
// waits until it serves.
func restart(st *state, dir, name string) error {
	i := slices.IndexFunc(st.Procs, func(p proc) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("no %s recorded in %s", name, statePath(dir))
	}
	old := st.Procs[i]
	if len(old.Args) == 0 {
		return fmt.Errorf("%s was started by a testenv that did not record its arguments; "+
			"restart the cluster (make cluster-down cluster)", name)
	}
	// Known before the component is stopped, so a name without a check stops nothing.
	serving, err := readiness(old, st, dir)
	if err != nil {
		return err
	}
	begin := time.Now()
	fmt.Printf("testenv: stopping %s (pid %d)\n", name, old.Pid)
	if err := old.stop(30 * time.Second); err != nil {
		return err
	}
	fmt.Printf("testenv: starting %-24s %s\n", name, old.Endpoint)
	pr, err := start(old.Name, old.Exe, old.Args, filepath.Dir(old.Log))
	if err != nil {
		return err
	}
	pr.Endpoint = old.Endpoint
	st.Procs[i] = pr
	if err := st.save(dir); err != nil {
		return err
	}
	if err := waitFor(pr, 3*time.Minute, serving); err != nil {
		return err
	}
	fmt.Printf("testenv: %s restarted in %.1fs (pid %d)\n", name, time.Since(begin).Seconds(), pr.Pid)
	return nil
}

// waitServing waits until component pr serves, or fails if it exits or timeout passes.
func waitServing(pr proc, st *state, dir string, timeout time.Duration) error {
	serving, err := readiness(pr, st, dir)
	if err != nil {
		return err
	}
	return waitFor(pr, timeout, serving)
}

// readiness is the check that component pr serves: what `up` and `restart` wait for.
func readiness(pr proc, st *state, dir string) (func() error, error) {
	plain := &http.Client{Timeout: 5 * time.Second}
	switch pr.Name {
	case "etcd":
		return func() error { return expectBody(plain, st.Etcd+"/health", `"health":"true"`) }, nil
	case "kube-apiserver":
		admin, err := adminHTTP(pki{dir: filepath.Join(dir, "pki")})
		if err != nil {
			return nil, err
		}
		return func() error { return expectBody(admin, st.APIServer+"/readyz", "ok") }, nil
	case "kube-controller-manager", "kube-scheduler":
		return func() error { return expectBody(selfSignedHTTP(), pr.Endpoint+"/healthz", "ok") }, nil
	case "kwok":
		return func() error { return expectBody(plain, pr.Endpoint+"/healthz", "ok") }, nil
	}
	return nil, fmt.Errorf("no readiness check for %s", pr.Name)
}

// selfSignedHTTP is a client for the controller manager's and the scheduler's health checks,
// served over TLS with certificates they sign themselves: it only asks whether they are up.
func selfSignedHTTP() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe
	}}
}

// healthy reports why the recorded cluster is not usable, or nil.
func healthy(st *state) error {
	for _, pr := range st.Procs {
		if !pr.alive() {
			return fmt.Errorf("%s (pid %d) is not running", pr.Name, pr.Pid)
		}
	}
	if len(st.Procs) == 0 {
		return errors.New("no processes recorded")
	}
	p := pki{dir: filepath.Join(filepath.Dir(st.Kubeconfig), "pki")}
	admin, err := adminHTTP(p)
	if err != nil {
		return err
	}
	return expectBody(admin, st.APIServer+"/readyz", "ok")
}

func report(st *state, dir string) {
	fmt.Printf("Kubernetes %s on 127.0.0.1, started %s\n", st.Version, st.Started.Format(time.RFC3339))
	var total int
	for _, pr := range st.Procs {
		rss := pr.rssKiB()
		total += rss
		fmt.Printf("  %-24s %-28s pid %-8d %4d MiB resident\n", pr.Name, pr.Endpoint, pr.Pid, rss/1024)
	}
	fmt.Printf("  %-24s %-28s %12d MiB resident\n", "all", "", total/1024)
	fmt.Printf("  %-24s %s (user admin, group system:masters, client certificate)\n", "kubeconfig", st.Kubeconfig)
	fmt.Printf("  %-24s %s\n", "bearer token", filepath.Join(dir, "pki", "admin.token"))
	fmt.Printf("  %-24s %s\n", "logs", filepath.Join(dir, "logs"))
	fmt.Println("Use it:")
	fmt.Printf("  export KUBECONFIG=%s\n", st.Kubeconfig)
	fmt.Println("  kubectl get nodes")
	fmt.Println("Stop it: make cluster-down")
}

// waitFor polls check until it succeeds, pr exits, or timeout passes, printing progress.
func waitFor(pr proc, timeout time.Duration, check func() error) error {
	return waitUntil(pr.Name, []proc{pr}, timeout, check)
}

// waitUntil polls check every 200 ms until it succeeds. It fails early if one of the
// watched processes exits, with the end of that process's log.
func waitUntil(what string, watched []proc, timeout time.Duration, check func() error) error {
	begin := time.Now()
	lastReport := begin
	for {
		err := check()
		if err == nil {
			fmt.Printf("testenv: %s: ready after %.1fs\n", what, time.Since(begin).Seconds())
			return nil
		}
		for _, pr := range watched {
			if !pr.alive() {
				return fmt.Errorf("%s exited while waiting for %s; the end of %s:\n%s", pr.Name, what, pr.Log, logTail(pr.Log, 30))
			}
		}
		if time.Since(begin) > timeout {
			msg := fmt.Sprintf("%s not ready after %s: %v", what, timeout, err)
			for _, pr := range watched {
				msg += fmt.Sprintf("\nthe end of %s:\n%s", pr.Log, logTail(pr.Log, 30))
			}
			return errors.New(msg)
		}
		if time.Since(lastReport) > 10*time.Second {
			fmt.Printf("testenv: still waiting for %s (%.0fs): %v\n", what, time.Since(begin).Seconds(), err)
			lastReport = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expectBody GETs url and checks for a 200 whose body contains want.
func expectBody(c *http.Client, url, want string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// adminHTTP is an HTTP client that trusts the cluster CA and presents the admin certificate.
func adminHTTP(p pki) (*http.Client, error) {
	ca, err := os.ReadFile(p.caCert())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", p.caCert())
	}
	cert, err := tls.LoadX509KeyPair(p.adminCert(), p.adminKey())
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

// writeKubeconfig writes a self-contained kubeconfig (certificates embedded) for the admin.
func writeKubeconfig(path, server string, p pki) error {
	ca, err := os.ReadFile(p.caCert())
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(p.adminCert())
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.adminKey())
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "testenv"
	return clientcmd.WriteToFile(*cfg, path)
}

func clientset(kubeconfig string) (*kubernetes.Clientset, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return nil, "", fmt.Errorf("reading the server version: %w", err)
	}
	return cs, v.GitVersion, nil
}

// writeKwokStages writes kwok's own default stages, taken from the kwok module so they
// match the kwok binary: nodes become Ready and keep a heartbeat, Pods become Running and
// Ready, and deleted Pods go away.
func writeKwokStages(path string) error {
	docs := []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeat,
		podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete}
	return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644)
}

func createNodes(cs *kubernetes.Clientset, n int) error {
	for i := range n {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
		}}
		_, err := cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	return nil
}

func nodesReady(cs *kubernetes.Clientset, want int) error {
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return err
	}
	// A Node takes Pods once it is Ready and the node lifecycle controller has lifted the
	// not-ready taint it was created with.
	ready := 0
	for _, n := range list.Items {
		isReady, tainted := false, false
		for _, c := range n.Status.Conditions {
			isReady = isReady || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		for _, t := range n.Spec.Taints {
			tainted = tainted || t.Key == corev1.TaintNodeNotReady
		}
		if isReady && !tainted {
			ready++
		}
	}
	if ready < want {
		return fmt.Errorf("%d of %d nodes Ready and untainted", ready, want)
	}
	return nil
}
