# The manager's cluster-wide rights. `kubebuilder-rs create api` adds each kind's rules (its
# objects, their status and finalizers) above the marker; add what your controllers need
# besides, e.g. the Deployments a kind owns.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: manager-role
rules:
# Events the controllers record.
- apiGroups:
  - events.k8s.io
  resources:
  - events
  verbs:
  - create
  - patch
# +kubebuilder:scaffold:rules
