# The CRDs' conversion webhooks, for config/default (`components: [../crd/patches]`): a
# component rather than a patch in config/crd, so that config/crd alone stays the plain
# generated CRDs, which serve only their storage versions and need no webhook running.
# `kubebuilder-rs create webhook --conversion` adds each kind above the marker.
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
{{entry}}
# +kubebuilder:scaffold:crdkustomizewebhookpatch
