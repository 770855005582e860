package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestGeneratePKIChainsToTheCA(t *testing.T) {
	p := pki{dir: t.TempDir()}
	if err := generatePKI(p); err != nil {
		t.Fatal(err)
	}
	verify := func(caPath, certPath, keyPath string, usage x509.ExtKeyUsage, host string) *x509.Certificate {
		t.Helper()
		ca, err := os.ReadFile(caPath)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			t.Fatalf("%s holds no certificate", caPath)
		}
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			t.Fatalf("%s and %s do not pair: %v", certPath, keyPath, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: host}); err != nil {
			t.Fatalf("%s does not verify against %s: %v", certPath, caPath, err)
		}
		return leaf
	}
	verify(p.caCert(), p.servingCert(), p.servingKey(), x509.ExtKeyUsageServerAuth, "127.0.0.1")
	verify(p.caCert(), p.servingCert(), p.servingKey(), x509.ExtKeyUsageServerAuth, "kubernetes.default.svc")
	admin := verify(p.caCert(), p.adminCert(), p.adminKey(), x509.ExtKeyUsageClientAuth, "")
	if admin.Subject.CommonName != "admin" || len(admin.Subject.Organization) != 1 || admin.Subject.Organization[0] != "system:masters" {
		t.Fatalf("admin subject is %v, want CN=admin,O=system:masters", admin.Subject)
	}
	verify(p.frontProxyCA(), p.frontProxyCert(), p.frontProxyKey(), x509.ExtKeyUsageClientAuth, "")
	// The front proxy's certificate must not be accepted as a cluster client certificate.
	if err := func() error {
		ca, _ := os.ReadFile(p.caCert())
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		pair, _ := tls.LoadX509KeyPair(p.frontProxyCert(), p.frontProxyKey())
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}(); err == nil {
		t.Fatal("the front proxy certificate verifies against the cluster CA")
	}
	for _, f := range []string{p.saKey(), p.saPub(), p.tokens(), p.adminToken()} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
}

func TestStopSignalsOnlyARecordedPidRunningTheRecordedBinary(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	sleep, _ = filepath.EvalSymlinks(sleep)
	dir := t.TempDir()
	p, err := start("sleeper", sleep, []string{"600"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !p.alive() {
		t.Fatal("a started process is not alive")
	}

	// The same pid recorded with another binary is a reused pid: never signalled.
	impostor := p
	impostor.Exe = "/nonexistent/binary"
	if impostor.alive() {
		t.Fatal("a pid running another binary counts as alive")
	}
	if err := impostor.stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if !p.alive() {
		t.Fatal("stop signalled a pid that runs another binary")
	}

	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.alive() {
		t.Fatal("the process survived stop")
	}
	// Stopping twice is harmless.
	if err := p.stop(time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestLeftoversFindsProcessesRunningTheClusterBinaries(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(dir); len(got) != 0 {
		t.Fatalf("leftovers in a new directory: %v", got)
	}
	// A copy of sleep in dir/bin stands in for a component left running.
	raw, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	component := filepath.Join(dir, "bin", "kube-apiserver")
	if err := os.WriteFile(component, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := start("kube-apiserver", component, []string{"600"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := leftovers(dir); len(got) != 1 {
		t.Fatalf("want the running component as the one leftover, got %v", got)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(dir); len(got) != 0 {
		t.Fatalf("leftovers after stop: %v", got)
	}
}
