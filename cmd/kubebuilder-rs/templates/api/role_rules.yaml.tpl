# The {{kind}} controller: its objects, their status and finalizers.
- apiGroups:
  - {{full_group}}
  resources:
  - {{plural}}
  - {{plural}}/finalizers
  - {{plural}}/status
  verbs:
  - create
  - delete
  - get
  - list
  - patch
  - update
  - watch
