apiVersion: {{api_version}}
kind: {{kind}}
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: {{module}}-sample
# TODO(user): add the spec's fields here.
spec: {}
