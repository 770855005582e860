# Build outputs.
/target/
# What `make deploy` generates: the kustomize overlay, the webhook's CA and certificate.
/deploy/
# Editor state.
*.swp
