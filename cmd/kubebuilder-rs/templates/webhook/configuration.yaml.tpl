---
apiVersion: admissionregistration.k8s.io/v1
kind: {{configuration_kind}}
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: {{configuration_name}}
webhooks:
# +kubebuilder:scaffold:{{entries_marker}}
