//! The manager's cache: one informer per kind and scope, read back as typed objects.
