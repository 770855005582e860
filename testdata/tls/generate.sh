#!/bin/sh
# Regenerates the TEST-ONLY TLS fixtures in this directory (see README.md). The keys are
# public: nothing anywhere may trust these certificates.
set -eu
cd "$(dirname "$0")"
days=36500

# A CA, and a server certificate it signs for the DNS name server.test only (no IP address),
# so a client that dials 127.0.0.1 must be told the name to verify.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=test-only server CA" -keyout ca-key.pem -out ca.pem \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=server.test" -keyout server-key.pem -out server.csr
printf 'subjectAltName=DNS:server.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
    -extfile server.ext -out server.pem
rm -f server.csr server.ext ca.srl ca-key.pem

# A self-signed leaf certificate (not a CA) that no configured CA vouches for.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=self-signed.test" -addext "subjectAltName=DNS:self-signed.test" \
    -addext "basicConstraints=critical,CA:FALSE" -addext "extendedKeyUsage=serverAuth" \
    -keyout self-signed-key.pem -out self-signed.pem
