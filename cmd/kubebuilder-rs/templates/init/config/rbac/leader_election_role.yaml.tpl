# The leader election Lease, in the manager's own namespace: read (get), made when missing
# (create), renewed or taken over (update), watched by a standby to take over as soon as it
# is released (watch).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: leader-election-role
  namespace: system
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - create
  - get
  - update
  - watch
