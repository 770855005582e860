# Generated from the code (`make manifests`): the rules the controllers declare,
# and those the runtime infers from them. Do not edit; what each verb is for:
#
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  labels:
    app.kubernetes.io/managed-by: kustomize
    app.kubernetes.io/name: {{project_name}}
  name: manager-role
rules: []
