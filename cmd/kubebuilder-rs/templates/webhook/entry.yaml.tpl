- name: {{webhook_name}}
  admissionReviewVersions:
  - v1
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: {{webhook_path}}
  failurePolicy: Fail
  rules:
  - apiGroups:
    - {{full_group}}
    apiVersions:
    - {{version}}
    operations:
    - CREATE
    - UPDATE
    resources:
    - {{plural}}
  sideEffects: None
