//! The controllers: a module per kind (`kubebuilder-rs create api` adds them above the
//! marker).

// +kubebuilder:scaffold:controllers
