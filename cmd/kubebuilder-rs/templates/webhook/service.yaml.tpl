apiVersion: v1
kind: Service
metadata:
  labels:
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: webhook-service
  namespace: system
spec:
  ports:
  - port: 443
    protocol: TCP
    targetPort: 9443
  selector:
    control-plane: controller-manager
    app.kubernetes.io/name: {{project_name}}
