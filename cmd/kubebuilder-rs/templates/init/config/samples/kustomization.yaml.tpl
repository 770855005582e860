# Example objects of each kind: `kubectl apply -k config/samples` (into the current namespace).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
# +kubebuilder:scaffold:manifestskustomizesamples
