# Serves /metrics over HTTPS on 8443 (--metrics-secure is on by default): the certificate is
# self-signed at start.
- op: add
  path: /spec/template/spec/containers/0/args/0
  value: --metrics-bind-address=:8443
