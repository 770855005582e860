// PKI for the cluster: one CA, the apiserver's serving certificate, the admin client
// certificate, the service-account signing key pair and a bearer token for the admin.

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki names the files written by generatePKI.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p pki) caCert() string      { return p.path("ca.crt") }
func (p pki) servingCert() string { return p.path("apiserver.crt") }
func (p pki) servingKey() string  { return p.path("apiserver.key") }
func (p pki) adminCert() string   { return p.path("admin.crt") }
func (p pki) adminKey() string    { return p.path("admin.key") }
func (p pki) saKey() string       { return p.path("sa.key") }
func (p pki) saPub() string       { return p.path("sa.pub") }
func (p pki) tokens() string      { return p.path("tokens.csv") }

func (p pki) frontProxyCA() string   { return p.path("front-proxy-ca.crt") }
func (p pki) frontProxyCert() string { return p.path("front-proxy-client.crt") }
func (p pki) frontProxyKey() string  { return p.path("front-proxy-client.key") }

// adminToken is the file holding the admin's bearer token alone, for clients that read a
// token file.
func (p pki) adminToken() string { return p.path("admin.token") }

// generatePKI writes a fresh cluster CA and everything signed by it, and the front proxy's
// CA and client certificate. Every key is ECDSA P-256: quick to generate and accepted by
// every component.
func generatePKI(p pki) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	ca, caKey, err := newCA("testenv-ca", p.caCert(), p.path("ca.key"))
	if err != nil {
		return err
	}

	serving := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	}
	if err := issue(ca, caKey, serving, p.servingCert(), p.servingKey()); err != nil {
		return err
	}

	// The group system:masters is bound to cluster-admin by the default RBAC policy.
	admin := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(ca, caKey, admin, p.adminCert(), p.adminKey()); err != nil {
		return err
	}

	proxyCA, proxyKey, err := newCA("testenv-front-proxy-ca", p.frontProxyCA(), p.path("front-proxy-ca.key"))
	if err != nil {
		return err
	}
	proxy := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "front-proxy-client"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(proxyCA, proxyKey, proxy, p.frontProxyCert(), p.frontProxyKey()); err != nil {
		return err
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(p.saKey(), saKey); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.saPub(), "PUBLIC KEY", pubDER, 0o644); err != nil {
		return err
	}

	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	tok := hex.EncodeToString(token)
	// Static token file format: token,user,uid,"group1,group2".
	if err := os.WriteFile(p.tokens(), []byte(tok+",admin-token,admin-token,\"system:masters\"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.adminToken(), []byte(tok+"\n"), 0o600)
}

// newCA writes a self-signed CA certificate and its key.
func newCA(name, certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"testenv"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signing %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, nil, err
	}
	return cert, key, writeKey(keyPath, key)
}

// issue signs tmpl with the CA and writes the certificate and a new key.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certPath, keyPath string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writeCert(certPath, der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}

func writeCert(path string, der []byte) error { return writePEM(path, "CERTIFICATE", der, 0o644) }

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
