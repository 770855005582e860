# The manager's Deployment. Its image is `controller`, rewritten by `make deploy IMG=<image>`
# in a generated overlay (kubectl has no `kustomize edit`).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- manager.yaml
images:
- name: controller
  newName: controller
  newTag: latest
