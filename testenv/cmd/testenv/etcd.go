// The embedded etcd server, at the version kube-apiserver pins, and compaction on demand.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd serves etcd until SIGTERM or SIGINT. `up` starts it as a process of its own.
func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dataDir := fs.String("data-dir", "", "etcd data directory")
	clientPort := fs.Int("client-port", 0, "client port on 127.0.0.1")
	peerPort := fs.Int("peer-port", 0, "peer port on 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" || *clientPort == 0 || *peerPort == 0 {
		return fmt.Errorf("--data-dir, --client-port and --peer-port are required")
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}

	cfg := embed.NewConfig()
	cfg.Name = "testenv"
	cfg.Dir = *dataDir
	// A test cluster is thrown away after use: skip fsync, as k8s.io/apiserver's own etcd
	// test server does.
	cfg.UnsafeNoFsync = true
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *clientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", *peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Printf("etcd %s ready, serving %s\n", e.Server.Cluster().Version(), client.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fmt.Errorf("etcd not ready within 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Printf("etcd: %v received, stopping\n", s)
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd failed: %w", err)
	}
}

// runCompact compacts the running cluster's etcd up to its current revision, so that a
// request for any older resourceVersion that reaches etcd answers 410 Gone.
func runCompact(args []string) error {
	dir, err := dirFlags("compact", args, nil)
	if err != nil {
		return err
	}
	st, err := loadState(dir)
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s (run `make cluster`): %w", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{st.Etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("connecting to etcd at %s: %w", st.Etcd, err)
	}
	defer cli.Close()
	// Any read reports the store's current revision in its header.
	resp, err := cli.Get(ctx, "compact-probe", clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("reading etcd's revision: %w", err)
	}
	rev := resp.Header.Revision
	// Another compaction (a concurrent `testenv compact`, or the apiserver's own) may have
	// reached rev first: then history up to rev is gone already, which is all this asks.
	_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	if errors.Is(err, rpctypes.ErrCompacted) {
		fmt.Printf("etcd was already compacted at revision %d or later\n", rev)
		return nil
	}
	if err != nil {
		return fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	fmt.Printf("compacted etcd at revision %d\n", rev)
	return nil
}
