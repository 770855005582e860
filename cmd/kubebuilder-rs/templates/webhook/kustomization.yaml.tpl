# The admission webhooks: the Service the API server calls (443, to the manager's 9443) and
# the webhook configurations. They carry no caBundle here: `make deploy` sets it.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- manifests.yaml
- service.yaml
configurations:
- kustomizeconfig.yaml
