# The whole operator: `make deploy IMG=...` applies it with the image set and a webhook
# certificate (hack/deploy-overlay.sh); `kubectl apply -k config/default` applies it as is.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization

# Every namespaced object goes into this namespace (the Namespace `system` is renamed to it),
# and every name gets this prefix, so that the operator's objects never collide with
# another operator's.
namespace: {{project_name}}-system
namePrefix: {{project_name}}-

resources:
- ../crd
- ../rbac
- ../manager
# The Service in front of the manager's HTTPS /metrics.
- metrics_service.yaml
# +kubebuilder:scaffold:default-resources

patches:
# /metrics over HTTPS on 8443, for scrapers the API server authenticates and authorizes.
- path: manager_metrics_patch.yaml
  target:
    kind: Deployment
# +kubebuilder:scaffold:default-patches
