# What a scraper (say, Prometheus' service account) needs to read /metrics: bind it to this
# ClusterRole. It is bound to nobody here.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: metrics-reader
rules:
- nonResourceURLs:
  - /metrics
  verbs:
  - get
