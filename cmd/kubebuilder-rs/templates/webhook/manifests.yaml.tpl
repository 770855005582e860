# The admission webhooks the API server calls, through the Service webhook-service
# (service.yaml). `kubebuilder-rs create webhook` adds a configuration for each type of
# webhook above the last marker, and each kind's entries above its configuration's marker;
# `make deploy` sets every entry's caBundle, so the API server trusts the manager's
# certificate.
# +kubebuilder:scaffold:webhook-configurations
