//! The project's API: a module per version, a file per kind (`kubebuilder-rs create api`
//! adds them above the marker).

// +kubebuilder:scaffold:versions
