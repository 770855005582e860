# The admission webhooks the API server calls, through the Service webhook-service
# (service.yaml). `kubebuilder-rs create webhook` adds each kind's entries above the markers;
# `make deploy` sets every entry's caBundle, so the API server trusts the manager's
# certificate.
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: mutating-webhook-configuration
webhooks:
# +kubebuilder:scaffold:mutating-webhooks
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: validating-webhook-configuration
webhooks:
# +kubebuilder:scaffold:validating-webhooks
