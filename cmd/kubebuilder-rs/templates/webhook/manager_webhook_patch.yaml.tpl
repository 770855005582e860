# Adds the webhook server to the manager: on (ENABLE_WEBHOOKS), its port (9443) and its
# serving certificate, mounted where the manager looks by default
# (/tmp/k8s-webhook-server/serving-certs/tls.{crt,key}). `make deploy` generates the Secret;
# or create a kubernetes.io/tls Secret of that name yourself, or with cert-manager.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller-manager
  namespace: system
spec:
  template:
    spec:
      containers:
      - name: manager
        env:
        - name: ENABLE_WEBHOOKS
          value: "true"
        ports:
        - name: webhook-server
          containerPort: 9443
          protocol: TCP
        volumeMounts:
        - name: webhook-certs
          mountPath: /tmp/k8s-webhook-server/serving-certs
          readOnly: true
      volumes:
      - name: webhook-certs
        secret:
          secretName: webhook-server-cert
