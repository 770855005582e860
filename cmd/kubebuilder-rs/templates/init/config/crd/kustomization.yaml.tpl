# The CustomResourceDefinitions. bases/ is written by `make manifests` from the Rust types
# (never edit it by hand); `kubebuilder-rs create api` adds each kind above the marker.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
# +kubebuilder:scaffold:crdkustomizeresource
