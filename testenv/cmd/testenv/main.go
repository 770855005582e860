// Command testenv runs a real Kubernetes cluster on loopback for this project's tests:
// etcd (embedded), kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which
// plays the kubelet for a few fake nodes so Pods become Running and Ready.
//
// Usage:
//
//	testenv up      --dir DIR   start the cluster, or report the one already running
//	testenv down    --dir DIR   stop every process `up` started, by recorded pid
//	testenv status  --dir DIR   report the running cluster; exit 1 if none is healthy
//	testenv compact --dir DIR   compact etcd up to its current revision
//	testenv restart --dir DIR NAME...
//	                            stop each named component (kube-apiserver, ...) and start it
//	                            again in place: same ports, certificates and etcd, as a
//	                            control-plane upgrade does
//	testenv etcd    ...         run the embedded etcd server (started by `up`)
//
// DIR (default target/testenv) holds bin/ (the binaries), pki/, the etcd data, logs/,
// state.json (ports and pids) and kubeconfig.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = runUp(args)
	case "down":
		err = runDown(args)
	case "status":
		err = runStatus(args)
	case "compact":
		err = runCompact(args)
	case "restart":
		err = runRestart(args)
	case "etcd":
		err = runEtcd(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testenv up|down|status|compact|restart [--dir DIR]")
	os.Exit(2)
}

// dirFlags parses the flags every user-facing command shares and returns the absolute
// state directory.
func dirFlags(name string, args []string, extra func(*flag.FlagSet)) (string, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	dir := fs.String("dir", "target/testenv", "state directory: binaries in bin/, then pki, data, logs, kubeconfig")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	return filepath.Abs(*dir)
}
