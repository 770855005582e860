# What the manager may do, and as whom it runs.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- service_account.yaml
- role.yaml
- role_binding.yaml
- leader_election_role.yaml
- leader_election_role_binding.yaml
# /metrics is served only to callers the API server authenticates and authorizes: the
# manager creates TokenReviews and SubjectAccessReviews (metrics-auth-role), and a scraper
# needs get on /metrics (metrics-reader, bound to nobody here).
- metrics_auth_role.yaml
- metrics_auth_role_binding.yaml
- metrics_reader_role.yaml
