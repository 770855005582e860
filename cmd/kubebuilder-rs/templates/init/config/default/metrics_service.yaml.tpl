# /metrics over HTTPS on 8443. Each scrape must carry a bearer token the API server
# authenticates and authorizes (get on the non-resource URL /metrics): bind a scraper's
# service account to the ClusterRole `metrics-reader` (config/rbac/metrics_reader_role.yaml).
apiVersion: v1
kind: Service
metadata:
  labels:
    control-plane: controller-manager
    app.kubernetes.io/name: {{project_name}}
    app.kubernetes.io/managed-by: kustomize
  name: controller-manager-metrics-service
  namespace: system
spec:
  ports:
  - name: https
    port: 8443
    protocol: TCP
    targetPort: 8443
  selector:
    control-plane: controller-manager
    app.kubernetes.io/name: {{project_name}}
