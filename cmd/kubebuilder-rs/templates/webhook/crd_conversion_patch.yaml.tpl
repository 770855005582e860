# The API server converts {{kind}}s between {{hub}} (stored) and the other versions by calling
# the manager's conversion webhook, /convert on the webhook Service, with ConversionReviews v1.
# The caBundle that makes it trust the manager's certificate is added when deploying.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {{crd_name}}
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig:
        service:
          namespace: system
          name: webhook-service
          path: /convert
      conversionReviewVersions:
      - v1
